"""The figures the README and the docs state are the committed tables' (a figure copied by hand goes stale when a grid
or a study is run again): each sentence or table is rebuilt from the table it quotes and must appear as it is."""

import json
import re
from pathlib import Path

import pandas as pd
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]


def recovery(table: pd.DataFrame, domain: str, metric: str) -> pd.Series:
    return table[(table.domain == domain) & (table.classical_method == "moderated_dl")
                 & (table.comparison == "recovery") & (table.metric == metric)].iloc[0]


def power(summary: pd.DataFrame) -> str:
    """The README's words for the calibrated L1 at 1 and 2 lags beside its true-rho GLS yardstick."""
    found, yardstick = summary.calibrated_l1, summary.known_rho_joint_size_adjusted
    return (f"{found['proxy_lags_one']} and {found['proxy_lags_two']} of {summary.replicates['proxy_lags_one']} "
            f"where that detects {yardstick['proxy_lags_one']} and {yardstick['proxy_lags_two']}")


def readme_sentences() -> list[str]:
    """What the README says, rebuilt from tables/: the head-to-head recovery figures, what economics' and energy's
    classical L1 detect on their surrogates, its worst null class, its false supports where the proxies set the
    effect's size and its power beside the true-rho GLS (tables/yardstick/), the last
    grid's wall time, and the classical L1 on economics' surrogates of version 4 under rules 6 and 7, and how the
    network moderator and AC-GATE rank the lags of two DGPs the quadratic moderators cannot follow
    (tables/lag_recovery/)."""
    table = pd.read_csv(ROOT / "tables" / "neural_vs_classical.csv")
    spearman, mae = "ranking: Spearman(k*, lag centre)", "size: k* MAE against the lag centre"
    linear, nonlinear = recovery(table, "synthetic_linear", spearman), recovery(table, "synthetic_nonlinear", spearman)
    linear_mae, nonlinear_mae = recovery(table, "synthetic_linear", mae), recovery(table, "synthetic_nonlinear", mae)
    studies = {domain: json.loads((ROOT / "tables" / f"{domain}_panel_matched.json").read_text())["error_rates"]
               for domain in ("economics", "energy")}
    economics, energy = (studies[d]["moderated_dl"]["L1"] for d in ("economics", "energy"))
    best_energy = max(rate["supported"] for rate in energy["power"].values())
    worst = max(rate["worst_null"]["supported"] for rate in (economics, energy))
    per_scenario, = {rate["replicates"] for study in (economics, energy) for rate in study["power"].values()}
    checks = pd.read_csv(ROOT / "tables" / "surrogates_v4_classical.csv").query("panel == 'economics' & layer == 'L1'")
    count = checks.set_index(["classical_rules", "scenario"]).supported
    yard = {domain: pd.read_csv(ROOT / "tables" / "yardstick" / f"{domain}_yardstick_summary.csv").set_index("scenario")
            for domain in ("economics", "energy")}
    false = [yard["economics"].calibrated_l1["effect_size"], yard["economics"].replicates["effect_size"]]
    interval = stats.binomtest(*false).proportion_ci(method="exact")
    maps = {name: pd.read_csv(ROOT / "tables" / "lag_recovery" / f"synthetic_{name}_lag_recovery_summary.csv")
            .set_index("method").mean_spearman for name in ("interaction", "non_monotone")}
    times = json.loads((ROOT / "tables" / "suite_times.json").read_text())
    wall = times["cpu on 2 cores (AMD EPYC)"]["wall_minutes"]
    return [f"(Spearman {linear.classical:.3f} against {linear.neural:.3f} linear, {nonlinear.classical:.3f} "
            f"against {nonlinear.neural:.3f} nonlinear)",
            f"(k* MAE {linear_mae.classical:.2f} against {linear_mae.neural:.2f})",
            f"(MAE {nonlinear_mae.neural:.2f} against {nonlinear_mae.classical:.2f})",
            f"detects a 2-lag spread along the proxies in {economics['power']['2']['supported']} of {per_scenario} "
            f"and a 1-lag spread in {economics['power']['1']['supported']} of {per_scenario}",
            f"on energy no spread in more than {best_energy} of {per_scenario}",
            f"It falsely supports in at most {worst} of {per_scenario} surrogates of any null class",
            f"in {false[0]} of {false[1]} economics ({100 * false[0] / false[1]:.1f} %, "
            f"{100 * interval.low:.1f}-{100 * interval.high:.1f} %) and "
            f"{yard['energy'].calibrated_l1['effect_size']} of "
            f"{yard['energy'].replicates['effect_size']} energy surrogates",
            f"it detects {power(yard['economics'])} on economics",
            f"and {power(yard['energy'])} on energy",
            f"The grid took {wall} minutes on 2 CPU cores",
            "(Spearman {:.2f} and {:.2f} against the moderated DL's {:.2f} and {:.2f} and AC-GATE's {:.2f} and {:.2f})"
            .format(*(maps[name][method] for method in ("neural_dl", "moderated_dl", "acgate")
                      for name in ("interaction", "non_monotone"))),
            f"in {count[6, 'common_shock']} of 40 economics surrogates until the classical L1 took shared shocks out "
            f"(classical rules 7: {count[7, 'common_shock']} of 40), and that L1 detects a 1-lag spread in "
            f"{count[7, 'proxy_lags_one']} of 40"]


