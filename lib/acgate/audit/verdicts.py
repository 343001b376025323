"""The verdict rules of the audit: the paper's, and the calibrated ones the project stands behind.

Both turn the audit's tables into one verdict per layer for a reference method: *supported*, *not certified*, *ruled
out* or *not claimed*, each with the rule that produced it and the evidence it read. The rules are estimator-agnostic:
the reference is AC-GATE (``audit.reference``'s default) or the classical moderated distributed lag, and each is
judged against the comparators of its own family (:data:`FAMILIES`); the audit gives both side by side.

- ``paper_verdicts``: the paper's Algorithm 1 as published, with the repository's honest additions of the first
  version (a practical L1 spread, circular stratifiers flagged one proxy at a time, a seed-pooled test). Kept so
  the two can be read side by side; its error rates on controls are published in ``tables/audit_calibration``.
- ``calibrated_verdicts``: rules whose behaviour on negative and positive controls is measured
  (``notebooks/06_audit_calibration.py``):

  * **L0 forecast**: the reference beats every comparator (every other method and persistence) on the same test
    rows, one-sided, with uncertainty over seeds (Wilcoxon) and over entities (entity block bootstrap), Holm over
    the comparators. Ruled out when some comparator beats it the same way.
  * **L1 heterogeneity**: evidence that the proxies hold the *lags*. For the moderated distributed lag, in-sample
    under the panel's own error model (:mod:`acgate.audit.gls`: feasible GLS with AR(1) errors and entity noise
    scales, every observed target step): the moderated curves beat one shape scaled for each entity (anything may
    set the size of the lagged effect, not the lags) and the shared curve, each by its GLS F statistic
    judged against permutations of the proxies across entities (both must be beaten, so no correction). For AC-GATE,
    held out: it beats its shared-lag twin (No-AC-Encoder), its twin trained on shuffled proxies and its proxy twin
    (the Proxy Shared-Gate), each over seeds and over entities. Both also need a practical spread of k* across entities
    (``audit.practical_sd``; the calibration measures the rule with it at zero too, so it is not the only guard).
  * **L2 alignment**: only when L1 is supported (the evidence that k* carries lags beyond what the proxies do
    otherwise), and some stratifier that the proxies do not carry jointly aligns with k* beyond chance (entity
    permutation) and beyond what the proxies give any k* (lag-free k*: random directions of what the proxies
    measure, :func:`acgate.statistics.lag_free_p`), Holm over stratifiers, the seeds agreeing on the sign: k* is a
    function of the proxies, so a stratifier they predict aligns with any k* that moves with them, and L2 asks
    whether the lags follow the stratifier's direction among the proxies'. AC-GATE's k* must also order the
    entities alike from seed to seed (where seeds share entities); the moderated distributed lag's L2 reads the k*
    of the same GLS fit its L1 tests (:data:`GLS_FIT`), one per panel.
  * **L3 recovery**: k* ranks the true lags and beats every collapsed model of the reference's family, one-sided,
    over seeds, or over entities for the moderated distributed lag's seedless fits on one shared panel, whose seeds
    replicate nothing (:func:`l3_verdict`; the paper's set keeps its two-sided test over seeds).

Every cell warns when its tests cannot reach alpha with the seeds there are (:func:`seed_floor_warning`), and the
audit adds a statement apart from the layers, whatever the proxies say: whether the entities' lags differ at all
(:func:`lags_differ_verdict`: a pooled GLS test of every entity's own curves against a shared shape).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from acgate.config import GATE_METHODS, SEEDLESS_METHODS, AuditConfig
from acgate.statistics import (
    fisher_combined,
    format_p,
    paired_wilcoxon,
    smallest_wilcoxon_p,
    unreplicated,
    wilcoxon_greater,
)

# the version of each reference's rules below, recorded with a calibration (tables/audit_calibration.json) and a
# panel-matched study: rates measured under another version of a reference's rules no longer describe them, and a
# study keeps the rates of a reference whose rules are unchanged. Raise a reference's version with any change to one
# of its rules or to what they read; raise both with a change to what both read (the circularity guards, L0's
# comparisons). The lags-differ statement and the stability test are GLS tests of the classical fit, and their rates
# are the classical reference's rows alone (acgate.audit.calibration.STATEMENTS): a change to them raises its version
RULES_VERSIONS = {"acgate": 6, "moderated_dl": 11}
VERDICTS = ("supported", "not certified", "ruled out", "not claimed")
LAYERS = ("L0", "L1", "L2", "L3")


@dataclass(frozen=True)
class Family:
    """A reference's comparators: its shared-lag twin, its shuffled-proxy twin and its proxy twin (which may use the
    proxies for everything but the lags), all three of which the calibrated L1 must beat, and the collapsed models
    whose constant k* L3's recovery must beat."""

    shared: str
    shuffled: str
    proxy: str
    collapsed: tuple[str, ...]


FAMILIES = {"acgate": Family("no_ac_encoder", "shuffled_proxies", "proxy_shared_gate",
                             ("no_ac_encoder", "uniform_lag")),
            "moderated_dl": Family("shared_dl", "shuffled_dl", "proxy_scaled_dl", ("shared_dl",))}
REFERENCES = tuple(FAMILIES)  # the audit gives the verdicts of each that was run, side by side
CLASSICAL_REFERENCE = "moderated_dl"  # the classical yardstick a gate model's verdicts are read against
# the k* of the in-sample GLS fit of the moderated curves (acgate.audit.gls), one per panel: the audit's tables list it
# as a method beside the runs, and the classical reference's calibrated L2 reads its alignment
GLS_FIT = "moderated_dl_gls"


def rules_versions(recorded: object) -> dict:
    """The rules version of each reference that a record states (``rules_version`` of a calibration or a study): a
    mapping reference -> version, or one number, which holds for every reference."""
    return dict(recorded) if isinstance(recorded, dict) else dict.fromkeys(REFERENCES, recorded)


def versions_text(versions: dict) -> str:
    """Rules versions as a sentence names them: "acgate 5, moderated_dl 6"."""
    return ", ".join(f"{reference} {version}" for reference, version in versions.items())


