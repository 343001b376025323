"""Readers on the real files in $ACGATE_RAW_DIR (skipped without it) and the downloaders against a local HTTP
server on 127.0.0.1."""

import dataclasses
import gzip
import hashlib
import http.server
import io
import json
import threading
import unicodedata
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from acgate.data import sources

ROOT = Path(__file__).resolve().parents[2]


def test_pwt_reader_and_economics_loader(raw_dir):
    frame = sources.load_pwt(raw_dir)
    row = frame[(frame.entity == "AGO") & (frame.time == 1980)].iloc[0]
    assert row.ctfp == pytest.approx(0.470326393842697)  # the value the data README records
    assert {"capital_output", "gdp_growth", "capital_growth", "log_emp_hours", "hc"} <= set(frame.columns)
    usa = frame[frame.entity == "USA"].set_index("time")
    raw = pd.read_stata(raw_dir / "pwt110.dta").query("countrycode == 'USA'").set_index("year")
    assert usa.gdp_growth.loc[2000] == pytest.approx(np.log(raw.rgdpna.loc[2000] / raw.rgdpna.loc[1999]))
    assert usa.capital_output.loc[2000] == pytest.approx(raw.ck.loc[2000] / raw.rgdpna.loc[2000])


def test_energy_loader_joins_owid_and_wgi(raw_dir):
    references = [raw_dir / "extra" / name for name in ("wgidataset_fullprecision.csv",
                                                        "reference_energy_wgi_merged.csv")]
    if not all(p.is_file() for p in references):
        pytest.skip(f"reference files not found: {', '.join(map(str, references))}")
    frame = sources.load_owid_wgi(raw_dir)
    assert frame.entity.str.fullmatch(r"[A-Z]{3}").all()  # OWID aggregates dropped
    wgi = pd.read_csv(references[0])
    ref = wgi.query("code == 'AFG' and year == 1996 and indicator == 'ge'").estimate.iloc[0]
    got = frame.query("entity == 'AFG' and time == 1996")["ge"].iloc[0]
    assert got == pytest.approx(ref)  # -2.175 in the 2024 release, per the data README
    assert frame.query("entity == 'AFG' and time == 1997")["ge"].isna().all()  # WGI were biennial before 2002
    merged = pd.read_csv(references[1])
    both = frame.merge(merged, left_on=["entity", "time"], right_on=["entity_code", "year"])
    both = both.dropna(subset=["renewables_share_energy_x", "renewables_share_energy_y"])
    assert len(both) > 2000
    np.testing.assert_allclose(both.renewables_share_energy_x, both.renewables_share_energy_y)


def test_missing_file_and_missing_column_are_named(tmp_path):
    with pytest.raises(sources.SourceError, match=r"input file not found: .*owid-co2-data.csv.*make data"):
        sources.read_owid_co2(tmp_path)
    pd.DataFrame({"iso_code": ["AAA"], "year": [2000], "population": [1.0]}).to_csv(
        tmp_path / "owid-co2-data.csv", index=False)
    with pytest.raises(sources.SourceError, match=r"owid-co2-data.csv: missing column\(s\) country, gdp, "
                                                  r"co2_per_unit_energy"):
        sources.read_owid_co2(tmp_path)


# --- a user's CSV


def test_entity_ids_are_read_exactly_as_written(tmp_path):
    csv = tmp_path / "ids.csv"
    csv.write_text("region,year,v\nNA,2000,1\nnull,2000,2\n000,2000,3\n001,2000,4\n1,2000,5\nNA,2001,NA\n")
    frame = sources.load_csv(csv, "region", "year")
    assert list(frame.entity) == ["NA", "null", "000", "001", "1", "NA"]
    assert frame.v.isna().tolist() == [False] * 5 + [True]  # other columns keep the usual missing markers


