"""AC-GATE's reach: on which panels does its k* read the entities' true lags, as the moderated distributed lag's does?

A panel is placed by three numbers its audit knows before it trains (the panel-matched study's source,
:func:`acgate.audit.surrogates.fit_source`, computes them in seconds): its entities N, the share of the target's
variance that the pooled lag curve explains (the lagged share) and the persistence of its noise (the noise model's
AR(1) rho). The map (``tables/reach/``, measured by ``python -m acgate.tools.reach`` on panels of the project's DGP
with known lags) gives, per cell of N, lagged share and rho, how often each method's k* ranked and spanned the true
lags there:

    where = place(read_map(MAP_FOLDER), n=88, share=0.05, rho=0.92)   # the nearest cell of the committed map
    said = reading(n=88, share=0.05, rho=0.92)   # {"place": ..., "reads": False, "sentence": "AC-GATE's reach ..."}
    said = reading(n=88, share=0.05, rho=0.92, gate_memory=False)   # AC-GATE without the gate's memory

AC-GATE without the gate's memory (``model.gate_memory: false``, the own-panel default) is another model, with its own
map on the same panels (``tables/reach/gate_memory_off/``, AC-GATE's rows only): :func:`committed_map` puts its rows
in place of the paper's model's.

``acgate.audit_panel`` logs the sentence before it trains, and the audit page shows it beside AC-GATE's verdicts (a
numbered warning beside each where AC-GATE's k* read the lags in fewer than :data:`READS` of the cell's panels).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from acgate.layout import MEMORY_OFF, REPOSITORY_TABLES

MAP_FOLDER = REPOSITORY_TABLES / "reach"  # the repository's committed map
# a method reads a panel's lags where its k* ranks them (Spearman with the truth) and spans them (the slope of k* on the
# truth: 0 for a k* that barely varies, however well it ranks) both at least this
GOOD = 0.5
READS = 0.8  # AC-GATE's verdicts can carry information on a panel's lags where its k* read them in this share of a cell


def read_map(folder: str | Path) -> pd.DataFrame | None:
    """The committed map's summary (``<folder>/reach_summary.csv``), or None where it was never measured."""
    path = Path(folder) / "reach_summary.csv"
    return pd.read_csv(path) if path.is_file() else None


def committed_map(gate_memory: bool = True) -> tuple[pd.DataFrame | None, str]:
    """The committed map for AC-GATE with the gate's memory (the paper's model) or without it, and the folder its
    AC-GATE rows come from (as the page names it). Without the memory: AC-GATE's rows of ``MAP_FOLDER/gate_memory_off``
    with every other method's of the main map, measured on the same panels; None where either was never measured."""
    table = read_map(MAP_FOLDER)
    if gate_memory:
        return table, f"tables/{MAP_FOLDER.name}"
    own = read_map(MAP_FOLDER / MEMORY_OFF)
    folder = f"tables/{MAP_FOLDER.name}/{MEMORY_OFF}"
    if table is None or own is None:
        return None, folder
    return pd.concat([table[table.method != "acgate"], own[own.method == "acgate"]], ignore_index=True), folder


def place(table: pd.DataFrame, n: int, share: float, rho: float) -> dict:
    """The cell of the map ``table`` (:func:`acgate.tools.reach.summary`) nearest a panel of ``n`` entities whose
    audit reads lagged share ``share`` and noise persistence ``rho``, with every method's median Spearman, median
    slope and share of panels read there. Cells are placed by what the same fit read on their panels
    (``measured_share``, ``measured_rho``), not by the noise they were drawn with; the distance is over log N, log
    share and rho, each scaled by its range over the map. ``inside`` says whether the panel lies within the map's
    range on every axis."""
    cells = table.groupby(["n", "share", "rho"], sort=True)[["measured_share", "measured_rho"]].mean().reset_index()
    grid = np.column_stack([np.log(cells.n), np.log(cells.measured_share.clip(lower=1e-6)), cells.measured_rho])
    point = np.array([np.log(n), np.log(max(share, 1e-6)), rho])
    span = np.ptp(grid, axis=0)
    best = cells.iloc[int(np.argmin((((grid - point) / np.where(span > 0, span, 1)) ** 2).sum(axis=1)))]
    here = table[(table.n == best.n) & (table.share == best.share) & (table.rho == best.rho)]
    inside = bool(np.all((point >= grid.min(axis=0) - 1e-9) & (point <= grid.max(axis=0) + 1e-9)))
    return {"n": int(best.n), "share": float(best.share), "rho": float(best.rho), "inside": inside,
            "measured_share": float(best.measured_share), "measured_rho": float(best.measured_rho),
            "panels": int(here.panels.min()),
            **{measure: dict(zip(here.method, here[measure].astype(float), strict=True))
               for measure in ("median_spearman", "median_slope", "share_read")}}


def reading(n: int, share: float, rho: float, table: pd.DataFrame | None = None, gate_memory: bool = True
            ) -> dict | None:
    """Whether AC-GATE's k* can read the lags of a panel of ``n`` entities, lagged share ``share`` and noise
    persistence ``rho``: its nearest cell of the map ``table`` (default: the committed one of AC-GATE with or without
    the gate's memory, :func:`committed_map`) (``place``), ``reads`` (AC-GATE read the lags in at least :data:`READS`
    of the cell's panels) and a ``sentence`` for the log and the audit page; None where no map with AC-GATE was
    measured."""
    committed, folder = committed_map(gate_memory)
    table = committed if table is None else table
    if table is None or "acgate" not in set(table.method):
        return None
    where = place(table, n, share, rho)
    read, panels = where["share_read"], where["panels"]
    ours = read["acgate"] >= READS
    classical = read.get("moderated_dl")
    if ours:
        verdict = "so AC-GATE's verdicts can carry information on the lags here"
    elif classical is not None and classical >= READS:
        verdict = ("so AC-GATE's verdicts say little about the lags here, where the moderated distributed lag's can: "
                   "read the classical reference's")
    else:
        verdict = (f"so neither reference read them in {READS * 100:.0f} % of these panels, and AC-GATE's verdicts say "
                   "little about the lags here")
    names = (("moderated_dl", "the moderated distributed lag"), ("neural_dl", "the neural distributed lag"))
    others = "".join(f", {said}'s in {round(read[name] * panels)} of {panels}" for name, said in names if name in read)
    outside = "" if where["inside"] else " (the panel lies outside the map)"
    model = "" if gate_memory else "without the gate's memory; "
    sentence = (f"AC-GATE's reach ({model}DGP panels whose lags spread by about 2 lags along the proxies, "
                f"{folder}): this panel (N {n}, its "
                f"pooled lag curve {share * 100:.0f} % of the target's variance, noise AR(1) {rho:.2f}) sits nearest "
                f"the cell of N {where['n']}, lagged share {where['measured_share'] * 100:.0f} % and noise AR(1) "
                f"{where['measured_rho']:.2f}{outside}, where AC-GATE's k* ranked and spanned the true lags (Spearman "
                f"and slope at least {GOOD}) in {round(read['acgate'] * panels)} of {panels} panels (median slope "
                f"{where['median_slope']['acgate']:.2f}){others}: {verdict}")
    return {"place": where, "reads": ours, "sentence": sentence}

