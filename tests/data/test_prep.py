"""Cleaning rules on small hand-made long frames, the proxy-shuffle control, and the real domains' entity counts."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from acgate.config import ParamsError, load_params, params_from_dict
from acgate.data import prep
from acgate.data.example import example_frame
from acgate.data.panel import PanelError, Standardiser

ROOT = Path(__file__).resolve().parents[2]

YEARS = list(range(2000, 2012))  # train 2000-2007, val 2008-2009, test 2010-2011


def params(model=None, **data):
    spec = {"domain": "toy", "n_seeds": 1,
            "data": {"loader": "csv", "csv_file": "toy.csv", "first_time": 2000, "last_time": 2011, "target": "y",
                     "features": ["x"], "proxies": ["mean:p"], "static": [], "stratifiers": ["mean:s"],
                     "max_missing_share": 0.15, "strict": True, **data},
            "split": {"val_start": 2008, "test_start": 2010}, "model": {"max_lag": 3, **(model or {})}}
    return params_from_dict(spec, "toy.yaml")


def frame(n=8, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        for t in YEARS:
            rows.append({"entity": f"e{i}", "time": t, "y": rng.normal(), "x": rng.normal(), "p": i + rng.normal(0, .1),
                         "s": rng.normal(), "c": 10.0 * i})
    return pd.DataFrame(rows)


def test_interpolation_only_between_observed_values_and_targets_never_filled():
    f = frame()
    f.loc[(f.entity == "e0") & (f.time == 2003), ["x", "y"]] = np.nan  # an inside gap
    f.loc[(f.entity == "e1") & (f.time == 2000), "x"] = np.nan  # a gap at the start: not extrapolated
    f.loc[(f.entity == "e2") & f.time.isin([2004, 2005]), "y"] = np.nan
    out = prep.prepare(f, params(max_missing_share=0.2), "toy.csv")
    x0 = f[f.entity == "e0"].set_index("time").x
    assert out.panel.X[0, 3, 0] == pytest.approx((x0[2002] + x0[2004]) / 2)
    assert np.isnan(out.panel.Y[0, 3])  # the target stays missing
    report = out.report.set_index("entity")
    assert report.loc["e2", "kept"] and np.isnan(out.panel.Y[list(out.panel.entities).index("e2"), 4:6]).all()
    # a feature that starts late: its first cell takes the nearest observed value, and the targets whose 3-year lag
    # window reaches it (2001-2003) are left out; the paper's rule drops the entity instead
    e1 = list(out.panel.entities).index("e1")
    x1, y1 = (f[f.entity == "e1"].set_index("time")[c] for c in ("x", "y"))
    assert out.panel.X[e1, 0, 0] == pytest.approx(x1[2001])
    assert np.isnan(out.panel.Y[e1, 1:4]).all() and out.panel.Y[e1, 4:] == pytest.approx(y1.loc[2004:].to_numpy())
    assert report.loc["e1", "kept"] and report.loc["e1", "targets_left_out"] == 3
    report = prep.prepare(f, params(max_missing_share=0.2, feature_edges="drop_entity"), "toy.csv").report
    reason = report.set_index("entity").loc["e1", "reason"]
    assert "missing at the start or end" in reason and "leave_out_targets would keep the entity" in reason


def test_a_panel_with_holes_keeps_its_entities_and_says_when_many_are_dropped():
    """The fault trial's panel: 150 entities x 40 years, 8 % of the feature and target cells missing at random and a
    3-year gap in a fifth of the entities. The paper's rules (15 %, no feature edges) dropped 104 of 150 without a
    word; the defaults keep every entity, and the paper's rules now come with a warning naming the reasons."""
    rng = np.random.default_rng(5)
    years = np.arange(1980, 2020)
    f = pd.DataFrame([{"entity": f"e{i:03d}", "time": t, "y": rng.normal(), "x": rng.normal(), "z": rng.normal(),
                       "p": i + rng.normal(), "s": rng.normal()} for i in range(150) for t in years])
    for column in ("y", "x", "z"):
        f.loc[rng.random(len(f)) < 0.08, column] = np.nan
    gap = f.entity.isin([f"e{i:03d}" for i in range(0, 150, 5)]) & f.time.isin([1995, 1996, 1997])
    f.loc[gap, ["y", "x", "z"]] = np.nan
    spec = {"first_time": 1980, "last_time": 2019, "features": ["x", "z"]}
    split = {"val_start": 2008, "test_start": 2014}
    own = params_from_dict({"domain": "holes", "n_seeds": 1, "split": split, "model": {"max_lag": 3},
                            "data": {"loader": "csv", "csv_file": "holes.csv", "target": "y", "proxies": ["mean:p"],
                                     "stratifiers": ["mean:s"], **spec}}, "holes.yaml")
    out = prep.prepare(f, own, "holes.csv")
    assert out.panel.n_entities == 150 and out.warning is None and out.panel.meta["prep"]["warning"] is None
    assert out.report.targets_left_out.sum() > 0
    paper = dataclasses.replace(own, data=dataclasses.replace(own.data, max_missing_share=0.15,
                                                              feature_edges="drop_entity"))
    out = prep.prepare(f, paper, "holes.csv")
    dropped = 150 - out.panel.n_entities
    assert dropped > 30
    assert out.warning.startswith(f"holes.csv: {dropped} of the 150 entities with the target were dropped")
    assert "144 for missing share over the limit" in out.warning and "data.max_missing_share = 0.15" in out.warning
    assert out.panel.meta["prep"]["warning"] == out.warning


