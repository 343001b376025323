"""Real-data readers, downloaders and domain loaders.

Every loader returns a **long frame**: one row per (entity, time) with the columns a domain's params name
(target, sequential features, and the raw columns that proxies, static features and stratifiers summarise).
``acgate.data.prep`` turns a long frame into a cleaned ``Panel``.

The official input files are read from the raw-data directory: ``$ACGATE_RAW_DIR`` when set, else
``data/raw/`` in the project. Tests and CI point ``ACGATE_RAW_DIR`` at a folder holding the four files under
their official names; ``python -m acgate.data.sources download`` (``make data``) fetches them. A user's panel CSV is
read only from ``data/raw/``, ``$ACGATE_RAW_DIR`` or a folder named in ``$ACGATE_DATA_DIRS`` (:func:`csv_path`), so
that a params file cannot make the project read, and quote, any file the user can read.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import http.client
import os
import re
import unicodedata
import urllib.request
import warnings
import zipfile
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from acgate.runs import atomic_write, spreadsheet_text, write_json

# Official sources (docs/data.md): PWT 11.0 as the zip of its DataverseNL dataset (DOI 10.34894/FABVLR,
# Dataverse access API), from which pwt110.dta is extracted; the WGI workbook of the World Bank; OWID's files from
# its public GitHub repositories. These addresses could not be checked from the machines this was built on (no
# internet); `python -m acgate.data.sources download NAME --url URL` fetches from another address.
OFFICIAL_URLS = {
    "pwt110.dta": "https://dataverse.nl/api/access/dataset/:persistentId/?persistentId=doi:10.34894/FABVLR",
    "wgidataset.xlsx": "https://www.worldbank.org/content/dam/sites/govindicators/doc/wgidataset.xlsx",
    "owid-co2-data.csv": "https://raw.githubusercontent.com/owid/co2-data/master/owid-co2-data.csv",
    "owid-energy-data.csv": "https://raw.githubusercontent.com/owid/energy-data/master/owid-energy-data.csv",
}


class SourceError(ValueError):
    """An input file is missing or malformed; the message names the file, column and entity."""


def raw_dir(root: Path) -> Path:
    """Where the official input files are read from: ``$ACGATE_RAW_DIR`` or ``<root>/data/raw``."""
    return Path(os.environ["ACGATE_RAW_DIR"]) if os.environ.get("ACGATE_RAW_DIR") else Path(root) / "data" / "raw"


DATA_DIRS = "ACGATE_DATA_DIRS"  # more folders a panel CSV may be read from, separated as in PATH


def data_folders(root: Path) -> list[Path]:
    """The folders a panel CSV may be read from: the project's ``data/raw``, the raw-data directory
    (:func:`raw_dir`) and every folder named in ``$ACGATE_DATA_DIRS``."""
    named = [Path(p).expanduser() for p in os.environ.get(DATA_DIRS, "").split(os.pathsep) if p.strip()]
    return list(dict.fromkeys([Path(root) / "data" / "raw", raw_dir(root), *named]))


def csv_path(csv_file: str, root: Path) -> Path:
    """The path of ``data.csv_file`` (relative to the project root, or absolute; ``~`` is the home folder) when it
    lies, links resolved, inside one of :func:`data_folders`; else :class:`SourceError` saying where to put it
    (nothing of the file is read)."""
    path = Path(root) / Path(csv_file).expanduser()
    real = path.resolve()
    folders = data_folders(root)
    if not any(real.is_relative_to(folder.resolve()) for folder in folders):
        raise SourceError(f"data.csv_file = {csv_file!r} is {real}, outside the folders a panel is read from "
                          f"({', '.join(map(str, folders))}). Put the CSV into the project's data/raw/, or name its "
                          f"folder when you start the run: {DATA_DIRS}=/path/to/folder make paper (several folders "
                          f"separated by '{os.pathsep}')")
    return path


def _input(directory: Path, name: str) -> Path:
    path = Path(directory) / name
    if not path.is_file():
        raise SourceError(f"input file not found: {path}. Run `make data` to download the official file, or set "
                          f"ACGATE_RAW_DIR to a folder that holds {name}")
    return path


def require_columns(frame: pd.DataFrame, columns: list[str], source: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        # a header written "region, year" names its second column ' year': the space is hard to see in the list
        spaced = {str(c).strip(): str(c) for c in frame.columns if str(c) != str(c).strip()}
        hint = [repr(spaced[c]) for c in missing if c in spaced]
        raise SourceError(f"{source}: missing column(s) {', '.join(missing)}; "
                          f"found {', '.join(map(str, frame.columns[:20]))}{' ...' if frame.shape[1] > 20 else ''}"
                          + (f"; the header writes {', '.join(hint)} with spaces around the name: remove them (a "
                             "space after a comma is part of the next name)" if hint else ""))


# pandas' default missing-value markers, applied to every column but the id columns
NA_STRINGS = ["", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
              "NA", "NULL", "NaN", "None", "n/a", "nan", "null"]


def read_csv_ids(source, ids: list[str], written: bool = False, **kwargs) -> pd.DataFrame:
    """A CSV whose ``ids`` columns are read exactly as written (strings: 'NA', 'null' and '001' stay as they are),
    every other column with pandas' usual parsing and missing-value markers. ``written``: a CSV the project wrote
    (``acgate.runs.write_csv``), whose text cells and column names that start like a formula carry a guarding ',
    taken off here."""
    header = pd.read_csv(source, nrows=0, **kwargs).columns
    if hasattr(source, "seek"):
        source.seek(0)
    frame = pd.read_csv(source, keep_default_na=False, dtype={c: str for c in ids if c in header},
                        na_values={c: NA_STRINGS for c in header if c not in ids}, **kwargs)
    if not written:
        return frame
    frame = frame.rename(columns=spreadsheet_text)
    for column in frame.select_dtypes(exclude="number").columns:
        frame[column] = frame[column].map(lambda v: spreadsheet_text(v) if isinstance(v, str) else v)
    return frame


# --- readers of the official files


PWT_READERS = {"pwt110.dta": pd.read_stata, "pwt110.csv": pd.read_csv,
               "pwt110.xlsx": lambda p: pd.read_excel(p, sheet_name="Data")}  # the official file first


def read_pwt(directory: Path) -> pd.DataFrame:
    """Penn World Table 11.0 from ``pwt110.dta`` (or its ``pwt110.csv`` / ``pwt110.xlsx`` forms)."""
    found = [name for name in PWT_READERS if (Path(directory) / name).is_file()]
    path = Path(directory) / found[0] if found else _input(directory, "pwt110.dta")
    frame = PWT_READERS[path.name](path)
    require_columns(frame, ["countrycode", "year", "ctfp", "ck", "rgdpna", "rnna", "hc", "emp", "avh"], str(path))
    return frame


def read_wgi(directory: Path) -> pd.DataFrame:
    """Worldwide Governance Indicators, long format (code, year, indicator, estimate); '..' read as missing."""
    path = _input(directory, "wgidataset.xlsx")
    frame = pd.read_excel(path)
    require_columns(frame, ["code", "year", "indicator", "estimate"], str(path))
    frame["estimate"] = pd.to_numeric(frame.estimate.replace("..", np.nan), errors="coerce")
    return frame


def read_owid_co2(directory: Path) -> pd.DataFrame:
    path = _input(directory, "owid-co2-data.csv")
    columns = ["iso_code", "country", "year", "population", "gdp", "co2_per_unit_energy"]
    frame = pd.read_csv(path, usecols=lambda c: c in columns)
    require_columns(frame, columns, str(path))
    return frame


def read_owid_energy(directory: Path) -> pd.DataFrame:
    path = _input(directory, "owid-energy-data.csv")
    columns = ["iso_code", "country", "year", "renewables_share_energy"]
    frame = pd.read_csv(path, usecols=lambda c: c in columns)
    require_columns(frame, columns, str(path))
    return frame


# --- domain loaders: official files -> long frame (entity, time, named columns)


def _log_positive(values: pd.Series) -> pd.Series:
    """log of positive values; zero or negative values become missing (positivity rule)."""
    return np.log(values.where(values > 0))


# what one entity and one time step of each loader's panels are, for the figures' axes; a csv panel is a user's own,
# whose entities stay "entity" and whose steps are whatever its time column counts
PANEL_UNITS = {"pwt": ("country", "years"), "owid_wgi": ("country", "years"), "csv": ("entity", "time steps")}


def load_pwt(directory: Path) -> pd.DataFrame:
    """Economics (PWT 11.0): target ctfp; sequential features capital-output ratio ck/rgdpna and the growth of
    rgdpna and ck; raw columns for the proxies, static features and stratifiers. Rows where ck or rgdpna is not
    positive are missing (the paper's cleaning rule)."""
    pwt = read_pwt(directory).rename(columns={"countrycode": "entity", "year": "time"})
    pwt = pwt.sort_values(["entity", "time"])
    positive = (pwt.ck > 0) & (pwt.rgdpna > 0)
    for column in ("ck", "rgdpna"):
        pwt[column] = pwt[column].where(positive)
    by_entity = pwt.groupby("entity")
    return pd.DataFrame({
        "entity": pwt.entity.astype(str), "time": pwt.time.astype(int), "ctfp": pwt.ctfp,
        "capital_output": pwt.ck / pwt.rgdpna,
        "gdp_growth": by_entity.rgdpna.transform(lambda s: np.log(s).diff()),
        "capital_growth": by_entity.ck.transform(lambda s: np.log(s).diff()),
        "log_emp_hours": _log_positive(pwt.emp * pwt.avh), "log_emp": _log_positive(pwt.emp), "hc": pwt.hc,
        "log_rgdpna": _log_positive(pwt.rgdpna), "log_ck": _log_positive(pwt.ck),
        "log_gdp_per_worker": _log_positive(pwt.rgdpna / pwt.emp),
        "log_capital_per_worker": _log_positive(pwt.rnna / pwt.emp),
    })


def load_owid_wgi(directory: Path) -> pd.DataFrame:
    """Energy (OWID + WGI): target co2_per_unit_energy (OWID CO2 data, kg CO2 per kWh of primary energy), input
    renewables_share_energy (OWID energy data), WGI estimates ge/rq/rl, and log GDP per capita. Countries only
    (ISO3 codes; OWID aggregates dropped); population and GDP must be positive (else missing)."""
    co2 = read_owid_co2(directory)
    energy = read_owid_energy(directory)
    countries = co2.iso_code.str.fullmatch(r"[A-Z]{3}", na=False)
    frame = co2[countries].merge(energy[["iso_code", "year", "renewables_share_energy"]], on=["iso_code", "year"],
                                 how="left")
    wgi = read_wgi(directory)
    wide = wgi[wgi.indicator.isin(["ge", "rq", "rl"])].pivot_table(index=["code", "year"], columns="indicator",
                                                                   values="estimate", aggfunc="first")
    frame = frame.merge(wide.reset_index().rename(columns={"code": "iso_code"}), on=["iso_code", "year"], how="left")
    per_capita = frame.gdp.where(frame.gdp > 0) / frame.population.where(frame.population > 0)
    return pd.DataFrame({
        "entity": frame.iso_code.astype(str), "time": frame.year.astype(int),
        "co2_per_unit_energy": frame.co2_per_unit_energy, "renewables_share_energy": frame.renewables_share_energy,
        "ge": frame.get("ge"), "rq": frame.get("rq"), "rl": frame.get("rl"),
        "log_gdp_per_capita": np.log(per_capita),
    }).sort_values(["entity", "time"])


def _records(f) -> Iterator[tuple[int, list[str]]]:
    """The records of an open CSV, read with Python's csv module, with the file line each starts on (the first line
    is 1). A line of nothing but spaces and tabs is skipped, as pandas skips it, but counts as a line; a quoted empty
    field ("") is a record, as it is to pandas, which is why the line itself is looked at, not the fields."""
    physical = [""]  # the line the reader took last

    def remember(lines: Iterable[str]) -> Iterator[str]:
        for line in lines:
            physical[0] = line
            yield line

    reader = csv.reader(remember(f))
    start = 1
    for row in reader:
        if reader.line_num > start or physical[0].strip(" \t\r\n"):  # pandas' whitespace: spaces and tabs
            yield start, row
        start = reader.line_num + 1


def _check_header(header: list[str], path: Path) -> None:
    """Every column name once, compared without the spaces around it (empty names, a spreadsheet's blank columns,
    aside): pandas reads a repeated name as 'name.1', and a params file naming 'name' silently gets the first."""
    positions: dict[str, list[int]] = {}
    for position, name in enumerate(header, start=1):
        if name.strip():
            positions.setdefault(name.strip(), []).append(position)
    repeated = [at for at in positions.values() if len(at) > 1]
    if repeated:
        named = "; ".join(f"{' and '.join(dict.fromkeys(repr(header[i - 1]) for i in at))} (columns "
                          f"{', '.join(map(str, at[:-1]))} and {at[-1]})" for at in repeated)
        raise SourceError(f"{path}: the header names a column more than once: {named}; only one of them would be "
                          "read, silently. Rename or delete the repeats, so that every column name is unique (names "
                          "are compared without the spaces around them)")


def _too_many_fields(path: Path, line: int, row: list[str], expected: int) -> SourceError:
    """A line with more fields than the header: pandas raised a ParserError naming no file, or (on the first data
    line) took the first column as an index and shifted every name by one, silently."""
    shown = ",".join(row)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    extra = row[expected:]
    cause = (f"The line ends in {len(extra)} comma(s) too many: delete them" if not "".join(extra).strip() else
             "A decimal comma (0,43) splits a number in two: save the file with decimal points (0.43); a text holding "
             'a comma must be in quotes ("Korea, Rep.")')
    return SourceError(f"{path}: line {line} has {len(row)} fields where the header has {expected} ({shown}). {cause}")


def _too_few_fields(path: Path, line: int, row: list[str], expected: int) -> SourceError:
    """A line with fewer fields than the header: pandas fills the missing ones with NaN, silently, so a line cut
    short (a copy broken off, a row pasted without its last columns) would lose values without a word."""
    if any("\n" in field for field in row):
        return SourceError(f"{path}: line {line} opens a quoted field that runs on over the next lines; a quote (\") "
                           "that opens a field and never closes is the usual cause: close it, or remove it")
    shown = ",".join(row)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return SourceError(f"{path}: line {line} has {len(row)} field(s) where the header has {expected} ({shown}): the "
                       "line is cut short or lacks columns. Complete it (an empty value is written as nothing between "
                       "two commas: A,2001,,0.5), or delete the line")


def _scan(path: Path) -> np.ndarray:
    """The file line of each data row of a user's CSV (what pandas reads as row i starts on line lines[i]), checking
    on the way what pandas reads wrongly or without naming the file: a repeated column name, a line with more or
    fewer fields than the header. A field may be as long as the file (pandas reads one of any length; the csv
    module's own limit, 128 KiB, stopped a long text cell with no file or line), the limit restored after."""
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, path.stat().st_size + 1))
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:  # -sig: pandas, too, drops a byte-order mark
            records = _records(f)
            header = next(records, (1, []))[1]
            _check_header(header, path)
            lines = []
            for line, row in records:
                if len(row) > len(header):
                    raise _too_many_fields(path, line, row, len(header))
                if len(row) < len(header):
                    raise _too_few_fields(path, line, row, len(header))
                lines.append(line)
    finally:
        csv.field_size_limit(limit)
    _check_last_line(path, lines[-1] if lines else None)
    return np.array(lines, dtype=int)


