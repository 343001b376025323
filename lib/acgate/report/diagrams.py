"""Schematic diagrams of the paper, drawn with plain matplotlib.

- ``use_case()`` (Fig. fig:use_case): the applied lag-audit workflow. A panel of entities with covariates X_{i,t},
  target Y_{i,t} and proxies p_i trains AC-GATE once per seed; the entity-level lag weights omega_i and effective
  lags k*_i go through the layered audit (L0 forecast calibration, L1 degeneracy guard, L2 stratifier alignment,
  L3 ground-truth recovery), which fills the verdict matrix. The proxy-shuffle negative control feeds L2.
- ``architecture()`` (Fig. fig:ac_gate_arch): AC-GATE. p_i -> AC encoder -> z_i -> scale-invariant lag gate ->
  omega_{i,k}; the lagged inputs X_{i,t-1..t-K} are weighted by omega and projected by h into the context c_{i,t},
  which joins the entity embedding and the projected static features (when the panel has any) in a 2-layer LSTM
  whose initial state comes from z_i; a reconstruction head maps z_i back to p_hat_i (lambda_r L_recon);
  k*_i = sum_k k omega_{i,k}. The contemporaneous X_{i,t} is not an input. Every box is a part of
  ``acgate.models.networks.ACGate`` (and its ``Backbone``) or of the training loss in ``acgate.models.train``.

Coordinates are inches from the lower-left corner of the figure, so sizes and gaps read as printed. Every box label
carries the box's name as its ``gid``, so tests can check that labels stay inside their boxes and never overlap.
"""

from __future__ import annotations

from matplotlib import colors
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from acgate.audit.verdicts import VERDICTS

# Okabe-Ito hues (colour-blind safe), one per role
INPUT = "#7f7f7f"  # data and inputs
MODEL = "#0072B2"  # learned components
LAGS = "#E69F00"  # lag weights and effective lags
AUDIT = "#CC79A7"  # audit layers
CONTROL = "#D55E00"  # negative control and information-flow note
OUTPUT = "#009E73"  # predictions and verdicts
VERDICT_COLOURS = dict(zip(VERDICTS, ("#009E73", "#E69F00", "#D55E00", "#b0b0b0"), strict=True))

TITLE_SIZE = 7.5  # pt
BODY_SIZE = 6.8  # pt


def _canvas(width: float, height: float) -> tuple[Figure, Axes]:
    """A white figure whose single axes spans it with data units of inches."""
    fig = Figure(figsize=(width, height), facecolor="white")
    FigureCanvasAgg(fig)  # so fig.canvas.draw() renders without pyplot
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    return fig, ax


def _tint(colour: str, amount: float) -> tuple[float, float, float]:
    """colour blended towards white; amount 0 is white, 1 the colour itself."""
    r, g, b = colors.to_rgb(colour)
    return (1 - amount * (1 - r), 1 - amount * (1 - g), 1 - amount * (1 - b))


def _box(ax: Axes, name: str, centre: tuple[float, float], size: tuple[float, float], title: str,
         body: str = "", colour: str = MODEL, dashed: bool = False, title_on_top: bool = False) -> FancyBboxPatch:
    """A rounded box named ``name`` with a bold title and an optional body centred in the space below it; a title
    without a body is centred in the box unless title_on_top."""
    (x, y), (w, h) = centre, size
    box = FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.06",
                         facecolor=_tint(colour, 0.14), edgecolor=colour, linewidth=1.0,
                         linestyle=(0, (3, 2)) if dashed else "solid", gid=name, zorder=2)
    ax.add_patch(box)
    if not (body or title_on_top):
        ax.text(x, y, title, ha="center", va="center", fontsize=TITLE_SIZE, fontweight="bold", gid=name, zorder=3)
        return box
    top = y + h / 2 - 0.06
    ax.text(x, top, title, ha="center", va="top", fontsize=TITLE_SIZE, fontweight="bold", gid=name, zorder=3)
    if body:
        title_bottom = top - 1.3 * TITLE_SIZE / 72
        ax.text(x, (title_bottom + y - h / 2) / 2, body, ha="center", va="center", fontsize=BODY_SIZE,
                linespacing=1.45, gid=name, zorder=3)
    return box


def _centre(box: FancyBboxPatch) -> tuple[float, float]:
    return box.get_x() + box.get_width() / 2, box.get_y() + box.get_height() / 2


