"""AC-GATE and its structural ablations (paper section IV).

Pipeline: proxies p_i -> score z_i -> lag weights omega_i -> lag context c_{i,t} -> y_hat_{i,t}.

Input contract, shared by every model: the prediction for target step t (t >= K) sees only
X_{t-1}, ..., X_{t-K} (``lag_windows``), never the contemporaneous X_t.

The four methods are one module with a ``method`` switch; every variant builds the same parameters
in the same order, so a seed gives every method the same initial weights:

- ``acgate``: the full model;
- ``no_ac_encoder``: z fixed to 0 for every entity, so omega is one learned distribution shared by all;
- ``uniform_lag``: omega fixed at 1/K;
- ``no_recon_reg``: lambda_r = 0 (applied by the training loss, see ``recon_weight``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from acgate.config import METHODS, ModelConfig


def lag_windows(x: Tensor, max_lag: int) -> Tensor:
    """Lagged inputs (N, T-K, K, F) from x (N, T, F): out[:, j, k-1] = x[:, K+j-k], lags k = 1..K
    of target step t = K+j. The contemporaneous x[:, K+j] is never included."""
    windows = x.unfold(1, max_lag, 1)[:, :-1]  # (N, T-K, F, K): x[:, j .. j+K-1]
    return windows.flip(-1).transpose(-1, -2)


@dataclass
class Output:
    y_hat: Tensor  # (N, T-K) predictions for target steps K..T-1
    omega: Tensor  # (N, K) lag weights
    z: Tensor  # (N, 1) conditioning score
    p_hat: Tensor  # (N, M) reconstructed proxies


def _mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, n_out))


class ACGate(nn.Module):
    def __init__(self, cfg: ModelConfig, method: str, n_entities: int, n_features: int, n_proxies: int,
                 n_static: int):
        super().__init__()
        if method not in METHODS:
            raise ValueError(f"unknown method '{method}'; choose one of {', '.join(METHODS)}")
        self.cfg, self.method = cfg, method
        d, K = cfg.hidden, cfg.max_lag
        self.encoder = _mlp(n_proxies, cfg.encoder_hidden, 1)  # f_phi: p_i -> z_i
        self.recon_head = _mlp(1, cfg.encoder_hidden, n_proxies)  # g_psi: z_i -> p_hat_i
        self.gate = _mlp(1, cfg.encoder_hidden, K)  # g_theta: z_i -> K lag logits
        self.lag_proj = nn.Linear(n_features, d)  # h: one step's features -> R^d
        self.entity_embedding = nn.Embedding(n_entities, cfg.entity_embedding) if cfg.entity_embedding else None
        self.static_proj = nn.Linear(n_static, cfg.static_embedding) if n_static else None
        self.init_state = nn.Linear(1, 2 * cfg.lstm_layers * d)  # z -> (h0, c0) of every layer
        n_in = d + cfg.entity_embedding + (cfg.static_embedding if n_static else 0)
        self.lstm = nn.LSTM(n_in, d, cfg.lstm_layers, batch_first=True,
                            dropout=cfg.dropout if cfg.lstm_layers > 1 else 0.0)
        self.head = nn.Linear(d, 1)
        self.register_buffer("position", torch.arange(1, K + 1, dtype=torch.float32) / K)  # k/K

    @property
    def recon_weight(self) -> float:
        return 0.0 if self.method == "no_recon_reg" else self.cfg.recon_weight

    def score(self, proxies: Tensor) -> Tensor:
        """z (N, 1) from proxies (N, M); the constant 0 under no_ac_encoder."""
        z = self.encoder(proxies)
        return torch.zeros_like(z) if self.method == "no_ac_encoder" else z

    def lag_weights(self, z: Tensor) -> Tensor:
        """omega (N, K) = softmax_k((g_theta(z)_k - lambda k/K) / tau); 1/K under uniform_lag."""
        logits = self.gate(z)
        if self.method == "uniform_lag":
            return torch.full_like(logits, 1.0 / self.cfg.max_lag)
        return torch.softmax((logits - self.cfg.position_penalty * self.position) / self.cfg.temperature, dim=-1)

    def forward(self, x: Tensor, proxies: Tensor, static: Tensor, entity_index: Tensor) -> Output:
        """x (N, T, F), proxies (N, M), static (N, D), entity_index (N,) -> predictions for steps K..T-1."""
        n = x.shape[0]
        z = self.score(proxies)
        omega = self.lag_weights(z)
        p_hat = self.recon_head(z.detach() if self.cfg.recon_detach else z)
        # h is affine, so sum_k omega_k h(x_{t-k}) = h(sum_k omega_k x_{t-k}): aggregate first, project once
        lag_mix = torch.einsum("ntkf,nk->ntf", lag_windows(x, self.cfg.max_lag), omega)
        context = self.lag_proj(lag_mix)  # c: (N, T-K, d)
        steps = context.shape[1]
        parts = [context]
        if self.entity_embedding is not None:
            parts.append(self.entity_embedding(entity_index)[:, None, :].expand(n, steps, -1))
        if self.static_proj is not None:
            parts.append(self.static_proj(static)[:, None, :].expand(n, steps, -1))
        h0, c0 = torch.tanh(self.init_state(z)).view(n, 2, self.cfg.lstm_layers, -1).permute(1, 2, 0, 3)
        hidden, _ = self.lstm(torch.cat(parts, dim=-1), (h0.contiguous(), c0.contiguous()))
        return Output(y_hat=self.head(hidden).squeeze(-1), omega=omega, z=z, p_hat=p_hat)
