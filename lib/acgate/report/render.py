"""Turning a table (a DataFrame of numbers) into what readers see: :func:`display` formats each column (a
``<x>_mean`` / ``<x>_sd`` pair as one "mean (sd)" cell, p-values to two digits, the paper's method names and
readable variable names from :func:`readable`, headers from :func:`header`), :func:`latex_table` lays it out for
a page (split into parts when too wide, a longtable when too long), :func:`markdown_table` writes it as Markdown,
and :func:`write_table` writes the CSV, LaTeX and Markdown files.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from acgate.runs import atomic_write, write_csv
from acgate.statistics import format_p

LABELS = {"acgate": "AC-GATE", "no_recon_reg": "No-Recon-Reg", "no_ac_encoder": "No-AC-Encoder",
          "uniform_lag": "Uniform-Lag", "plain_lstm": "Plain LSTM", "tft": "TFT", "ganet": "GA-Net",
          "grouped_ardl": "Grouped ARDL", "persistence": "persistence", "shuffled_proxies": "Shuffled-Proxy Gate",
          "moderated_dl": "Moderated DL", "shared_dl": "Shared-Lag DL", "shuffled_dl": "Shuffled-Proxy DL",
          "two_stage_dl": "Two-Stage DL", "proxy_shared_gate": "Proxy Shared-Gate",
          "proxy_scaled_dl": "Proxy-Scaled DL", "moderated_dl_gls": "Moderated DL (GLS fit)", "neural_dl": "Neural DL"}
P_COLUMNS = ("p", "fisher_p", "pooled_p", "fisher_p_min", "fisher_p_max", "p_seed_better", "p_entity_better",
             "p_neural_better", "p_neural_worse",
             "holm_better", "holm_worse", "pooled_lag_free_p", "p_holm", "p_value")
RESAMPLED_P = {"pooled_p": "permutations", "pooled_lag_free_p": "permutations", "p_entity_better": "bootstrap"}
# counts, printed as whole numbers whatever their dtype; also parameters_<domain> and n_<x>
COUNT_COLUMNS = ("W", "entities", "seeds", "seeds_tested", "pairs", "nonzero_pairs", "permutations", "bootstrap",
                 "runs", "replicates", "false_supported", "false_replicates")
UNDEFINED = "undefined"  # Spearman of a constant k* (or truth)

# readable names of the variables the paper's panels summarise; any other name reads with its underscores as spaces
VARIABLES = {"hc": "human capital", "log_gdp_per_worker": "log GDP per worker", "rl": "rule of law",
             "log_capital_per_worker": "log capital per worker", "ge": "government effectiveness",
             "rq": "regulatory quality", "log_gdp_per_capita": "log GDP per capita", "latent_z": "latent moderator z",
             "log_emp_hours": "log hours worked", "log_emp": "log employment", "log_rgdpna": "log real GDP",
             "log_ck": "log capital stock"}
SUMMARIES = {"mean": "mean", "trend": "trend of", "first": "first", "last": "last"}  # prep's prefixes
# the units of those variables, for a figure's axis (PWT 11.0's variable labels: rgdpna and rnna in millions of 2021
# US$, emp in millions of persons; OWID's gdp in international-$ at 2011 prices; WGI estimates run from about -2.5
# to 2.5); a mean, first or last value keeps its variable's unit
UNITS = {"hc": "PWT index", "log_gdp_per_worker": "log 2021 US$", "log_capital_per_worker": "log 2021 US$",
         "rl": "WGI estimate", "ge": "WGI estimate", "rq": "WGI estimate", "log_gdp_per_capita": "log 2011 int. $"}
HEADERS = {  # readable column headers of the Markdown and LaTeX tables (the CSV keeps the column names)
    "kstar_kind": "k* kind", "test_mse": "test MSE", "mae_lag_centre": "k* MAE (lag centre)",
    "spearman_lag_centre": "Spearman (lag centre)", "mae_dgp_mean_lag": "k* MAE (DGP mean lag)",
    "spearman_dgp_mean_lag": "Spearman (DGP mean lag)", "kstar_sd": "sd(k*)", "median_seconds": "median seconds",
    "test_r2_by_time": "test R² (per year)", "test_r2_pooled": "test R² (pooled)", "omega_entropy": "ω entropy",
    "max_abs_spearman_with_proxy": "max |ρ| with a proxy", "mean_abs_rho": "mean |ρ|", "median_rho": "median ρ",
    "share_p_below_alpha": "share p < α", "fisher_p": "Fisher p", "fisher_p_min": "Fisher p min",
    "fisher_p_max": "Fisher p max", "pooled_rho": "pooled ρ", "proxy_r_joint": "proxy R (joint)",
    "pooled_lag_free_p": "lag-free p", "p_holm": "Holm p", "n_pairs": "pairs", "mean_abs_rho_drop": "drop in mean |ρ|",
    "p_seed_better": "p over seeds", "p_entity_better": "p over entities", "holm_better": "Holm p better",
    "holm_worse": "Holm p worse", "kstar_seed_agreement": "seed agreement of k*", "bootstrap": "bootstrap draws",
    "ac_encoder": "AC encoder", "ci_low": "95 % CI low", "ci_high": "95 % CI high",
    "mean_loss_diff": "mean loss difference", "mean_diff": "mean difference", "median_diff": "median difference",
}


def readable(name: str) -> str:
    """A reader's label for a method, domain, stratifier or proxy id: the paper's method names, known variables
    from :data:`VARIABLES` ("mean_hc": "mean human capital"), any other id with its underscores as spaces, so a
    user's own names read as written."""
    if name in LABELS:
        return LABELS[name]
    if name.endswith("_proxy_shuffle"):
        return f"{readable(name.removesuffix('_proxy_shuffle'))} (proxy shuffle)"
    summary, _, column = name.partition("_")
    if summary in SUMMARIES and column:
        return f"{SUMMARIES[summary]} {VARIABLES.get(column, column.replace('_', ' '))}"
    return VARIABLES.get(name, name.replace("_", " "))