def family(reference: str) -> Family:
    """The comparators of a reference method: its family in :data:`FAMILIES`.

    Parameters
    ----------
    reference : str
        A method name, e.g. ``audit.reference``.

    Returns
    -------
    Family
        AC-GATE's (``FAMILIES["acgate"]``) for a gate model (:data:`acgate.config.GATE_METHODS`), the moderated
        distributed lag's (``FAMILIES[CLASSICAL_REFERENCE]``) for any other name.
    """
    return FAMILIES["acgate" if reference in GATE_METHODS else CLASSICAL_REFERENCE]


def heterogeneity_comparators(cfg: AuditConfig) -> list[str]:
    """The methods the calibrated L1 needs the reference to beat on held-out loss.

    Parameters
    ----------
    cfg : AuditConfig
        The audit settings; reads ``reference`` and ``heterogeneity_comparators``.

    Returns
    -------
    list of str
        ``audit.heterogeneity_comparators`` when it names any; otherwise the reference family's shared-lag,
        shuffled-proxy and proxy twins, in that order.
    """
    twins = family(cfg.reference)
    return list(cfg.heterogeneity_comparators) or [twins.shared, twins.shuffled, twins.proxy]


def cell(verdict: str, rule: str, evidence: str, warnings: list[str] | None = None, *, p: float | None = None,
         statistic: str = "", value: float | None = None) -> dict:
    """One verdict cell: a layer's verdict, the rule that produced it and the evidence it read.

    Parameters
    ----------
    verdict : str
        One of :data:`VERDICTS`: "supported", "not certified", "ruled out" or "not claimed".
    rule : str
        The rule, as text with its thresholds filled in.
    evidence : str
        What the rule read, as text.
    warnings : list of str or None, default None
        Caveats for the reader; None for none.
    p : float or None, default None
        The p-value the verdict turned on: of the layer's own tests that a "supported" needs below alpha, the
        largest (None, also for NaN, where no test decided). A gate on another layer (L2 needs L1) is not folded in:
        its own cell has its p.
    statistic : str, default ""
        What ``value`` is, e.g. "mean sd(k*)"; empty for none.
    value : float or None, default None
        The layer's headline number (None, also for NaN, for none).

    Returns
    -------
    dict
        ``{"verdict": verdict, "rule": rule, "evidence": evidence, "warnings": warnings, "p": p, "statistic":
        statistic, "value": value}``, with ``warnings`` an empty list when None or empty and p and value floats or
        None.

    Raises
    ------
    ValueError
        When ``verdict`` is not one of :data:`VERDICTS`.
    """
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict '{verdict}'; one of {', '.join(VERDICTS)}")
    return {"verdict": verdict, "rule": rule, "evidence": evidence, "warnings": warnings or [], "p": _number(p),
            "statistic": statistic, "value": _number(value)}


def _largest(ps: list[float]) -> float | None:
    """The largest of the p-values a verdict needed, or None where there is none or one is NaN (a test not run)."""
    return None if not ps or np.isnan(ps).any() else max(ps)


def _number(x: float | None) -> float | None:
    """``x`` as a float, or None where it is None, NaN or infinite (verdicts.json holds neither)."""
    return None if x is None or not np.isfinite(x) else float(x)


def of_reference(table: pd.DataFrame, reference: str) -> pd.DataFrame:
    """The rows of a paired-comparison table that are about one reference.

    Parameters
    ----------
    table : pandas.DataFrame
        A held-out or Wilcoxon table of the audit, with a ``reference`` column. A table without one (e.g. an empty frame
        read back from an empty CSV) passes through whole.
    reference : str
        The reference method.

    Returns
    -------
    pandas.DataFrame
        The rows whose ``reference`` is ``reference``; ``table`` itself when it has no ``reference`` column.
    """
    return table[table.reference == reference] if "reference" in table else table


# --- the paper's rules


def paper_verdicts(cfg: AuditConfig, l1: pd.DataFrame, l2_summary: pd.DataFrame, l3: pd.DataFrame,
                   wilcoxon: pd.DataFrame, has_stratifiers: bool) -> dict:
    """The L0-L3 verdicts of the paper's rules for the reference method, ``cfg.reference``.

    L0: test MSE against every other method, two-sided paired Wilcoxon over seeds; L1: the spread of k* against the
    practical threshold and the paper's epsilon; L2: stratifier alignment (Fisher p, the share of seeds with p < alpha,
    the seed-pooled p), stratifiers circular with a single proxy not counting; L3: :func:`l3_verdict`, two-sided. Each
    cell's ``rule`` states its rule in full.

    Parameters
    ----------
    cfg : AuditConfig
        The audit settings: ``reference``, ``alpha``, ``practical_sd``, ``epsilon``, ``l1_min_share``, ``edge_share``
        and ``l3_min_spearman``.
    l1 : pandas.DataFrame
        The audit's L1 table, one row per seed and method, with columns method, kstar_sd, degenerate_paper,
        degenerate_practical and (optional) share_at_window_edge.
    l2_summary : pandas.DataFrame
        The L2 summary, one row per method and stratifier, with columns method, stratifier, circular, seeds_tested,
        seeds_skipped, mean_abs_rho, share_p_below_alpha, fisher_p and pooled_p (NaN where not applicable, which does
        not block); may be empty.
    l3 : pandas.DataFrame
        The L3 table, one row per seed and method, with columns method, seed, spearman_lag_centre and mae_lag_centre;
        empty without a true lag.
    wilcoxon : pandas.DataFrame
        The paired Wilcoxon table, with columns reference, metric, method, mean_diff (method minus reference),
        nonzero_pairs and p; only its ``test_mse`` rows about ``cfg.reference`` are read.
    has_stratifiers : bool
        Whether any L2 test was set up (the audit passes whether its L2 table has rows); False makes L2 "not claimed".

    Returns
    -------
    dict
        Layer ("L0", "L1", "L2", "L3") -> its verdict cell (:func:`cell`).
    """
    wilcoxon = of_reference(wilcoxon, cfg.reference)
    return {"L0": _paper_l0(cfg, wilcoxon), "L1": _paper_l1(cfg, l1),
            "L2": _paper_l2(cfg, l2_summary, has_stratifiers), "L3": l3_verdict(cfg, l3, one_sided=False)}


