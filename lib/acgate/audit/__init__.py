"""The audit: reading run folders, the layered audit of a domain and its tables, the verdict rules, and the two
error-rate studies (the audit calibration and the panel-matched study)."""
