"""AC-GATE, its structural ablations (paper section IV) and the neural baselines (Plain LSTM, TFT, GA-Net).

Input contract, the same for every model: the prediction for target step t (t >= K) is made from the lag window
``lag_windows(x, K)[:, t-K]`` = (x_{t-1}, ..., x_{t-K}), never from the contemporaneous x_t, plus the entity's
proxies, static features and index. Models receive the windows, not the raw sequence, so the rule holds by
construction and lag-specific occlusion (replacing one lag of every window) applies to all of them alike.

AC-GATE pipeline: proxies p_i -> score z_i -> lag weights omega_i -> lag context c_{i,t} -> y_hat_{i,t}. Its four
variants are one module with a ``method`` switch that builds the same parameters in the same order, so a seed
gives every variant the same initial weights:

- ``acgate``: the full model;
- ``no_ac_encoder``: z fixed to 0 for every entity, so omega is one learned distribution shared by all;
- ``uniform_lag``: omega fixed at 1/K;
- ``no_recon_reg``: lambda_r = 0 (applied by the training loss, see ``recon_weight``);
- ``proxy_shared_gate``: omega is one learned distribution shared by all entities (the gate reads z = 0), while z
  from the proxies still sets the backbone's initial state: the proxies may set anything (level, the size of the
  lagged effect) except the lags. The calibrated L1 asks AC-GATE to beat it, so that what it certifies is the
  proxies' hold on the lags alone.

Baselines (all with the same d, LSTM depth, dropout, entity embedding and static projection):

- ``plain_lstm``: the AC-GATE backbone fed the flattened lag window; no encoder, no gate;
- ``tft``: Temporal Fusion Transformer (Lim et al. 2021): static covariate encoders, variable selection over the K
  lag inputs, gated residual networks, LSTM, static enrichment, interpretable multi-head attention, gating;
- ``ganet``: GA-Net (Xue, Li, Zhang 2020): an auxiliary network gives each lag position a gate, relaxed Bernoulli
  (Gumbel-sigmoid) while training and thresholded at evaluation; attention renormalised over the open positions.

Training noise (dropout, GA-Net's relaxed gates) is drawn for the whole batch's steps even when a forward pass
computes only the first T' of them (``noise_steps``): the training step stops at the last training target (every
model is causal in the target steps), and drawing the noise of the steps it leaves out keeps the random draws,
and so the training path, those of the whole batch.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from acgate.config import GATE_METHODS, NEURAL_BASELINES, ModelConfig

# cuDNN copies LSTM weights that are not in a module's flat buffer, as the backbone's folded first-layer weights (a
# few KB) are not, and warns of the memory that costs with large ones: that warning, from this module's calls only
warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous", module=__name__)


def lag_windows(x: Tensor, max_lag: int) -> Tensor:
    """Lagged inputs (N, T-K, K, F) from x (N, T, F): out[:, j, k-1] = x[:, K+j-k], lags k = 1..K
    of target step t = K+j. The contemporaneous x[:, K+j] is never included."""
    windows = x.unfold(1, max_lag, 1)[:, :-1]  # (N, T-K, F, K): x[:, j .. j+K-1]
    return windows.flip(-1).transpose(-1, -2)


@dataclass
class Output:
    y_hat: Tensor  # (N, T-K) predictions for target steps K..T-1
    omega: Tensor | None = None  # (N, K) structural lag weights (gate models)
    z: Tensor | None = None  # (N, 1) conditioning score (gate models)
    p_hat: Tensor | None = None  # (N, M) reconstructed proxies (gate models)
    internal: Tensor | None = None  # (N, T-K, K) a baseline's internal weights over lags (diagnostic)
    gates: Tensor | None = None  # (N, T-K, K) GA-Net gates: relaxed in (0, 1) while training, 0/1 at evaluation
    gate_density: Tensor | None = None  # share of open GA-Net gates


def _mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, n_out))


def step_noise(x: Tensor, noise_steps: int | None, draw: Callable[[Tensor], Tensor], time_major: bool = False
               ) -> Tensor:
    """Random numbers for x (N, T', ...): ``draw`` fills a tensor shaped like x with ``noise_steps`` steps on axis 1
    (laid out (steps, N, ...) when ``time_major``, as nn.LSTM's dropout draws them), and its first T' steps are
    returned (N, T', ...). The generator advances as for the whole batch, and the steps computed get its numbers."""
    steps = noise_steps or x.shape[1]
    shape = (steps, x.shape[0], *x.shape[2:]) if time_major else (x.shape[0], steps, *x.shape[2:])
    noise = draw(x.new_empty(shape))
    return (noise.transpose(0, 1) if time_major else noise)[:, :x.shape[1]]


def dropout(x: Tensor, p: float, training: bool, noise_steps: int | None = None, time_major: bool = False) -> Tensor:
    """Dropout of x (N, T', ...) with its mask drawn for ``noise_steps`` steps (:func:`step_noise`); the same
    numbers as ``nn.functional.dropout`` for the whole batch on the CPU (a test checks it)."""
    if not training or p == 0.0:
        return x
    return x * step_noise(x, noise_steps, lambda t: t.bernoulli_(1 - p).div_(1 - p), time_major)


class StepDropout(nn.Dropout):
    """nn.Dropout whose mask is drawn for the whole batch's steps (:func:`dropout`); for tensors with a step axis
    (axis 1) when ``noise_steps`` is given, any tensor otherwise."""

    def forward(self, x: Tensor, noise_steps: int | None = None) -> Tensor:
        return dropout(x, self.p, self.training, noise_steps)


class StackedLSTM(nn.Module):
    """A stacked LSTM (batch first) run one layer at a time, with dropout between layers drawn for the whole batch's
    steps (:func:`dropout`, time-major as nn.LSTM draws it): the same function, initial weights and random numbers as
    ``nn.LSTM(n_in, hidden, layers, batch_first=True, dropout=p)`` (a test checks it), whose ``state_dict`` it
    also loads (runs written before it)."""

    def __init__(self, n_in: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.layers = nn.ModuleList(nn.LSTM(n_in if i == 0 else hidden, hidden, batch_first=True)
                                    for i in range(layers))
        self.dropout = dropout if layers > 1 else 0.0
        self.register_load_state_dict_pre_hook(self._from_nn_lstm)

    @staticmethod
    def _from_nn_lstm(module, state_dict, prefix, *_):
        """Keys of an nn.LSTM (``weight_ih_l1``) renamed to this module's (``layers.1.weight_ih_l0``)."""
        for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(prefix + "layers.")]:
            name, layer = key[len(prefix):].rsplit("_l", 1)
            state_dict[f"{prefix}layers.{layer}.{name}_l0"] = state_dict.pop(key)

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor] | None = None, noise_steps: int | None = None,
                input_weights: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """x (N, T', n_in), state (h0, c0) each (layers, N, hidden) -> the last layer's outputs (N, T', hidden).
        ``input_weights`` (weight (4 hidden, n_x), bias (4 hidden,)) replace the first layer's own input weight and
        bias, for a caller that folds an affine map of its inputs into them (x is then (N, T', n_x)); that layer then
        runs as ``torch.lstm``, not as its module (hooks on the module do not fire)."""
        for i, layer in enumerate(self.layers):
            if i:
                x = dropout(x, self.dropout, self.training, noise_steps, time_major=True)
            layer_state = None if state is None else (state[0][i:i + 1], state[1][i:i + 1])
            if i == 0 and input_weights is not None:
                if layer_state is None:
                    zeros = x.new_zeros(1, x.shape[0], layer.hidden_size)
                    layer_state = (zeros, zeros)
                weights = [input_weights[0], layer.weight_hh_l0, input_weights[1], layer.bias_hh_l0]
                x = torch.lstm(x, layer_state, weights, True, 1, 0.0, self.training, False, True)[0]
            else:
                x, _ = layer(x, layer_state)
        return x


class Backbone(nn.Module):
    """Entity embedding, static projection, an optional initial state from a conditioning vector, a stacked LSTM
    over the target steps and a linear head.

    The LSTM's first layer reads, at every step, the model's step vector (an affine map of the model's step inputs),
    the entity embedding and the static projection. The step map and the static projection are affine, and so is
    the first layer's input product, so both maps are folded into that layer's input weights: the layer reads the
    step inputs, the entity embedding and the static features themselves (for AC-GATE on the paper's synthetic
    panel 11 inputs instead of 80). The same function of the same parameters as projecting first (a test writes
    that order out), float32 rounding apart, at a fraction of the first layer's input arithmetic, forward and
    backward, whenever the step inputs are fewer than the step vector's width (every model and panel here; a
    Plain LSTM or GA-Net with some 60 lag inputs or more would gain nothing)."""

    def __init__(self, cfg: ModelConfig, n_entities: int, n_static: int, n_step: int, init_dim: int = 0):
        super().__init__()
        self.cfg, self.n_step = cfg, n_step
        self.entity_embedding = nn.Embedding(n_entities, cfg.entity_embedding) if cfg.entity_embedding else None
        self.static_proj = nn.Linear(n_static, cfg.static_embedding) if n_static else None
        self.init_state = nn.Linear(init_dim, 2 * cfg.lstm_layers * cfg.hidden) if init_dim else None
        n_in = n_step + cfg.entity_embedding + (cfg.static_embedding if n_static else 0)
        self.lstm = StackedLSTM(n_in, cfg.hidden, cfg.lstm_layers, cfg.dropout)
        self.head = nn.Linear(cfg.hidden, 1)

    def entity_context(self, static: Tensor, entity_index: Tensor) -> list[Tensor]:
        parts = []
        if self.entity_embedding is not None:
            parts.append(self.entity_embedding(entity_index))
        if self.static_proj is not None:
            parts.append(self.static_proj(static))
        return parts

    def forward(self, inputs: Tensor, step_map: tuple[Tensor, Tensor | None], static: Tensor, entity_index: Tensor,
                init: Tensor | None = None, noise_steps: int | None = None) -> Tensor:
        """inputs (N, T', n_u) and ``step_map`` (weight (n_step, n_u), bias (n_step,) or None, in
        ``nn.functional.linear``'s order): the step vectors are the map of the inputs -> y_hat (N, T')."""
        n, length = inputs.shape[:2]
        n_step = self.n_step
        if step_map[0].shape != (n_step, inputs.shape[-1]):
            raise ValueError(f"the step map's weight is {tuple(step_map[0].shape)}; this backbone needs "
                             f"({n_step}, {inputs.shape[-1]}) for step inputs of width {inputs.shape[-1]}")
        layer = self.lstm.layers[0]
        w_ih, bias = layer.weight_ih_l0, layer.bias_ih_l0
        weights, parts = [w_ih[:, :n_step] @ step_map[0]], [inputs]
        if step_map[1] is not None:
            bias = bias + w_ih[:, :n_step] @ step_map[1]
        used = n_step
        if self.entity_embedding is not None:
            width = self.cfg.entity_embedding
            weights.append(w_ih[:, used:used + width])
            parts.append(self.entity_embedding(entity_index)[:, None, :].expand(n, length, -1))
            used += width
        if self.static_proj is not None:
            weights.append(w_ih[:, used:] @ self.static_proj.weight)
            bias = bias + w_ih[:, used:] @ self.static_proj.bias
            parts.append(static[:, None, :].expand(n, length, -1))
        state = None
        if self.init_state is not None:
            h0, c0 = torch.tanh(self.init_state(init)).view(n, 2, self.cfg.lstm_layers, -1).permute(1, 2, 0, 3)
            state = (h0.contiguous(), c0.contiguous())
        hidden = self.lstm(torch.cat(parts, dim=-1), state, noise_steps, (torch.cat(weights, dim=1), bias))
        return self.head(hidden).squeeze(-1)


class ACGate(nn.Module):
    def __init__(self, cfg: ModelConfig, method: str, n_entities: int, n_features: int, n_proxies: int,
                 n_static: int):
        super().__init__()
        if method not in GATE_METHODS:
            raise ValueError(f"unknown method '{method}'; choose one of {', '.join(GATE_METHODS)}")
        self.cfg, self.method = cfg, method
        K = cfg.max_lag
        self.encoder = _mlp(n_proxies, cfg.encoder_hidden, 1)  # f_phi: p_i -> z_i
        self.recon_head = _mlp(1, cfg.encoder_hidden, n_proxies)  # g_psi: z_i -> p_hat_i
        self.gate = _mlp(1, cfg.encoder_hidden, K)  # g_theta: z_i -> K lag logits
        self.lag_proj = nn.Linear(n_features, cfg.hidden)  # h: one step's features -> R^d
        self.backbone = Backbone(cfg, n_entities, n_static, cfg.hidden, init_dim=1)  # z -> (h0, c0) of every layer
        self.register_buffer("position", torch.arange(1, K + 1, dtype=torch.float32) / K)  # k/K

    @property
    def recon_weight(self) -> float:
        return 0.0 if self.method == "no_recon_reg" else self.cfg.recon_weight

    def score(self, proxies: Tensor) -> Tensor:
        """z (N, 1) from proxies (N, M); the constant 0 under no_ac_encoder."""
        z = self.encoder(proxies)
        return torch.zeros_like(z) if self.method == "no_ac_encoder" else z

    def lag_weights(self, z: Tensor) -> Tensor:
        """omega (N, K) = softmax_k((g_theta(z)_k - lambda k/K) / tau); 1/K under uniform_lag; under
        proxy_shared_gate the gate reads 0 whatever z is, so omega is one distribution for every entity."""
        logits = self.gate(torch.zeros_like(z) if self.method == "proxy_shared_gate" else z)
        if self.method == "uniform_lag":
            return torch.full_like(logits, 1.0 / self.cfg.max_lag)
        return torch.softmax((logits - self.cfg.position_penalty * self.position) / self.cfg.temperature, dim=-1)

    def forward(self, lags: Tensor, proxies: Tensor, static: Tensor, entity_index: Tensor,
                noise_steps: int | None = None) -> Output:
        """lags (N, T', K, F), proxies (N, M), static (N, D), entity_index (N,) -> predictions for target steps
        K..K+T'-1; training noise drawn for ``noise_steps`` target steps (default T'; see the module docstring)."""
        z = self.score(proxies)
        omega = self.lag_weights(z)
        p_hat = self.recon_head(z.detach() if self.cfg.recon_detach else z)
        # h is affine, so sum_k omega_k h(x_{t-k}) = h(sum_k omega_k x_{t-k}): aggregate first; the backbone takes
        # the context c = h(aggregate) (N, T', d) through h's weights, folded into its first layer
        aggregate = torch.einsum("ntkf,nk->ntf", lags, omega)
        y_hat = self.backbone(aggregate, (self.lag_proj.weight, self.lag_proj.bias), static, entity_index, init=z,
                              noise_steps=noise_steps)
        return Output(y_hat=y_hat, omega=omega, z=z, p_hat=p_hat)


class PlainLSTM(nn.Module):
    """The AC-GATE backbone fed the whole lag window (flattened) at every step: no encoder, no gate."""

    recon_weight = 0.0

    def __init__(self, cfg: ModelConfig, n_entities: int, n_features: int, n_static: int):
        super().__init__()
        self.cfg = cfg
        self.window_proj = nn.Linear(cfg.max_lag * n_features, cfg.hidden)
        self.backbone = Backbone(cfg, n_entities, n_static, cfg.hidden)

    def forward(self, lags: Tensor, proxies: Tensor, static: Tensor, entity_index: Tensor,
                noise_steps: int | None = None) -> Output:
        step_map = (self.window_proj.weight, self.window_proj.bias)
        return Output(y_hat=self.backbone(lags.flatten(start_dim=2), step_map, static, entity_index,
                                          noise_steps=noise_steps))


class LagEmbedding(nn.Module):
    """One linear embedding per lag position: (N, T', K, F) -> (N, T', K, d)."""

    def __init__(self, max_lag: int, n_features: int, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_lag, n_features, d) / math.sqrt(n_features))
        self.bias = nn.Parameter(torch.zeros(max_lag, d))

    def forward(self, lags: Tensor) -> Tensor:
        return torch.einsum("ntkf,kfd->ntkd", lags, self.weight) + self.bias

    def folded(self, projection: nn.Linear) -> tuple[Tensor, Tensor]:
        """``projection`` (d -> e) of each lag's embedding as one affine map of that lag's inputs: weight (K, F, e)
        and bias (K, e). Both maps are affine, so projection(embedding(x_k)) = x_k folded_weight_k + folded_bias_k."""
        weight = torch.einsum("kfd,ed->kfe", self.weight, projection.weight)
        return weight, self.bias @ projection.weight.T + projection.bias

    def folded_flat(self, projection: nn.Linear) -> tuple[Tensor, Tensor]:
        """``projection`` (K*d -> e) of the flattened embedding (N, T', K*d) as one affine map of the flattened lag
        inputs (N, T', K*F): weight (e, K*F) and bias (e,), in ``nn.functional.linear``'s order."""
        per_lag = projection.weight.view(projection.weight.shape[0], *self.bias.shape)  # (e, K, d)
        weight = torch.einsum("kfd,ekd->ekf", self.weight, per_lag).flatten(start_dim=1)
        return weight, torch.einsum("kd,ekd->e", self.bias, per_lag) + projection.bias


class GRN(nn.Module):
    """Gated residual network: LayerNorm(skip(a) + GLU(W2 ELU(W1 a + W3 c))) (Lim et al. 2021, eq. 2-5)."""

    def __init__(self, d_in: int, d: int, d_out: int, dropout: float, d_context: int = 0):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d)
        self.context = nn.Linear(d_context, d, bias=False) if d_context else None
        self.fc2 = nn.Linear(d, d)
        self.glu = nn.Linear(d, 2 * d_out)
        self.skip = nn.Linear(d_in, d_out) if d_in != d_out else nn.Identity()
        self.norm = nn.LayerNorm(d_out)
        self.dropout = StepDropout(dropout)

    def forward(self, a: Tensor, c: Tensor | None = None, noise_steps: int | None = None) -> Tensor:
        return self.gated(self.fc1(a), self.skip(a), c, noise_steps)

    def gated(self, h: Tensor, skip: Tensor, c: Tensor | None = None, noise_steps: int | None = None) -> Tensor:
        """The network from fc1's output ``h`` = W1 a + b1 and the skip path's ``skip`` = skip(a) on: for a caller
        that computes both more cheaply than from ``a`` itself (TFT, from the lag inputs its ``a`` is affine in).
        In evaluation no dropout stands between W2 and the GLU's product, so the two are one affine map (d -> 2
        d_out, folded weights): one product fewer over TFT's (N, T', K) lag positions in every validation pass, the
        same function float32 rounding apart (a test writes the two products out)."""
        if self.context is not None and c is not None:
            h = h + self.context(c)
        h = nn.functional.elu(h)
        if self.training:
            value, gate = self.glu(self.dropout(self.fc2(h), noise_steps)).chunk(2, dim=-1)
        else:
            glu = self.glu.weight
            value, gate = nn.functional.linear(h, glu @ self.fc2.weight,
                                               glu @ self.fc2.bias + self.glu.bias).chunk(2, dim=-1)
        return self.norm(skip + value * torch.sigmoid(gate))