def test_the_readmes_figures_are_the_committed_tables():
    readme = " ".join((ROOT / "README.md").read_text().split())  # however the lines wrap
    missing = [sentence for sentence in readme_sentences() if sentence not in readme]
    assert not missing, missing


# the calibration table of docs/audit.md: (reference, rule, layer) per column
CALIBRATED = ("calibrated", "calibrated, practical_sd 0")
ALL_RULES = ("paper", *CALIBRATED)
CALIBRATION_COLUMNS = [
    *(("acgate", rule, "L1") for rule in ALL_RULES), *(("acgate", rule, "L2") for rule in ALL_RULES),
    ("acgate", "calibrated", "L2 test alone"), ("acgate", "calibrated", "L3"), ("acgate", "paper", "L3"),
    *(("moderated_dl", rule, "L1") for rule in CALIBRATED), *(("moderated_dl", rule, "L2") for rule in CALIBRATED),
    ("moderated_dl", "calibrated", "L2 test alone"), ("moderated_dl", "calibrated", "L3"),
    ("moderated_dl", "calibrated", "lags differ")]
ACGATE_COLUMNS = [column for column in CALIBRATION_COLUMNS if column[0] == "acgate"]


def calibration_rows(folder: Path = ROOT / "tables", columns: list[tuple] = CALIBRATION_COLUMNS) -> list[str]:
    """The rows of docs/audit.md's calibration table, rebuilt from ``folder``/audit_calibration.csv: a row per
    scenario (negative controls first), supported / replicates per column of ``columns``, in bold where the answer is
    wrong (any "supported" where the truth is not, under 90 % where it is)."""
    table = pd.read_csv(folder / "audit_calibration.csv")
    cells = table.set_index(["scenario", "reference", "rule", "layer"])
    control = table.groupby("scenario").control.first()
    rows = []
    for scenario in sorted(control.index, key=lambda name: (control[name] != "negative", name)):
        shown = []
        for reference, rule, layer in columns:
            cell = cells.loc[(scenario, reference, rule, layer)]
            wrong = (cell.supported > 0 if cell.truth == "not supported"
                     else cell.supported < 0.9 * cell.replicates)
            text = f"{cell.supported}/{cell.replicates}"
            shown.append(f"**{text}**" if wrong else text)
        rows.append(f"| {scenario} | {control[scenario]} | " + " | ".join(shown) + " |")
    return rows