def _paper_l0(cfg: AuditConfig, wilcoxon: pd.DataFrame) -> dict:
    ref, alpha = cfg.reference, cfg.alpha
    rule = (f"paper: supported when {ref}'s test MSE is lower than every other method's with two-sided paired "
            f"Wilcoxon p < {alpha}; ruled out when some method's is lower with p < {alpha}; else not certified")
    mse = wilcoxon[wilcoxon.metric == "test_mse"]
    if mse.empty:
        return cell("not certified", rule, "no other method to compare with")
    better = mse[(mse.p < alpha) & (mse.mean_diff < 0)]
    worse = mse[(mse.p < alpha) & (mse.mean_diff > 0)]
    evidence = "; ".join(f"{r.method}: diff {r.mean_diff:+.4g}, p {r.p:.2g}" for r in mse.itertuples())
    tested = mse[mse.p.notna()]  # a pair the seeds do not replicate has no test, and more seeds cannot help it
    warnings = seed_floor_warning(tested.nonzero_pairs.min(), alpha, two_sided=True) if len(tested) else []
    return cell("ruled out" if len(better) else "supported" if len(worse) == len(mse) else "not certified",
                rule, evidence, warnings)


def _paper_l1(cfg: AuditConfig, l1: pd.DataFrame) -> dict:
    rule = (f"paper: supported when sd_i(k*) > {cfg.practical_sd} in at least {cfg.l1_min_share:.0%} of seeds; "
            f"ruled out when sd_i(k*) <= epsilon = {cfg.epsilon:g} in every seed; else not certified")
    mine = l1[l1.method == cfg.reference]
    if mine.empty:
        return cell("not claimed", rule, f"no runs of {cfg.reference}")
    share = (~mine.degenerate_practical).mean()
    evidence = (f"mean sd(k*) {mine.kstar_sd.mean():.3f}; non-degenerate seeds: {share:.0%} practical, "
                f"{(~mine.degenerate_paper).mean():.0%} with the paper's epsilon")
    verdict = ("ruled out" if mine.degenerate_paper.all() else
               "supported" if share >= cfg.l1_min_share else "not certified")
    return cell(verdict, rule, evidence, edge_warning(cfg, mine))


def edge_warning(cfg: AuditConfig, mine: pd.DataFrame) -> list[str]:
    """A warning (in a list) when many entities' largest lag weight sits on the window's last lag.

    Their lags may reach past the window, and k* then understates them.

    Parameters
    ----------
    cfg : AuditConfig
        The audit settings; reads ``edge_share``.
    mine : pandas.DataFrame
        The reference's rows of the L1 table, one per seed, with ``share_at_window_edge``: the share of entities whose
        largest lag weight is on the last lag K (NaN without a lag profile).

    Returns
    -------
    list of str
        One warning when the mean share over seeds is at least ``audit.edge_share``; empty when it is lower or NaN, or
        the column is missing.
    """
    share = mine.share_at_window_edge.mean() if "share_at_window_edge" in mine else np.nan
    if not np.isfinite(share) or share < cfg.edge_share:
        return []
    return [f"{share:.0%} of entities put their largest lag weight on the last lag K (mean over seeds; the warning "
            f"starts at {cfg.edge_share:.0%}): their lags may reach past the window, and k* understates them; "
            "widen model.max_lag and train again"]


def _paper_l2(cfg: AuditConfig, l2_summary: pd.DataFrame, has_stratifiers: bool) -> dict:
    alpha = cfg.alpha
    rule = (f"paper: supported when some stratifier not circular with any single proxy has Fisher p < {alpha}, at "
            f"least half the seeds with permutation p < {alpha}, and (where every seed has the same entities) "
            f"seed-pooled p < {alpha}; ruled out when every seed is L1-degenerate; not claimed without a testable "
            "stratifier; else not certified")
    summary = l2_summary[l2_summary.method == cfg.reference] if not l2_summary.empty else l2_summary
    if not has_stratifiers:
        return cell("not claimed", rule, "no stratifiers")
    if summary.empty or summary.seeds_tested.sum() == 0:
        return _nothing_tested(summary, rule)
    passes = summary[(summary.fisher_p < alpha) & (summary.share_p_below_alpha >= 0.5)
                     & ~(summary.pooled_p >= alpha)]  # pooled p NaN (not applicable) does not block
    clean = passes[~passes.circular]
    evidence = "; ".join(f"{r.stratifier}{' (circular)' if r.circular else ''}: mean|rho| {r.mean_abs_rho:.3f}, "
                         f"share p<{alpha} {r.share_p_below_alpha:.2f}, Fisher p {r.fisher_p:.2g}"
                         for r in summary.itertuples())
    if len(passes) and clean.empty:
        evidence += "; only circular stratifiers pass"
    return cell("supported" if len(clean) else "not certified", rule, evidence)


def _nothing_tested(summary: pd.DataFrame, rule: str) -> dict:
    """L2 where no seed was tested: ruled out when L1 found every seed degenerate (nothing to stratify); not claimed
    when a stratifier could not be tested at all (constant across entities or missing), which says nothing about
    the lags."""
    untestable = summary[(summary.seeds_tested == 0) & (summary.seeds_skipped == 0)] if len(summary) else summary
    if len(untestable):
        return cell("not claimed", rule, f"not testable: {', '.join(untestable.stratifier)} has no spread across "
                    "entities (or no values) where k* has one")
    return cell("ruled out", rule, "every seed L1-degenerate: nothing to stratify")


