"""AC-GATE: entity-conditioned lag-gated panel model and its layered lag audit."""

__version__ = "0.1.0"
