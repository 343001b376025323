"""A page of headings, paragraphs, lists, tables, figures and boxes, rendered as one self-contained HTML document
(figures embedded as base64 PNG, styles inline, no script) and as Markdown (figures as PNG files beside it), so that
both say the same. Text is plain and escaped by the renderers; a verdict (supported, not certified, ruled out, not
claimed) in bold, or opening a cell of a verdict table, shows as a coloured badge in HTML. The audit report
(:mod:`acgate.report.audit_page`) is written with it.

    page = Page("title"); page.heading(1, "title"); page.paragraph("text ", Strong("supported"))
    html_text = render_html(page); markdown, png_files = render_markdown(page)
"""

from __future__ import annotations

import base64
import html
import io
import re
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import pandas as pd

from acgate.audit.verdicts import VERDICTS
from acgate.report import render

DPI = 130  # a page-wide figure (7 in) is about 900 pixels wide
FIGURES_FOLDER = "report_figures"  # the Markdown page's figures, beside it


@dataclass(frozen=True)
class Strong:
    text: str


@dataclass(frozen=True)
class Code:
    text: str


@dataclass(frozen=True)
class Link:
    """A link; one within the page (``href`` "#<id>") is plain text in Markdown, whose anchors are the headings'."""

    text: str
    href: str


@dataclass
class Page:
    """A page of headings, paragraphs, lists, tables, figures and boxes. Text is plain (a ``str``, or a
    :class:`Strong`, :class:`Code` or :class:`Link` run); the renderers escape it."""

    title: str
    blocks: list = field(default_factory=list)

    def heading(self, level: int, text: str, anchor: str = "") -> None:
        self.blocks.append(("heading", level, text, anchor))

    def paragraph(self, *runs, kind: str = "") -> None:
        self.blocks.append(("paragraph", list(runs), kind))

    def bullets(self, items: list, label: str = "") -> None:
        """``items``: each a list of runs (or one run). With ``label`` ("W"), item n opens with "W<n>" and has the
        anchor "w<n>", for a :class:`Link` to "#w<n>"."""
        self.blocks.append(("bullets", [i if isinstance(i, list) else [i] for i in items], label))

    def table(self, frame: pd.DataFrame, verdicts: bool = False) -> None:
        """A table as :func:`acgate.report.render.display` shows it; with ``verdicts``, cells of text as they are, each
        verdict that opens one as a coloured badge (HTML)."""
        self.blocks.append(("table", frame, verdicts))

    def figure(self, name: str, fig: plt.Figure, caption: str) -> None:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        self.blocks.append(("figure", name, buffer.getvalue(), caption))

    def box(self, kind: str, title: str) -> None:
        """Open a box (``kind``: problem, warning or note) that holds the blocks up to :meth:`end_box`."""
        self.blocks.append(("box", kind, title))

    def end_box(self) -> None:
        self.blocks.append(("end_box",))

    def preformatted(self, summary: str, text: str) -> None:
        """Text kept as written (the parameters), folded under ``summary``."""
        self.blocks.append(("pre", summary, text))


def _html_runs(runs: list) -> str:
    out = []
    for run in runs:
        if isinstance(run, Strong):
            out.append(f"<strong>{html.escape(run.text)}</strong>")
        elif isinstance(run, Code):
            out.append(f"<code>{html.escape(run.text)}</code>")
        elif isinstance(run, Link):
            out.append(f'<a href="{html.escape(run.href)}">{html.escape(run.text)}</a>')
        else:
            out.append(html.escape(str(run)))
    return "".join(out)


def _badge(verdict: str) -> str:
    return f'<span class="v {verdict.replace(" ", "-")}">{html.escape(verdict)}</span>'