class GateAddNorm(nn.Module):
    """LayerNorm(residual + GLU(x)), the TFT's gating layer."""

    def __init__(self, d: int, dropout: float):
        super().__init__()
        self.glu = nn.Linear(d, 2 * d)
        self.norm = nn.LayerNorm(d)
        self.dropout = StepDropout(dropout)

    def forward(self, x: Tensor, residual: Tensor, noise_steps: int | None = None) -> Tensor:
        value, gate = self.glu(self.dropout(x, noise_steps)).chunk(2, dim=-1)
        return self.norm(residual + value * torch.sigmoid(gate))


class TFT(nn.Module):
    """Temporal Fusion Transformer over the K lag inputs of each target step. The static covariates are the
    entity's proxies and static features; the variable-selection weights over the lags are its internal lag profile."""

    recon_weight = 0.0

    def __init__(self, cfg: ModelConfig, n_entities: int, n_features: int, n_proxies: int, n_static: int):
        super().__init__()
        self.cfg = cfg
        d, K, p = cfg.hidden, cfg.max_lag, cfg.dropout
        if d % cfg.attention_heads:
            raise ValueError(f"model.hidden = {d} must be divisible by model.attention_heads = {cfg.attention_heads}")
        self.lag_embedding = LagEmbedding(K, n_features, d)
        self.entity_embedding = nn.Embedding(n_entities, cfg.entity_embedding) if cfg.entity_embedding else None
        self.static_input = nn.Linear(n_proxies + n_static + cfg.entity_embedding, d)
        self.static_contexts = nn.ModuleList(GRN(d, d, d, p) for _ in range(4))  # selection, enrichment, h0, c0
        self.selection_weights = GRN(K * d, d, K, p, d_context=d)
        self.lag_transform = GRN(d, d, d, p)  # shared across lag positions
        self.lstm = StackedLSTM(d, d, cfg.lstm_layers, p)
        self.post_lstm = GateAddNorm(d, p)
        self.enrichment = GRN(d, d, d, p, d_context=d)
        self.heads, self.head_dim = cfg.attention_heads, d // cfg.attention_heads
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, self.head_dim)  # shared across heads: interpretable attention
        self.attention_out = nn.Linear(self.head_dim, d)
        self.post_attention = GateAddNorm(d, p)
        self.position_wise = GRN(d, d, d, p)
        self.post_ff = GateAddNorm(d, p)
        self.head = nn.Linear(d, 1)

    def lag_selection(self, lags: Tensor, c_select: Tensor, noise_steps: int | None = None) -> tuple[Tensor, Tensor]:
        """Variable selection over the K lags (N, T', K, F), with the static context ``c_select`` (N, T', d): the
        weights (N, T', K) of the selection network on the flattened lag embeddings, and the weighted sum (N, T', d)
        of the lag transform of each embedding. The first layers of the selection network and of the lag transform
        are affine in the embedding and so in the lags: they are taken from the lags (K*F or F inputs) with the
        embedding folded into their weights (:meth:`LagEmbedding.folded_flat`, :meth:`LagEmbedding.folded`), not from
        the embedding (K*d or d inputs). The same function of the same parameters as the textbook order (a test
        writes it out), float32 rounding apart. The skip paths take the embedding itself: the selection network's
        (K*d -> K), folded, would be a product with a few output columns, whose CPU kernels round differently with
        the number of rows, and the validation pass through the last validation step would no longer be
        bit-identical to the whole batch's (a test checks it)."""
        embedded = self.lag_embedding(lags)  # (N, T', K, d)
        select, transform = self.selection_weights, self.lag_transform
        flat = lags.flatten(start_dim=2)  # (N, T', K*F)
        weights = torch.softmax(select.gated(nn.functional.linear(flat, *self.lag_embedding.folded_flat(select.fc1)),
                                             select.skip(embedded.flatten(start_dim=2)), c_select, noise_steps), dim=-1)
        per_lag, bias = self.lag_embedding.folded(transform.fc1)  # the lag transform's first layer, every lag
        first = torch.einsum("ntkf,kfe->ntke", lags, per_lag) + bias
        transformed = transform.gated(first, embedded, noise_steps=noise_steps)  # (N, T', K, d)
        return weights, torch.einsum("ntk,ntkd->ntd", weights, transformed)

    def forward(self, lags: Tensor, proxies: Tensor, static: Tensor, entity_index: Tensor,
                noise_steps: int | None = None) -> Output:
        n, length, K = lags.shape[:3]
        statics = [proxies, static] + ([self.entity_embedding(entity_index)] if self.entity_embedding else [])
        s = self.static_input(torch.cat(statics, dim=-1))
        c_select, c_enrich, c_h, c_c = (grn(s) for grn in self.static_contexts)
        weights, selected = self.lag_selection(lags, c_select[:, None, :].expand(n, length, -1), noise_steps)
        state = tuple(c[None].expand(self.cfg.lstm_layers, -1, -1).contiguous() for c in (c_h, c_c))
        temporal = self.post_lstm(self.lstm(selected, state, noise_steps), selected, noise_steps)
        enriched = self.enrichment(temporal, c_enrich[:, None, :].expand(n, length, -1), noise_steps)
        q = self.query(enriched).view(n, length, self.heads, self.head_dim)
        k = self.key(enriched).view(n, length, self.heads, self.head_dim)
        scores = torch.einsum("nthd,nshd->nhts", q, k) / math.sqrt(self.head_dim)
        causal = torch.ones(length, length, dtype=torch.bool, device=lags.device).triu(1)
        attention = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1).mean(dim=1)  # (N, T', T')
        attended = self.attention_out(attention @ self.value(enriched))
        out = self.post_ff(self.position_wise(self.post_attention(attended, enriched, noise_steps),
                                              noise_steps=noise_steps), temporal, noise_steps)
        return Output(y_hat=self.head(out).squeeze(-1), internal=weights)


