"""The ``Panel`` container, chronological splits and train-only normalisers.

A panel holds N entities observed at T time values. Targets at the first K time steps of
each series are warm-up context only: the model's first prediction is for the step at index K,
built from the K steps before it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from acgate.data.sources import read_csv_ids, sha256
from acgate.layout import PANEL_DATA_FILES
from acgate.runs import atomic_write, write_csv

SPLITS = ("train", "val", "test")


class PanelError(ValueError):
    """A panel's contents break its contract; the message names the field and entity."""


@dataclass
class Panel:
    """Arrays of one panel. Shapes: N entities, T time steps, F features, M proxies, D statics."""

    entities: np.ndarray  # (N,) entity ids as strings
    times: np.ndarray  # (T,) increasing integer time values (step index or year)
    X: np.ndarray  # (N, T, F) sequential covariates, no missing values
    Y: np.ndarray  # (N, T) target; NaN where unobserved
    P: np.ndarray  # (N, M) entity proxies
    S: np.ndarray  # (N, D) static features, D may be 0
    feature_names: list[str]
    proxy_names: list[str]
    static_names: list[str]
    val_start: int  # first time value of the validation window
    test_start: int  # first time value of the test window
    stratifiers: pd.DataFrame = field(default_factory=pd.DataFrame)  # index: entity
    truth: dict[str, np.ndarray] = field(default_factory=dict)  # per-entity ground truth (synthetic)
    meta: dict = field(default_factory=dict)  # provenance notes recorded with every run (e.g. a proxy permutation)

    def __post_init__(self) -> None:
        self.validate()

    @property
    def n_entities(self) -> int:
        return len(self.entities)

    def validate(self) -> None:
        n, t = len(self.entities), len(self.times)
        expected = {"X": (n, t, len(self.feature_names)), "Y": (n, t), "P": (n, len(self.proxy_names)),
                    "S": (n, len(self.static_names))}
        for name, shape in expected.items():
            if getattr(self, name).shape != shape:
                raise PanelError(f"panel.{name} has shape {getattr(self, name).shape}, expected {shape}")
        if len(set(self.entities)) != n:
            raise PanelError("panel.entities has duplicate ids")
        if np.any(np.diff(self.times) <= 0):
            raise PanelError("panel.times must be strictly increasing")
        for name, values, names in (("X", self.X, self.feature_names), ("P", self.P, self.proxy_names),
                                    ("S", self.S, self.static_names)):
            bad = ~np.isfinite(values)
            if bad.any():
                idx = np.argwhere(bad)[0]
                raise PanelError(f"panel.{name}: missing or infinite value for entity '{self.entities[idx[0]]}' "
                                 f"in column '{names[idx[-1]]}'")
        infinite = np.isinf(self.Y)
        if infinite.any():
            i, t = np.argwhere(infinite)[0]
            raise PanelError(f"panel.Y: infinite target for entity '{self.entities[i]}' at time {self.times[t]} "
                             "(NaN marks a missing target)")
        flat = [self.proxy_names[j] for j in range(self.P.shape[1]) if np.ptp(self.P[:, j]) == 0]
        if flat:
            raise PanelError(f"panel.P: proxy '{flat[0]}' is the same for every entity, so it cannot condition "
                             "the lag gate; drop it from the proxies")
        for name in self.stratifiers.columns:
            values = self.stratifiers[name].dropna()
            if values.nunique() < 2:
                raise PanelError(f"panel.stratifiers: stratifier '{name}' "
                                 f"{'has no value' if values.empty else 'is the same for every entity'}, so it cannot "
                                 "order entities and L2 could not test it; drop it from data.stratifiers")
        if not self.times[0] < self.val_start < self.test_start <= self.times[-1]:
            raise PanelError(f"split: need {self.times[0]} < val_start ({self.val_start}) < test_start "
                             f"({self.test_start}) <= {self.times[-1]} (the panel's time range)")

    def target_split(self, max_lag: int) -> np.ndarray:
        """Split label ('train'/'val'/'test') of each target step, shape (T - K,): steps K..T-1."""
        target_times = self.times[max_lag:]
        return np.where(target_times < self.val_start, "train",
                        np.where(target_times < self.test_start, "val", "test"))

    def split_masks(self, max_lag: int) -> dict[str, np.ndarray]:
        """Boolean masks (N, T - K) of observed targets in each split, after the K warm-up steps."""
        labels = self.target_split(max_lag)
        observed = np.isfinite(self.Y[:, max_lag:])
        masks = {s: observed & (labels == s)[None, :] for s in SPLITS}
        for s, m in masks.items():
            if not m.any():
                raise PanelError(f"split '{s}' has no observed target after the {max_lag} warm-up steps; "
                                 f"check split.val_start / split.test_start and model.max_lag")
        return masks

    def prediction_frame(self, max_lag: int, y_hat: np.ndarray) -> pd.DataFrame:
        """One row per observed target step that has a prediction y_hat (N, T - K): entity, time, split, y, y_hat
        (the columns of predictions.csv)."""
        y = self.Y[:, max_lag:]
        entity, step = np.nonzero(np.isfinite(y) & np.isfinite(y_hat))
        return pd.DataFrame({"entity": self.entities[entity], "time": self.times[max_lag:][step],
                             "split": self.target_split(max_lag)[step], "y": y[entity, step],
                             "y_hat": y_hat[entity, step]})

    def with_shuffled_proxies(self, seed: int, salt: int) -> tuple[Panel, np.ndarray]:
        """A copy whose proxy vectors are permuted across entities by one non-identity permutation drawn from a
        generator seeded by (seed, salt), and the permutation: entity i receives the proxies of entity
        permutation[i]. This panel is left as it is."""
        rng = np.random.default_rng([seed, salt])
        identity = np.arange(self.n_entities)
        permutation = identity
        while np.array_equal(permutation, identity):
            permutation = rng.permutation(self.n_entities)
        return dataclasses.replace(self, P=self.P[permutation], meta=dict(self.meta)), permutation

    def digest(self) -> str:
        """Short hash of what a run trains on: entities, times, X, Y, S and P, each proxy vector with its entity (a
        correction that swaps two entities' proxies gives another digest). Recorded with every run (of the panel it
        was given: a shuffled-proxy method's run records its panel's, not its shuffle's): a run whose panel digest
        differs from its panel's now was trained on other data and is stale."""
        digest = hashlib.sha256("\x1f".join(map(str, self.entities)).encode())
        for values in (self.times, self.X, self.Y, self.S, self.P):
            digest.update(np.ascontiguousarray(values, dtype=np.float64).tobytes())
        return digest.hexdigest()[:12]

    def train_time_mask(self) -> np.ndarray:
        """(T,) True for time values inside the training window."""
        return self.times < self.val_start

    # --- persistence: one .npz for arrays, one CSV for stratifiers, and one JSON for names and the other two files'
    # sha256, written last: a panel file edited, damaged or half-copied after it was saved is refused when loaded

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        arrays = {"X": self.X, "Y": self.Y, "P": self.P, "S": self.S, "times": self.times,
                  **{f"truth_{k}": v for k, v in self.truth.items()}}
        atomic_write(directory / "panel.npz", lambda f: np.savez(f, **arrays), binary=True)
        write_csv(directory / "stratifiers.csv", self.stratifiers, index_label="entity")
        meta = {"entities": [str(e) for e in self.entities], "feature_names": self.feature_names,
                "proxy_names": self.proxy_names, "static_names": self.static_names,
                "val_start": int(self.val_start), "test_start": int(self.test_start), "meta": self.meta,
                "sha256": {name: sha256(directory / name) for name in PANEL_DATA_FILES}}
        atomic_write(directory / "panel.json", lambda f: json.dump(meta, f, indent=1))

    @classmethod
    def load(cls, directory: Path) -> Panel:
        """The panel saved in ``directory``; a PanelError naming the file and the fix when a file is missing,
        damaged, or changed since the panel was saved (its sha256 differs from the one panel.json records)."""
        directory = Path(directory)
        fix = ("a processed panel is derived data: delete the folder and rerun the step that wrote it (make paper "
               "redoes a missing panel; 01_data_prep for a data domain, 02_synthetic_dgp for a synthetic one)")
        try:
            meta = json.loads((directory / "panel.json").read_text())
            recorded = meta["sha256"]
        except FileNotFoundError:
            raise PanelError(f"{directory}: no panel.json; {fix}") from None
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
            why = "records no file checksums (written by an older version)" if isinstance(err, KeyError) else \
                "is damaged"
            raise PanelError(f"{directory / 'panel.json'} {why}; {fix}") from None
        for name in PANEL_DATA_FILES:
            path = directory / name
            if not path.is_file():
                raise PanelError(f"{path} is missing; {fix}")
            if sha256(path) != recorded.get(name):
                raise PanelError(f"{path} was changed or damaged after the panel was saved (its sha256 differs from "
                                 f"the one in panel.json), so what it holds is not what the panel was made of; {fix}")
        with np.load(directory / "panel.npz") as arrays:
            data = {k: arrays[k] for k in arrays.files}
        truth = {k.removeprefix("truth_"): v for k, v in data.items() if k.startswith("truth_")}
        stratifiers = read_csv_ids(directory / "stratifiers.csv", ["entity"], written=True).set_index("entity")
        return cls(entities=np.array(meta["entities"]), times=data["times"], X=data["X"], Y=data["Y"],
                   P=data["P"], S=data["S"], feature_names=meta["feature_names"],
                   proxy_names=meta["proxy_names"], static_names=meta["static_names"],
                   val_start=meta["val_start"], test_start=meta["test_start"],
                   stratifiers=stratifiers, truth=truth, meta=meta.get("meta", {}))


