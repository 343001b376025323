"""Tools beside the library: the speed and memory benchmark (``python -m acgate.tools.bench``) and the statistical
equivalence check of two grids (``python -m acgate.tools.equivalence``)."""
