"""The grid-equivalence check (two standard errors per cell, verdict matrix unchanged) on hand-worked numbers."""

import numpy as np
import pandas as pd
import pytest

from acgate.tools import equivalence


def long(values, metric="test_mse", method="acgate"):
    return pd.DataFrame({"domain": "d", "method": method, "seed": range(len(values)), "metric": metric,
                         "value": values})


def test_a_cell_agrees_within_two_standard_errors_of_the_old_seeds():
    old = long([1.0, 2.0, 3.0, 4.0])  # mean 2.5, sd 1.2910, se 0.6455
    table = equivalence.compare(pd.concat([old, long([5.0] * 3, metric="flat")]),
                                pd.concat([long([2.0, 3.0, 4.0, 5.0]), long([5.0] * 3, metric="flat")]))
    row = table.set_index("metric").loc["test_mse"]
    assert row.se == pytest.approx(np.std([1, 2, 3, 4], ddof=1) / 2)
    assert row.move_in_se == pytest.approx(1 / row.se) and row.agrees  # 1.55 SE
    assert table.set_index("metric").loc["flat"].agrees  # no spread and no move
    far = equivalence.compare(old, long([3.5, 4.5, 5.5, 6.5])).iloc[0]
    assert far.move_in_se == pytest.approx(2.5 / row.se) and not far.agrees  # 3.9 SE
    moved = equivalence.compare(long([5.0] * 3), long([5.0, 5.0, 5.3])).iloc[0]
    assert moved.move_in_se == np.inf and not moved.agrees  # no spread, but it moved
    assert equivalence.compare(long([5.0] * 3), long([5.00001] * 3)).iloc[0].agrees  # 2e-6: rounding
    undefined = equivalence.compare(long([np.nan] * 3), long([np.nan] * 3)).iloc[0]
    assert undefined.agrees and undefined.move_in_se == 0  # undefined in both grids
    # zero but for rounding (the k* spread of a shared lag on two machines): no move, spread over seeds or not
    assert equivalence.compare(long([0.0] * 20), long([1.8e-15] * 20)).iloc[0].agrees
    assert equivalence.compare(long([1e-16, 0.0] * 10), long([1e-15, 9e-16] * 10)).iloc[0].agrees  # 78 SE
    assert not equivalence.compare(long([0.0] * 20), long([1e-9] * 20)).iloc[0].agrees
    appears = equivalence.compare(long([np.nan] * 3), long([0.5, 0.6, 0.7])).iloc[0]
    assert not appears.agrees  # undefined before, defined now


def test_verdict_matrices_are_compared_cell_by_cell(tmp_path):
    for name, verdict in (("old", "supported"), ("new", "not certified")):
        (tmp_path / name).mkdir()
        pd.DataFrame({"domain": ["a", "b"], "L1 calibrated": ["supported", verdict]}).to_csv(
            tmp_path / name / "verdict_matrix.csv", index=False)
    same, both = equivalence.verdicts_agree(tmp_path / "old", tmp_path / "old")
    assert same
    same, both = equivalence.verdicts_agree(tmp_path / "old", tmp_path / "new")
    assert not same and both.loc[("b", "acgate"), "L1 calibrated (new)"] == "not certified"
    # a row or column the new grid adds is no change; a row it lost is
    added = tmp_path / "added"
    added.mkdir()
    pd.DataFrame({"domain": ["a", "b", "a"], "reference": ["acgate", "acgate", "moderated_dl"],
                  "L1 calibrated": ["supported", "supported", "not certified"], "vs classical": ["", "", ""]}).to_csv(
        added / "verdict_matrix.csv", index=False)
    assert equivalence.verdicts_agree(tmp_path / "old", added)[0]
    assert not equivalence.verdicts_agree(added, tmp_path / "old")[0]


def test_runs_without_audits_compare_their_run_metrics_alone(tmp_path):
    """Runs copied back from another machine without their audits: no L2 rows, and no error."""
    assert equivalence.compare(equivalence.l2_values(tmp_path), equivalence.l2_values(tmp_path)).empty