class _SigmoidTanh(torch.autograd.Function):
    """tanh(x) = 2 sigmoid(2x) - 1 (float32 rounding apart: at most about 2e-7), with tanh's own backward from the
    output. PyTorch's CPU tanh kernel took 2.5 ns an element on the AMD EPYC VM, six times its sigmoid, whatever the
    size; this form takes 40-45 % of its time on GA-Net's (N, T', K, d) gate network (docs/speed.md)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        y = torch.sigmoid(2 * x).mul_(2).sub_(1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        return torch.ops.aten.tanh_backward(grad, *ctx.saved_tensors)


def _tanh(x: Tensor) -> Tensor:
    """tanh, on the CPU by way of a sigmoid (:class:`_SigmoidTanh`); CUDA's tanh is as fast as its sigmoid."""
    return torch.tanh(x) if x.is_cuda else _SigmoidTanh.apply(x)


class GANet(nn.Module):
    """Gated attention over the K lag positions: an auxiliary network opens or closes each position (relaxed
    Bernoulli while training, thresholded at evaluation), attention is renormalised over the open positions, and
    the attended lag context drives the shared backbone."""

    recon_weight = 0.0

    def __init__(self, cfg: ModelConfig, n_entities: int, n_features: int, n_static: int):
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden
        self.lag_embedding = LagEmbedding(cfg.max_lag, n_features, d)
        self.backbone = Backbone(cfg, n_entities, n_static, d)
        n_context = cfg.entity_embedding + (cfg.static_embedding if n_static else 0)
        self.query = nn.Linear(n_context, d) if n_context else None
        # auxiliary network: tanh(W_e e_k + W_q q) -> gate logit, one hidden layer of width d
        self.gate_embedding = nn.Linear(d, d)
        self.gate_query = nn.Linear(d, d, bias=False)
        self.gate_out = nn.Linear(d, 1)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)

    def forward(self, lags: Tensor, proxies: Tensor, static: Tensor, entity_index: Tensor,
                noise_steps: int | None = None) -> Output:
        """The embedding e_k of each lag, the gate network tanh(W_e e_k + W_q q), the keys W_k e_k and the values
        W_v e_k, computed with the embedding folded into each projection (:meth:`LagEmbedding.folded`). Only the gate
        network needs a (N, T', K, d) tensor; the scores and the attended values are linear in the lags, so they are
        taken from the (N, T', K, F) lags directly: the same function of the same parameters as embedding every lag
        and projecting it, at a fraction of the arithmetic (float32 rounding differs at about 1e-6)."""
        n, length, K = lags.shape[:3]
        parts = self.backbone.entity_context(static, entity_index)
        query = (self.query(torch.cat(parts, dim=-1)) if self.query is not None
                 else lags.new_zeros(n, self.cfg.hidden))  # (N, d), from the entity's embedding and statics
        gate_weight, gate_bias = self.lag_embedding.folded(self.gate_embedding)
        hidden = _tanh(torch.einsum("ntkf,kfd->ntkd", lags, gate_weight)
                       + (gate_bias + self.gate_query(query)[:, None, :])[:, None])  # (N, T', K, d)
        logits = self.gate_out(hidden).squeeze(-1)  # (N, T', K)
        if self.training:  # Gumbel-sigmoid: a relaxed Bernoulli sample of each gate
            u = step_noise(logits, noise_steps, lambda t: t.uniform_()).clamp(1e-6, 1 - 1e-6)
            gates = torch.sigmoid((logits + torch.log(u) - torch.log1p(-u)) / self.cfg.gate_temperature)
        else:
            gates = (logits > 0).to(logits.dtype)
            gates = torch.where(gates.sum(-1, keepdim=True) > 0, gates, torch.ones_like(gates))  # none open: all
        key_weight, key_bias = self.lag_embedding.folded(self.key)
        # key_k . q = x_k (W_k q) + b_k . q, per entity
        scores = ((lags * torch.einsum("kfd,nd->nkf", key_weight, query)[:, None]).sum(dim=-1)
                  + (query @ key_bias.T)[:, None, :]) / math.sqrt(self.cfg.hidden)  # (N, T', K)
        weighted = gates * torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
        attention = weighted / weighted.sum(dim=-1, keepdim=True).clamp_min(1e-12)  # renormalised over open gates
        value_weight, value_bias = self.lag_embedding.folded(self.value)
        # the context sum_k a_k value_k = (sum_k a_k x_k W_v,k) + (sum_k a_k b_v,k) (N, T', d) is linear in the
        # attention-weighted lags and the attention: the backbone takes it through that map, folded
        inputs = torch.cat([(attention[..., None] * lags).flatten(start_dim=2), attention], dim=-1)
        step_map = (torch.cat([value_weight.flatten(end_dim=1), value_bias]).T, None)
        return Output(y_hat=self.backbone(inputs, step_map, static, entity_index, noise_steps=noise_steps),
                      internal=attention, gates=gates, gate_density=gates.mean())


def build(cfg: ModelConfig, method: str, n_entities: int, n_features: int, n_proxies: int, n_static: int) -> nn.Module:
    """The model of ``method`` for panels of these dimensions."""
    if method in GATE_METHODS:
        return ACGate(cfg, method, n_entities, n_features, n_proxies, n_static)
    if method == "plain_lstm":
        return PlainLSTM(cfg, n_entities, n_features, n_static)
    if method == "tft":
        return TFT(cfg, n_entities, n_features, n_proxies, n_static)
    if method == "ganet":
        return GANet(cfg, n_entities, n_features, n_static)
    raise ValueError(f"unknown neural method '{method}' (a method name in the params file's or the notebook's "
                     f"methods list); choose one of {', '.join(GATE_METHODS + NEURAL_BASELINES)}, or grouped_ardl")