def l3_verdict(cfg: AuditConfig, l3: pd.DataFrame, one_sided: bool = True,
               kstar_by_entity: pd.DataFrame | None = None) -> dict:
    """L3: recovery of the true lags, which must beat every collapsed model that was run and needs at least one of them.

    The collapsed models are the reference family's (``Family.collapsed``). For each that was run, a paired Wilcoxon
    over seeds of k* MAE against the lag centre (collapsed minus reference), one-sided (the calibrated rule) or
    two-sided with the reference lower (the paper's); a model whose difference is the same in every seed gets no test
    and is not beaten. Two closed-form fits that read no seed (:data:`acgate.config.SEEDLESS_METHODS`) on one shared
    panel replicate nothing over seeds: given ``kstar_by_entity`` (the calibrated rule on a shared panel), they are
    compared over the entities instead, by a one-sided Wilcoxon of each entity's absolute k* error (collapsed minus
    reference). Supported when the mean Spearman(k*, lag centre) over seeds is at least ``audit.l3_min_spearman``
    and every collapsed model is beaten (p < alpha and a positive mean difference); ruled out when the mean Spearman is
    below 0.2; not claimed without L3 rows of the reference; else not certified, also when every seed's Spearman is
    undefined (k* or the truth constant).

    Parameters
    ----------
    cfg : AuditConfig
        The audit settings: ``reference``, ``alpha`` and ``l3_min_spearman``.
    l3 : pandas.DataFrame
        The L3 table, one row per seed and method, with columns method, seed, spearman_lag_centre and mae_lag_centre;
        may be empty (no ground truth).
    one_sided : bool, default True
        True for the calibrated rule's one-sided test (:func:`acgate.statistics.wilcoxon_greater`), False for the
        paper's two-sided one (:func:`acgate.statistics.paired_wilcoxon`).
    kstar_by_entity : pandas.DataFrame or None, default None
        Every run's k* per entity, with columns entity, seed, method, kstar and kstar_true, when every seed shares one
        panel (None otherwise): the entities then replicate a pair of seedless fits.

    Returns
    -------
    dict
        The L3 verdict cell (:func:`cell`), with a :func:`seed_floor_warning` for each tested model whose seeds cannot
        reach alpha.
    """

    alpha, collapsed_models = cfg.alpha, family(cfg.reference).collapsed
    test = "one-sided" if one_sided else "two-sided"
    rule = (f"supported when mean Spearman(k*, lag centre) >= {cfg.l3_min_spearman} and k* MAE is lower than each "
            f"collapsed model's ({', '.join(collapsed_models)}; at least one must have run) with {test} paired "
            f"Wilcoxon p < {alpha} over seeds"
            + (" (over entities for two seedless fits on one shared panel)" if kstar_by_entity is not None else "")
            + "; ruled out when mean Spearman < 0.2; else not certified (also when Spearman is undefined because k* "
            "or the truth is constant)")
    mine = l3[l3.method == cfg.reference] if not l3.empty else l3
    if mine.empty:
        return cell("not claimed", rule, "no ground truth")
    rho = mine.spearman_lag_centre.mean()
    mae = l3.set_index(["method", "seed"]).mae_lag_centre
    ran = [m for m in collapsed_models if m in mae.index.get_level_values("method")]
    parts, beats, warnings, deciding = [], bool(ran), [], []
    for method in ran:
        pair = pd.concat({"m": mae.loc[method], "r": mae.loc[cfg.reference]}, axis=1).dropna()
        diff = (pair.m - pair.r).to_numpy()
        if kstar_by_entity is not None and {method, cfg.reference} <= set(SEEDLESS_METHODS):
            errors = _entity_errors(kstar_by_entity, method, cfg.reference)  # the seeds replicate nothing
            p, diff = wilcoxon_greater(errors), errors
            parts.append(f"{method} MAE diff {diff.mean():+.3f}, p {format_p(p)} over {len(diff)} entities (seedless "
                         "fits on one panel)")
        elif unreplicated(diff):  # deterministic fits on one shared panel: the seeds replicate nothing
            p = np.nan
            parts.append(f"{method} MAE diff {diff.mean():+.3f}, p {format_p(p)} (the same in every seed: no test)")
        else:
            p = wilcoxon_greater(diff) if one_sided else paired_wilcoxon(pair.m, pair.r)["p"]
            parts.append(f"{method} MAE diff {diff.mean():+.3f}, p {format_p(p)}")
            warnings += seed_floor_warning(int(np.sum(diff != 0)), alpha, two_sided=not one_sided, comparator=method)
        beats &= bool(p < alpha and diff.mean() > 0)
        deciding.append(p)
    evidence = (f"mean Spearman {rho:.3f}, mean MAE {mine.mae_lag_centre.mean():.3f}; "
                + ("; ".join(parts) or "no collapsed model was run, so recovery cannot be told from a constant k*"))
    verdict = ("not certified" if np.isnan(rho) else "ruled out" if rho < 0.2 else
               "supported" if rho >= cfg.l3_min_spearman and beats else "not certified")
    return cell(verdict, rule, evidence, warnings, p=_largest(deciding), statistic="mean Spearman(k*, lag centre)",
                value=rho)


def _entity_errors(kstar_by_entity: pd.DataFrame, collapsed: str, reference: str) -> np.ndarray:
    """Each entity's absolute k* error against the truth, ``collapsed`` minus ``reference``, on the first seed both
    ran (seedless fits on one panel: every seed's is the same)."""
    rows = kstar_by_entity[kstar_by_entity.method.isin([collapsed, reference])]
    seed = min(set(rows.seed[rows.method == collapsed]) & set(rows.seed[rows.method == reference]))
    error = (rows[rows.seed == seed].assign(error=lambda r: (r.kstar - r.kstar_true).abs())
             .pivot_table(index="entity", columns="method", values="error", aggfunc="first").dropna())
    return (error[collapsed] - error[reference]).to_numpy()


def seed_floor_warning(nonzero_pairs: int, level: float, two_sided: bool = False, comparator: str = "") -> list[str]:
    """A warning (in a list) when a Wilcoxon test over the seeds there are cannot reach a level.

    With n non-zero differences the smallest p is 1/2^n one-sided and 2/2^n two-sided
    (:func:`acgate.statistics.smallest_wilcoxon_p`).

    Parameters
    ----------
    nonzero_pairs : int
        n, the number of seeds with a non-zero paired difference (converted with ``int``).
    level : float
        The level the test must reach: alpha, or alpha / m for the first step of Holm over m comparators.
    two_sided : bool, default False
        Whether the test is two-sided.
    comparator : str, default ""
        A name the warning starts with ("name: ..."); empty for none.

    Returns
    -------
    list of str
        Empty when the smallest p is below ``level``; otherwise one warning with that p and the number of seeds with a
        non-zero difference that would reach ``level``.
    """
    floor = smallest_wilcoxon_p(int(nonzero_pairs), two_sided)
    if floor < level:
        return []
    side = "two-sided" if two_sided else "one-sided"
    needed = next(n for n in range(1, 64) if smallest_wilcoxon_p(n, two_sided) < level)
    return [f"{comparator + ': ' if comparator else ''}{int(nonzero_pairs)} seeds with a non-zero difference can "
            f"give a {side} Wilcoxon p of at best {floor:.3g}, which cannot reach {level:.3g}; train more seeds "
            f"({needed} or more)"]


# --- the calibrated rules