def with_unit(name: str) -> str:
    """:func:`readable` with the variable's unit from :data:`UNITS` ("mean human capital (PWT index)"); a name
    whose unit is not known here (a user's own, a trend) reads as :func:`readable` alone."""
    summary, _, column = name.partition("_")
    known = UNITS.get(column) if summary in ("mean", "first", "last") else UNITS.get(name)
    return f"{readable(name)} ({known})" if known else readable(name)


def header(column: str) -> str:
    """A table column's readable header (:data:`HEADERS`; "parameters_<domain>": "parameters, <domain>")."""
    if column.startswith("parameters_"):
        return f"parameters, {readable(column.removeprefix('parameters_'))}"
    return HEADERS.get(column, column.replace("_", " "))


def is_count(column: str) -> bool:
    """Whether a column holds counts, printed as whole numbers even where a NaN made the column float."""
    return column in COUNT_COLUMNS or column.startswith(("parameters_", "n_"))


def _format(value, column: str) -> str:
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return UNDEFINED if "spearman" in column else ""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(value)
    if is_count(column):  # 58, not 58.000; a W of tied ranks keeps its half: 3.5
        return str(int(value)) if float(value).is_integer() else f"{value:.1f}"
    if column in P_COLUMNS or column.endswith("_p"):
        return format_p(value)
    if column == "value":  # a headline number of any size (a loss difference, a share, a correlation)
        return f"{value:.3g}"
    text = f"{value:.4f}" if ("mse" in column or "loss" in column) else f"{value:.3f}"
    return text.removeprefix("-") if float(text) == 0 else text  # never "-0.000"