def _arrow(ax: Axes, start: FancyBboxPatch | tuple[float, float], end: FancyBboxPatch | tuple[float, float],
           label: str = "", label_at: tuple[float, float] | None = None, colour: str = "#404040",
           dashed: bool = False, bend: str = "arc3", style: str = "-|>") -> FancyArrowPatch:
    """An arrow from box (its centre, clipped at its edge) or point to box or point; the label sits at label_at,
    by default just above the midpoint. bend is a matplotlib connection style, style an arrow style."""
    start_box, end_box = (p if isinstance(p, FancyBboxPatch) else None for p in (start, end))
    posA = _centre(start) if start_box else start
    posB = _centre(end) if end_box else end
    arrow = FancyArrowPatch(posA, posB, patchA=start_box, patchB=end_box, arrowstyle=style, mutation_scale=8,
                            shrinkA=1.5, shrinkB=1.5, color=colour, linewidth=0.9, connectionstyle=bend,
                            linestyle=(0, (3, 2)) if dashed else "solid", zorder=1)
    ax.add_patch(arrow)
    if label:
        x, y = label_at or ((posA[0] + posB[0]) / 2, (posA[1] + posB[1]) / 2 + 0.08)
        ax.text(x, y, label, ha="center", va="center", fontsize=BODY_SIZE, color=colour, zorder=3,
                bbox=dict(boxstyle="square,pad=0.1", facecolor="white", edgecolor="none"))
    return arrow


def use_case() -> Figure:
    """The applied lag-audit workflow: panel -> AC-GATE per seed -> omega_i, k*_i -> L0-L3 audit -> verdicts."""
    fig, ax = _canvas(7.0, 3.5)
    flow_y = 1.95
    panel = _box(ax, "panel", (0.66, flow_y), (1.14, 1.1), "Entity panel",
                 "countries $i = 1,\\ldots,N$\ncovariates $X_{i,t}$\ntarget $Y_{i,t}$\nproxies $p_i$", INPUT)
    model = _box(ax, "model", (2.0, flow_y), (1.08, 0.95), "AC-GATE",
                 "trained per seed\n$r \\in \\mathcal{S}$ on a\nchronological split", MODEL)
    lags = _box(ax, "lags", (3.3, flow_y), (1.16, 0.95), "Entity-level lags",
                "$\\omega_{i,k}$, $k = 1,\\ldots,K$\n$k^\\star_i = {\\sum}_k\\, k\\,\\omega_{i,k}$", LAGS)
    shuffle = _box(ax, "shuffle", (1.93, 0.45), (2.3, 0.56), "Proxy-shuffle negative control",
                   "permute $p_i$ across entities, retrain", CONTROL, dashed=True)

    audit_x, audit_w = 5.0, 1.6
    l0 = _box(ax, "L0", (audit_x, 3.13), (audit_w, 0.68), "L0 forecast calibration",
              "MSE, MAE, $R^2$ vs persistence\nand baselines", AUDIT)
    l1 = _box(ax, "L1", (audit_x, 2.36), (audit_w, 0.56), "L1 degeneracy guard",
              "$\\mathrm{sd}_i(k^\\star_i) > \\epsilon$ per seed", AUDIT)
    l2 = _box(ax, "L2", (audit_x, 1.36), (audit_w, 0.98), "L2 stratifier alignment",
              "Spearman $|\\rho|$ of $k^\\star_i$ vs pre-\nspecified stratifiers $\\xi_i$; entity-\n"
              "label permutation test;\nFisher $p$ across seeds", AUDIT)
    l3 = _box(ax, "L3", (audit_x, 0.38), (audit_w, 0.56), "L3 ground-truth recovery",
              "MAE, $\\rho$ vs $k^{\\mathrm{true}}_i$ (synthetic only)", AUDIT)
    verdict = _box(ax, "verdict", (6.47, 1.76), (0.9, 3.32), "Verdict\nmatrix", colour=OUTPUT, title_on_top=True)
    _verdict_legend(ax, verdict)

    left = l0.get_x()
    _arrow(ax, panel, model)
    _arrow(ax, model, lags)
    _arrow(ax, (2.0, flow_y + 0.48), (left, 3.13), r"forecasts $\hat y_{i,t}$", (3.3, 3.24),
           bend="angle,angleA=90,angleB=180,rad=0")
    _arrow(ax, lags, l1)
    _arrow(ax, l1, l2, "valid seeds", (audit_x + 0.36, 1.98))
    _arrow(ax, (3.62, flow_y - 0.48), (left, 0.38), bend="angle,angleA=-90,angleB=180,rad=0")
    _arrow(ax, (0.66, flow_y - 0.55), shuffle, dashed=True, colour=CONTROL,
           bend="angle,angleA=-90,angleB=180,rad=0")
    _arrow(ax, (2.9, 0.73), (left, 1.1), r"shuffled $k^\star_i$", (3.22, 1.2), colour=CONTROL,
           dashed=True, bend="angle,angleA=90,angleB=180,rad=0")
    for layer in (l0, l1, l2, l3):
        y = _centre(layer)[1]
        _arrow(ax, (left + audit_w, y), (verdict.get_x(), y))
    return fig


def _verdict_legend(ax: Axes, verdict: FancyBboxPatch) -> None:
    """One coloured chip per verdict, stacked under the verdict box's title."""
    x = verdict.get_x() + 0.1
    for n, name in enumerate(VERDICTS):
        y = verdict.get_y() + verdict.get_height() - 0.85 - 0.62 * n
        ax.add_patch(Rectangle((x, y - 0.07), 0.14, 0.14, facecolor=VERDICT_COLOURS[name], edgecolor="none",
                               zorder=3))
        ax.text(x + 0.2, y, name.replace(" ", "\n"), ha="left", va="center", fontsize=BODY_SIZE,
                linespacing=1.1, gid="verdict", zorder=3)


