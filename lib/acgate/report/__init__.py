"""What readers see: the paper's tables and figures, the reproduction table, the comparisons across audits, a
domain's audit page and its figures, and the rendering of tables and pages."""
