"""AC-GATE, its structural ablations (paper section IV) and the neural baselines (Plain LSTM, TFT, GA-Net).

Input contract, the same for every model: the prediction for target step t (t >= K) is made from the lag window
``lag_windows(x, K)[:, t-K]`` = (x_{t-1}, ..., x_{t-K}), never from the contemporaneous x_t, plus the entity's
proxies, static features and index. Models receive the windows, not the raw sequence, so the rule holds by
construction and lag-specific occlusion (replacing one lag of every window) applies to all of them alike. Every
model is causal in the target steps (an LSTM; TFT's attention is masked to earlier steps), so its predictions for
the first T' steps are the same whether it sees the first T' windows or all of them.

AC-GATE pipeline: proxies p_i -> score z_i -> lag weights omega_i -> lag context c_{i,t} -> y_hat_{i,t}. Its
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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from acgate.config import GATE_METHODS, NEURAL_METHODS, ModelConfig


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


def _mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, n_out))


class Backbone(nn.Module):
    """Entity embedding, static projection, an optional initial state from a conditioning vector, a stacked LSTM
    over the target steps and a linear head. At every step the LSTM reads the model's step vector (n_step wide),
    the entity embedding and the static projection. With ``memory`` False each step is read alone, from the initial
    state: nothing of an earlier step's input reaches a later prediction."""

    def __init__(self, cfg: ModelConfig, n_entities: int, n_static: int, n_step: int, init_dim: int = 0,
                 memory: bool = True):
        super().__init__()
        self.cfg, self.memory = cfg, memory
        self.entity_embedding = nn.Embedding(n_entities, cfg.entity_embedding) if cfg.entity_embedding else None
        self.static_proj = nn.Linear(n_static, cfg.static_embedding) if n_static else None
        self.init_state = nn.Linear(init_dim, 2 * cfg.lstm_layers * cfg.hidden) if init_dim else None
        n_in = n_step + cfg.entity_embedding + (cfg.static_embedding if n_static else 0)
        self.lstm = nn.LSTM(n_in, cfg.hidden, num_layers=cfg.lstm_layers, batch_first=True,
                            dropout=cfg.dropout if cfg.lstm_layers > 1 else 0.0)
        self.head = nn.Linear(cfg.hidden, 1)

    def entity_context(self, static: Tensor, entity_index: Tensor) -> list[Tensor]:
        """The entity's embedding and static projection, each (N, width)."""
        parts = []
        if self.entity_embedding is not None:
            parts.append(self.entity_embedding(entity_index))
        if self.static_proj is not None:
            parts.append(self.static_proj(static))
        return parts

    def forward(self, steps: Tensor, static: Tensor, entity_index: Tensor, init: Tensor | None = None) -> Tensor:
        """steps (N, T', n_step), static (N, D), entity_index (N,), init (N, init_dim) -> y_hat (N, T')."""
        n, length = steps.shape[:2]
        context = [part[:, None, :].expand(n, length, -1) for part in self.entity_context(static, entity_index)]
        state = None
        if self.init_state is not None:
            h0, c0 = torch.tanh(self.init_state(init)).view(n, 2, self.cfg.lstm_layers, -1).permute(1, 2, 0, 3)
            state = (h0.contiguous(), c0.contiguous())
        inputs = torch.cat([steps, *context], dim=-1)
        if not self.memory:  # N x T' sequences of one step, each from its entity's initial state
            inputs = inputs.reshape(n * length, 1, -1)
            state = tuple(s.repeat_interleave(length, dim=1) for s in state) if state else None
        hidden, _ = self.lstm(inputs, state)
        return self.head(hidden).reshape(n, length)


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
        # z -> (h0, c0) of every layer
        self.backbone = Backbone(cfg, n_entities, n_static, cfg.hidden, init_dim=1, memory=cfg.gate_memory)
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

    def forward(self, lags: Tensor, proxies: Tensor, static: Tensor, entity_index: Tensor) -> Output:
        """lags (N, T', K, F), proxies (N, M), static (N, D), entity_index (N,) -> predictions for target steps
        K..K+T'-1."""
        z = self.score(proxies)
        omega = self.lag_weights(z)
        p_hat = self.recon_head(z.detach() if self.cfg.recon_detach else z)
        # the lag context c_t = sum_k omega_k h(x_{t-k}); h is affine and the omega_k sum to 1, so this is
        # h(sum_k omega_k x_{t-k}): one projection a step instead of K
        context = self.lag_proj(torch.einsum("ntkf,nk->ntf", lags, omega))
        y_hat = self.backbone(context, static, entity_index, init=z)
        return Output(y_hat=y_hat, omega=omega, z=z, p_hat=p_hat)


class PlainLSTM(nn.Module):
    """The AC-GATE backbone fed the whole lag window (flattened) at every step: no encoder, no gate."""

    recon_weight = 0.0

    def __init__(self, cfg: ModelConfig, n_entities: int, n_features: int, n_static: int):
        super().__init__()
        self.cfg = cfg
        self.window_proj = nn.Linear(cfg.max_lag * n_features, cfg.hidden)
        self.backbone = Backbone(cfg, n_entities, n_static, cfg.hidden)

    def forward(self, lags: Tensor, proxies: Tensor, static: Tensor, entity_index: Tensor) -> Output:
        return Output(y_hat=self.backbone(self.window_proj(lags.flatten(start_dim=2)), static, entity_index))