@pytest.mark.parametrize("content, message", [
    (b"", r"the file is empty; it needs a header row"),
    (b"region,year,v\n", r"a header but no rows"),
    ("region,year,v\nZ\xfcrich,2000,1\n".encode("latin-1"), r"not UTF-8 text .* save it as UTF-8"),
    (b"region;year;v\nA;2000;1\n", r"one column 'region;year;v': the file seems separated by semicolons"),
    (b"region,year,time,v\nA,2000,1,1\n", r"a column named 'time' besides the time column 'year'; rename it"),
    (b"region,year,entity,v\nA,2000,x,1\n", r"a column named 'entity' besides the entity column 'region'"),
    (b"region,year,v\n,2000,1\n", r"column 'region' is empty on line 2"),
    (b"region,t,v\nA,2000,1\n", r"\(data.entity_column = 'region', data.time_column = 'year': set them in the params "
                              r"file to the file's own column names\): missing column\(s\) year; found region, t, v"),
    (b"region, year, v\nA, 2000, 1\n", r"\(data.entity_column = .*\): missing column\(s\) year; found region,  year,  "
                                      r"v; the header writes ' year' with spaces around the name: remove them"),
    (b'region,year,v\nA,"2000,1\nB,2001,1\n', r"line 2 opens a quoted field that runs on over the next lines; a "
                                              r"quote \(\"\) that opens a field and never closes is the usual cause"),
    (b'region,year,v\n \t\n""\nB,2001,1\n', r"line 3 has 1 field\(s\) where the header has 3"),  # "" is a row
    # pandas filled the missing fields with NaN without a word: a line cut short, a last line broken off
    (b"region,year,v,w\nA,2000,1,2\nA,2001,1\n", r"line 3 has 3 field\(s\) where the header has 4 \(A,2001,1\): "
                                                 r"the line is cut short"),
    (b"region,year,v,w\nA,2000,1,2\nA,20", r"line 3 has 2 field\(s\) where the header has 4"),
])
def test_malformed_csv_names_the_file_and_the_fix(tmp_path, content, message):
    csv = tmp_path / "mine.csv"
    csv.write_bytes(content)
    with pytest.raises(sources.SourceError, match=rf"mine.csv:? {message}"):
        sources.load_csv(csv, "region", "year")


def test_a_field_longer_than_the_csv_modules_limit_is_read_or_named_with_its_line(tmp_path):
    """A 300 kB text cell (over the csv module's 128 KiB field limit, which stopped the scan with "field larger than
    field limit" and no file or line) is read as pandas reads it; a quote that never closes before such a stretch is
    named as the cause, with the file; the csv module's limit is left as it was."""
    import csv as csv_module

    long = "a" * 300_000
    csv = tmp_path / "mine.csv"
    csv.write_text(f"region,year,v,note\nA,2000,1,{long}\nA,2001,2,short\n")
    limit = csv_module.field_size_limit()
    frame = sources.load_csv(csv, "region", "year")
    assert frame.note.str.len().tolist() == [300_000, 5] and csv_module.field_size_limit() == limit
    csv.write_text(f'region,year,v,note\nA,2000,1,short\nA,2001,2,"{long}\nA,2002,3,x\n')
    with pytest.raises(sources.SourceError, match=r"mine.csv: pandas cannot read it .* a quote \(\"\) that opens a "
                                                  r"field and never closes is the usual cause"):
        sources.load_csv(csv, "region", "year")
    assert csv_module.field_size_limit() == limit


def test_a_last_line_without_a_line_break_is_named_as_possibly_cut(tmp_path):
    """All its fields are there, so only the missing line break can tell that '0.51' may be '0.5132' cut off."""
    csv = tmp_path / "mine.csv"
    csv.write_bytes(b"region,year,v\nA,2000,0.5132\nA,2001,0.51")
    with pytest.warns(UserWarning, match=r"mine.csv: the file does not end with a line break, so its last line "
                                         r"\(line 3\) may have been cut off"):
        frame = sources.load_csv(csv, "region", "year")
    assert frame.v.tolist() == [0.5132, 0.51]  # read as written: a warning, not a refusal
    for ending in (b"\n", b"\r\n"):
        csv.write_bytes(b"region,year,v\nA,2000,0.5132\nA,2001,0.51" + ending)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sources.load_csv(csv, "region", "year")


def test_a_column_named_twice_in_the_header_is_refused_naming_the_columns(tmp_path):
    """pandas reads a repeated name as 'outcome.1' and the params' 'outcome' takes the first column, silently."""
    csv = tmp_path / "mine.csv"
    csv.write_text("region,year,outcome,x,outcome\nA,2000,1,2,3\n")
    with pytest.raises(sources.SourceError, match=r"mine.csv: the header names a column more than once: 'outcome' "
                                                  r"\(columns 3 and 5\); only one of them would be read, silently\. "
                                                  r"Rename or delete the repeats"):
        sources.load_csv(csv, "region", "year")
    csv.write_text("region,year,x,x \nA,2000,1,2\n")  # the same name but for a space: which one is meant?
    with pytest.raises(sources.SourceError, match=r"more than once: 'x' and 'x ' \(columns 3 and 4\)"):
        sources.load_csv(csv, "region", "year")
    csv.write_text("region,year,v,,\nA,2000,1,,\n")  # empty names (a spreadsheet's blank columns) are no repeats
    assert list(sources.load_csv(csv, "region", "year").v) == [1]