def test_missing_share_rule():
    f = frame()
    f.loc[(f.entity == "e3") & f.time.isin([2001, 2002]), "y"] = np.nan  # 2 of 12 years: 0.17 > 0.15
    report = prep.prepare(f, params(), "toy.csv").report.set_index("entity")
    assert not report.loc["e3", "kept"] and report.loc["e3", "reason"].startswith("missing share 0.17 > 0.15")


def test_summaries_use_the_training_window_only():
    f = frame()
    p = params(proxies=["mean:p", "trend:p", "first:p", "last:p", "c"])
    base = prep.prepare(f, p, "toy.csv").panel
    f2 = f.copy()
    f2.loc[f2.time >= 2008, ["p", "s"]] += 1000.0  # later history must not matter
    later = prep.prepare(f2, p, "toy.csv").panel
    np.testing.assert_array_equal(base.P, later.P)
    pd.testing.assert_frame_equal(base.stratifiers, later.stratifiers)
    e0 = f[(f.entity == "e0") & (f.time < 2008)].set_index("time").p
    slope = np.polyfit(e0.index.to_numpy(float), e0.to_numpy(), 1)[0]
    np.testing.assert_allclose(base.P[0], [e0.mean(), slope, e0.iloc[0], e0.iloc[-1], 0.0], rtol=1e-5)
    assert base.proxy_names == ["mean_p", "trend_p", "first_p", "last_p", "c"]


def test_bad_input_stops_early_with_file_column_and_entity():
    f = frame()
    with pytest.raises(prep.PrepError, match=r"toy.csv: 2 duplicated \(entity, time\) rows, e.g. entity 'e0' at "
                                             r"time 2000"):
        prep.prepare(pd.concat([f, f.iloc[:1]]), params(), "toy.csv")
    bad = f.astype({"x": object})
    bad.loc[5, "x"] = "n/a"
    with pytest.raises(prep.PrepError, match=r"column 'x' has a non-numeric value 'n/a' for entity 'e0' at time 2005"):
        prep.prepare(bad, params(), "toy.csv")
    with pytest.raises(Exception, match=r"toy.csv: missing column\(s\) s"):
        prep.prepare(f.drop(columns="s"), params(), "toy.csv")
    empty = f.copy()
    empty.loc[empty.entity == "e4", "y"] = np.nan
    with pytest.raises(prep.PrepError, match=r"entity 'e4': target y never observed"):
        prep.prepare(empty, params(), "toy.csv")
    assert not prep.prepare(empty, params(strict=False), "toy.csv").report.set_index("entity").loc["e4", "kept"]
    with pytest.raises(prep.PrepError, match=r"first_time..last_time = 2000..2015 is outside the data's time range"):
        prep.prepare(f, params(last_time=2015), "toy.csv")
    with pytest.raises(prep.PrepError, match=r"'c' .* varies within entity 'e0'"):
        prep.prepare(f.assign(c=np.arange(len(f), dtype=float)), params(proxies=["c"]), "toy.csv")
    with pytest.raises(prep.PrepError, match=r"only 4 entities survive cleaning; .* needs at least 5"):
        prep.prepare(frame(n=4), params(), "toy.csv")
    with pytest.raises(ParamsError, match=r"toy.yaml: model.max_lag = 8 is too long .* 2000..2007"):
        params(model={"max_lag": 8})
    with pytest.raises(ParamsError, match=r"toy.yaml: data.target is required"):
        params_from_dict({"domain": "toy", "data": {"loader": "csv", "csv_file": "x.csv", "first_time": 2000,
                                                    "last_time": 2011, "features": ["x"], "proxies": ["p"]},
                          "split": {"val_start": 2008, "test_start": 2010}}, "toy.yaml")
    with pytest.raises(ParamsError, match=r"exactly one of the sections 'synthetic' .* or 'data'"):
        params_from_dict({"domain": "toy"}, "toy.yaml")


