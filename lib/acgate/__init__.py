"""AC-GATE: entity-conditioned lag-gated panel model and its layered lag audit.

``acgate.audit_panel(frame, entity=..., time=..., ...)`` audits a pandas DataFrame in one call
(:mod:`acgate.panel_audit`).
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("audit_panel", "PanelAudit"):  # imported on first use: the package itself stays light to import
        from acgate import panel_audit

        return getattr(panel_audit, name)
    raise AttributeError(f"module 'acgate' has no attribute {name!r}")