def calibrated_verdicts(cfg: AuditConfig, l1: pd.DataFrame, heldout: pd.DataFrame, agreement: pd.DataFrame,
                        l2_summary: pd.DataFrame, l3: pd.DataFrame, wilcoxon: pd.DataFrame,
                        has_stratifiers: bool, shared_entities: bool, lag_tests: pd.DataFrame | None = None,
                        kstar_by_entity: pd.DataFrame | None = None) -> dict:
    """The L0-L3 verdicts of the calibrated rules for the reference method, ``cfg.reference``.

    L0: held-out test loss against every comparator, over seeds and over entities, Holm over the comparators; L1:
    for a gate model, held-out loss against the reference's twins (:func:`heterogeneity_comparators`), for the
    classical reference the in-sample GLS interaction tests (``lag_tests``), and the practical spread of k*;
    L2: stratifier alignment (:func:`aligned_stratifiers`), gated by L1 and the seed agreement of k*; L3:
    :func:`l3_verdict`, one-sided. The module docstring and each cell's ``rule`` state the rules in full.

    Parameters
    ----------
    cfg : AuditConfig
        The audit settings under which the reference is judged: ``reference``, ``alpha``, the thresholds and
        ``heterogeneity_comparators``.
    l1 : pandas.DataFrame
        The audit's L1 table, one row per seed and method, with columns method, kstar_sd, degenerate_paper and
        (optional) share_at_window_edge.
    heldout : pandas.DataFrame
        The held-out comparisons, with columns reference, comparator, nonzero_pairs, mean_loss_diff (comparator minus
        reference), p_seed_better (NaN where the seeds replicate nothing), p_entity_better, holm_better and holm_worse;
        only its rows about ``cfg.reference`` are read.
    agreement : pandas.DataFrame
        The seed agreement table, one row per method, with columns method and median_rho (NaN where seeds do not share
        entities).
    l2_summary : pandas.DataFrame
        The L2 summary, one row per method and stratifier, with columns method, stratifier, seeds_tested,
        seeds_skipped, circular_joint, proxy_r_joint, alignment_rho, alignment_p, p_holm, sign_consistency,
        alignment_lag_free_median and lag_free_p; may be empty.
    l3 : pandas.DataFrame
        The L3 table (see :func:`l3_verdict`); may be empty.
    wilcoxon : pandas.DataFrame
        The paired Wilcoxon table; taken to its rows about ``cfg.reference``, but no calibrated rule reads it.
    has_stratifiers : bool
        Whether any L2 test was set up; False makes L2 "not claimed".
    shared_entities : bool
        Whether every seed has the same entities and targets (one real panel): L0 then warns that the Wilcoxon over
        seeds measures training randomness only.
    lag_tests : pandas.DataFrame or None, default None
        The audit's in-sample GLS lag tests (:func:`acgate.audit.lag_tests.table`), one row per panel, with
        columns p_vs_entity_scaled, p_vs_shared, kstar_sd and note; read by the classical reference's L1 (None or
        empty: not testable).
    kstar_by_entity : pandas.DataFrame or None, default None
        Every run's k* per entity when every seed shares one panel, else None: L3 compares two seedless fits over the
        entities (:func:`l3_verdict`).

    Returns
    -------
    dict
        Layer ("L0", "L1", "L2", "L3") -> its verdict cell (:func:`cell`).
    """
    heldout, wilcoxon = of_reference(heldout, cfg.reference), of_reference(wilcoxon, cfg.reference)
    lag_tests = pd.DataFrame() if lag_tests is None else lag_tests
    l1_cell = (_heterogeneity(cfg, l1, heldout) if cfg.reference in GATE_METHODS else
               _interactions(cfg, l1, lag_tests))
    return {"L0": _forecast(cfg, heldout, shared_entities), "L1": l1_cell,
            "L2": _alignment(cfg, l1_cell, agreement, l2_summary, has_stratifiers),
            "L3": _with_curves_per_entity(cfg, l3_verdict(cfg, l3, kstar_by_entity=kstar_by_entity), l3,
                                          kstar_by_entity)}


CURVES_PER_ENTITY = "two_stage_dl"  # each entity's own lag curves, no proxies: it recovers lags the proxies do not hold


def _with_curves_per_entity(cfg: AuditConfig, l3_cell: dict, l3: pd.DataFrame,
                            kstar_by_entity: pd.DataFrame | None) -> dict:
    """The classical reference's L3 cell with the same rule's verdict for :data:`CURVES_PER_ENTITY` beside it (key
    ``two_stage_dl`` and a sentence in the evidence), where it ran on a panel with a known truth: where the lags differ
    along something the proxies do not hold, it is the classical model that recovers them. AC-GATE's cell is as it
    is."""
    if cfg.reference in GATE_METHODS or l3.empty or not (l3.method == CURVES_PER_ENTITY).any():
        return l3_cell
    other = l3_verdict(dataclasses.replace(cfg, reference=CURVES_PER_ENTITY), l3, kstar_by_entity=kstar_by_entity)
    return {**l3_cell, CURVES_PER_ENTITY: other,
            "evidence": f"{l3_cell['evidence']}. {CURVES_PER_ENTITY} (each entity's own curves, no proxies), by the "
                        f"same rule: {other['verdict']} ({other['evidence']})"}


def _forecast(cfg: AuditConfig, heldout: pd.DataFrame, shared_entities: bool) -> dict:
    alpha = cfg.alpha
    rule = (f"calibrated: supported when {cfg.reference}'s test MSE, on the same test rows, is lower than every "
            "comparator's (every other method and persistence) by a one-sided paired Wilcoxon over seeds and a "
            f"one-sided entity block bootstrap, the larger p Holm-adjusted over the comparators below {alpha}; ruled "
            "out when some comparator is lower by the same test; else not certified")
    if heldout.empty:
        return cell("not certified", rule, "no comparator was scored")
    level = alpha / len(heldout)  # Holm's first step
    seeded = heldout[heldout.p_seed_better.notna()] if "p_seed_better" in heldout else heldout  # NaN: no seed test
    short = [r.comparator for r in seeded.itertuples() if seed_floor_warning(r.nonzero_pairs, level)]
    warnings = seed_floor_warning(seeded.nonzero_pairs.min(), level, comparator=(
        f"against {len(short)} of the {len(heldout)} comparators ({', '.join(short)})")) if short else []
    if shared_entities:
        warnings.append("every seed shares one test window and one set of entities: the Wilcoxon over seeds "
                        "measures training randomness only; the entity bootstrap carries the sampling uncertainty")
    evidence = "; ".join(f"{r.comparator}: loss diff {r.mean_loss_diff:+.4g} (comparator - reference), Holm p "
                         f"better {format_p(r.holm_better)}, worse {format_p(r.holm_worse)}"
                         for r in heldout.itertuples())
    if set(heldout.comparator) == {"persistence"}:
        evidence = "against persistence alone: " + evidence
    verdict = ("ruled out" if (heldout.holm_worse < alpha).any() else
               "supported" if (heldout.holm_better < alpha).all() else "not certified")
    return cell(verdict, rule, evidence, warnings, p=_largest(list(heldout.holm_better)),
                statistic="smallest loss gain over a comparator", value=heldout.mean_loss_diff.min())