def test_time_steps_must_be_consecutive_whole_numbers():
    """Biennial data dropped every entity for 'missing share 0.45 > 0.15' with no word of the step; a column observed
    every other year (as WGI before 2002) is no step of the panel."""
    biennial = frame()[lambda f: f.time % 2 == 0]
    with pytest.raises(prep.PrepError, match=r"toy.csv: the time values \(2000, 2002, 2004, 2006, \.\.\.\) are all 2 "
                                             r"apart or a multiple of 2, but the panel's time steps must be "
                                             r"consecutive whole numbers .* Renumber the time column as consecutive "
                                             r"steps, e.g. \(time - 2000\) / 2, and set data.first_time, "
                                             r"data.last_time and the split years in the same units"):
        prep.prepare(biennial, params(last_time=2010), "toy.csv")
    gappy = frame()
    gappy.loc[gappy.time % 2 == 1, "p"] = np.nan
    assert len(prep.prepare(gappy, params(), "toy.csv").panel.entities) == 8


@pytest.mark.parametrize("column, value", [("x", 1e30), ("y", np.inf), ("y", 1e300), ("p", -np.inf), ("s", -2e19)])
def test_infinite_or_overflowing_values_stop_prep_with_entity_time_and_column(column, value):
    f = frame()
    f.loc[(f.entity == "e3") & (f.time == 2004), column] = value
    with pytest.raises(prep.PrepError, match=rf"toy.csv: column '{column}' has the value .* for entity 'e3' at time "
                                             r"2004: infinite, or beyond the range the models compute in"):
        prep.prepare(f, params(), "toy.csv")


def test_normalisers_are_fitted_in_float64_and_checked_finite():
    values = np.array([[1.0, 2.0, 3e19], [4.0, 5.0, 6.0]], dtype=np.float32)[:, :, None]  # float32 squares overflow
    with np.errstate(over="ignore"):
        assert not np.isfinite(np.nanstd(values))
    fitted = Standardiser.fit(values, (0, 1), ["x"], "feature")
    assert np.isfinite(fitted.scale).all() and np.isfinite(fitted.transform(values)).all()
    with pytest.raises(PanelError, match=r"feature 'gap': its training-window mean or sd is not finite"):
        Standardiser.fit(np.full((2, 3, 1), np.nan), (0, 1), ["gap"], "feature")


def with_copy(shift, copy=lambda y, entity: y):
    """frame() with a feature 'lead' that is ``copy`` of the target at t + shift (per entity, its ends filled so
    that no entity is dropped for them)."""
    f = frame()
    f["lead"] = f.groupby("entity").y.shift(-shift)
    f["lead"] = f.groupby("entity").lead.transform(lambda v: v.ffill().bfill())
    f["lead"] = copy(f.lead, f.entity.str[1:].astype(int))
    return f


@pytest.mark.parametrize("shift, when, why", [
    (1, "t\\+1", r"so they would see the very targets they predict \(a leak: test R2 near 1, k\* near 1\)"),
    (3, "t\\+3", r"so they would see the very targets they predict \(a leak: test R2 near 1, k\* near 3\)"),
    (0, "t", r"so this is the target's own past under another name"),
    (-2, "t-2", r"so this is the target's own past under another name")],
    ids=["next time", "three times ahead", "same time", "two times back"])
def test_a_feature_that_is_the_target_stops_prep_naming_it_and_the_shift(shift, when, why):
    """A user's feature that is the target (at the next time: test R2 0.999 and k* 1 for every gated method, and a
    "supported" L2, with no warning) or its past under another name stops prep, with the shift and the fix."""
    with pytest.raises(prep.PrepError, match=rf"toy.csv: feature 'lead' at time t equals target 'y' at time {when} "
                                             r"\(correlation 1.0000 within entities, in levels and in changes, over 8 "
                                             rf"entities, training window 2000..2007\): the models see features at "
                                             rf"lags 1..3, {why}.*Drop 'lead' from data.features"):
        prep.prepare(with_copy(shift), params(features=["x", "lead"]), "toy.csv")


@pytest.mark.parametrize("copy", [lambda y, e: -y, lambda y, e: (1 + e) * y + 10 * e, lambda y, e: y.round(2),
                                  lambda y, e: y + np.random.default_rng(1).normal(0, 0.01, len(y)),
                                  lambda y, e: y + np.random.default_rng(1).normal(0, 0.2, len(y))],
                         ids=["negated", "rescaled and shifted per entity", "rounded", "with noise",
                              "with noise a fifth of its sd"])  # the last passed at 0.999 (a leak all the same)
def test_near_copies_of_the_target_are_caught_too(copy):
    with pytest.raises(prep.PrepError, match=r"feature 'lead' at time t equals target 'y' at time t\+1 "
                                             r"\(correlation (0\.9[5-9]\d\d|1\.0000) within entities"):
        prep.prepare(with_copy(1, copy), params(features=["x", "lead"]), "toy.csv")