@pytest.mark.parametrize("rows, line, cause", [
    (["A,2000,0.5", "A,2001,0,43"], 3, r"A decimal comma \(0,43\) splits a number in two: save the file with decimal "
                                       r"points \(0.43\); a text holding a comma must be in quotes"),
    (["A,2000,0,43", "A,2001,0.5"], 2, "A decimal comma"),  # on the first data line pandas took 'region' as the index
    (["A,2000,1", "", "A,2001,1,"], 4, r"The line ends in 1 comma\(s\) too many: delete them"),  # a blank line counts
])
def test_a_line_with_more_fields_than_the_header_names_the_line_the_counts_and_the_fix(tmp_path, rows, line, cause):
    csv = tmp_path / "mine.csv"
    csv.write_text("region,year,v\n" + "\n".join(rows) + "\n")
    with pytest.raises(sources.SourceError, match=rf"mine.csv: line {line} has 4 fields where the header has 3 "
                                                  rf"\(A,20\d\d,.*\)\. {cause}"):
        sources.load_csv(csv, "region", "year")


@pytest.mark.parametrize("cell, message", [
    ("", r"has no value on line 4 \(entity 'B'\); every row needs its time: fill it in"),
    ("NA", r"has no value on line 4 \(entity 'B'\)"),
    ("2001.5", r"holds '2001.5' on line 4 \(entity 'B'\), not a whole number below 1e\+09; .*number the periods "
               r"as consecutive steps"),
    ("inf", r"holds 'inf' on line 4 \(entity 'B'\), not a whole number"),
    ("1e20", r"holds '1e\+20' on line 4 \(entity 'B'\), not a whole number below 1e\+09"),  # int64 wrapped it round
    # a pandas Period or a date written to the CSV: the fix names consecutive steps
    ("2001Q1", r"holds '2001Q1' on line 4 \(entity 'B'\), not a whole number .*number the periods as consecutive"),
    ("2001-01-01", r"holds '2001-01-01' on line 4 \(entity 'B'\), not a whole number"),
])
def test_a_missing_or_fractional_time_names_the_line_and_the_entity(tmp_path, cell, message):
    csv = tmp_path / "mine.csv"
    csv.write_text(f"region,year,v\nA,2000,1\n\nB,{cell},2\n")  # a blank line, which pandas skips, still counts
    with pytest.raises(sources.SourceError, match=rf"mine.csv: column 'year' {message}"):
        sources.load_csv(csv, "region", "year")


@pytest.mark.parametrize("name, writer, what", [
    ("mine.csv", lambda path, text: path.write_bytes(gzip.compress(text)), "a gzip-compressed file: unpack it first"),
    ("mine.csv.gz", lambda path, text: path.write_bytes(gzip.compress(text)), "a gzip-compressed file"),
    ("mine.csv", lambda path, text: pd.DataFrame({"region": ["A"], "year": [2000]}).to_excel(path, index=False),
     r"a zip archive, which is what an Excel workbook \(.xlsx\) is: save the sheet as 'CSV UTF-8'"),
])
def test_a_compressed_file_or_a_workbook_named_csv_says_what_it_is(tmp_path, name, writer, what):
    """They were all told to re-encode with iconv -f latin1, which cannot help."""
    path = tmp_path / name
    writer(path, b"region,year,v\nA,2000,1\n")
    with pytest.raises(sources.SourceError, match=rf"{name}: not a CSV but {what}") as err:
        sources.load_csv(path, "region", "year")
    assert "iconv" not in str(err.value)


def test_a_year_typo_far_from_every_other_time_names_the_line(tmp_path):
    """20003 among 2000..2011 was dropped as outside the window and its year interpolated, without a word."""
    csv = tmp_path / "mine.csv"
    rows = [f"{e},{t},1" for e in "AB" for t in range(2000, 2012) if (e, t) != ("B", 2003)]
    csv.write_text("region,year,v\n" + "\n".join(rows[:17] + ["B,20003,1"] + rows[17:]) + "\n")
    with pytest.raises(sources.SourceError, match=r"column 'year' holds 20003 on line 19 \(entity 'B'\), far from "
                                                  r"every other time \(they lie in 2000..2011\): a typo"):
        sources.load_csv(csv, "region", "year")
    csv.write_text("region,year,v\n" + "\n".join(rows) + "\nB,1990,1\n")  # a real earlier year is no typo
    assert sources.load_csv(csv, "region", "year").time.min() == 1990


