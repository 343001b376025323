"""Tests of acgate.report.reproduction: the lookup of the paper's numbers beside ours."""

import math

import pandas as pd

from acgate.report import inputs, reproduction


def test_the_reproduction_table_has_rows_only_for_paper_domains_that_ran(own_report):
    tables, results = own_report
    assert reproduction.reproduction(tables, results).empty


def test_the_reproduction_lookup_places_every_paper_number_once():
    paper = inputs.paper_numbers()

    def numbers(node):  # the paper's numbers (and verdicts) below a section; the case study names its stratifier
        return sum(numbers(v) if isinstance(v, dict) else k != "stratifier" for k, v in node.items())

    expected = sum(numbers(paper[s]) for s in paper if s not in ("ours", "not_comparable"))
    table = reproduction.reproduction({}, dict.fromkeys(inputs.paper_domains(paper)), paper)
    assert len(table) == expected + 4  # the synthetic verdict row stands for both scenarios
    assert not table.duplicated(["paper_table", "row", "quantity"]).any()
    assert (table.ours == "").all() and (table.difference == "").all()  # no tables: no counterparts
    assert (table.comparable == reproduction.NO_COUNTERPART).all()


def test_a_method_not_run_for_a_domain_is_named_not_shown_as_a_value():
    """tft left out of synthetic_nonlinear: its rows say there is no counterpart, where its NaN Spearman read as
    "undefined" (a constant k*) and its other numbers as empty cells beside "comparable: yes"; a Spearman that is
    NaN in a row that ran stays NaN (undefined)."""
    paper = inputs.paper_numbers()
    summary = pd.DataFrame([{"domain": d, "method": m, "spearman_lag_centre_mean": math.nan if m == "no_ac_encoder"
                             else 0.5} for d in ("synthetic_linear", "synthetic_nonlinear")
                            for m in ("acgate", "no_ac_encoder", "tft") if (d, m) != ("synthetic_nonlinear", "tft")])
    table = reproduction.reproduction({"synthetic_summary": summary},
                                      dict.fromkeys(["synthetic_linear", "synthetic_nonlinear"]), paper)
    rows = table[(table.paper_table == "app_synth_summary") & (table.quantity == "spearman")].set_index("row")
    assert rows.loc["linear tft", "ours"] == 0.5 and rows.loc["linear tft", "comparable"] == "yes"
    assert math.isnan(rows.loc["nonlinear no_ac_encoder", "ours"])
    assert rows.loc["nonlinear no_ac_encoder", "comparable"] == "yes"
    assert rows.loc["nonlinear tft", "ours"] == "" and rows.loc["nonlinear tft", "difference"] == ""
    assert rows.loc["nonlinear tft", "comparable"] == reproduction.NO_COUNTERPART
