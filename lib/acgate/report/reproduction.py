"""The reproduction table: every number the paper reports (``paper_numbers.yaml``) next to ours.

The lookup is data, not code: the ``ours`` entries of ``paper_numbers.yaml`` say, per group of paper numbers,
which of our tables holds its counterpart, in which column and on which rows (the schema is at the top of that
file); ``not_comparable`` says where the two are different statistics. :func:`reproduction` walks those entries.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pandas as pd

from acgate.audit import domain_audit as audit_lib
from acgate.report.inputs import paper_numbers

NONE = pd.DataFrame()  # a table that was not built
# a paper number whose counterpart no table of ours holds: its ``comparable`` (``ours`` and ``difference`` empty), so
# that a missing run (a method left out of a domain) does not read as a value
NO_COUNTERPART = "no counterpart: not among these runs (a method or domain not run, e.g. methods or leave_out)"


def _leaves(node: dict, levels: list[str], expand: dict, names: dict) -> Iterator[tuple[dict, dict]]:
    """(the keys naming it, its quantities) per leaf of ``node``, one key per level; a key that ``expand`` maps to
    several names gives a leaf under each."""
    if not levels:
        yield names, node
        return
    for key, child in node.items():
        for name in expand.get(key, [key]):
            yield from _leaves(child, levels[1:], expand, {**names, levels[0]: name})


def _select(frame: pd.DataFrame, where: dict) -> pd.DataFrame:
    """The rows of ``frame`` whose columns hold the values of ``where`` (a value or a list of values)."""
    mask = pd.Series(True, index=frame.index)
    for column, values in where.items():
        mask &= frame[column].isin(values)
    return frame[mask]


def _ours(entry: dict, fields: dict, tables: dict[str, pd.DataFrame]) -> float | str | None:
    """Our counterpart of one paper number: ``entry``'s column on its rows of its tables, the first (or the
    ``take`` of them); None where no table holds it."""
    quantity = fields["quantity"]
    ours = {k: entry.get("our_names", {}).get(v, v) if isinstance(v, str) else v for k, v in fields.items()}
    column = entry.get("column", quantity)
    column = (column.get(quantity, quantity) if isinstance(column, dict) else column).format(**ours)
    where = {k: [v.format(**ours)] if isinstance(v, str) else v for k, v in entry.get("where", {}).items()}
    found = [_select(frame, where)[column] for name in entry["tables"]
             if column in (frame := tables.get(name.format(**ours), NONE))]
    values = pd.concat(found) if found else pd.Series(dtype=float)
    if values.empty:
        return None
    take = entry.get("take", {}).get(quantity, "first")
    value = values.iloc[0] if take == "first" else getattr(values, take)()
    return value if isinstance(value, str) else float(value)


def comparability(table: str, row: str, quantity: str, rules: list[dict]) -> str:
    """'yes', or why the paper's number and ours are different statistics (the first of ``rules`` that applies)."""
    for rule in rules:
        if rule["table"] in (table, "*") and rule["row"] in row and quantity.startswith(rule["quantity"]):
            return rule["why"]
    return "yes"


def _difference(theirs, ours) -> float | str:
    """Ours - the paper's (NaN without ours); for text, whether the two are the same."""
    if isinstance(theirs, str):
        return "same" if theirs == ours else "differs"
    return math.nan if isinstance(ours, float) and math.isnan(ours) else ours - theirs


def _rows(entry: dict, paper: dict, tables: dict[str, pd.DataFrame], audited: set[str]) -> Iterator[dict]:
    """The reproduction rows of one ``ours`` entry: its numbers about audited domains, each next to ours."""
    node = paper
    for key in entry["numbers"].split("."):
        node = node[key]
    for names, leaf in _leaves(node, entry.get("levels", []), entry.get("expand", {}), {}):
        for quantity in entry.get("quantities", list(leaf)):
            fields = {**leaf, **names, "quantity": quantity}
            if not {d.format(**fields) for d in entry["domains"]} <= audited:  # about a domain that was not run
                continue
            table, row, theirs = entry["paper_table"].format(**fields), entry["row"].format(**fields), leaf[quantity]
            ours = _ours(entry, fields, tables)
            yield {"paper_table": table, "row": row, "quantity": quantity, "paper": theirs,
                   "ours": "" if ours is None else ours,
                   "difference": "" if ours is None else _difference(theirs, ours),
                   "comparable": NO_COUNTERPART if ours is None
                   else comparability(table, row, quantity, paper["not_comparable"])}


def reproduction(tables: dict[str, pd.DataFrame], results: dict[str, audit_lib.AuditResult],
                 paper: dict | None = None) -> pd.DataFrame:
    """Every number the paper reports about the domains in ``results`` next to ours: one row per (paper table,
    row, quantity) with the paper's value, ours and ours - paper (both empty, and :data:`NO_COUNTERPART` as
    ``comparable``, where no table of ours holds its counterpart). Verdicts compare as text. Empty when no domain of
    the paper was audited."""
    paper = paper or paper_numbers()
    return pd.DataFrame([row for entry in paper["ours"] for row in _rows(entry, paper, tables, set(results))])