def table_rows(path: Path, header: str) -> list[str]:
    """The rows of the Markdown table of ``path`` whose header line starts with ``header`` (a table indented in a
    list item too: its rows without the indentation)."""
    lines = [line.strip() for line in path.read_text().splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith(header)) + 2  # the header and its rule
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def test_the_calibration_table_in_the_docs_is_the_committed_one():
    """Row for row, every scenario of the calibration (and none it does not have); and the committed calibration
    has every scenario of the code."""
    from acgate.audit.calibration import SCENARIOS

    assert set(pd.read_csv(ROOT / "tables" / "audit_calibration.csv").scenario) == set(SCENARIOS)
    assert table_rows(ROOT / "docs" / "audit.md", "| scenario | control | L1 paper |") == calibration_rows()


def test_the_calibration_without_the_gate_memory_in_the_docs_is_the_committed_one():
    """AC-GATE's columns of the calibration of its model without the gate's memory (tables/gate_memory_off/), which
    own panels read, row for row; and its classical rows are the paper calibration's (the same control panels and
    seeds: only AC-GATE's family trains otherwise)."""
    from acgate.audit.calibration import SCENARIOS
    from acgate.layout import MEMORY_OFF

    folder = ROOT / "tables" / MEMORY_OFF
    assert set(pd.read_csv(folder / "audit_calibration.csv").scenario) == set(SCENARIOS)
    assert table_rows(ROOT / "docs" / "audit.md", "| scenario, without the gate's memory | control |") == \
        calibration_rows(folder, ACGATE_COLUMNS)
    paper, free = (pd.read_csv(path / "audit_calibration.csv").query("reference == 'moderated_dl'")
                   .reset_index(drop=True) for path in (ROOT / "tables", folder))
    pd.testing.assert_frame_equal(paper, free)


SPREADS = ["0.25", "0.5", "1", "1.5", "2", "3"]  # the columns of docs/results.md's panel-matched table


def panel_matched_rows() -> list[str]:
    """The rows of docs/results.md's panel-matched table, rebuilt from both studies' records: per panel, reference
    and layer, the nulls supported, each spread's power and the smallest spread detected in 80 %."""
    rows = []
    for domain in ("economics", "energy"):
        rates = json.loads((ROOT / "tables" / f"{domain}_panel_matched.json").read_text())["error_rates"]
        for reference, shown in (("moderated_dl", "moderated DL"), ("acgate", "AC-GATE")):
            for layer, rate in rates.get(reference, {}).items():  # a study without AC-GATE has no AC-GATE rows
                nulls = rate["false_support"]
                power = [rate["power"].get(spread) for spread in SPREADS]
                cells = ["-" if cell is None else f"{cell['supported']}/{cell['replicates']}" for cell in power]
                smallest = rate["smallest_detectable"]
                seen = "none" if smallest is None else f"{smallest:g} lag" + ("s" if smallest > 1 else "")
                rows.append(f"| {domain}, {shown}, {layer} | {nulls['supported']}/{nulls['replicates']} | "
                            + " | ".join(cells) + f" | {seen} |")
    return rows


def test_the_panel_matched_table_in_the_docs_is_the_committed_studies():
    assert table_rows(ROOT / "docs" / "results.md", "| panel, reference, layer |") == panel_matched_rows()


def yardstick_rows() -> list[str]:
    """The rows of docs/results.md's yardstick table, rebuilt from tables/yardstick/: per panel and scenario, the
    classical reference's calibrated L1 and each of its two tests alone, and the GLS F that knows rho: against the
    shared curve by the F distribution and size-adjusted, against the entity-scaled shape size-adjusted, both, and
    both at one critical value."""
    rows = []
    for path in sorted((ROOT / "tables" / "yardstick").glob("*_yardstick_summary.csv")):
        domain, summary = path.name.removesuffix("_yardstick_summary.csv"), pd.read_csv(path)
        for r in summary.itertuples():
            def interval(key: str, r=r) -> str:
                return (f"{getattr(r, key)} ({100 * getattr(r, key + '_low'):.1f}-"
                        f"{100 * getattr(r, key + '_high'):.1f} %)")
            cells = [interval("calibrated_l1"), *(str(getattr(r, key)) for key in (
                "vs_shared", "vs_entity_scaled", "known_rho_f", "known_rho_f_size_adjusted",
                "known_rho_scaled_f_size_adjusted")), interval("known_rho_both_size_adjusted"),
                interval("known_rho_joint_size_adjusted")]
            rows.append(f"| {domain}, `{r.scenario}` ({r.replicates}) | " + " | ".join(cells) + " |")
    return rows