def test_ids_that_differ_only_by_spaces_around_them_are_refused_naming_both(tmp_path):
    """Ids are kept exactly as written, so 'USA ' and 'USA' were two entities, each with part of the years."""
    csv = tmp_path / "mine.csv"
    csv.write_text("region,year,v\nUSA,2000,1\nFRA,2000,1\nFRA ,2001,1\n\tUSA,2001,2\nUSA,2002,1\n")
    with pytest.raises(sources.SourceError, match=r"mine.csv: column 'region' writes the entity 'USA' in 2 ways that "
                                                  r"differ only by spaces around it, by Unicode normalisation.*: "
                                                  r"'USA' \(line 2\) and '\\tUSA' \(line 5\) \(also: 'FRA'\); "
                                                  r".*remove the spaces"):
        sources.load_csv(csv, "region", "year")
    nfd, nfc = unicodedata.normalize("NFD", "Curaçao"), unicodedata.normalize("NFC", "Curaçao")  # one id, two ways
    csv.write_text(f"region,year,v\n{nfc},2000,1\n{nfd},2001,1\n", encoding="utf-8")
    with pytest.raises(sources.SourceError, match=r"writes the entity 'Curaçao' in 2 ways .* normalised to NFC"):
        sources.load_csv(csv, "region", "year")
    # a zero-width space copied in with the 2012 rows: two entities, one of them then dropped without a word
    csv.write_text("region,year,v\nregion_00,2011,1\nregion_00\u200b,2012,1\n", encoding="utf-8")
    with pytest.raises(sources.SourceError, match=r"writes the entity 'region_00' in 2 ways .*invisible characters .*"
                                                  r"'region_00\\u200b' \(line 3\)"):
        sources.load_csv(csv, "region", "year")
    csv.write_text("region,year,v\nNew York ,2000,1\nNew York ,2001,2\n")  # written one way: one entity, as written
    assert list(sources.load_csv(csv, "region", "year").entity) == ["New York "] * 2


# --- downloads


class Handler(http.server.BaseHTTPRequestHandler):
    files: dict = {}

    def do_GET(self):  # noqa: N802 (http.server's naming)
        body, announced = self.files.get(self.path, (None, None))
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(announced))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def leftovers(directory):
    return sorted(p.name for p in directory.iterdir())


def test_download_records_url_and_checksum(server, tmp_path):
    body = b"country,year\n" + b"AAA,2000\n" * 1000
    Handler.files["/ok.csv"] = (body, len(body))
    record = sources.download(f"{server}/ok.csv", tmp_path / "owid-co2-data.csv")
    assert (tmp_path / "owid-co2-data.csv").read_bytes() == body
    assert record["sha256"] == hashlib.sha256(body).hexdigest() and record["bytes"] == len(body)
    saved = json.loads((tmp_path / "owid-co2-data.csv.source.json").read_text())
    assert saved["url"] == f"{server}/ok.csv" and saved["sha256"] == record["sha256"] and saved["downloaded_utc"]
    assert leftovers(tmp_path) == ["owid-co2-data.csv", "owid-co2-data.csv.source.json"]


def test_truncated_or_failed_download_leaves_no_file(server, tmp_path):
    Handler.files["/short.csv"] = (b"abc", 1000)  # announces more than it sends
    with pytest.raises(Exception):  # noqa: B017 (urllib raises IncompleteRead, or our own OSError)
        sources.download(f"{server}/short.csv", tmp_path / "owid-energy-data.csv")
    with pytest.raises(Exception):  # noqa: B017
        sources.download(f"{server}/absent.csv", tmp_path / "owid-energy-data.csv")
    assert leftovers(tmp_path) == []


