"""Typed, validated run parameters loaded from ``params/*.yaml``.

Every key is a dataclass field whose metadata carries its meaning (``help``) and its allowed
range (``check``); validation and the parameter reference in docs/parameters.md are both generated
from that metadata, so the documentation cannot drift from the code.

Usage::

    from acgate.config import load_params
    params = load_params("params/synthetic_linear.yaml", overlay="params/smoke.yaml")
    params.model.max_lag  # 10 (5 under the smoke overlay)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# AC-GATE, its ablations, and AC-GATE trained on proxies permuted across entities (the calibrated L1's comparator)
GATE_METHODS = ("acgate", "no_ac_encoder", "uniform_lag", "no_recon_reg", "shuffled_proxies", "proxy_shared_gate")
NEURAL_BASELINES = ("plain_lstm", "tft", "ganet")
NEURAL_METHODS = GATE_METHODS + NEURAL_BASELINES  # trained by gradient steps (acgate.models.train)
# the classical yardstick (acgate.models.classical): the moderated distributed lag, its shared-lag and shuffled-proxy
# twins (the comparators of its own heterogeneity verdict) and the two-stage shrinkage model
CLASSICAL_METHODS = ("moderated_dl", "shared_dl", "shuffled_dl", "proxy_scaled_dl", "two_stage_dl")
# the neural moderated distributed lag (acgate.models.neural_dl): the yardstick's signed curves per feature moderated
# through a network of the proxies (its hidden layer drawn from the seed, its output layer fitted by ridge)
CURVE_NETWORK_METHODS = ("neural_dl",)
CURVE_METHODS = CLASSICAL_METHODS + CURVE_NETWORK_METHODS  # fitted in closed form to lag curves per feature
METHODS = NEURAL_METHODS + ("grouped_ardl",) + CURVE_METHODS
CLOSED_FORM_METHODS = ("grouped_ardl", *CURVE_METHODS)  # numpy fits: no epochs, always on the CPU
# closed-form fits that read no seed (shuffled_dl reads one: its permutation; neural_dl its hidden layer): on one
# panel every seed's fit is the same
SEEDLESS_METHODS = tuple(m for m in CLOSED_FORM_METHODS if m not in ("shuffled_dl", *CURVE_NETWORK_METHODS))
SCENARIOS = ("linear", "nonlinear", "constant", "two_regime", "interaction", "non_monotone")
DRIVERS = ("linear", "threshold")
LOADERS = ("pwt", "owid_wgi", "csv")
FEATURE_EDGES = ("leave_out_targets", "drop_entity")  # data.feature_edges
# The one rule for a domain's name: it names the domain's folders under data/ and runs/, is the workflow's {domain}
# wildcard (workflow/Snakefile constrains the wildcard with this pattern, so that a name the params check lets through
# is one the workflow matches) and part of its rule names (train_<domain>_seeds...). No '-': Snakemake would take one,
# but a rule name is then no identifier (rules.<name>), and '_' does the same job.
NAME_PATTERN = r"[A-Za-z0-9_]{1,100}"
NAME_RULE = ("a plain name of letters, digits and _, at most 100 of them (it names folders and files under data/ and "
             "runs/ and the workflow's jobs; no -: write my_panel, not my-panel)")


class ParamsError(ValueError):
    """A params file is malformed; the message names the file, the key and the allowed values."""


# --- range checks: each returns None when the value is allowed, else a description of the range.


def _positive(v: Any) -> str | None:
    return None if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else "a number > 0"


def _non_negative(v: Any) -> str | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
    return None if ok else "a number >= 0"


def _int_at_least(lo: int) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        return None if isinstance(v, int) and not isinstance(v, bool) and v >= lo else f"an integer >= {lo}"

    return check


def _int_between(lo: int, hi: int, why: str) -> Callable[[Any], str | None]:
    """An integer in lo..hi; ``why`` says what the bounds protect (a count past hi only costs time and memory)."""
    def check(v: Any) -> str | None:
        ok = isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi
        return None if ok else f"an integer in {lo}..{hi:_} ({why})"

    return check


def _unit_interval_open_right(v: Any) -> str | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1
    return None if ok else "a number in [0, 1)"


def _open_unit_interval(v: Any) -> str | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1
    return None if ok else "a number in (0, 1)"


def _unit_interval(v: Any) -> str | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1
    return None if ok else "a number in [0, 1]"


def _share(v: Any) -> str | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1
    return None if ok else "a number in (0, 1]"


def _plain_name(v: Any) -> str | None:
    ok = isinstance(v, str) and re.fullmatch(NAME_PATTERN, v) is not None
    return None if ok else NAME_RULE


def _one_of(*choices: Any) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        return None if v in choices else "one of " + ", ".join(map(str, choices))

    return check


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "true or false"


def _methods(v: Any) -> str | None:
    ok = isinstance(v, (list, tuple)) and len(v) > 0 and all(m in METHODS for m in v) and len(set(v)) == len(v)
    return None if ok else "a non-empty list of distinct names from " + ", ".join(METHODS)


def _float(v: Any) -> str | None:
    return None if isinstance(v, (int, float)) and not isinstance(v, bool) else "a number"


def _method_list(v: Any) -> str | None:
    ok = isinstance(v, (list, tuple)) and all(m in METHODS for m in v) and len(set(v)) == len(v)
    return None if ok else "empty, or a list of distinct names from " + ", ".join(METHODS)


def _int(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) else "an integer"


def _text(v: Any) -> str | None:
    return None if isinstance(v, str) and v.strip() else "a non-empty string"


def _names(at_least: int) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        ok = isinstance(v, (list, tuple)) and len(v) >= at_least and all(isinstance(x, str) and x for x in v) \
            and len(set(v)) == len(v)  # a name given twice doubles its columns in every design
        return None if ok else f"a list of at least {at_least} distinct column name(s)"

    return check


def _string(v: Any) -> str | None:
    return None if isinstance(v, str) else "a string"


def _block(v: Any) -> str | None:
    ok = v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)
    return None if ok else "auto or an integer >= 1"


def _param(default: Any, help: str, check: Callable[[Any], str | None], required: bool = False) -> Any:
    return field(default=default, metadata={"help": help, "check": check, "required": required})


# --- the sections of a params file


@dataclass(frozen=True)
class SyntheticConfig:
    """The synthetic data-generating process (paper Algorithm 2)."""

    scenario: str = _param("linear", "lag-centre map: linear 3+7(1-z), nonlinear 10(1-z)^2, constant (a null: "
                           "every entity has lag centre constant_centre), two_regime (3 where z >= 0.5, else "
                           "lag_horizon), interaction (a saddle in z and a second latent z2 ~ U(0,1), "
                           "1+(K-1)(1+(2z-1)(2z2-1))/2, i.e. 5.5+4.5(2z-1)(2z2-1) at K = 10; the proxies become "
                           "[z, z2, 1-0.7z]), non_monotone (1+(K-1)(1+sin(2 pi z))/2, i.e. 5.5+4.5 sin(2 pi z) at "
                           "K = 10); each rounded and clipped to 1..lag_horizon", _one_of(*SCENARIOS))
    constant_centre: int = _param(5, "lag centre of every entity under scenario constant", _int_at_least(1))
    n_entities: int = _param(200, "number of entities N", _int_at_least(2))
    n_steps: int = _param(30, "number of time steps T (time index 0..T-1)", _int_at_least(3))
    lag_horizon: int = _param(10, "number of lags 1..K the DGP spreads its weights over", _int_at_least(1))
    driver: str = _param("linear", "what the lagged inputs pass through: linear (x itself) or threshold (the hinge "
                         "threshold_gain * max(x - driver_threshold, 0)); the contemporaneous term stays linear",
                         _one_of(*DRIVERS))
    driver_threshold: float = _param(0.0, "driver threshold: the x below which a lagged input has no effect", _float)
    threshold_gain: float = _param(1.75, "driver threshold: slope of the hinge, chosen so the lagged part of Y has "
                                   "close to the linear driver's variance (ratio 0.95 at the default panel and "
                                   "threshold 0, 20 seeds; 1.24 with gain 2)", _positive)
    noise_sd: float = _param(0.15, "sd of the Gaussian target noise", _non_negative)
    proxy_noise_sd: float = _param(0.0525, "sd of the noise added to each proxy [z, sqrt z, 1-0.7z] ([z, z2, 1-0.7z] "
                                   "under interaction)", _non_negative)
    static_noise_sd: float = _param(0.06, "sd of the noise on the z-correlated static feature s_0", _non_negative)
    ar_coef: float = _param(0.65, "AR(1) coefficient of the sequential input x_t", _non_negative)
    innovation_coef: float = _param(0.35, "weight of the N(0,1) innovation in x_t", _non_negative)
    drift_coef: float = _param(0.10, "weight of the entity shift (z - 0.5) in x_t", _non_negative)
    x0_shock_coef: float = _param(0.6, "weight of the N(0,1) draw in x_0", _non_negative)
    x0_shift_coef: float = _param(0.4, "weight of (z - 0.5) in x_0", _non_negative)
    lag_width: float = _param(1.25, "Gaussian width of the DGP lag weights around the lag centre", _positive)
    contemporaneous_coef: float = _param(0.15, "weight of the contemporaneous x_t in Y_t", _non_negative)
    z_coef: float = _param(0.25, "weight of z in Y_t", _non_negative)
    static_coef: float = _param(0.10, "weight of the static feature s_0 in Y_t", _non_negative)


@dataclass(frozen=True)
class DataConfig:
    """A real panel: its source and its cleaning rules (lib/acgate/data/prep.py)."""

    loader: str = _param("csv", "pwt (PWT 11.0), owid_wgi (OWID energy + CO2 data and WGI) or csv (your long CSV)",
                         _one_of(*LOADERS), required=True)
    csv_file: str = _param("", "csv loader: path of the long CSV, relative to the project root; read only inside "
                           "data/raw, $ACGATE_RAW_DIR or a folder named in $ACGATE_DATA_DIRS", _string)
    entity_column: str = _param("entity", "csv loader: the column naming the entity", _text)
    time_column: str = _param("year", "csv loader: the column holding the time: whole numbers one step apart (years, "
                              "or steps 0, 1, 2, ... for data every other year or every quarter)", _text)
    first_time: int = _param(0, "first time value of the panel", _int, required=True)
    last_time: int = _param(0, "last time value of the panel", _int, required=True)
    target: str = _param("", "the target column", _text, required=True)
    features: tuple = _param((), "sequential feature columns, seen at lags 1..K", _names(1), required=True)
    proxies: tuple = _param((), "entity proxies: mean:col, trend:col, first:col or last:col over the training window, "
                            "or a column constant within each entity", _names(1), required=True)
    static: tuple = _param((), "static features, in the same forms as proxies (may be empty)", _names(0))
    stratifiers: tuple = _param((), "L2 stratifiers, in the same forms as proxies", _names(0))
    max_missing_share: float = _param(0.5, "drop an entity when the share of times lacking the target or a feature "
                                      "exceeds this (0.5: mostly empty; the paper's domains set 0.15)",
                                      _unit_interval_open_right)
    feature_edges: str = _param("leave_out_targets", "a feature unobserved before its first or after its last value "
                                "in an entity: leave_out_targets keeps the entity, fills those cells with the nearest "
                                "observed value and leaves every target whose lag window reaches one of them out of "
                                "the loss and the metrics; drop_entity drops the entity (the paper's rule)",
                                _one_of(*FEATURE_EDGES))
    strict: bool = _param(True, "true: an entity whose target is never observed is an error; false: it is dropped "
                          "and reported", _bool)
    proxy_shuffle: bool = _param(False, "negative control: permute the proxies across entities, one non-identity "
                                 "permutation per seed", _bool)


@dataclass(frozen=True)
class SplitConfig:
    """Chronological split by time value (a step index for synthetic data, a year for real data)."""

    val_start: int = _param(22, "first time value of the validation window; training is everything before", _int)
    test_start: int = _param(26, "first time value of the test window; validation is [val_start, test_start)", _int)


@dataclass(frozen=True)
class ModelConfig:
    """AC-GATE architecture (paper section IV and its locked-parameter appendix)."""

    max_lag: int = _param(10, "maximum lag K; the first K steps of every series are warm-up context",
                          _int_between(2, 1000, "with one lag every k* is 1, and no lag can differ"))
    hidden: int = _param(64, "width d of the lag projection and of the LSTM", _int_at_least(1))
    lstm_layers: int = _param(2, "number of stacked LSTM layers", _int_at_least(1))
    dropout: float = _param(0.05, "dropout between LSTM layers", _unit_interval_open_right)
    encoder_hidden: int = _param(128, "hidden width of the proxy encoder, the reconstruction head and the gate",
                                 _int_at_least(1))
    entity_embedding: int = _param(8, "size of the learned entity embedding (0 disables it)", _int_at_least(0))
    static_embedding: int = _param(8, "size of the projection of the static features s_i", _int_at_least(1))
    position_penalty: float = _param(0.1, "lambda: gate logit penalty lambda * k/K on farther lags", _non_negative)
    temperature: float = _param(1.0, "tau: temperature of the lag-gate softmax", _positive)
    recon_weight: float = _param(0.1, "lambda_r: weight of the proxy-reconstruction loss", _non_negative)
    recon_detach: bool = _param(False, "true: reconstruction trains only its head, not the encoder", _bool)
    gate_memory: bool = _param(True, "AC-GATE family: true (the paper's) carries the LSTM state from one target step "
                               "to the next, so an earlier step's lag context reaches later predictions and the gate "
                               "need not hold the longer lags (its k* sits about a lag low on a flat panel); false "
                               "reads each step's context alone from the state z sets, so the gate is the whole lag "
                               "response", _bool)
    neural_dl_hidden: int = _param(32, "neural_dl: tanh units of the network that moderates the lag curves (its "
                                   "hidden layer, drawn from the seed)", _int_at_least(1))
    recon_anchor_weight: float = _param(1.0, "weight of the first proxy in the reconstruction loss (others 1)",
                                        _positive)
    attention_heads: int = _param(4, "TFT: attention heads (model.hidden must be divisible by it)", _int_at_least(1))
    gate_temperature: float = _param(0.5, "GA-Net: temperature of the relaxed-Bernoulli gates while training",
                                     _positive)
    ardl_min_rows_per_coef: int = _param(3, "Grouped ARDL: a group with fewer training rows per coefficient is "
                                         "fitted with the global model instead", _int_at_least(1))


@dataclass(frozen=True)
class TrainConfig:
    """Training with one optimiser step over the whole panel an epoch and early stopping on the validation task
    loss."""

    lr: float = _param(1e-3, "Adam learning rate", _positive)
    max_epochs: int = _param(200, "maximum number of full-batch epochs", _int_at_least(1))
    patience: int = _param(20, "epochs without a better validation task loss before stopping", _int_at_least(1))
    grad_clip: float = _param(1.0, "maximum global gradient norm", _positive)
    device: str = _param("auto", "auto (CUDA when present, else CPU), cpu or cuda", _one_of("auto", "cpu", "cuda"))
    threads: int = _param(1, "CPU threads per run (keeps parallel jobs from oversubscribing cores)", _int_at_least(1))
    block_entities: int | str = _param(
        "auto", "entities per block of a training step (gradients accumulate over the blocks, so an epoch is still "
        "one optimiser step over the whole panel, and peak memory follows the block, not the panel); auto: the whole "
        "panel, or on the CPU a panel of more than 256 entities in blocks of up to 256 that keep under 96 MB of "
        "activations (larger blocks are slower there); less where the memory available asks for it", _block)
    stacked: str = _param("auto", "train the seeds of a neural method as one stacked model (acgate.models.stacked): "
                              "auto on CUDA, where it is faster; on; off (the lone runs, the reference)",
                          _one_of("auto", "on", "off"))
    keep_freed_memory: bool = _param(
        True, "keep the memory a training process frees for its next step (acgate.models.memory.keep_freed_memory; "
        "Linux with glibc): otherwise glibc hands a step's large activations back to the system and maps them again, "
        "as fresh zeroed pages, in the next step. The process holds its peak memory until it ends. It changes no "
        "result, only the time; false: glibc's own settings", _bool)
    log_every: int = _param(25, "print a progress line every this many epochs (training without a progress bar, "
                                "as acgate.models.train.fit runs by default; the notebooks show a bar instead)",
                            _int_at_least(1))


@dataclass(frozen=True)
class AuditConfig:
    """The layered audit (paper section V): thresholds and the permutation tests."""

    permutations: int = _param(2000, "B: entity-label permutations per L2 test", _int_between(
        1, 100_000, "p resolves to 1/(B + 1); more permutations only cost time and memory"))
    permutation_seed: int = _param(0, "seed of the permutation generator", _int)
    alpha: float = _param(0.05, "significance level of every test in the verdicts", _open_unit_interval)
    epsilon: float = _param(1e-6, "L1 (paper): a seed is degenerate when sd_i(k*) <= epsilon; degenerate seeds skip L2",
                            _non_negative)
    practical_sd: float = _param(0.25, "L1 (practical): sd_i(k*) a reader would notice, in lags", _non_negative)
    l1_min_share: float = _param(0.8, "L1 supported when at least this share of seeds beats practical_sd",
                                 _share)
    circular_threshold: float = _param(0.95, "a stratifier is circular when |Spearman| with a proxy (paper rule) or "
                                       "the rank multiple correlation with all proxies jointly (calibrated rule) "
                                       "reaches this, or it shares a proxy's name", _share)
    bootstrap: int = _param(2000, "entity block bootstrap resamples of the held-out loss comparisons (L0, L1)",
                            _int_between(1, 100_000, "more resamples only cost time and memory"))
    min_seed_agreement: float = _param(0.5, "calibrated L2 needs the median seed-to-seed Spearman of k* at least "
                                       "this where seeds share entities", _unit_interval)
    heterogeneity_comparators: tuple = _param((), "calibrated L1: methods the reference must beat on held-out loss; "
                                              "empty: the reference family's shared-lag, shuffled-proxy and proxy "
                                              "twins (no_ac_encoder, shuffled_proxies and proxy_shared_gate for "
                                              "AC-GATE; shared_dl, shuffled_dl and proxy_scaled_dl for the moderated "
                                              "distributed lag)", _method_list)
    min_sign_consistency: float = _param(0.8, "calibrated L2 needs at least this share of the tested seeds to agree "
                                         "on the sign of Spearman(k*, stratifier)", _unit_interval)
    edge_share: float = _param(0.2, "L1 warns that lags may reach past the window (widen model.max_lag) when at least "
                               "this share of entities put their largest lag weight on the last lag K", _share)
    l3_min_spearman: float = _param(0.8, "L3 supported needs mean Spearman(k*, lag centre) at least this",
                                    _unit_interval)
    reference: str = _param("acgate", "the method whose verdicts come first (verdicts.json's verdicts); the audit "
                            "also gives them for acgate and moderated_dl wherever they ran, side by side",
                            _one_of(*GATE_METHODS, "moderated_dl", "two_stage_dl"))
    true_lag: str = _param("", "your own panel, when you simulated it: the column (constant within each entity, or "
                           "a summary such as mean:col) holding each entity's true lag, so L3 is audited too",
                           _string)
    noise_draws: int = _param(20, "simulated panels each step of the surrogates' noise model takes (its indirect "
                              "inference of rho, acgate.audit.noise): their error is one offset every reading of a "
                              "panel shares, about 0.035 higher with 20 than with 200 on a panel of 78 countries x 18 "
                              "steps (a reading of 88 x 34: 0.1 s with 20, 1.2 s with 200); 200 in economics, energy "
                              "and your own panel (20, the default, is the value the first studies were measured "
                              "with)",
                              _int_between(1, 1_000, "the simulated panels are held in memory at once"))


@dataclass(frozen=True)
class Params:
    """One domain's resolved parameters."""

    domain: str = _param("synthetic_linear", "domain name; runs go to runs/<domain>/", _plain_name)
    n_seeds: int = _param(20, "number of seeds; seeds are 0..n_seeds-1", _int_between(
        1, 1000, "each seed is a full set of runs"))
    methods: tuple = _param(GATE_METHODS, "methods trained for this domain", _methods)
    synthetic: SyntheticConfig | None = None
    data: DataConfig | None = None
    split: SplitConfig = field(default_factory=SplitConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def kind(self) -> str:
        """"synthetic" (a simulated panel), "data" (a real panel) or "proxy_shuffle" (a real panel whose proxies are
        permuted: the negative control). Everything that treats domains differently asks this, never the name."""
        if self.synthetic is not None:
            return "synthetic"
        return "proxy_shuffle" if self.data.proxy_shuffle else "data"

    def recorded(self, section: str) -> dict:
        """The params section ``section`` (e.g. "audit") as a dict, as the hashes of runs and studies and the records
        of calibrations and audits hold it: without the settings added later that hold the value they were added with
        (:func:`without_later_defaults`)."""
        return without_later_defaults(section, dataclasses.asdict(getattr(self, section)))

    def digest(self) -> str:
        """Short hash of what shapes one training run (domain, data or synthetic, split, model, train), recorded
        with every run; a run whose hash differs from the current one is stale. The audit settings, the seed count
        and the list of methods do not shape a run, so changing them leaves finished runs valid; nor does
        ``train.block_entities`` (an epoch is the same optimiser step whatever the block; each run records its
        block), nor ``train.stacked`` (each seed's optimiser steps are those of its lone run; each run records the
        stack), nor ``train.keep_freed_memory`` (where memory comes from changes no number). The model settings
        added after the paper's runs (:data:`LATER_SETTINGS`) count only where they differ from the values
        they were added with: the paper's model hashes as it did before they existed, so its runs, studies and
        calibration stay current."""
        shaping = {k: v for k, v in self.to_dict().items()
                   if k not in ("audit", "n_seeds", "methods") and v is not None}
        unshaping = ("block_entities", "stacked", "keep_freed_memory")
        shaping["train"] = {k: v for k, v in shaping["train"].items() if k not in unshaping}
        shaping["model"] = self.recorded("model")
        text = json.dumps(shaping, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


# settings added after the paper's runs, studies and calibration, per section, with the value each had when it was
# added: a run's hash, a study's params digest and a calibration's settings hold one only
# where it differs from that value (fixed here, not read from the defaults, so a later default still hashes apart)
LATER_SETTINGS = {"model": {"gate_memory": True, "neural_dl_hidden": 32}, "audit": {"noise_draws": 20}}


def without_later_defaults(section: str, values: dict) -> dict:
    """The params section ``section`` (its ``values``, a dict) without the settings of :data:`LATER_SETTINGS` that
    hold the value they were added with: what the hashes of runs and studies and a calibration's settings read, so
    that those made before a setting existed stay current."""
    later = LATER_SETTINGS.get(section, {})
    return {k: v for k, v in values.items() if k not in later or v != later[k]}


SECTIONS = {"synthetic": SyntheticConfig, "data": DataConfig, "split": SplitConfig, "model": ModelConfig,
            "train": TrainConfig, "audit": AuditConfig}
OPTIONAL_SECTIONS = ("synthetic", "data")  # a domain has exactly one of these


def _build(cls: type, values: dict, where: str, source: str) -> Any:
    if not isinstance(values, dict):
        raise ParamsError(f"{source}: '{where}' must be a mapping of keys to values, got {values!r}")
    known = {f.name: f for f in dataclasses.fields(cls) if f.name not in SECTIONS}
    unknown = sorted(set(values) - set(known) - set(SECTIONS))
    if unknown:
        prefix = f"{where}." if where else ""
        raise ParamsError(
            f"{source}: unknown key '{prefix}{unknown[0]}'; allowed keys{' in ' + where if where else ''}: "
            + ", ".join(sorted(known) + ([] if where else sorted(SECTIONS)))
        )
    absent = [f.name for f in known.values() if f.metadata.get("required") and f.name not in values]
    if absent:
        raise ParamsError(f"{source}: {where}.{absent[0]} is required ({known[absent[0]].metadata['help']})")
    kwargs = {}
    for name, value in values.items():
        if name in SECTIONS:
            continue
        f = known[name]
        if isinstance(value, int) and not isinstance(value, bool) and f.type in ("float", float):
            value = float(value)
        problem = f.metadata["check"](value)
        if problem:
            key = f"{where}.{name}" if where else name
            raise ParamsError(f"{source}: {key} = {value!r} is not allowed: must be {problem} ({f.metadata['help']})")
        kwargs[name] = tuple(value) if isinstance(value, list) else value
    return cls(**kwargs)


def _merge(base: dict, overlay: dict) -> dict:
    out = dict(base)
    for key, value in overlay.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


class StrictLoader(yaml.SafeLoader):
    """YAML as a settings file should be read: a key given twice in one mapping (the second would silently replace
    the first: a ``model:`` section written twice) and an alias (``*name``, which can expand a small file into
    gigabytes) are errors, with the line. Plain values are read by YAML 1.2's rules, as a user writes them, not
    PyYAML's YAML 1.1: ``1e-3`` and ``1e-06`` are numbers (1.1: strings, refused as "not a number"), only
    true/false are booleans (1.1: ``features: [NO]`` gave ``[False]``, ``stacked: on`` True), and a whole number
    written with a leading zero stays as written (1.1: ``domain: 0123`` was the octal 83)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.constructor.ConstructorError(None, None, "an alias (*name) repeats another part of the file; "
                                                    "settings files take none: write the value out", mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key '{key}' is given twice (first on line {seen[key] + 1}); the second would "
                    "replace the first: merge them into one", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


# YAML 1.2's core schema for plain scalars, in place of PyYAML's YAML 1.1 resolvers for booleans, numbers and nulls
StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in (
        "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _tag, _pattern, _first in (
        ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
        ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
        ("tag:yaml.org,2002:float", r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", "-+0123456789.")):
    StrictLoader.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))


def _yaml_12_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | str:
    """A YAML 1.2 integer; one written with a leading zero ("0123", a name or code) stays the text it is."""
    text = loader.construct_scalar(node)
    if re.fullmatch(r"[-+]?0[0-9]+", text):
        return text
    return int(text, 8) if text.startswith("0o") else int(text, 0)


StrictLoader.add_constructor("tag:yaml.org,2002:int", _yaml_12_int)


def read_settings(text: str):
    """A YAML text read by :class:`StrictLoader`."""
    return yaml.load(text, Loader=StrictLoader)  # a SafeLoader: no object of Python is built


MAX_PARAMS_BYTES = 1 << 20  # a params file is a few kilobytes; a megabyte is no settings file


def _read_yaml(path: Path) -> dict:
    if path.is_dir():
        raise ParamsError(f"{path} is a folder; name a params file (.yaml) in it")
    if not path.is_file():
        raise ParamsError(f"params file not found: {path}")
    if path.stat().st_size > MAX_PARAMS_BYTES:
        raise ParamsError(f"{path}: {path.stat().st_size:_} bytes, more than a params file holds (at most "
                          f"{MAX_PARAMS_BYTES:_}); name the settings file, not a data file")
    try:
        data = read_settings(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ParamsError(f"{path}: not valid YAML: {err}") from err
    except RecursionError:
        raise ParamsError(f"{path}: nested deeper than a settings file can be (lists or mappings inside one another "
                          "thousands of levels deep); a params file has sections of keys, two levels") from None
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: the top level must be a mapping of keys to values")
    return data


def params_from_dict(data: dict, source: str = "<dict>") -> Params:
    """Validate a nested dict (as read from YAML) into :class:`Params`."""
    top = _build(Params, data, "", source)
    sections = {name: _build(cls, data.get(name, {}), name, source) for name, cls in SECTIONS.items()
                if name in data or name not in OPTIONAL_SECTIONS}
    present = [name for name in OPTIONAL_SECTIONS if name in data]
    if len(present) != 1:
        raise ParamsError(f"{source}: a params file needs exactly one of the sections 'synthetic' (a simulated "
                          f"panel) or 'data' (a real panel); found {present or 'neither'}")
    params = dataclasses.replace(top, **sections)
    _check_consistency(params, source)
    return params


def _check_consistency(params: Params, source: str) -> None:
    split, model = params.split, params.model
    if split.test_start <= split.val_start:
        raise ParamsError(
            f"{source}: split.test_start = {split.test_start} must be after split.val_start = {split.val_start}"
        )
    if params.synthetic is not None:
        first, last = 0, params.synthetic.n_steps - 1
        if not first < split.val_start < split.test_start <= last:
            raise ParamsError(
                f"{source}: split.val_start = {split.val_start} and split.test_start = {split.test_start} "
                f"must satisfy 0 < val_start < test_start <= {last} (synthetic.n_steps = {last + 1})"
            )
        check_lag_fits(model.max_lag, first, split.val_start, source)
    if params.data is not None:
        data = params.data
        if data.loader == "csv" and not data.csv_file:
            raise ParamsError(f"{source}: data.csv_file is required with data.loader = csv")
        if data.loader == "csv":
            _check_roles(data, source)
        if not data.first_time < split.val_start < split.test_start <= data.last_time:
            raise ParamsError(f"{source}: split years must satisfy data.first_time ({data.first_time}) < "
                              f"split.val_start ({split.val_start}) < split.test_start ({split.test_start}) <= "
                              f"data.last_time ({data.last_time})")
        check_lag_fits(model.max_lag, data.first_time, split.val_start, source)


def _check_roles(data: DataConfig, source: str) -> None:
    """The entity and time columns of a CSV are two columns, and the entity ids are no data: a column named as both,
    or the entity column as a target, feature, proxy, static feature or stratifier, stops with the key that names
    it (it ended in a KeyError, or a 'missing column' for a column the file has)."""
    if data.entity_column == data.time_column:
        raise ParamsError(f"{source}: data.entity_column and data.time_column both name column "
                          f"{data.entity_column!r}; the entity ids and the times are two columns of the CSV: name each")
    uses = [("data.target", data.target), *((f"data.{key}", spec) for key in ("features", "proxies", "static",
                                                                             "stratifiers")
                                            for spec in getattr(data, key))]
    for key, spec in uses:
        if spec.split(":", 1)[-1] == data.entity_column:
            raise ParamsError(f"{source}: {key} names {spec!r}, the entity column (data.entity_column): the entity "
                              "ids only say whose row it is and are no data. Remove it from "
                              f"{key}; for a trait of each entity, add a column holding it and name that")


def check_lag_fits(max_lag: int, first_time: int, val_start: int, source: str) -> None:
    """K must leave at least one training target after the K warm-up steps."""
    train_steps = val_start - first_time
    if max_lag >= train_steps:
        raise ParamsError(
            f"{source}: model.max_lag = {max_lag} is too long for the training window "
            f"({train_steps} steps, {first_time}..{val_start - 1}): the first K steps are warm-up, "
            f"so max_lag must be in 2..{train_steps - 1}"
        )


def _extends(path: Path, data: dict, seen: list[Path]) -> Path | None:
    """The file ``data`` (read from ``path``) extends, checked: a string, and no cycle through ``seen``."""
    if "extends" not in data:
        return None
    base = data["extends"]
    if not isinstance(base, str) or not base:
        raise ParamsError(f"{path}: extends = {base!r} must be one file name (the params file this one builds on)")
    target = (path.parent / base).resolve()
    if target.is_dir():
        raise ParamsError(f"{path}: extends = {base!r} is the folder {target}; name the params file this one builds "
                          "on (e.g. extends: economics.yaml)")
    if not target.is_file():
        raise ParamsError(f"{path}: extends = {base!r}, but {target} does not exist (a path relative to {path.name})")
    if target in seen:
        chain = " -> ".join(str(p) for p in [*seen, target])
        raise ParamsError(f"{path}: extends forms a cycle ({chain}); a params file may not extend itself")
    return target


def _read_with_base(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """A params file; ``extends: other.yaml`` (relative to it) takes that file as the base and overlays this one."""
    data = _read_yaml(path)
    base = _extends(path, data, [*seen, path.resolve()])
    if base is not None:
        data.pop("extends")
        data = _merge(_read_with_base(base, (*seen, path.resolve())), data)
    return data


def source_files(path: str | Path, overlay: str | Path | None = None) -> list[Path]:
    """The files ``load_params(path, overlay)`` reads: the params file, the chain of files it ``extends``, the
    overlay. A change to any of them makes a run stale (the workflow lists them as inputs)."""
    files = [Path(path)]
    while (base := _extends(files[-1], _read_yaml(files[-1]), [f.resolve() for f in files])) is not None:
        files.append(base)
    return files + ([Path(overlay)] if overlay else [])


def load_params(path: str | Path, overlay: str | Path | None = None) -> Params:
    """Load ``path`` (a domain's params file), optionally overlaid by a profile such as ``params/smoke.yaml``."""
    path = Path(path)
    data = _read_with_base(path)
    source = str(path)
    if overlay:
        data = _merge(data, _read_yaml(Path(overlay)))
        source = f"{path} + {overlay}"
    return params_from_dict(data, source)


def reference_markdown() -> str:
    """The parameter reference (key, default, allowed values, meaning) as a Markdown table; a key a params file must
    set has "required" for its default."""
    rows = ["| key | default | allowed | meaning |", "|---|---|---|---|"]
    sections: list[tuple[str, type]] = [("", Params), *SECTIONS.items()]
    probe = object()
    for prefix, cls in sections:
        for f in dataclasses.fields(cls):
            if f.name in SECTIONS:
                continue
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc,operator]
            allowed = f.metadata["check"](probe)
            key = f"{prefix}.{f.name}" if prefix else f.name
            shown = "required" if f.metadata["required"] else f"`{default}`"
            rows.append(f"| `{key}` | {shown} | {allowed} | {f.metadata['help']} |")
    return "\n".join(rows)


def update_reference(path: str | Path) -> None:
    """Rewrite the parameter reference between the marker comments of ``path`` (docs/parameters.md)."""
    path = Path(path)
    text = path.read_text()
    start, end = "<!-- parameter-reference:start -->", "<!-- parameter-reference:end -->"
    head, rest = text.split(start)
    _, tail = rest.split(end)
    path.write_text(f"{head}{start}\n{reference_markdown()}\n{end}{tail}")


if __name__ == "__main__":
    import sys

    update_reference(sys.argv[1] if len(sys.argv) > 1 else "docs/parameters.md")