def test_features_that_only_trend_with_the_target_or_are_the_target_column_itself_pass():
    """Two series that trend together match in levels only; the target's own column listed among the features is how
    its past is asked for on purpose; the example panel's driver is no copy either."""
    f = frame()
    rng = np.random.default_rng(2)
    f["y"] = f.time + rng.normal(0, 0.05, len(f))
    f["trend"] = 3 * f.time + rng.normal(0, 0.05, len(f))
    out = prep.prepare(f, params(features=["x", "trend", "y"]), "toy.csv")
    assert out.panel.feature_names == ["x", "trend", "y"]
    example = load_params(ROOT / "params" / "example_panel.yaml")
    own = example_frame().rename(columns={"region": "entity", "year": "time"})
    assert prep.prepare(own, example, "example_panel.csv").panel.n_entities == 40


def test_min_entities_for_a_permutation_test():
    assert prep.min_entities(0.05) == 5  # 2/4! = 0.083, 2/5! = 0.017
    assert prep.min_entities(0.001) == 7


def test_proxy_shuffle_is_a_seeded_non_identity_permutation():
    panel = prep.prepare(frame(n=6), params(), "toy.csv").panel
    original = panel.P.copy()
    permutations = set()
    for seed in range(20):
        shuffled, perm = panel.with_shuffled_proxies(seed, prep.PROXY_SHUFFLE_SALT)
        assert not np.array_equal(perm, np.arange(6))
        np.testing.assert_array_equal(shuffled.P, original[perm])
        permutations.add(tuple(perm))
    np.testing.assert_array_equal(panel.P, original)  # the panel itself is left as it is
    assert len(permutations) > 10
    first = panel.with_shuffled_proxies(3, prep.PROXY_SHUFFLE_SALT)[1]
    np.testing.assert_array_equal(panel.with_shuffled_proxies(3, prep.PROXY_SHUFFLE_SALT)[1], first)  # same seed
    assert not np.array_equal(panel.with_shuffled_proxies(3, 1)[1], first)  # another salt, another permutation


def test_shuffle_domains_extend_their_base():
    base = load_params(ROOT / "params" / "energy.yaml")
    twin = load_params(ROOT / "params" / "energy_proxy_shuffle.yaml")
    assert twin.domain == "energy_proxy_shuffle" and twin.data.proxy_shuffle and not base.data.proxy_shuffle
    assert twin.model == base.model and twin.split == base.split and twin.data.proxies == base.data.proxies


@pytest.mark.parametrize("domain, kept", [("economics", 88), ("energy", 78)])
def test_real_domains_keep_the_papers_entity_counts(domain, kept, raw_dir):
    p = load_params(ROOT / "params" / f"{domain}.yaml")
    long, source = prep.load_long(p, ROOT)
    out = prep.prepare(long, p, source)
    assert out.panel.n_entities == kept
    assert len(out.panel.times) == {"economics": 44, "energy": 28}[domain]
    assert not out.report.kept.all() and (out.report.reason != "").all()
    assert np.isfinite(out.panel.X).all() and np.isfinite(out.panel.P).all()


def test_a_stratifier_without_spread_is_refused_naming_it():
    """A stratifier that is the same for every entity (or has no value) cannot order entities; L2 would have called it
    "ruled out" as if k* were degenerate, so prep stops with its name and the fix, and so does loading such a panel."""
    with pytest.raises(prep.PrepError, match=r"toy.csv: panel.stratifiers: stratifier 'mean_s' is the same for "
                                             r"every entity, .*drop it from data.stratifiers"):
        prep.prepare(frame().assign(s=1.0), params(), "toy.csv")
    panel = prep.prepare(frame(), params(), "toy.csv").panel
    panel.stratifiers["mean_s"] = np.nan
    with pytest.raises(PanelError, match=r"stratifier 'mean_s' has no value"):
        panel.validate()


def test_a_column_made_from_held_out_targets_is_refused_naming_it():
    """A static column holding each entity's mean target over the test window (a target encoding) halved AC-GATE's
    test MSE without a word; the time-varying features were checked against the target, entity-level columns not."""
    f = frame()
    p = params()
    held_out = f[f.time >= p.split.test_start].groupby("entity").y.mean()
    leaky = f.assign(s=f.entity.map(held_out))
    with pytest.raises(prep.PrepError, match=r"toy.csv: stratifier 'mean_s' is the entities' mean target over the "
                                             r"test window \(correlation 1.0000 across entities;.*Drop it"):
        prep.prepare(leaky, p, "toy.csv")
    prep.prepare(f, p, "toy.csv")  # the toy panel's own stratifier is no leak