def test_download_extracts_the_member_of_a_dataset_archive(server, tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("readme.txt", "PWT")
        archive.writestr("data/pwt110.dta", b"stata bytes")
    Handler.files["/bundle"] = (buffer.getvalue(), len(buffer.getvalue()))
    record = sources.download(f"{server}/bundle", tmp_path / "pwt110.dta")
    assert (tmp_path / "pwt110.dta").read_bytes() == b"stata bytes"
    assert record["sha256"] == hashlib.sha256(b"stata bytes").hexdigest()
    assert leftovers(tmp_path) == ["pwt110.dta", "pwt110.dta.source.json"]


def test_domains_without_their_input_files_are_skipped_with_the_reason(tmp_path, monkeypatch):
    from acgate.config import load_params
    from acgate.data.sources import missing_inputs

    monkeypatch.setenv("ACGATE_RAW_DIR", str(tmp_path))
    energy = load_params(ROOT / "params" / "energy.yaml")
    why = missing_inputs(energy, ROOT)
    assert "make data" in why
    assert all(n in why for n in ("owid-co2-data.csv", "owid-energy-data.csv", "wgidataset.xlsx"))
    economics = load_params(ROOT / "params" / "economics.yaml")
    assert "pwt110.dta not found" in missing_inputs(economics, ROOT)
    (tmp_path / "pwt110.csv").write_text("countrycode,year\n")  # an accepted form of the PWT file
    assert missing_inputs(economics, ROOT) == ""
    assert [p.name for p in sources.locate_inputs(economics, ROOT)[0]] == ["pwt110.csv"]
    own = load_params(ROOT / "params" / "example_panel.yaml")  # a user's CSV: the key that names it, not make data
    monkeypatch.setattr(sources, "locate_inputs", lambda params, root: ([], [root / params.data.csv_file]))
    assert missing_inputs(own, ROOT).endswith("not found (data.csv_file, relative to the project root)")


@pytest.mark.parametrize("where", ["/etc/passwd", "../../../../../../../../etc/passwd", "link"])
def test_a_panel_is_read_only_from_the_folders_named_for_it(where, tmp_path, monkeypatch):
    """A params file cannot point the project at any readable file (an absolute path, a climb out of the project, a
    link in data/raw to a file elsewhere): refused before anything is read, saying where to put the CSV; nothing of
    the file is quoted. A folder named in $ACGATE_DATA_DIRS is read."""
    from acgate.config import load_params
    from acgate.data import prep

    root = tmp_path / "project"
    (root / "data" / "raw").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "panel.csv").write_text("entity,time,y\nroot:x:0:0,2000,1\n")
    (root / "data" / "raw" / "link").symlink_to(outside / "panel.csv")
    monkeypatch.delenv(sources.DATA_DIRS, raising=False)
    monkeypatch.delenv("ACGATE_RAW_DIR", raising=False)
    params = load_params(ROOT / "params" / "example_panel.yaml")
    params = dataclasses.replace(params, data=dataclasses.replace(
        params.data, csv_file="data/raw/link" if where == "link" else where))
    with pytest.raises(sources.SourceError) as err:
        prep.load_long(params, root)
    message = str(err.value)
    assert "outside the folders a panel is read from" in message and "ACGATE_DATA_DIRS=" in message
    assert "root:" not in message
    with pytest.raises(sources.SourceError, match="outside the folders"):
        sources.locate_inputs(params, root)
    if where == "link":
        monkeypatch.setenv(sources.DATA_DIRS, str(outside))  # the user names the folder: read
        with pytest.raises(sources.SourceError, match="missing column"):  # read, and checked as a panel
            prep.load_long(params, root)


def test_a_download_that_fails_says_what_to_fetch_by_hand_and_where_to_put_it(server, tmp_path, capsys):
    """Offline (or a moved file), `make data` ends in a message, not a traceback: each address and the path its file
    goes to."""
    with pytest.raises(SystemExit) as stop:
        sources.main(["download", "owid-co2-data.csv", "--raw-dir", str(tmp_path), "--url", f"{server}/absent.csv"])
    message = str(stop.value)
    assert "1 of 1 files could not be downloaded" in message and f"{server}/absent.csv" in message
    assert str(tmp_path / "owid-co2-data.csv") in message and "ACGATE_RAW_DIR" in message
    assert "failed: HTTPError" in capsys.readouterr().out and leftovers(tmp_path) == []


@pytest.mark.parametrize(("content", "message"), [
    ("region,year,v\nA,2000,1\n".encode("utf-16"), r"not a CSV but UTF-16 text .*iconv -f utf-16 -t utf-8"),
    (b"sep=,\nregion,year,v\nA,2000,1\n", r"line 1 is Excel's separator hint 'sep=,', not the header; delete"),
    (b"# exported 2026\n# by a tool\nregion,year,v\nA,2000,1\n", r"line 1 \('# exported 2026'\) is a comment, not "
                                                                  r"the header; delete the lines above the header"),
])
def test_a_file_whose_first_line_is_no_header_says_what_it_is(tmp_path, content, message):
    """A UTF-16 file was told to convert from latin-1; Excel's 'sep=,' line and comment lines above the header were
    taken as the header ("line 2 has 3 fields where the header has 1", about decimal commas)."""
    csv = tmp_path / "mine.csv"
    csv.write_bytes(content)
    with pytest.raises(sources.SourceError, match=message):
        sources.load_csv(csv, "region", "year")
