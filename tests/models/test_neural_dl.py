"""The neural moderated distributed lag (acgate.models.neural_dl): its fit is the moderated fit on the network's
units, its seed draws them, it recovers lag maps the quadratic moderators cannot, and its run folder."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from acgate.config import load_params
from acgate.data import dgp
from acgate.data.panel import Normalisers
from acgate.models import classical, neural_dl
from acgate.models.runner import run_method
from acgate.statistics import spearman

ROOT = Path(__file__).resolve().parents[2]


def _design(panel, params, size):
    K = params.model.max_lag
    norm = Normalisers.fit(panel)
    d = classical.design(classical.lag_windows(norm.X.transform(panel.X), K), norm.Y.transform(panel.Y)[:, K:],
                         classical.lag_basis(K, size), panel.target_split(K))
    return d, classical.moderators(norm.P.transform(panel.P), shared=False)


def test_its_units_are_standardised_tanh_of_the_proxies_drawn_from_the_seed(smoke_params, panel):
    d, q = _design(panel, smoke_params, 3)
    units = neural_dl.hidden_units(q, 12, seed=4)
    assert units.shape == (panel.n_entities, 13) and np.all(units[:, 0] == 1)
    assert np.allclose(units[:, 1:].mean(axis=0), 0) and np.allclose(units[:, 1:].std(axis=0), 1)
    assert np.array_equal(units, neural_dl.hidden_units(q, 12, seed=4))
    assert not np.allclose(units, neural_dl.hidden_units(q, 12, seed=5))


def test_the_fit_is_the_moderated_fit_on_the_networks_units(smoke_params, panel):
    """neural_dl = moderated_dl with the network's units as moderators, the basis size and ridge chosen alike."""
    found = neural_dl.fit_neural_dl(panel, smoke_params, seed=2)
    size = found.facts["basis_size"]
    d, q = _design(panel, smoke_params, size)
    expected = classical.fit_moderated(d, neural_dl.hidden_units(q, smoke_params.model.neural_dl_hidden, 2))
    assert found.facts["ridge"] == expected.facts["ridge"]
    basis = classical.lag_basis(smoke_params.model.max_lag, size)
    assert np.allclose(found.curves, np.einsum("nfj,kj->nfk", expected.theta, basis))
    other = neural_dl.fit_neural_dl(panel, smoke_params, seed=3)
    assert not np.allclose(other.curves, found.curves)  # another seed, another hidden layer


@pytest.mark.parametrize("scenario", ["interaction", "non_monotone"])
def test_it_recovers_lag_maps_the_quadratic_moderators_cannot(scenario):
    """The paper's synthetic panel (200 entities) with a saddle or a sine as the lag map: the moderated distributed
    lag's linear and squared proxies cannot follow it, the network's units can (seeds 0 and 1; measured over seeds
    0-3: Spearman 0.92 against 0.18 under interaction, 0.96 against 0.83 under non_monotone)."""
    params = load_params(ROOT / "params" / f"synthetic_{scenario}.yaml")
    for seed in (0, 1):
        panel = dgp.simulate(params.synthetic, seed, params.split.val_start, params.split.test_start)
        truth = panel.truth["dgp_mean_lag"]
        network = neural_dl.fit_neural_dl(panel, params, seed).lag_table().kstar.to_numpy()
        quadratic = classical.fit_classical(panel, params, "moderated_dl").lag_table().kstar.to_numpy()
        assert spearman(network, truth) > 0.85
        assert spearman(network, truth) > spearman(quadratic, truth) + 0.05
        assert np.mean(np.abs(network - truth)) < np.mean(np.abs(quadratic - truth))


def test_feature_lags_by_hand():
    """Each feature's k* from its own oriented, clipped curve: a curve at lag 2 gives 2; a negative curve at lags 1
    and 4 (negative in total, so turned over) gives 2.5; a curve that changes sign keeps its side of the total."""
    curves = np.zeros((2, 3, 4))
    curves[:, 0, 1] = 1.0
    curves[:, 1, [0, 3]] = -1.0
    curves[0, 2] = [0.5, -0.1, 0.0, 0.5]
    curves[1, 2] = [0.0, 0.0, 1.0, 0.0]
    found = classical.feature_lags(curves)
    assert found[:, 0].tolist() == [2.0, 2.0] and found[:, 1].tolist() == [2.5, 2.5]
    assert found[0, 2] == pytest.approx((1 * 0.5 + 4 * 0.5) / 1.0) and found[1, 2] == 3.0


def test_its_run_folder(smoke_params, panel, tmp_path):
    """A seed-reading closed-form fit: coefficients.csv holds its curves, the manifest its seed, no history."""
    params = dataclasses.replace(smoke_params, methods=("neural_dl",))
    metrics = run_method(panel, params, "neural_dl", 1, tmp_path, log=lambda _: None)
    out = tmp_path / params.domain / "seed01" / "neural_dl"
    curves = pd.read_csv(out / "coefficients.csv")
    assert len(curves) == panel.n_entities * panel.X.shape[2]
    assert json.loads((out / "manifest.json").read_text())["seed"] == 1
    assert metrics["hidden_seed"] == 1 and metrics["epochs_run"] is None
    assert pd.read_csv(out / "history.csv").empty
    lags = pd.read_csv(out / "lags.csv")
    assert np.allclose(lags.kstar, neural_dl.fit_neural_dl(panel, params, 1).lag_table().kstar)