def _heterogeneity(cfg: AuditConfig, l1: pd.DataFrame, heldout: pd.DataFrame) -> dict:
    alpha, comparators = cfg.alpha, heterogeneity_comparators(cfg)
    rule = (f"calibrated: supported when {cfg.reference} has a lower held-out test loss than each of "
            f"{', '.join(comparators)} (one-sided Wilcoxon over seeds and entity block bootstrap, both p < "
            f"{alpha}) and sd_i(k*) > {cfg.practical_sd} in at least {cfg.l1_min_share:.0%} of seeds; ruled out when "
            f"sd_i(k*) <= epsilon = {cfg.epsilon:g} in every seed; else not certified")
    mine = l1[l1.method == cfg.reference]
    if mine.empty:
        return cell("not claimed", rule, f"no runs of {cfg.reference}")
    if mine.degenerate_paper.all():
        return cell("ruled out", rule, f"sd(k*) <= epsilon in every seed (mean {mine.kstar_sd.mean():.3g})",
                    edge_warning(cfg, mine), statistic="mean sd(k*)", value=mine.kstar_sd.mean())
    share = (mine.kstar_sd > cfg.practical_sd).mean()  # from the spread, so a rerun with another threshold holds
    parts = [f"sd(k*) > {cfg.practical_sd} in {share:.0%} of seeds (mean sd {mine.kstar_sd.mean():.3f})"]
    rows = heldout.set_index("comparator") if not heldout.empty else pd.DataFrame()
    beaten, warnings, deciding = [], [], []
    for comparator in comparators:
        if comparator not in rows.index:
            parts.append(f"{comparator} not run: lag heterogeneity cannot be told from a shared, shuffled or "
                         "proxy twin")
            continue
        r = rows.loc[comparator]
        # a NaN seed p: see heldout
        ok = bool(r.p_entity_better < alpha and (np.isnan(r.p_seed_better) or r.p_seed_better < alpha))
        beaten.append(ok)
        deciding.append(r.p_better)  # the larger of the two (the entities' alone where the seeds test nothing)
        parts.append(f"vs {comparator}: loss diff {r.mean_loss_diff:+.4g}, p seeds {format_p(r.p_seed_better)}, "
                     f"p entities {format_p(r.p_entity_better, cfg.bootstrap)}{'' if ok else ' (not beaten)'}")
        if not np.isnan(r.p_seed_better):  # NaN: the seeds replicate nothing, and more of them cannot help
            warnings += seed_floor_warning(r.nonzero_pairs, alpha, comparator=comparator)
    supported = share >= cfg.l1_min_share and len(beaten) == len(comparators) and all(beaten)
    return cell("supported" if supported else "not certified", rule, "; ".join(parts),
                warnings + edge_warning(cfg, mine), p=_largest(deciding) if len(deciding) == len(comparators) else None,
                statistic="mean sd(k*)", value=mine.kstar_sd.mean())


def _interactions(cfg: AuditConfig, l1: pd.DataFrame, lag_tests: pd.DataFrame) -> dict:
    """The calibrated L1 of the classical reference: the in-sample GLS interaction tests of each panel."""
    alpha = cfg.alpha
    rule = (f"calibrated: supported when, in-sample under the panel's AR(1) errors and entity noise scales (feasible "
            f"GLS, every observed target step), {cfg.reference}'s lag curves moderated by the proxies fit better than "
            "one shape scaled for each entity (the shape fitted with non-negative scales, each entity's scale of it "
            "then free: anything may set the size of the lagged effect, not the lags; its p from a parametric "
            "bootstrap of that fit) and than the shared curve (its p from permuting the proxies across entities), "
            f"each GLS F statistic's p below {alpha} (Fisher's combination over "
            f"independent panels), the GLS fit's sd_i(k*) > {cfg.practical_sd} in at least {cfg.l1_min_share:.0%} of "
            f"panels; ruled out when sd_i(k*) <= epsilon = {cfg.epsilon:g} in every seed; else not certified. The "
            f"verdict speaks for the GLS fit's k* ({GLS_FIT}); how closely the runs' k* rank the entities alike is "
            "reported, not a gate")
    mine = l1[l1.method == cfg.reference] if len(l1) else l1
    if mine.empty:
        return cell("not claimed", rule, f"no runs of {cfg.reference}")
    if mine.degenerate_paper.all():
        return cell("ruled out", rule, f"sd(k*) <= epsilon in every seed (mean {mine.kstar_sd.mean():.3g})",
                    edge_warning(cfg, mine), statistic="mean sd(k*)", value=mine.kstar_sd.mean())
    tested = lag_tests[np.isfinite(lag_tests.p_vs_entity_scaled)] if len(lag_tests) else lag_tests
    if tested.empty:
        notes = "; ".join(dict.fromkeys(n for n in lag_tests.note if isinstance(n, str) and n)) if len(lag_tests) \
            else "no panel"
        return cell("not certified", rule, f"not testable: {notes}", edge_warning(cfg, mine))
    p_scaled, p_shared = (float(tested[c].iloc[0]) if len(tested) == 1 else fisher_combined(tested[c])
                          for c in ("p_vs_entity_scaled", "p_vs_shared"))
    share = float((tested.kstar_sd > cfg.practical_sd).mean())
    first = tested.iloc[0]
    evidence = (f"vs the entity-scaled shape: p {format_p(p_scaled)} ({int(first.draws)} bootstrap draws); vs the "
                f"shared curve: p {format_p(p_shared)} ({int(first.permutations)} proxy permutations); "
                f"{len(tested)} panel(s); AR(1) rho {tested.rho.mean():.2f} (corrected for short series; "
                f"{first.rho_raw:.2f} raw); GLS sd(k*) > "
                f"{cfg.practical_sd} in {share:.0%} of panels (mean sd {tested.kstar_sd.mean():.3f}); the runs' k* "
                f"against the GLS fit's: Spearman {tested.kstar_agreement.median():.2f}")
    supported = p_scaled < alpha and p_shared < alpha and share >= cfg.l1_min_share
    return cell("supported" if supported else "not certified", rule, evidence,
                edge_warning(cfg, mine) + common_shock_warning(alpha, tested) + proxy_shock_warning(alpha, tested)
                + stability_warning(alpha, tested),
                p=_largest([p_scaled, p_shared]), statistic="GLS mean sd(k*)", value=tested.kstar_sd.mean())