def architecture() -> Figure:
    """AC-GATE: proxies condition a lag gate whose weights build the lag context of a 2-layer LSTM."""
    fig, ax = _canvas(7.0, 3.95)
    main_y, gate_y, cond_y, recon_y, extra_y = 1.08, 1.93, 2.76, 3.6, 0.3
    score_x = 2.62  # z_i, the lag gate and the weighted sum share one column
    proxies = _box(ax, "proxies", (0.5, cond_y), (0.8, 0.5), "proxies", "$p_i \\in \\mathbb{R}^M$", INPUT)
    encoder = _box(ax, "encoder", (1.58, cond_y), (0.95, 0.5), "AC encoder", "$z_i = f_\\phi(p_i)$", MODEL)
    score = _box(ax, "score", (score_x, cond_y), (0.5, 0.4), "$z_i$", colour=MODEL)
    recon = _box(ax, "recon", (1.65, recon_y), (1.4, 0.5), "reconstruction head",
                 "$\\hat p_i = g_\\psi(z_i)$", MODEL)
    proxies_hat = _box(ax, "proxies_hat", (0.5, recon_y), (0.55, 0.4), "$\\hat p_i$", colour=INPUT)
    _box(ax, "objective", (5.8, recon_y), (1.8, 0.5), "training objective",
         "$\\mathcal{L} = \\mathcal{L}_{\\mathrm{task}} + \\lambda_r\\,\\mathcal{L}_{\\mathrm{recon}}$", INPUT)
    gate = _box(ax, "gate", (score_x, gate_y), (1.85, 0.6), "scale-invariant lag gate",
                "softmax over $k = 1,\\ldots,K$ of\n$(g_\\theta(z_i)_k - \\lambda\\, k/K)\\,/\\,\\tau$", LAGS)
    effective = _box(ax, "effective", (4.5, gate_y), (1.3, 0.6), "effective lag",
                     "$k^\\star_i = {\\sum}_k\\, k\\,\\omega_{i,k}$", LAGS)

    lagged = _box(ax, "lagged", (0.7, main_y), (1.1, 0.6), "lagged inputs",
                  "$X_{i,t-k}$, $k = 1,\\ldots,K$", INPUT)
    weighted = _box(ax, "weighted", (score_x, main_y), (1.2, 0.6), "weighted sum",
                    "${\\sum}_k\\, \\omega_{i,k} X_{i,t-k}$", LAGS)
    project = _box(ax, "project", (3.72, main_y), (0.45, 0.4), "$h(\\cdot)$", colour=MODEL)
    concat = _box(ax, "concat", (4.53, main_y), (0.58, 0.4), "concat", colour=INPUT)
    lstm = _box(ax, "lstm", (5.6, main_y), (1.0, 0.6), "2-layer LSTM", "state from $z_i$", MODEL)
    head = _box(ax, "head", (6.62, main_y), (0.56, 0.6), "head", "$\\hat y_{i,t}$", OUTPUT)

    extras = [_box(ax, name, (x, extra_y), (1.2, 0.46), title, body, INPUT)
              for name, x, title, body in (("embedding", 3.85, "entity embedding", "$e_i$"),
                                           ("static", 5.21, "static features", "$W_s s_i$ (if any)"))]
    _box(ax, "no_shortcut", (1.2, extra_y), (2.1, 0.46), "$X_{i,t}$ is not an input",
         "(no contemporaneous shortcut)", CONTROL, dashed=True)

    _arrow(ax, proxies, encoder)
    _arrow(ax, encoder, score)
    _arrow(ax, (score_x, cond_y + 0.2), recon, bend="angle,angleA=90,angleB=0,rad=0")
    _arrow(ax, recon, proxies_hat)
    _arrow(ax, proxies_hat, proxies, "$\\lambda_r\\,\\mathcal{L}_{\\mathrm{recon}}$",
           (0.84, (cond_y + recon_y) / 2), colour=CONTROL, dashed=True, style="<|-|>")
    _arrow(ax, score, gate)
    _arrow(ax, gate, weighted, "$\\omega_{i,k}$", (score_x + 0.22, (gate_y + main_y) / 2))
    _arrow(ax, gate, effective, "$\\omega_{i,k}$", (3.7, gate_y + 0.12))
    _arrow(ax, lagged, weighted)
    _arrow(ax, weighted, project)
    _arrow(ax, project, concat, "$c_{i,t}$", (4.09, main_y + 0.14))
    _arrow(ax, concat, lstm)
    _arrow(ax, lstm, head)
    _arrow(ax, (score_x + 0.25, cond_y), (5.6, main_y + 0.3), "initial state $(h_0, c_0)$", (4.3, cond_y + 0.1),
           bend="angle,angleA=0,angleB=90,rad=0")
    for extra in extras:
        _arrow(ax, extra, concat)
    return fig