def _verdict_cell(text: str) -> str:
    """A cell of the verdicts at a glance: the verdict it opens with as a badge, the rest small."""
    verdict = next((v for v in VERDICTS if text.startswith(v)), None)
    if verdict is None:
        return html.escape(text)
    return _badge(verdict) + (f' <span class="small">{html.escape(text[len(verdict):].strip())}</span>'
                              if text[len(verdict):].strip() else "")


STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:62em;margin:1.5em auto;padding:0 1em;
color:#222;line-height:1.45;overflow-wrap:break-word}
h1{font-size:1.6em;margin-bottom:0.2em}h2{border-bottom:1px solid #ccc;padding-bottom:0.15em;margin-top:1.6em}
h3{margin-bottom:0.3em}
table{border-collapse:collapse;font-size:0.88em;margin:0.5em 0;display:block;overflow-x:auto;max-width:100%}
td,th{padding:2px 10px;text-align:left;border-bottom:1px solid #ddd;vertical-align:top}th{background:#f4f4f4}
.box{border-left:5px solid;padding:0.4em 1em;margin:1em 0;border-radius:3px}
.box.problem{border-color:#c0392b;background:#fdecea}.box.warning{border-color:#d68910;background:#fef5e7}
.box.note{border-color:#888;background:#f6f6f6}.box h3{margin-top:0.3em}
.v{display:inline-block;padding:0 0.45em;border-radius:3px;font-weight:600;white-space:nowrap}
.v.supported{background:#d5f5e3;color:#145a32}.v.not-certified{background:#eaecee;color:#34495e}
.v.ruled-out{background:#fadbd8;color:#78281f}.v.not-claimed{background:#fff;color:#777;border:1px solid #ccc}
.small{font-size:0.88em;color:#444}.evidence{font-size:0.88em;color:#333;margin:0.2em 0 0.2em 1.2em}
figure{margin:1em 0}figure img{max-width:100%;box-sizing:border-box;border:1px solid #eee}
figcaption{font-size:0.9em;color:#333}
pre{background:#f6f6f6;padding:0.6em;overflow-x:auto;font-size:0.82em}details{margin:0.4em 0}
summary{cursor:pointer;color:#1a5276}ul.labelled{list-style:none;padding-left:0.5em}ul.labelled li{margin:0.25em 0}
@media (max-width:32em){body{padding:0 0.5em}td,th{padding:2px 4px}ul{padding-left:1.2em}}
"""


def render_html(page: Page) -> str:
    """The page as one self-contained HTML document: figures as base64 PNG, styles inline, no script."""
    parts = []
    for block in page.blocks:
        kind = block[0]
        if kind == "heading":
            _, level, text, anchor = block
            parts.append(f"<h{level}{f' id={html.escape(anchor)!r}' if anchor else ''}>{html.escape(text)}"
                         f"</h{level}>")
        elif kind == "paragraph":
            _, runs, style = block
            verdict = next((r.text for r in runs if isinstance(r, Strong) and r.text in VERDICTS), None)
            body = _html_runs(runs)
            if verdict:  # a verdict's word as a coloured badge
                body = body.replace(f"<strong>{html.escape(verdict)}</strong>", _badge(verdict), 1)
            parts.append(f"<p{f' class={style!r}' if style else ''}>{body}</p>")
        elif kind == "bullets":
            _, items, label = block
            rows = "".join(f"<li id='{label.lower()}{n}'><strong>{label}{n}</strong> {_html_runs(item)}</li>"
                           if label else f"<li>{_html_runs(item)}</li>" for n, item in enumerate(items, start=1))
            parts.append(f"<ul{' class=labelled' if label else ''}>{rows}</ul>")
        elif kind == "table" and block[2]:
            _, frame, _ = block
            head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
            rows = "".join("<tr>" + "".join(f"<td>{_verdict_cell(str(v))}</td>" for v in row) + "</tr>"
                           for row in frame.itertuples(index=False))
            parts.append(f'<table class="verdicts"><tr>{head}</tr>{rows}</table>')
        elif kind == "table":
            shown = render.display(block[1]).rename(columns=render.header)
            parts.append(shown.to_html(index=False, escape=True, border=0, na_rep=""))
        elif kind == "figure":
            _, name, png, caption = block
            data = base64.b64encode(png).decode("ascii")
            parts.append(f'<figure id="figure-{html.escape(name)}"><img alt="{html.escape(name)}" '
                         f'src="data:image/png;base64,{data}"><figcaption>{html.escape(caption)}</figcaption>'
                         "</figure>")
        elif kind == "box":
            parts.append(f'<div class="box {block[1]}"><h3>{html.escape(block[2])}</h3>')
        elif kind == "end_box":
            parts.append("</div>")
        elif kind == "pre":
            parts.append(f"<details><summary>{html.escape(block[1])}</summary><pre>{html.escape(block[2])}</pre>"
                         "</details>")
    return (f"<!doctype html>\n<html lang='en'><head><meta charset='utf-8'><title>{html.escape(page.title)}</title>"
            f"<meta name='viewport' content='width=device-width,initial-scale=1'><style>{STYLE}</style></head>\n"
            "<body>\n" + "\n".join(parts) + "\n</body></html>\n")


def _md_escape(text: str) -> str:
    """Plain text as Markdown: the characters that would format it escaped (an underscore only where it could start
    or end emphasis, so ids such as mean_hc stay as written)."""
    text = re.sub(r"([\\`*\[\]<>|])", r"\\\1", str(text))
    return re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", text)


def _md_runs(runs: list) -> str:
    out = []
    for run in runs:
        if isinstance(run, Strong):  # spaces inside the markers would leave them literal under CommonMark
            text = str(run.text)
            core = text.strip()
            lead, trail = text[:len(text) - len(text.lstrip())], text[len(text.rstrip()):]
            out.append(f"{lead}**{_md_escape(core)}**{trail}" if core else text)
        elif isinstance(run, Code):
            out.append(f"`{run.text.replace('`', '')}`")
        elif isinstance(run, Link):
            out.append(_md_escape(run.text) if run.href.startswith("#") else f"[{_md_escape(run.text)}]({run.href})")
        else:
            out.append(_md_escape(run))
    return "".join(out)


def render_markdown(page: Page, figures_folder: str = FIGURES_FOLDER) -> tuple[str, dict[str, bytes]]:
    """The page as Markdown (a box as a block quote), and the PNG files it links to (path relative to the page:
    bytes)."""
    parts, outside, files = [], [], {}
    for block in page.blocks:
        kind = block[0]
        if kind == "heading":
            parts.append(f"{'#' * block[1]} {_md_escape(block[2])}")
        elif kind == "paragraph":
            parts.append(_md_runs(block[1]))
        elif kind == "bullets":
            _, items, label = block
            parts.append("\n".join(f"- {f'**{label}{n}** ' if label else ''}{_md_runs(item)}"
                                   for n, item in enumerate(items, start=1)))
        elif kind == "table" and block[2]:
            parts.append(block[1].map(_md_escape).to_markdown(index=False))
        elif kind == "table":
            parts.append(render.markdown_table(block[1], "").strip())
        elif kind == "figure":
            _, name, png, caption = block
            path = f"{figures_folder}/{name}.png"
            files[path] = png
            parts.append(f"![{_md_escape(name)}]({path})\n\n*{_md_escape(caption)}*")
        elif kind == "box":  # what follows goes into the box, until end_box
            outside, parts = parts, [f"**{_md_escape(block[2])}**"]
        elif kind == "end_box":
            quoted = "\n".join(f"> {line}".rstrip() for line in "\n\n".join(parts).split("\n"))
            parts = [*outside, quoted]
        elif kind == "pre":
            parts.append(f"{_md_escape(block[1])}:\n\n```yaml\n{block[2].rstrip()}\n```")
    return "\n\n".join(parts) + "\n", files