def _check_last_line(path: Path, line: int | None) -> None:
    """Warn where the file does not end with a line break: its last line may be a copy or download broken off in
    the middle of a value ("...,0.51" of "...,0.5132"), which no other check can see when the fields are all there."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        if line is None or f.tell() == 0:
            return
        f.seek(-1, os.SEEK_END)
        if f.read(1) in (b"\n", b"\r"):
            return
    warnings.warn(f"{path}: the file does not end with a line break, so its last line (line {line}) may have been "
                  "cut off in the middle of a value, by an interrupted copy or download; check that line against "
                  "the source, then end the file with a line break (this warning then goes)", stacklevel=3)


def _check_ids(ids: pd.Series, lines: np.ndarray, path: Path, column: str) -> None:
    """Ids are kept exactly as written, so two that differ only by the spaces around them, by how Unicode writes
    the same letters (NFC 'é' as one character, NFD as 'e' and an accent: what macOS and Windows tools may each
    produce), or by invisible format characters (a zero-width space U+200B or joiner, a byte-order mark, a direction
    mark: Unicode's category Cf, which copying from web pages and spreadsheets brings along) would split one entity in
    two, each with part of its years (and both then dropped): refused, naming the ways it is written and their
    lines."""
    first = pd.DataFrame({"id": ids.to_numpy(), "line": lines}).drop_duplicates("id")
    first["key"] = ["".join(c for c in unicodedata.normalize("NFC", i.strip()) if unicodedata.category(c) != "Cf")
                    for i in first.id]
    clashing = first[first.key.duplicated(keep=False)]
    if clashing.empty:
        return
    keys = list(dict.fromkeys(clashing.key))
    ways = [f"{entity!r} (line {line})" for entity, line in clashing.loc[clashing.key == keys[0], ["id", "line"]]
            .itertuples(index=False)]
    others = f" (also: {', '.join(map(repr, keys[1:4]))}{', ...' if len(keys) > 4 else ''})" if len(keys) > 1 else ""
    raise SourceError(f"{path}: column '{column}' writes the entity {keys[0]!r} in {len(ways)} ways that differ only "
                      f"by spaces around it, by Unicode normalisation (an accented letter as one character or as "
                      f"a letter and an accent) or by invisible characters (zero-width spaces, byte-order or direction "
                      f"marks): {', '.join(ways[:-1])} and {ways[-1]}{others}; ids are read exactly as written ('NA' "
                      f"and '001' are ids), so these would be {len(ways)} entities, each with part of the years. Write "
                      "each entity one way: remove the spaces around the ids and any invisible character in them, and "
                      "save the file with its text normalised to NFC (python: unicodedata.normalize('NFC', text))")


TIME_LIMIT = 10**9  # no year or step is this large; a value past it is a typo (and past 9.2e18 int64 wraps it round)
TIME_FENCE = 10  # a time farther than this many interquartile ranges (of the distinct times, plus one) from them


def _check_times(frame: pd.DataFrame, lines: np.ndarray, path: Path, entity_column: str, time_column: str
                 ) -> pd.Series:
    """The time column as whole numbers; an empty cell, a value that is no whole number, and a value far from every
    other (a year typed 20003 among 1990..2023, which the window would drop and interpolation would hide) stop,
    naming its line and entity."""
    times = pd.to_numeric(frame[time_column], errors="coerce")
    bad = ~np.isfinite(times) | (times != times.round()) | (times.abs() >= TIME_LIMIT)
    if bad.any():
        at = int(bad.to_numpy().argmax())
        value, where = frame[time_column].iloc[at], f"on line {lines[at]} (entity '{frame[entity_column].iloc[at]}')"
        if pd.isna(value):
            raise SourceError(f"{path}: column '{time_column}' has no value {where}; every row needs its time: fill it "
                              "in (a whole number: a year or a step), or delete the row")
        raise SourceError(f"{path}: column '{time_column}' holds '{value}' {where}, not a whole number below "
                          f"{TIME_LIMIT:.0e}; times are whole numbers (years, or steps 0, 1, 2, ...): for quarters or "
                          "months, number the periods as consecutive steps and set data.first_time, data.last_time "
                          "and the split in the same units")
    times = times.astype(np.int64)
    low, high = np.percentile(np.unique(times), [25, 75])
    reach = TIME_FENCE * (high - low + 1)
    far = (times < low - reach) | (times > high + reach)
    if far.any():
        at = int(far.to_numpy().argmax())
        usual = times[~far]
        raise SourceError(f"{path}: column '{time_column}' holds {times.iloc[at]} on line {lines[at]} (entity "
                          f"'{frame[entity_column].iloc[at]}'), far from every other time (they lie in "
                          f"{usual.min()}..{usual.max()}): a typo? Correct it, or delete the row; a row outside "
                          "data.first_time..data.last_time would be dropped without a word, and its year filled in "
                          "by interpolation")
    return times


NOT_CSV = {  # the first bytes of files that are no text, whatever their name, and what to do with each
    b"\x1f\x8b": "a gzip-compressed file: unpack it first (gunzip -k FILE) and name the unpacked CSV",
    b"PK\x03\x04": "a zip archive, which is what an Excel workbook (.xlsx) is: save the sheet as 'CSV UTF-8' from the "
                    "spreadsheet, or unpack the archive",
    b"\xd0\xcf\x11\xe0": "an old Excel workbook (.xls): save the sheet as 'CSV UTF-8' from the spreadsheet",
    b"BZh": "a bzip2-compressed file: unpack it first (bunzip2 -k FILE)",
    b"\xfd7zXZ": "an xz-compressed file: unpack it first (unxz -k FILE)",
    b"%PDF": "a PDF document, not a table",
    b"\xff\xfe": "UTF-16 text (little-endian, as Windows tools and Excel's 'Unicode Text' save it): save it as UTF-8 "
                 "('CSV UTF-8'), e.g. iconv -f utf-16 -t utf-8 FILE > NEW.csv",
    b"\xfe\xff": "UTF-16 text (big-endian): save it as UTF-8 ('CSV UTF-8'), e.g. iconv -f utf-16 -t utf-8 FILE > "
                 "NEW.csv",
}


def _check_text(path: Path) -> None:
    """A file that is no CSV text at all (compressed, a workbook, a PDF; found by its first bytes, whatever its
    name) stops with what it is and how to get the CSV out of it, rather than as text in the wrong encoding."""
    with open(path, "rb") as f:
        head = f.read(8)
    kind = next((what for magic, what in NOT_CSV.items() if head.startswith(magic)), None)
    if kind:
        raise SourceError(f"{path}: not a CSV but {kind}")
    with open(path, encoding="utf-8", errors="replace") as f:
        first = f.readline().lstrip("\ufeff").rstrip("\r\n")
    if re.fullmatch(r"sep=.", first):
        raise SourceError(f"{path}: line 1 is Excel's separator hint {first!r}, not the header; delete that line (the "
                          "first line names the columns)")
    if first.startswith("#"):
        raise SourceError(f"{path}: line 1 ({first[:60]!r}) is a comment, not the header; delete the lines above the "
                          "header (the first line names the columns)")


def load_csv(path: Path, entity_column: str, time_column: str) -> pd.DataFrame:
    """A user's long CSV (UTF-8, comma-separated): one row per entity and time. Entity ids are kept exactly as
    written ('NA', 'null' and '001' are ids, not missing values or numbers), and two ids that differ only by the
    spaces around them are refused; the entity and time columns are renamed to the panel's own 'entity' and
    'time'. Errors name the file and, for a row, its line (the header is line 1)."""
    path = Path(path)
    if not path.is_file():
        raise SourceError(f"panel CSV not found: {path} (the params file's data.csv_file, relative to the project "
                          "root)")
    _check_text(path)
    try:
        lines = _scan(path)
        frame = read_csv_ids(path, [entity_column])
    except pd.errors.EmptyDataError:
        raise SourceError(f"{path}: the file is empty; it needs a header row and one row per entity and time") from None
    except UnicodeDecodeError as err:
        raise SourceError(f"{path}: not UTF-8 text ({err.reason}); save it as UTF-8 (a "
                          "spreadsheet's 'CSV UTF-8'), e.g. iconv -f latin1 -t utf-8") from None
    except pd.errors.ParserError as err:
        raise SourceError(f"{path}: pandas cannot read it ({str(err).strip()}); a quote (\") that opens a field and "
                          "never closes is the usual cause: close it, or remove it") from None
    if len(lines) != len(frame):  # a safety net: no file found so far makes the two readers part
        raise SourceError(f"{path}: Python's csv module finds {len(lines)} data row(s) and pandas {len(frame)}, so "
                          "no line number could be trusted; check the quotes (\") in the file: a field is quoted "
                          "whole (\"Korea, Rep.\"), a quote inside it doubled (\"\")")
    if frame.shape[1] == 1 and entity_column not in frame.columns:
        separator = next((name for sep, name in ((";", "semicolons"), ("\t", "tabs"), ("|", "bars"))
                          if sep in frame.columns[0]), "")
        if separator:
            raise SourceError(f"{path}: one column {frame.columns[0]!r}: the file seems separated by {separator}; "
                              "save it comma-separated")
    require_columns(frame, [entity_column, time_column],
                    f"{path} (data.entity_column = {entity_column!r}, data.time_column = {time_column!r}: set them "
                    "in the params file to the file's own column names)")
    if frame.empty:
        raise SourceError(f"{path}: a header but no rows; it needs one row per entity and time")
    for internal, own in (("entity", entity_column), ("time", time_column)):
        if internal != own and internal in frame.columns:
            raise SourceError(f"{path}: a column named '{internal}' besides the {internal} column '{own}'; rename it "
                              f"(the panel names its own {internal} column '{internal}')")
    blank = frame[entity_column].str.strip() == ""
    if blank.any():
        raise SourceError(f"{path}: column '{entity_column}' is empty on line {lines[blank.to_numpy().argmax()]}; "
                          "every row needs an entity id")
    _check_ids(frame[entity_column], lines, path, entity_column)
    times = _check_times(frame, lines, path, entity_column, time_column)
    frame = frame.rename(columns={entity_column: "entity", time_column: "time"})
    frame["time"] = times
    return frame


LOADER_FILES = {"owid_wgi": ["owid-co2-data.csv", "owid-energy-data.csv", "wgidataset.xlsx"]}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def locate_inputs(params, root: Path) -> tuple[list[Path], list[Path]]:
    """The input files a domain's loader reads: (present, missing)."""
    data = params.data
    if data.loader == "csv":
        wanted = [csv_path(data.csv_file, root)]
    elif data.loader == "pwt":
        forms = [raw_dir(root) / name for name in PWT_READERS]
        wanted = [next((p for p in forms if p.is_file()), forms[0])]
    else:
        wanted = [raw_dir(root) / name for name in LOADER_FILES[data.loader]]
    return [p for p in wanted if p.is_file()], [p for p in wanted if not p.is_file()]


def missing_inputs(params, root: Path) -> str:
    """Why a domain cannot be prepared here ('' when its inputs are present, or it needs none)."""
    if params.data is None:
        return ""
    absent = locate_inputs(params, root)[1]
    if not absent:
        return ""
    hint = (" (data.csv_file, relative to the project root)" if params.data.loader == "csv"
            else " (run `make data`, or set ACGATE_RAW_DIR)")
    return f"{', '.join(map(str, absent))} not found{hint}"


def input_files(params, root: Path) -> list[dict]:
    """The input files a domain's loader reads, with size and sha256, for the data manifest."""
    return [{"file": str(p), "bytes": p.stat().st_size, "sha256": sha256(p)} for p in locate_inputs(params, root)[0]]


# --- downloads


def download(url: str, target: Path, timeout: float = 120.0) -> dict:
    """Fetch ``url`` into ``target`` atomically and record its provenance in ``<target>.source.json``.

    When the server sends a zip archive that is not itself the target (the PWT dataset bundle), the member named
    like the target is extracted. A failed or truncated transfer (fewer bytes than the server announced) raises
    and leaves no file behind.
    """
    target = Path(target)
    digest, size = hashlib.sha256(), 0  # of the file as saved (the extracted member for an archive)
    fetched = target.with_name(target.name + ".download")
    with urllib.request.urlopen(url, timeout=timeout) as response:
        expected = response.headers.get("Content-Length")

        def write(f) -> None:
            nonlocal size
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
                f.write(chunk)
            if expected is not None and size != int(expected):
                raise OSError(f"download of {url} truncated: {size} of {expected} bytes")

        atomic_write(fetched, write, binary=True)
    try:
        if zipfile.is_zipfile(fetched) and target.suffix != ".zip":
            with zipfile.ZipFile(fetched) as archive:
                members = [m for m in archive.namelist() if Path(m).name == target.name]
                if not members:
                    raise SourceError(f"{url}: the archive has no {target.name} (it has {archive.namelist()[:10]})")
                data = archive.read(members[0])
            digest, size = hashlib.sha256(data), len(data)
            atomic_write(target, lambda f: f.write(data), binary=True)
            fetched.unlink()
        else:
            os.replace(fetched, target)
    finally:
        fetched.unlink(missing_ok=True)
    record = {"url": url, "file": target.name, "bytes": size, "sha256": digest.hexdigest(),
              "downloaded_utc": datetime.now(UTC).isoformat(timespec="seconds")}
    write_json(target.with_name(target.name + ".source.json"), record)
    return record


def main(argv: list[str] | None = None) -> None:
    from acgate.layout import project_root

    parser = argparse.ArgumentParser(prog="python -m acgate.data.sources",
                                     description="Download the official input files into the raw-data directory.")
    parser.add_argument("command", choices=["download"])
    parser.add_argument("names", nargs="*", default=list(OFFICIAL_URLS), help="files to fetch (default: all four)")
    parser.add_argument("--raw-dir", default=None, help="target folder (default: $ACGATE_RAW_DIR or data/raw)")
    parser.add_argument("--url", default=None, help="fetch the one named file from this address instead")
    args = parser.parse_args(argv)
    directory = Path(args.raw_dir) if args.raw_dir else raw_dir(project_root())
    unknown = [name for name in args.names if name not in OFFICIAL_URLS]
    if unknown:
        raise SystemExit(f"unknown file '{unknown[0]}'; choose from {', '.join(OFFICIAL_URLS)}")
    failed = []
    for name in args.names:
        url = args.url if args.url and len(args.names) == 1 else OFFICIAL_URLS[name]
        print(f"downloading {name} from {url} ...", flush=True)
        try:
            record = download(url, directory / name)
        except (OSError, http.client.HTTPException, SourceError) as err:  # offline, a proxy, a moved file
            print(f"  failed: {type(err).__name__}: {err}", flush=True)
            failed.append((name, url))
            continue
        print(f"  {record['bytes']:,} bytes, sha256 {record['sha256']}", flush=True)
    if failed:
        by_hand = "\n".join(f"  {url}\n    -> {directory / name}" + (" (the address gives an archive: take this "
                                                                     "file out of it)" if name.endswith(".dta") else "")
                             for name, url in failed)
        raise SystemExit(f"{len(failed)} of {len(args.names)} files could not be downloaded (no network here?). "
                         f"Fetch them by hand, e.g. in a browser, and save each under the name shown:\n{by_hand}\n"
                         "or put them in a folder of your own and set ACGATE_RAW_DIR to it; docs/data.md says what "
                         "each file is.")


if __name__ == "__main__":
    main()