def display(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as text for readers: each ``<x>_mean`` / ``<x>_sd`` pair becomes one "mean (sd)" column
    ``<x>``, methods get the paper's names and variables readable ones (:func:`readable`), numbers a fixed precision
    per column (p-values two significant digits; never a negative zero)."""
    out = pd.DataFrame(index=frame.index)
    for column in frame.columns:
        if column.endswith("_sd") and column[:-3] + "_mean" in frame:
            continue
        if column.endswith("_mean") and (sd := column[:-5] + "_sd") in frame:
            name = column[:-5]
            out[name] = [_format(m, name) + ("" if isinstance(s, float) and math.isnan(s) else f" ({_format(s, name)})")
                         if not (isinstance(m, float) and math.isnan(m)) else _format(m, name)
                         for m, s in zip(frame[column], frame[sd], strict=True)]
        elif column in ("method", "comparator"):
            out[column] = frame[column].map(lambda m: LABELS.get(m, m))
        elif column in ("stratifier", "closest_proxy", "domain"):
            out[column] = frame[column].map(readable)
        elif column in ("paper", "ours", "difference") and "quantity" in frame:  # reproduction: as its quantity
            out[column] = [_format(v, q) for v, q in zip(frame[column], frame.quantity, strict=True)]
        elif (draws := RESAMPLED_P.get(column)) in frame:  # a resampling p at its floor prints as "<= 1/(B+1)"
            out[column] = [format_p(v, int(b)) for v, b in zip(frame[column], frame[draws], strict=True)]
        else:
            out[column] = [_format(v, column) for v in frame[column]]
    return out


TEXT_WIDTH = 6.5  # inches: LaTeX tables are laid out for a page of this text width, in \small
# inches per character in \small (Computer Modern, 9 pt, T1), measured with \settowidth: a-z 4.54 pt a letter, 0-9
# 4.62, A-J 6.16, the underscore 7.19 (the tables' ids are full of them); "other" (lower case, spaces, punctuation)
# a little under a lower-case letter
GLYPH = {"upper": 0.085, "digit": 0.064, "underscore": 0.1, "other": 0.06}
PAD = 8 / 72  # inches: the two \tabcolsep of 4 pt around each column
WRAP = 1.6, 0.9  # inches: text wider than the first wraps (a p{} column), never narrower than the second
# leading columns like these name a row, and repeat in each part of a table split for width
KEYS = ("domain", "reference", "method", "comparator", "stratifier", "run", "scenario", "control", "rule", "layer",
        "paper_table", "row")
TEX_CHARS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "{": r"\{", "}": r"\}",
             "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "_": r"\_\allowbreak{}"}
TEX_SYMBOLS = (("<=", r"$\leq$"), ("|ρ|", r"$|\rho|$"), ("ρ", r"$\rho$"), ("α", r"$\alpha$"), ("ω", r"$\omega$"),
               ("R²", "$R^2$"), ("k*", r"$k^\star$"), ("<", "$<$"), (">", "$>$"))


def _tex(text: str) -> str:
    """Plain text as LaTeX: special characters escaped (underscores may break a line), the tables' symbols in
    math mode."""
    out = "".join(TEX_CHARS.get(c, c) for c in text)
    for plain, tex in TEX_SYMBOLS:
        out = out.replace(plain, tex)
    return out


def _is_number(frame: pd.DataFrame, column: str) -> bool:
    """Whether a column of :func:`display` shows numbers (right-aligned): a numeric column of ``frame`` that is
    not yes/no, or a "mean (sd)" pair."""
    return column not in frame or (pd.api.types.is_numeric_dtype(frame[column])
                                   and not pd.api.types.is_bool_dtype(frame[column]))


def _header_lines(column: str) -> list[str]:
    return textwrap.wrap(header(column), 12, break_long_words=False) or [""]


def _printed(text: str) -> float:
    """The estimated printed width of ``text`` in inches (:data:`GLYPH`)."""
    return sum(GLYPH["upper" if c.isupper() else "digit" if c.isdigit() else "underscore" if c == "_" else "other"]
               for c in text)


def _column_specs(frame: pd.DataFrame, shown: pd.DataFrame) -> dict[str, tuple[str, float]]:
    """Per column of ``shown``: its LaTeX column type and its printed width in inches (without padding), estimated
    from its longest line. Numbers align right, text left; text wider than ``WRAP[0]`` wraps in a p{} column, whose
    width is what the page leaves (at least ``WRAP[1]``; at most ``WRAP[0]`` if the table is split anyway)."""
    natural = {c: max(map(_printed, [*_header_lines(c), *shown[c]])) for c in shown}
    numeric = {c: _is_number(frame, c) for c in shown}
    wrapped = [c for c in shown if not numeric[c] and natural[c] > WRAP[0]]
    share = (TEXT_WIDTH - sum(natural[c] + PAD for c in shown if c not in wrapped) - PAD * len(wrapped)) / max(
        len(wrapped), 1)
    width = math.floor(100 * (share if share >= WRAP[1] else WRAP[0])) / 100  # rounded up, it would not fit
    return {c: (f"p{{{width}in}}", width) if c in wrapped else ("r" if numeric[c] else "l", natural[c])
            for c in shown}


def _parts(specs: dict[str, tuple[str, float]]) -> list[list[str]]:
    """The columns of each part of a table too wide for :data:`TEXT_WIDTH`: the leading row-naming columns
    (:data:`KEYS`) in every part, the others in order, in as few parts as fit, of even widths."""
    columns = list(specs)
    keys = columns[:next((i for i, c in enumerate(columns) if c not in KEYS), len(columns))]
    rest = [specs[c][1] + PAD for c in columns[len(keys):]]
    room = TEXT_WIDTH - sum(specs[k][1] + PAD for k in keys)
    for n in range(1, len(rest) + 1):  # n parts, each closed once it holds its share of the widths
        parts: list[list[str]] = [[]]
        width = 0.0
        for column, w in zip(columns[len(keys):], rest, strict=True):
            if parts[-1] and (width + w > room or width >= sum(rest) / n):
                parts, width = [*parts, []], 0.0
            parts[-1].append(column)
            width += w
        if len(parts) <= n:
            return [keys + part for part in parts]
    return [keys + [c] for c in columns[len(keys):]] or [keys]


def _tabular_body(shown: pd.DataFrame, columns: list[str], specs: dict[str, tuple[str, float]]) -> tuple[str, str]:
    """The column types and the header and body rows of ``columns``, between the booktabs rules."""
    heads = " & ".join(rf"\begin{{tabular}}[b]{{@{{}}{'r' if specs[c][0] == 'r' else 'l'}@{{}}}}"
                       + r"\\".join(_tex(line) for line in _header_lines(c)) + r"\end{tabular}" for c in columns)
    rows = "\n".join(" & ".join(_tex(v) for v in row) + r" \\" for row in shown[columns].itertuples(index=False))
    return "".join(specs[c][0] for c in columns), f"\\toprule\n{heads} \\\\\n\\midrule\n{rows}\n\\bottomrule"


def latex_table(frame: pd.DataFrame, name: str, caption: str) -> str:
    r"""The table as LaTeX (booktabs, \small, caption and label ``tab:<name>``) with readable headers. A table wider
    than :data:`TEXT_WIDTH` is split into parts (a), (b), ... that repeat the row-naming columns; one of more than
    40 rows in all is a longtable (one per part)."""
    shown = display(frame)
    specs = _column_specs(frame, shown)
    parts = _parts(specs)
    long = len(frame) * len(parts) > 40  # more rows than a page holds
    blocks = []
    for n, columns in enumerate(parts):
        spec, body = _tabular_body(shown, columns, specs)
        part = f" ({chr(ord('a') + n)})" if len(parts) > 1 else ""
        if long:
            title = rf"\caption{{{_tex(caption)}{part}}}" + (rf"\label{{tab:{name}}}" if n == 0 else "")
            head, rest = body.split("\\midrule\n", 1)  # the column heads open the first page and repeat
            blocks.append(("\\addtocounter{table}{-1}\n" if n else "")  # one table number for all its parts
                          + f"\\begin{{longtable}}{{{spec}}}\n{title}\\\\\n{head}\\midrule\n\\endfirsthead\n"
                          f"{head}\\midrule\n\\endhead\n{rest}\n\\end{{longtable}}")
        else:
            blocks.append((f"\\par\\medskip{part.strip()}\\par\n" if part else "")
                          + f"\\begin{{tabular}}{{{spec}}}\n{body}\n\\end{{tabular}}")
    if long:
        return "{\\small\\setlength{\\tabcolsep}{4pt}\n" + "\n".join(blocks) + "\n}\n"
    return (f"\\begin{{table}}\n\\centering\n\\small\n\\setlength{{\\tabcolsep}}{{4pt}}\n\\caption{{{_tex(caption)}}}"
            f"\n\\label{{tab:{name}}}\n" + "\n".join(blocks) + "\n\\end{table}\n")


def markdown_table(frame: pd.DataFrame, caption: str) -> str:
    """The caption and the table as Markdown: readable headers, each column as :func:`display` formats it
    (numbers right-aligned)."""
    shown = display(frame).map(lambda text: text.replace("|", "\\|"))  # "|" would end a cell
    align = ["right" if _is_number(frame, c) else "left" for c in shown]
    table = shown.rename(columns=lambda c: header(c).replace("|", "\\|")).to_markdown(
        index=False, disable_numparse=True, colalign=align)
    return f"{caption}\n\n{table}\n"


def write_table(frame: pd.DataFrame, directory: Path, name: str, caption: str,
                latex: bool | pd.DataFrame = True) -> list[Path]:
    """``<name>.csv`` (the numbers, under the column names), ``<name>.md`` (:func:`markdown_table`) and
    ``<name>.tex`` (:func:`latex_table` of ``frame``, or of ``latex`` when that is a frame: the columns a page
    shows; ``latex=False``: no LaTeX, and an old ``<name>.tex`` is removed) in ``directory``, each written
    atomically."""
    directory = Path(directory)
    paths = [directory / f"{name}.{ext}" for ext in ("csv", "md", "tex")]
    write_csv(paths[0], frame, index=False)
    atomic_write(paths[1], lambda f: f.write(markdown_table(frame, caption)))
    if latex is False:
        paths[2].unlink(missing_ok=True)
        return paths[:2]
    page = frame if latex is True else latex
    atomic_write(paths[2], lambda f: f.write(latex_table(page, name, caption)))
    return paths
