"""Data: the real inputs (readers, downloads, checksums), the ``Panel`` container with its splits and normalisers,
the synthetic DGP with known lags, data preparation into a checked panel, and the example panel."""