def lags_changed(alpha: float, lag_tests: pd.DataFrame) -> dict:
    """Whether the lags changed over time (:func:`acgate.audit.gls.stability_test`: the early and the late years'
    moderated lag maps differ, against each entity's own stable curves): its p (Fisher's combination where several
    panels were tested), the first time of the late half and the mean k* of each half, where that p is below
    ``alpha``; an empty dict where it is not, or where no panel was tested."""
    tested = lag_tests[lag_tests.stable_p.notna()] if "stable_p" in lag_tests else lag_tests.iloc[:0]
    if tested.empty:
        return {}
    p = float(tested.stable_p.iloc[0]) if len(tested) == 1 else fisher_combined(tested.stable_p)
    if not p < alpha:
        return {}
    return {"p": p, "panels": len(tested), "first_late": tested.stable_first_late.iloc[0],
            "kstar_early": float(tested.stable_kstar_early.mean()),
            "kstar_late": float(tested.stable_kstar_late.mean()),
            "change": float(tested.stable_kstar_mean_abs_change.mean())}


def stability_warning(alpha: float, lag_tests: pd.DataFrame) -> list[str]:
    """A warning (in a list) where the lags changed over time (:func:`lags_changed`): every lag verdict then reads an
    average of two lag maps, and the held-out years follow the later one."""
    changed = lags_changed(alpha, lag_tests)
    if not changed:
        return []
    return [f"the lags changed over time: the moderated lag map of the years from {changed['first_late']} differs "
            f"from the one before (stability test p {format_p(changed['p'])} against each entity's own stable "
            f"curves; mean k* {changed['kstar_early']:.2f} before, {changed['kstar_late']:.2f} from then, an entity's "
            f"k* {changed['change']:.2f} lags apart on average): every lag verdict reads an average of the two maps, "
            "and the held-out years follow the later one; audit the two periods apart (split=) to see each"]


def common_shock_warning(alpha: float, tested: pd.DataFrame) -> list[str]:
    """A warning (in a list) when the residuals of the panels' pooled lag fit share shocks (Pesaran's CD below
    ``alpha`` in any panel), which the GLS tests then took out (each entity's loading on the cross-sectional mean of
    the target, :func:`acgate.audit.gls.with_common_shocks`), with the CD of what the L1's GLS fit leaves
    (:func:`acgate.audit.noise.tested_dependence`): a shock whose loadings follow the proxies could pass for lags
    that do, and what is left of it the panel-matched study's common_shock null measures."""
    if "cd_p" not in tested or not (tested.cd_p < alpha).any():
        return []
    left = ""
    if "cd_gls" in tested and tested.cd_gls.notna().any():
        still = ": they share shocks still" if (tested.cd_gls_p < alpha).any() else ""
        left = (f"; what the L1's GLS fit leaves has CD {tested.cd_gls.median():.1f} "
                f"(p {format_p(float(tested.cd_gls_p.min()))}{still})")
    return [f"the entities share shocks: Pesaran's CD of the pooled lag fit's residuals {tested.cd.median():.1f} "
            f"(p {format_p(float(tested.cd_p.max()))}), a common factor (the cross-sectional mean of each step) "
            f"holding {tested.common_share.median():.0%} of their variance; the GLS tests (L1, the lags-differ "
            "statement, the stability over time) took out each entity's own loading on it (common correlated "
            f"effects){left}, as a shock that richer entities feel more can pass for lags that follow the proxies "
            "(the panel-matched study's common_shock null measures how often it still does)"]


def proxy_shock_warning(alpha: float, tested: pd.DataFrame) -> list[str]:
    """A warning (in a list) when the shocks in what the L1's GLS fit leaves follow the proxies step by step
    (:func:`acgate.statistics.proxy_shocks`, p at most ``alpha`` in any panel): the L1's p assume no such shocks,
    and the panel-matched study's Gaussian surrogates do not carry them. On surrogates that carry the real panels'
    own shocks the L1 loses its size (docs/results.md). Records made before the statistic existed lack it: no
    warning."""
    if "proxy_shock_p" not in tested or not (tested.proxy_shock_p <= alpha).any():
        return []
    worst = tested.loc[tested.proxy_shock_p.idxmin()]
    return [f"the shocks follow the proxies step by step: each step's residuals of the L1's GLS fit regressed on the "
            f"proxies give R² {worst.proxy_shock_r2:.2f} on average, against {worst.proxy_shock_r2_null:.2f} with the "
            f"proxies permuted (p {format_p(float(worst.proxy_shock_p))}); the L1's p and the panel-matched study's "
            "surrogates assume no such shocks, and on surrogates that carry the real panels' own shocks the L1 says "
            "\"supported\" far more often than alpha where the lags are one curve for all (docs/results.md): its "
            "error rates here may be understated"]


