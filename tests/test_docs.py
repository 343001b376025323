"""The figures the README states are the committed tables' (a figure copied by hand goes stale when a grid is run
again): each sentence is rebuilt from the table it quotes and must appear in the README as it is."""

import json
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def recovery(table: pd.DataFrame, domain: str, metric: str) -> pd.Series:
    return table[(table.domain == domain) & (table.classical_method == "moderated_dl")
                 & (table.comparison == "recovery") & (table.metric == metric)].iloc[0]


def readme_sentences() -> list[str]:
    """What the README says, rebuilt from tables/: the head-to-head recovery figures, the smallest spread economics'
    classical L1 detects, what AC-GATE's detect on both panels', and the last grid's wall time."""
    table = pd.read_csv(ROOT / "tables" / "neural_vs_classical.csv")
    spearman, mae = "ranking: Spearman(k*, lag centre)", "size: k* MAE against the lag centre"
    linear, nonlinear = recovery(table, "synthetic_linear", spearman), recovery(table, "synthetic_nonlinear", spearman)
    linear_mae, nonlinear_mae = recovery(table, "synthetic_linear", mae), recovery(table, "synthetic_nonlinear", mae)
    studies = {domain: json.loads((ROOT / "tables" / f"{domain}_panel_matched.json").read_text())["error_rates"]
               for domain in ("economics", "energy")}
    smallest = studies["economics"]["moderated_dl"]["L1"]["smallest_detectable"]
    neural = [[rate for layer in ("L1", "L2") for rate in studies[domain]["acgate"][layer]["power"].values()]
              for domain in studies]
    detected = {rate["supported"] for rates in neural for rate in rates} - {0}
    replicates = " and ".join(str(max(rate["replicates"] for rate in rates)) for rates in neural)
    times = json.loads((ROOT / "tables" / "suite_times.json").read_text())
    wall = times["cpu on 2 cores (AMD EPYC)"]["wall_minutes"]
    return [f"(Spearman {linear.classical:.3f} against {linear.neural:.3f} linear, {nonlinear.classical:.3f} "
            f"against {nonlinear.neural:.3f} nonlinear)",
            f"(k* MAE {linear_mae.classical:.2f} against {linear_mae.neural:.2f})",
            f"(MAE {nonlinear_mae.neural:.2f} against {nonlinear_mae.classical:.2f})",
            f"a lag spread of {smallest:g} lag or more along the proxies",
            f"calibrated L1 and L2 detect {'no spread' if not detected else 'some spreads'} on either panel "
            f"({replicates} surrogates a scenario)",
            f"The grid took {wall} minutes on 2 CPU cores"]


def test_the_readmes_figures_are_the_committed_tables():
    readme = " ".join((ROOT / "README.md").read_text().split())  # however the lines wrap
    missing = [sentence for sentence in readme_sentences() if sentence not in readme]
    assert not missing, missing