def test_the_yardstick_table_in_the_docs_is_the_committed_measurement():
    header = "| panel, scenario (surrogates) | calibrated L1 |"
    assert table_rows(ROOT / "docs" / "results.md", header) == yardstick_rows()


def noise_recovery_rows() -> list[str]:
    """The rows of docs/results.md's noise-recovery table, rebuilt from tables/noise_recovery/: per rho and common
    factors, each panel's and lags' mean rho read less the truth, and the factor share read / true where a factor is."""
    summaries = {domain: pd.read_csv(ROOT / "tables" / "noise_recovery" / f"{domain}_noise_recovery_summary.csv")
                 .set_index(["rho", "factors", "lags"]) for domain in ("economics", "energy")}
    rows = []
    for rho in (0.5, 0.8, 0.95):
        for factors, words in ((0, "none"), (1, "the panel's"), (2, "and a second")):
            cells = []
            for domain in ("economics", "energy"):
                for lags in ("one_curve", "proxy_lags_two"):
                    r = summaries[domain].loc[(rho, factors, lags)]
                    cell = f"{r.rho_bias:+.2f}"
                    if factors:
                        cell += f" ({100 * r.share_read_mean:.0f} / {100 * r.true_share_mean:.0f} %)"
                    cells.append(cell)
            rows.append(f"| {rho:g}, {words} | " + " | ".join(cells) + " |")
    return rows


def test_the_noise_recovery_table_in_the_docs_is_the_committed_measurement():
    assert table_rows(ROOT / "docs" / "results.md", "| rho, factors | economics, one curve |") == noise_recovery_rows()


def flat_panel_rows() -> list[str]:
    """The rows of docs/design.md's flat-panel table, rebuilt from tables/lag_recovery/flat_panels/: per lag centre
    and weight of the contemporaneous x_t (as each run's record says its DGP was), the mean bias of k* of the paper's
    AC-GATE, of AC-GATE without the gate's memory and of the moderated DL."""
    found: dict[tuple, dict] = {}
    for folder in sorted((ROOT / "tables" / "lag_recovery" / "flat_panels").iterdir()):
        params = json.loads((folder / "synthetic_null_lag_recovery.json").read_text())["params"]
        key = (params["synthetic"]["constant_centre"], params["synthetic"]["contemporaneous_coef"])
        summary = pd.read_csv(folder / "synthetic_null_lag_recovery_summary.csv").set_index("method")
        for method, r in summary.iterrows():
            name = method if method != "acgate" else f"acgate, memory {params['model']['gate_memory']}"
            found.setdefault(key, {})[name] = f"{r.mean_bias:+.2f} ({r.panels})"
    return [f"| {centre}, {weight:g} | " + " | ".join(cells[name] for name in (
        "acgate, memory True", "acgate, memory False", "moderated_dl")) + " |"
            for (centre, weight), cells in sorted(found.items(), key=lambda item: (item[0][0], -item[0][1]))]


def test_the_flat_panel_table_in_the_docs_is_the_committed_measurement():
    assert table_rows(ROOT / "docs" / "design.md", "| lag centre, weight of x_t |") == flat_panel_rows()


