"""Models: AC-GATE, its ablations and the neural baselines (``networks``), the non-neural baselines and the
classical yardstick, training, the lag summaries and metrics of a run, and ``runner``, which trains one method on one
panel and writes its run folder."""
