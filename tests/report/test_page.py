"""Tests of acgate.report.page: user strings escaped in a page's HTML and Markdown."""

import dataclasses
import html

import markdown_it
import pandas as pd

from acgate.report.audit_page import write_audit_report
from acgate.report.page import Code, Page, Strong, render_html, render_markdown


def test_user_strings_are_escaped_in_html_and_markdown(tiny_grid, tmp_path):
    result, params, runs, data, _, _ = tiny_grid
    evil = "<script>alert(1)</script> region_*01*"
    excluded = pd.DataFrame([{"seed": 0, "method": "acgate", "reason": evil}])
    html_path, md_path = write_audit_report(dataclasses.replace(result, problems=[evil], excluded=excluded), params,
                                            runs, data, tmp_path)
    page = html_path.read_text()
    assert "<script>" not in page and page.count(html.escape(evil)) == 2  # the problem, the table of runs left out
    assert r"\<script\>" in md_path.read_text() and r"region\_\*01\*" in md_path.read_text()

    small = Page("t")
    small.paragraph(Strong("supported"), " entity ", Code("a<b"), " & c_d")
    small.table(pd.DataFrame({"entity": ["<img src=x>"], "kstar": [1.5]}))
    shown = render_html(small)
    assert "&lt;img src=x&gt;" in shown and "<code>a&lt;b</code> &amp; c_d" in shown
    assert '<span class="v supported">supported</span>' in shown  # a verdict as a badge
    markdown, files = render_markdown(small)
    assert "**supported** entity `a<b` & c_d" in markdown and not files


def test_strong_text_with_spaces_at_its_ends_renders_bold_under_commonmark():
    """report.md showed a literal "**features: **driver" in 9 bullets: CommonMark closes no emphasis after a space."""
    page = Page("t")
    page.bullets([[Strong("features: "), "driver"], [Strong(" audit"), " done"]])
    page.paragraph(Strong("supported"), " plainly")
    markdown, _ = render_markdown(page)
    rendered = markdown_it.MarkdownIt("commonmark").render(markdown)
    assert "**" not in rendered, rendered
    assert "<strong>features:</strong> driver" in rendered and "<strong>audit</strong> done" in rendered