def acgate_rates_rows() -> list[str]:
    """The rows of docs/results.md's table of AC-GATE's rates on the real panels' surrogates, rebuilt from
    tables/panel_matched_acgate/: per panel and scenario, supported / surrogates of AC-GATE's and the moderated DL's
    L1 under the paper's rule and calibrated, and their calibrated L3, on the same surrogates."""
    rows = []
    for domain in ("economics", "energy"):
        table = pd.read_csv(ROOT / "tables" / "panel_matched_acgate" / f"{domain}_panel_matched.csv")
        found = table.set_index(["scenario", "reference", "rule", "layer"])
        for scenario in dict.fromkeys(table.scenario):
            cells = [found.loc[(scenario, reference, rule, layer)] for reference in ("acgate", "moderated_dl")
                     for rule, layer in (("paper", "L1"), ("calibrated", "L1"), ("calibrated", "L3"))]
            rows.append(f"| {domain}, `{scenario}` ({cells[0].replicates}) | "
                        + " | ".join(str(cell.supported) for cell in cells) + " |")
    return rows


def test_acgate_rates_on_the_real_panels_surrogates_in_the_docs_are_the_committed_studies():
    assert table_rows(ROOT / "docs" / "results.md", "| panel, scenario (surrogates) | AC-GATE L1, paper |") \
        == acgate_rates_rows()


def test_the_null_size_table_in_the_docs_is_the_committed_measurement():
    """docs/results.md's false supports per null class at 200 surrogates are tables/null_size/'s (the classes whose
    proxies set the size of something) and tables/null_size/same_lags/'s (the others with one curve for all), row for
    row, each under the classical rules version its record names."""
    text = (ROOT / "docs" / "results.md").read_text()
    rows = re.findall(r"^  \| (economics|energy), `(\w+)` \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", text,
                      re.MULTILINE)
    assert len(rows) == 8, rows
    for domain, scenario, rules, *said in rows:
        folder = ROOT / "tables" / "null_size" / ("same_lags" if scenario in ("one_curve", "noise_scale") else "")
        path = folder / f"{domain}_panel_matched"
        assert rules == str(json.loads(path.with_suffix(".json").read_text())["rules_version"]["moderated_dl"])
        table = pd.read_csv(path.with_suffix(".csv"))
        table = table[(table.scenario == scenario) & (table.reference == "moderated_dl")
                      & (table.rule == "calibrated")].set_index("layer")
        assert set(table.replicates) == {200}, (domain, scenario)
        found = [str(table.supported[layer]) for layer in ("L1", "L2", "lags differ", "lags changed")]
        assert found == said, (domain, scenario, found, said)


def test_the_surrogate_checks_in_the_docs_are_the_committed_counts():
    """docs/results.md's rows of the classical L1 on surrogate version 4, rebuilt from
    tables/surrogates_v4_classical.csv (each count with its 95 % interval; "not measured" where that panel, scenario
    and rules version was not run)."""
    table = pd.read_csv(ROOT / "tables" / "surrogates_v4_classical.csv")
    cells = table[table.layer == "L1"].set_index(["panel", "classical_rules", "scenario"])
    labels = {"common_shock": "`common_shock` null", "one_curve": "`one_curve` null",
              "proxy_lags_one": "`proxy_lags_one` (1-lag spread)",
              "proxy_lags_half": "`proxy_lags_half` (0.5-lag spread)"}
    results = (ROOT / "docs" / "results.md").read_text()
    for scenario, label in labels.items():
        for rules in (6, 7):
            shown = []
            for panel in ("economics", "energy"):
                if (panel, rules, scenario) not in cells.index:
                    shown.append("not measured")
                    continue
                cell = cells.loc[(panel, rules, scenario)]
                shown.append(f"{cell.supported}/{cell.replicates} ({cell.ci_low:.0%}-{cell.ci_high:.0%})"
                             .replace("%-", "-").replace("%)", " %)"))
            row = f"| {label}: calibrated L1 supported, rules {rules} | {shown[0]} | {shown[1]} |"
            assert row in results, row


