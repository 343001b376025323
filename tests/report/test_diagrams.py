import matplotlib

matplotlib.use("Agg")

import itertools  # noqa: E402

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

from acgate.report import diagrams  # noqa: E402

KEY_LABELS = {
    diagrams.use_case: ["L0", "L1", "L2", "L3", "verdict", "AC-GATE", "proxy-shuffle", "supported", "ruled out"],
    diagrams.architecture: ["LSTM", "lag gate", "encoder", "reconstruction head", "effective lag",
                            "is not an input", "embedding"],
}
DIAGRAMS = list(KEY_LABELS)


def rendered(draw):
    """The figure drawn once, its non-empty text artists and their extents in display pixels."""
    fig = draw()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for ax in fig.axes for t in ax.texts if t.get_visible() and t.get_text().strip()]
    return fig, renderer, texts, [t.get_window_extent(renderer) for t in texts]


@pytest.mark.parametrize("draw", DIAGRAMS, ids=lambda f: f.__name__)
def test_diagram_is_a_figure_with_its_key_labels(draw):
    fig, _, texts, _ = rendered(draw)
    assert isinstance(fig, Figure)
    content = " ".join(" ".join(t.get_text().split()) for t in texts).lower()  # labels may wrap
    missing = [label for label in KEY_LABELS[draw] if label.lower() not in content]
    assert not missing, f"{draw.__name__} lacks the labels {missing}"


@pytest.mark.parametrize("draw", DIAGRAMS, ids=lambda f: f.__name__)
def test_no_two_labels_overlap(draw):
    _, _, texts, extents = rendered(draw)
    assert len(texts) > 10
    clashes = [(a.get_text(), b.get_text())
               for (a, box_a), (b, box_b) in itertools.combinations(zip(texts, extents, strict=True), 2)
               if box_a.padded(-0.5).overlaps(box_b.padded(-0.5))]
    assert not clashes, f"overlapping labels in {draw.__name__}: {clashes}"


@pytest.mark.parametrize("draw", DIAGRAMS, ids=lambda f: f.__name__)
def test_box_labels_stay_inside_their_boxes_and_the_figure(draw):
    fig, renderer, texts, extents = rendered(draw)
    boxes = {p.get_gid(): p.get_window_extent(renderer) for ax in fig.axes for p in ax.patches
             if isinstance(p, FancyBboxPatch) and p.get_gid()}
    labelled = [(t, e) for t, e in zip(texts, extents, strict=True) if t.get_gid()]
    assert len(labelled) >= len(boxes) > 5
    for text, extent in labelled:
        box = boxes[text.get_gid()]
        assert box.padded(-1).contains(extent.x0, extent.y0) and box.padded(-1).contains(extent.x1, extent.y1), \
            f"label {text.get_text()!r} spills out of box {text.get_gid()!r}"
    page = fig.bbox
    for text, extent in zip(texts, extents, strict=True):
        assert page.contains(extent.x0, extent.y0) and page.contains(extent.x1, extent.y1), \
            f"label {text.get_text()!r} leaves the figure"


@pytest.mark.parametrize("draw", DIAGRAMS, ids=lambda f: f.__name__)
def test_diagram_saves_to_png_and_pdf(draw, tmp_path):
    fig = draw()
    for suffix, magic in ((".png", b"\x89PNG"), (".pdf", b"%PDF")):
        path = tmp_path / f"{draw.__name__}{suffix}"
        fig.savefig(path, dpi=150)
        assert path.read_bytes()[:4] == magic


def test_architecture_shows_only_what_the_model_has():
    _, _, texts, _ = rendered(diagrams.architecture)
    content = " ".join(" ".join(t.get_text().split()) for t in texts).lower()
    assert "macro" not in content  # acgate.models.networks has no macro controls
    assert "static features" in content and "entity embedding" in content