class LagEmbedding(nn.Module):
    """One linear embedding per lag position: (N, T', K, F) -> (N, T', K, d)."""

    def __init__(self, max_lag: int, n_features: int, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_lag, n_features, d) / math.sqrt(n_features))
        self.bias = nn.Parameter(torch.zeros(max_lag, d))

    def forward(self, lags: Tensor) -> Tensor:
        return torch.einsum("ntkf,kfd->ntkd", lags, self.weight) + self.bias


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
        self.dropout = nn.Dropout(dropout)

    def forward(self, a: Tensor, c: Tensor | None = None) -> Tensor:
        h = self.fc1(a)
        if self.context is not None and c is not None:
            h = h + self.context(c)
        value, gate = self.glu(self.dropout(self.fc2(nn.functional.elu(h)))).chunk(2, dim=-1)
        return self.norm(self.skip(a) + value * torch.sigmoid(gate))


class GateAddNorm(nn.Module):
    """LayerNorm(residual + GLU(x)), the TFT's gating layer."""

    def __init__(self, d: int, dropout: float):
        super().__init__()
        self.glu = nn.Linear(d, 2 * d)
        self.norm = nn.LayerNorm(d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        value, gate = self.glu(self.dropout(x)).chunk(2, dim=-1)
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
        self.lstm = nn.LSTM(d, d, num_layers=cfg.lstm_layers, batch_first=True,
                            dropout=p if cfg.lstm_layers > 1 else 0.0)
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

    def lag_selection(self, lags: Tensor, c_select: Tensor) -> tuple[Tensor, Tensor]:
        """Variable selection over the K lags (N, T', K, F) with the static context ``c_select`` (N, T', d): the
        selection weights (N, T', K), from the flattened lag embeddings, and the weighted sum (N, T', d) of each
        lag's transformed embedding."""
        embedded = self.lag_embedding(lags)  # (N, T', K, d)
        weights = torch.softmax(self.selection_weights(embedded.flatten(start_dim=2), c_select), dim=-1)
        return weights, torch.einsum("ntk,ntkd->ntd", weights, self.lag_transform(embedded))

    def forward(self, lags: Tensor, proxies: Tensor, static: Tensor, entity_index: Tensor) -> Output:
        n, length, K = lags.shape[:3]
        statics = [proxies, static] + ([self.entity_embedding(entity_index)] if self.entity_embedding else [])
        s = self.static_input(torch.cat(statics, dim=-1))
        c_select, c_enrich, c_h, c_c = (grn(s) for grn in self.static_contexts)
        weights, selected = self.lag_selection(lags, c_select[:, None, :].expand(n, length, -1))
        state = tuple(c[None].expand(self.cfg.lstm_layers, -1, -1).contiguous() for c in (c_h, c_c))
        temporal = self.post_lstm(self.lstm(selected, state)[0], selected)
        enriched = self.enrichment(temporal, c_enrich[:, None, :].expand(n, length, -1))
        q = self.query(enriched).view(n, length, self.heads, self.head_dim)
        k = self.key(enriched).view(n, length, self.heads, self.head_dim)
        scores = torch.einsum("nthd,nshd->nhts", q, k) / math.sqrt(self.head_dim)
        causal = torch.ones(length, length, dtype=torch.bool, device=lags.device).triu(1)
        attention = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1).mean(dim=1)  # (N, T', T')
        attended = self.attention_out(attention @ self.value(enriched))
        out = self.post_ff(self.position_wise(self.post_attention(attended, enriched)), temporal)
        return Output(y_hat=self.head(out).squeeze(-1), internal=weights)


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

    def forward(self, lags: Tensor, proxies: Tensor, static: Tensor, entity_index: Tensor) -> Output:
        n = lags.shape[0]
        parts = self.backbone.entity_context(static, entity_index)
        query = (self.query(torch.cat(parts, dim=-1)) if self.query is not None
                 else lags.new_zeros(n, self.cfg.hidden))  # (N, d), from the entity's embedding and statics
        embedded = self.lag_embedding(lags)  # (N, T', K, d)
        hidden = torch.tanh(self.gate_embedding(embedded) + self.gate_query(query)[:, None, None, :])
        logits = self.gate_out(hidden).squeeze(-1)  # (N, T', K)
        if self.training:  # Gumbel-sigmoid: a relaxed Bernoulli sample of each gate
            u = torch.rand_like(logits).clamp(1e-6, 1 - 1e-6)
            gates = torch.sigmoid((logits + torch.log(u) - torch.log1p(-u)) / self.cfg.gate_temperature)
        else:
            gates = (logits > 0).to(logits.dtype)
            gates = torch.where(gates.sum(-1, keepdim=True) > 0, gates, torch.ones_like(gates))  # none open: all
        scores = torch.einsum("ntkd,nd->ntk", self.key(embedded), query) / math.sqrt(self.cfg.hidden)
        weighted = gates * torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
        attention = weighted / weighted.sum(dim=-1, keepdim=True).clamp_min(1e-12)  # renormalised over open gates
        context = torch.einsum("ntk,ntkd->ntd", attention, self.value(embedded))
        return Output(y_hat=self.backbone(context, static, entity_index), internal=attention, gates=gates)


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
                     f"methods list); choose one of {', '.join(NEURAL_METHODS)}, or grouped_ardl")
