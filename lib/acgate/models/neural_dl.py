"""The neural moderated distributed lag (``neural_dl``): the classical yardstick's lag curves, signed and one per
feature, moderated through a network of the proxies instead of their linear and squared terms (the paper's
"conditional moderated distributed lag" with a neural moderator).

    fit = fit_neural_dl(panel, params, seed=0)     # an acgate.models.classical.ClassicalFit
    fit.lag_table(), fit.curve_table(), classical.feature_lags(fit.curves)   # k* per entity; curves; k* per feature

AC-GATE gives each entity one positive lag distribution for all its features; a country panel's pooled lag curve
changes sign along the lags and differs across features, which that gate cannot express. Here each entity's curve of
feature f over lags 1..K is B theta_if, in the classical fits' standardised units and orthonormal polynomial basis B
(K, J), with

    y_it = a_i + sum_f u_if,t . theta_if + e_it,      theta_if = b_f + A_f h_i,      h_i = tanh(W q_i + c),

q_i the entity's standardised proxies and their standardised squares (``classical.moderators`` without its constant)
and h_i the network's ``model.neural_dl_hidden`` tanh units (each standardised across entities). The hidden layer
(W, c) is drawn from the run's seed and kept (a random-feature network); the output layer (b, A) is fitted by ridge
least squares with entity intercepts, exactly as ``moderated_dl`` fits its interactions, the ridge penalty (from
:data:`RIDGE_SHARES`) and the basis size J chosen on validation. So the fit is convex and exact: no epochs, nothing
that a short validation window can stop early. (A network whose hidden layer is trained too did not settle: on the
economics panel L-BFGS still lowered its objective after 5,000 iterations at every penalty tried, its training MSE
falling towards a third of the shared curve's; see CHANGELOG.)

Its lag table (omega, k*) is built from the curves as the classical fits' is (``classical.lag_profile``), and
``classical.feature_lags`` gives each feature's own k*.
"""

from __future__ import annotations

import numpy as np

from acgate.config import Params
from acgate.data.panel import Panel
from acgate.models import classical
from acgate.models.classical import ClassicalFit, CurveFit, Design, fit_curves, standardise

SALT = 6_151  # the hidden layer's random stream, apart from every other stream of the project
# the ridge penalties tried: moderated_dl's and two larger ones, as 32 units ask for more shrinkage than 2M proxy terms
# (with moderated_dl's alone, validation chose the largest on 5 of 6 economics surrogates and every flat DGP panel)
RIDGE_SHARES = (*classical.RIDGE_SHARES, 10.0, 100.0)


def hidden_units(q: np.ndarray, hidden: int, seed: int) -> np.ndarray:
    """(N, 1 + H) the network's moderators: the constant and the ``hidden`` tanh units of q (N, 1 + Q) (its first
    column the constant), each standardised across entities. W ~ N(0, 1/Q) and c ~ N(0, 1) from ``seed``: a unit's
    input then has an sd of about 1 across entities (0.9 on both real panels) around its own centre c, so the units
    bend without saturating (about 16 % of the inputs beyond +-2 there)."""
    rng = np.random.default_rng([SALT, seed])
    inputs = q[:, 1:]
    weight = rng.normal(0.0, 1.0 / np.sqrt(max(inputs.shape[1], 1)), (inputs.shape[1], hidden))
    bias = rng.normal(0.0, 1.0, hidden)
    return np.hstack([q[:, :1], standardise(np.tanh(inputs @ weight + bias))])


def fit_neural_dl(panel: Panel, params: Params, seed: int) -> ClassicalFit:
    """Fit ``neural_dl`` on ``panel`` (module docstring): the ridge penalty and the basis size chosen on validation."""
    hidden = params.model.neural_dl_hidden

    def fitter(d: Design, q: np.ndarray) -> CurveFit:
        return classical.fit_moderated(d, hidden_units(q, hidden, seed), RIDGE_SHARES)

    found = fit_curves(panel, params, "neural_dl", fitter, shared=False)
    found.facts.update(fit=f"ridge on {hidden} random tanh units of the proxies (neural_dl)", hidden_seed=seed)
    return found