LAG_RECOVERY = [  # (file stem, scenario, label, measure) of docs/results.md's lag-recovery table, in order
    ("economics_lag_recovery", "one_curve", "economics, one curve for all", "direction"),
    ("economics_lag_recovery", "proxy_lags_one", "economics, 1-lag spread along the proxies", "recovery"),
    ("economics_lag_recovery", "proxy_lags_two", "economics, 2-lag spread", "recovery"),
    ("economics_lag_recovery_shifted", "proxy_lags_two", "economics, 2-lag spread of capital-output's lags only",
     "recovery"),
    ("energy_lag_recovery", "one_curve", "energy, one curve for all", "direction"),
    ("energy_lag_recovery", "proxy_lags_one", "energy, 1-lag spread along the proxies", "recovery"),
    ("energy_lag_recovery", "proxy_lags_two", "energy, 2-lag spread", "recovery"),
    ("synthetic_linear_lag_recovery", "linear", "DGP linear map (200 entities, 30 steps)", "recovery"),
    ("synthetic_nonlinear_lag_recovery", "nonlinear", "DGP nonlinear map", "recovery"),
    ("synthetic_non_monotone_lag_recovery", "non_monotone", "DGP non-monotone map (a sine)", "recovery"),
    ("synthetic_interaction_lag_recovery", "interaction", "DGP interaction (a saddle in two moderators)", "recovery"),
    ("synthetic_null_lag_recovery", "constant", "DGP flat, lag centre 5 for all", "bias"),
]


def lag_recovery_rows() -> list[str]:
    """docs/results.md's lag-recovery rows from tables/lag_recovery/: per cell the mean Spearman of k* with the true
    lags / the mean k* MAE; on one curve for all, the mean and sd of k*'s Spearman with the proxies' direction; on the
    flat DGP, the mean bias of k*."""
    rows = []
    for stem, scenario, label, measure in LAG_RECOVERY:
        table = pd.read_csv(ROOT / "tables" / "lag_recovery" / f"{stem}_summary.csv")
        cells = table[table.scenario == scenario].set_index("method")
        shown = []
        for method in ("moderated_dl", "neural_dl", "acgate"):
            cell = cells.loc[method]
            shown.append({"recovery": f"{cell.mean_spearman:.2f} / {cell.mean_mae:.2f}",
                          "direction": f"{cell.mean_direction_spearman:+.2f} (sd {cell.sd_direction_spearman:.2f})",
                          "bias": f"bias {cell.mean_bias:+.2f}"}[measure])
        rows.append(f"| {label} | {int(cells.panels.iloc[0])} | " + " | ".join(shown) + " |")
    return rows


def test_the_lag_recovery_table_in_the_docs_is_the_committed_measurement():
    header = "| panels | n | moderated DL | neural DL | AC-GATE |"
    assert table_rows(ROOT / "docs" / "results.md", header) == lag_recovery_rows()


def test_the_reach_figures_in_the_docs_are_the_committed_maps():
    """Where the README and docs/results.md place economics in AC-GATE's reach map, and what the map without the gate's
    memory changed, rebuilt from tables/reach/ and the economics study's source."""
    from acgate.audit import reach

    source = json.loads((ROOT / "tables" / "economics_panel_matched.json").read_text())["source"]
    said = reach.reading(88, source["lagged_share_of_variance"], source["residual_ar1"])["place"]
    read = {method: round(share * said["panels"]) for method, share in said["share_read"].items()}
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"(economics: AC-GATE {read['acgate']} of 20, the moderated DL {read['moderated_dl']})" in readme
    paper, free = (pd.read_csv(folder / "reach_summary.csv").query("method == 'acgate'")
                   for folder in (ROOT / "tables" / "reach", ROOT / "tables" / "reach" / "gate_memory_off"))
    results = " ".join((ROOT / "docs" / "results.md").read_text().split())
    counts = [int(round((table.share_read * table.panels).sum())) for table in (free, paper)]
    assert f"reads the lags in {counts[0]} of the {int(paper.panels.sum())} panels instead of {counts[1]}" in results
    assert f"mean bias over the cells {paper.mean_bias.mean():.2f} lags" in results
    assert f"becomes {free.mean_bias.mean():.2f}" in results
