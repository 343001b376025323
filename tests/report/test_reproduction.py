"""Tests of acgate.report.reproduction: the lookup of the paper's numbers beside ours."""

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
    numeric = table[table.paper_table != "verdict_matrix"]
    assert numeric.ours.isna().all() and (table[table.paper_table == "verdict_matrix"].ours == "").all()
