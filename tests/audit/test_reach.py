"""acgate.audit.reach: a panel is placed in AC-GATE's reach map by the numbers its audit reads, and the reading says
whether AC-GATE's k* read the lags in panels like it."""

import numpy as np
import pandas as pd

from acgate.audit import reach

CELLS = [(40, 0.05, 0.0, 0.03, 0.0), (40, 0.05, 0.95, 0.04, 0.95), (150, 0.2, 0.8, 0.15, 0.78),
         (600, 0.7, 0.95, 0.45, 0.7)]


def map_table(acgate_read: float = 0.1, classical_read: float = 0.9) -> pd.DataFrame:
    """A hand-made summary: every cell with AC-GATE and the moderated DL, the measured coordinates beside the drawn."""
    rows = []
    for n, share, rho, measured_share, measured_rho in CELLS:
        for method, read in (("acgate", acgate_read), ("moderated_dl", classical_read)):
            rows.append({"n": n, "share": share, "rho": rho, "method": method, "panels": 20, "median_spearman": 0.9,
                         "median_slope": read, "share_read": read, "measured_share": measured_share,
                         "measured_rho": measured_rho})
    return pd.DataFrame(rows)


def test_a_panel_is_placed_by_the_coordinates_its_audit_reads():
    """The cells are placed by what the fit read on their panels (a cell drawn at rho 0.95 whose panels read 0.7 sits
    at 0.7), on log N, log share and rho each scaled by its range."""
    table = map_table()
    assert reach.place(table, 88, 0.05, 0.92) | {"median_spearman": None} == {
        "n": 40, "share": 0.05, "rho": 0.95, "inside": True, "measured_share": 0.04, "measured_rho": 0.95,
        "panels": 20, "median_spearman": None, "median_slope": {"acgate": 0.1, "moderated_dl": 0.9},
        "share_read": {"acgate": 0.1, "moderated_dl": 0.9}}
    assert reach.place(table, 500, 0.4, 0.72)["n"] == 600  # measured at 0.7, though drawn at 0.95
    assert reach.place(table, 160, 0.16, 0.8)["n"] == 150
    assert not reach.place(table, 5000, 0.2, 0.8)["inside"]  # past the map's largest N


def test_the_reading_says_whether_ac_gate_can_read_the_lags_and_which_reference_to_read():
    blind = reach.reading(88, 0.05, 0.92, map_table(acgate_read=0.1, classical_read=0.9))
    assert not blind["reads"]
    assert blind["sentence"].startswith(
        "AC-GATE's reach (DGP panels whose lags spread by about 2 lags along the proxies, tables/reach): this panel "
        "(N 88, its pooled lag curve 5 % of the target's variance, noise AR(1) 0.92)")
    assert "in 2 of 20 panels (median slope 0.10), the moderated distributed lag's in 18 of 20" in blind["sentence"]
    assert blind["sentence"].endswith("read the classical reference's")
    neither = reach.reading(88, 0.05, 0.92, map_table(acgate_read=0.1, classical_read=0.3))["sentence"]
    assert neither.endswith("so neither reference read them in 80 % of these panels, and AC-GATE's verdicts say "
                            "little about the lags here")
    sighted = reach.reading(88, 0.05, 0.92, map_table(acgate_read=0.85))
    assert sighted["reads"]
    assert sighted["sentence"].endswith("AC-GATE's verdicts can carry information on the lags here")


def test_ac_gate_without_the_gate_memory_is_read_against_its_own_map(tmp_path, monkeypatch):
    """The map of AC-GATE without the gate's memory (its rows in the map folder's gate_memory_off) with the other
    methods' rows of the main map, measured on the same panels; none where it was not measured."""
    map_table(acgate_read=0.1).to_csv(tmp_path / "reach_summary.csv", index=False)
    monkeypatch.setattr(reach, "MAP_FOLDER", tmp_path)
    assert reach.reading(88, 0.05, 0.92, gate_memory=False) is None
    (tmp_path / "gate_memory_off").mkdir()
    own = map_table(acgate_read=0.85, classical_read=0.2)
    own[own.method == "acgate"].to_csv(tmp_path / "gate_memory_off" / "reach_summary.csv", index=False)
    assert not reach.reading(88, 0.05, 0.92)["reads"]  # the paper's model
    without = reach.reading(88, 0.05, 0.92, gate_memory=False)
    assert without["reads"] and without["sentence"].startswith(
        f"AC-GATE's reach (without the gate's memory; DGP panels whose lags spread by about 2 lags along the proxies, "
        f"tables/{tmp_path.name}/gate_memory_off): this panel")
    assert "the moderated distributed lag's in 18 of 20" in without["sentence"]  # the main map's


def test_no_map_no_reading(tmp_path):
    assert reach.read_map(tmp_path) is None
    assert reach.reading(88, 0.05, 0.92, map_table().assign(method="moderated_dl")) is None  # no AC-GATE measured


def test_the_committed_map_covers_the_grid_with_20_panels_a_cell():
    """The map the audit reads: 27 cells of N, lagged share and rho, 20 panels each, with every method measured."""
    table = reach.read_map(reach.MAP_FOLDER)
    assert table is not None, f"no map in {reach.MAP_FOLDER}: python -m acgate.tools.reach --jobs 2"
    assert table.groupby(["n", "share", "rho"]).ngroups == 27 and set(table.method) >= {"acgate", "moderated_dl"}
    assert (table.panels == 20).all()
    assert np.isfinite(table[["measured_share", "measured_rho"]].to_numpy()).all()
    without, _ = reach.committed_map(gate_memory=False)  # AC-GATE without the gate's memory, on the same panels
    assert without is not None and len(without) == len(table)
    assert (without.panels == 20).all() and without.groupby(["n", "share", "rho"]).ngroups == 27