# the saved files' format: the workflow's panel steps take it as a parameter, so a change of format redoes every panel
# (Snakemake reruns a job whose parameters changed); 2: panel.json records the other files' sha256
FORMAT = 2


@dataclass(frozen=True)
class Standardiser:
    """Centre and scale fitted on training data only; columns constant in training are centred only,
    so a flat training history can never blow up the scaled values."""

    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, values: np.ndarray, axis: tuple[int, ...], names: list[str], what: str) -> Standardiser:
        """Fitted in float64 (float32 squares of large values overflow); ``names`` of the last axis and ``what``
        they are name a column whose mean or sd is still not finite."""
        values = np.asarray(values, dtype=np.float64)
        mean = np.nanmean(values, axis=axis)
        sd = np.nanstd(values, axis=axis)
        bad = ~(np.isfinite(mean) & np.isfinite(sd))
        if np.any(bad):
            name = names[int(np.argmax(np.atleast_1d(bad)))]
            raise PanelError(f"{what}{f' {name!r}' if name else ''}: its training-window mean or sd is not finite (no "
                             "observed value, or values too large); check the panel")
        scale = np.where(sd > 1e-8 * np.maximum(1.0, np.abs(mean)), sd, 1.0)
        return cls(mean=mean, scale=scale)

    def transform(self, values: np.ndarray) -> np.ndarray:
        return (values - self.mean) / self.scale

    def inverse(self, values: np.ndarray) -> np.ndarray:
        return values * self.scale + self.mean


@dataclass(frozen=True)
class Normalisers:
    """Per-column standardisers of X, Y, P and S, all fitted on the training window."""

    X: Standardiser
    Y: Standardiser
    P: Standardiser
    S: Standardiser

    @classmethod
    def fit(cls, panel: Panel) -> Normalisers:
        train = panel.train_time_mask()
        return cls(X=Standardiser.fit(panel.X[:, train], (0, 1), panel.feature_names, "feature"),
                   Y=Standardiser.fit(panel.Y[:, train], (0, 1), [""], "the target"),
                   P=Standardiser.fit(panel.P, (0,), panel.proxy_names, "proxy"),
                   S=Standardiser.fit(panel.S, (0,), panel.static_names, "static feature"))