def lags_differ_verdict(cfg: AuditConfig, lag_tests: pd.DataFrame) -> dict:
    """Whether the entities' lags differ at all, whatever the proxies say: a statement apart from the layers.

    It reads the pooled GLS test of every entity's own lag curves against a shared shape scaled for each
    (:func:`acgate.audit.gls.shape_test`, one row per panel). Supported when its p (a parametric bootstrap's; Fisher's
    combination of the panels' p where several were tested) is below alpha; not claimed when no panel could be
    tested; else not certified. What it says together with both references' L1 is
    :func:`acgate.report.reading.lags_differ_reading`'s to say.

    Parameters
    ----------
    cfg : AuditConfig
        The audit settings; reads ``alpha``.
    lag_tests : pandas.DataFrame
        The audit's lag_tests table, one row per panel (one per seed, or one where the seeds share their panel), with
        columns differ_entities (the entities tested), differ_p (NaN when none could be), differ_share_below_05,
        differ_rho and differ_note (why not).

    Returns
    -------
    dict
        A verdict cell (:func:`cell`, without warnings).
    """
    alpha = cfg.alpha
    rule = ("supported when every entity's own distributed-lag curves fit better than the pooled curve shape scaled "
            "for each entity (the size of the lagged effect may differ, the shape not), by one F statistic pooled "
            "over the entities on the panel's GLS-transformed series (AR(1) errors, entity noise scales), its p from "
            f"a parametric bootstrap of the fitted shared shape below {alpha}; else not certified")
    tested = lag_tests[np.isfinite(lag_tests.differ_p)] if "differ_p" in lag_tests else lag_tests.iloc[:0]
    if tested.empty:
        notes = "; ".join(dict.fromkeys(n for n in lag_tests.get("differ_note", pd.Series(dtype=str))
                                        if isinstance(n, str) and n)) or "no panel"
        return cell("not claimed", rule, f"not testable: {notes}")
    p = float(tested.differ_p.iloc[0]) if len(tested) == 1 else fisher_combined(tested.differ_p)
    share = float(np.average(tested.differ_share_below_05, weights=tested.differ_entities))
    evidence = (f"pooled over {int(tested.differ_entities.sum())} entities ({len(tested)} panel(s)): p {format_p(p)} "
                f"({int(tested.differ_draws.iloc[0])} bootstrap draws; AR(1) rho {tested.differ_rho.mean():.2f}); "
                f"{share:.0%} of the entities' own tests reject at 0.05")
    return cell("supported" if p < alpha else "not certified", rule, evidence, p=p,
                statistic="share of entities whose own test rejects at 0.05", value=share)


def _alignment(cfg: AuditConfig, l1_cell: dict, agreement: pd.DataFrame, l2_summary: pd.DataFrame,
               has_stratifiers: bool) -> dict:
    alpha, gate = cfg.alpha, cfg.reference in GATE_METHODS
    source = (f"the seed-to-seed Spearman of k* has median >= {cfg.min_seed_agreement} (where seeds share entities)"
              if gate else f"k* from the GLS fit its L1 tests ({GLS_FIT}, one per panel)")
    rule = (f"calibrated: supported only when L1 is supported, {source}, and some stratifier whose ranks the proxies "
            f"do not predict jointly (rank multiple correlation < {cfg.circular_threshold}) aligns with k* beyond "
            "chance and beyond what the proxies give any k*: the larger of its entity-permutation p and its lag-free "
            "p (k* against random directions of what the proxies measure; seed-pooled where seeds share entities, "
            f"else Fisher over independent seeds) below {alpha} after Holm over those stratifiers, and at least "
            f"{cfg.min_sign_consistency:.0%} of the tested seeds agree on its sign; ruled out when every seed is "
            "L1-degenerate (nothing to stratify); not claimed without a testable stratifier; else not certified")
    if not has_stratifiers:
        return cell("not claimed", rule, "no stratifiers")
    method = cfg.reference if gate else GLS_FIT
    summary = l2_summary[l2_summary.method == method] if not l2_summary.empty else l2_summary
    if summary.empty and not gate:
        return cell("not claimed", rule, "no GLS fit of the panel to stratify (see lag_tests.csv for why)")
    if summary.empty or summary.seeds_tested.sum() == 0:
        return _nothing_tested(summary, rule)
    evidence = "; ".join(_stratifier_evidence(r, cfg) for r in summary.itertuples())
    mine = agreement[agreement.method == cfg.reference] if gate and not agreement.empty else agreement.iloc[:0]
    blockers = []
    if l1_cell["verdict"] != "supported":
        blockers.append("L1 not supported: no evidence that the proxies hold the lags")
    if len(mine) and np.isfinite(mine.median_rho.iloc[0]) and mine.median_rho.iloc[0] < cfg.min_seed_agreement:
        blockers.append(f"k* ordering not reproducible across seeds (median seed-pair Spearman "
                        f"{mine.median_rho.iloc[0]:.2f} < {cfg.min_seed_agreement})")
    verdict = "supported" if len(aligned_stratifiers(cfg, summary)) and not blockers else "not certified"
    passing = aligned_stratifiers(cfg, summary)
    clean = passing if len(passing) else summary[~summary.circular_joint & summary.p_holm.notna()]
    best = clean.loc[clean.p_holm.idxmin()] if len(clean) else None  # the one that passes, or is closest to it
    return cell(verdict, rule, "; ".join(blockers + [evidence]), p=None if best is None else best.p_holm,
                statistic="" if best is None else f"alignment rho of {best.stratifier}",
                value=None if best is None else best.alignment_rho)


def aligned_stratifiers(cfg: AuditConfig, summary: pd.DataFrame) -> pd.DataFrame:
    """The stratifiers that pass the calibrated L2 test, its gates (L1, seed agreement) apart.

    Parameters
    ----------
    cfg : AuditConfig
        The audit settings; reads ``alpha`` and ``min_sign_consistency``.
    summary : pandas.DataFrame
        One reference's rows of the L2 summary, with columns circular_joint, p_holm and sign_consistency.

    Returns
    -------
    pandas.DataFrame
        The rows of ``summary`` that are not jointly circular, have a Holm p below alpha, and whose tested seeds agree
        on the sign of rho in at least ``audit.min_sign_consistency`` of them.
    """
    return summary[~summary.circular_joint & (summary.p_holm < cfg.alpha)
                   & (summary.sign_consistency >= cfg.min_sign_consistency)]


def _stratifier_evidence(row, cfg: AuditConfig) -> str:
    if row.circular_joint:
        return f"{row.stratifier}: circular (the proxies predict its ranks with R {row.proxy_r_joint:.2f})"
    return (f"{row.stratifier} (the proxies predict its ranks with R {row.proxy_r_joint:.2f}): rho "
            f"{row.alignment_rho:+.3f}, permutation p {format_p(row.alignment_p, cfg.permutations)}; lag-free k* "
            f"(random directions of the proxies) align with |rho| {row.alignment_lag_free_median:.3f} (median), "
            f"lag-free p {format_p(row.lag_free_p)}; Holm p {format_p(row.p_holm)}, sign agreement "
            f"{row.sign_consistency:.0%}")
