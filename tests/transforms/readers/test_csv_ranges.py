"""CSV by byte ranges (transforms/readers/csv_ranges.py): the rows the ranges of a file own,
in range order, are the rows of the whole file as the reader's RowSplitter cuts them, byte
for byte -- or the join check fails loudly; never a silently cut or doubled row."""

from __future__ import annotations

import csv
import io
import pathlib

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from beam_tfrecords.transforms.readers import csv_ranges as cr
from beam_tfrecords.transforms.readers.csv_columnar import BOM, RowSplitter
from beam_tfrecords.transforms.readers.ranges import (
    ByteRange,
    RangeError,
    bytes_reader,
    check_links,
    plan_ranges,
)

LIMIT = 1 << 20
FAST = settings(max_examples=80, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def whole_rows(data: bytes, dialect: cr.Dialect, limit: int = LIMIT) -> list:
    """(offset, row) of every row of the file, header first, read at once by the reader's
    splitter."""
    splitter = RowSplitter(io.BytesIO(data), dialect.quote, dialect.delimiter, limit,
                           strip_bom=True)
    at, out = splitter.start, []
    for row in splitter:
        out.append((at, row))
        at += len(row) if type(row) is bytes else row.size
    return out


def ranged_rows(data: bytes, cuts: list[ByteRange], dialect: cr.Dialect, *,
                ncols: int | None = None, limit: int = LIMIT, lookahead: int = 1 << 20
                ) -> list:
    """The rows every range owns, in range order, after the join check (RangeError)."""
    read_at = bytes_reader(data)
    rows, links = [], []
    for span in cuts:
        start = cr.csv_range_start(read_at, span.start, dialect, ncols=ncols,
                                   lookahead=lookahead)
        assert start.first >= span.start or span.start <= cr.first_start(read_at)
        owned = cr.RangeRows(read_at, start, span.end, dialect, limit)
        got = list(owned)
        assert all(span.start <= at < span.end for at, _ in got)
        rows += got
        links.append(owned.link)
    check_links("f.csv", links, cr.describe_state)
    return rows


def cut_at(size: int, points: list[int]) -> list[ByteRange]:
    bounds = sorted({0, size, *(p for p in points if 0 < p < size)})
    return [ByteRange(a, b) for a, b in zip(bounds, bounds[1:])] or [ByteRange(0, 0)]


def either_equal_or_refused(data: bytes, cuts: list[ByteRange], dialect: cr.Dialect,
                            **kw) -> bool:
    """The safety property: equal rows, or a RangeError. True when equal."""
    try:
        got = ranged_rows(data, cuts, dialect, **kw)
    except RangeError:
        return False
    assert got == whole_rows(data, dialect, kw.get("limit", LIMIT))
    return True


# -- generated files --------------------------------------------------------------------------

ANY = st.lists(st.sampled_from([b"a", b"b", b",", b'"', b"\n", b"\r", b"\r\n", b'""', b" "]),
               max_size=60).map(b"".join)


@st.composite
def written_csv(draw, tame: bool = False):
    """CSV as csv.writer writes it: fields with delimiters, quotes, CR, LF and CRLF inside;
    rows ended by LF or CRLF; maybe a BOM, maybe no line end at the end. ``tame``: quoted
    fields start and end with a letter (as text columns do)."""
    ncols = draw(st.integers(1, 4))
    inner = st.sampled_from(["a", "b", "x y", ",", '"', "\n", "\r\n", "\r", ""])
    letters = st.sampled_from(["a", "bc", "Z"])
    if tame:
        field = st.one_of(letters, st.tuples(letters, st.lists(inner, max_size=4), letters).map(
            lambda t: t[0] + "".join(t[1]) + t[2]))
    else:
        field = st.lists(inner, max_size=4).map("".join)
    rows = draw(st.lists(st.lists(field, min_size=ncols, max_size=ncols), min_size=1,
                         max_size=8))
    header = [f"c{i}" for i in range(ncols)]
    out = io.StringIO(newline="")
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    # csv.writer quotes a field holding the characters of its line end only: a CR in a field
    # of a file of LF line ends is written bare (a row end to any reader). Tame files quote.
    quote_all = draw(st.booleans()) or (tame and ending == "\n")
    writer = csv.writer(out, quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL,
                        lineterminator=ending)
    writer.writerow(header)
    for row in rows:
        if ncols == 1 and row == [""]:
            row = ["a"]  # csv.writer writes "" as an empty line, which csv reads as no cells
        writer.writerow(row)
    text = out.getvalue().encode()
    if draw(st.booleans()):
        text = text.rstrip(b"\r\n")
    if draw(st.booleans()):
        text = BOM + text
    return text, ncols


def cuts_of(data: bytes, draw) -> list[ByteRange]:
    how = draw(st.sampled_from(["split", "points"]))
    if how == "split":
        return plan_ranges(len(data), draw(st.integers(1, max(1, len(data)))))
    return cut_at(len(data), draw(st.lists(st.integers(0, len(data)), max_size=6)))


# -- the properties ---------------------------------------------------------------------------

@FAST
@given(data=ANY, bom=st.booleans(), draw=st.data())
def test_any_bytes_split_anywhere_give_the_whole_rows_or_a_loud_error(data, bom, draw):
    """Malformed quoting, unterminated quotes, lone CRs, empty lines: whatever the text and
    the cuts, the ranges' rows are the whole file's or the join check refuses them."""
    data = (BOM if bom else b"") + data
    either_equal_or_refused(data, cuts_of(data, draw.draw), cr.Dialect())


@FAST
@given(text=written_csv(), draw=st.data())
def test_written_csv_split_anywhere(text, draw):
    """CSV as a writer writes it -- line breaks and quotes inside fields, CRLF -- with cuts
    inside quoted fields, right after quotes, between CR and LF and at the end."""
    data, ncols = text
    cuts = cuts_of(data, draw.draw)
    either_equal_or_refused(data, cuts, cr.Dialect(), ncols=draw.draw(
        st.sampled_from([None, ncols])))


@FAST
@given(text=written_csv(tame=True), draw=st.data())
def test_text_columns_always_join_up(text, draw):
    """Quoted text that starts and ends with a letter, whatever it holds between (line
    breaks, doubled quotes, delimiters): the guess is always right, so no error either."""
    data, ncols = text
    cuts = cuts_of(data, draw.draw)
    assert either_equal_or_refused(data, cuts, cr.Dialect(), ncols=ncols)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=written_csv(), draw=st.data())
def test_every_single_cut_of_a_written_file(text, draw):
    """Two ranges cut at every byte of a file (so at every kind of position)."""
    data, ncols = text
    assume(len(data) < 100)
    for point in range(len(data) + 1):
        either_equal_or_refused(data, cut_at(len(data), [point]), cr.Dialect(), ncols=ncols)


@FAST
@given(data=ANY, quote=st.sampled_from(['"', "'", "§"]),
       delimiter=st.sampled_from([",", ";", "\t", "é"]), draw=st.data())
def test_other_dialects_and_multibyte_characters(data, quote, delimiter, draw):
    """The configured delimiter and quote character, also when they are two UTF-8 bytes."""
    text = data.replace(b'"', quote.encode()).replace(b",", delimiter.encode())
    dialect = cr.Dialect(quote.encode(), delimiter.encode())
    either_equal_or_refused(text, cuts_of(text, draw.draw), dialect)


@FAST
@given(data=ANY, bom=st.booleans())
def test_the_walk_cuts_rows_where_the_reader_does(data, bom):
    """The parse the guesses are scored on is the reader's: from the file's start its row
    ends are RowSplitter's, and it ends inside a quoted field exactly when the reader finds
    an unterminated quote."""
    data = (BOM if bom else b"") + data
    read_at = bytes_reader(data)
    head = cr.first_start(read_at)
    events = list(cr._Walk(read_at, cr.Dialect(), head, False))
    ends = [at for kind, at in events if kind == cr._ROW]
    rows = whole_rows(data, cr.Dialect())
    complete = [(at, row) for at, row in rows if type(row) is bytes or row.complete]
    assert ends == [at + (len(row) if type(row) is bytes else row.size) for at, row in complete]
    assert any(kind == cr._OPEN for kind, _ in events) == (len(complete) < len(rows))


@FAST
@given(data=ANY, at=st.integers(0, 80), quote=st.sampled_from(['"', "§"]),
       delimiter=st.sampled_from([",", "é"]), chunk=st.sampled_from([3, 1 << 16]))
def test_the_walk_from_inside_a_quoted_field_is_the_readers(data, at, quote, delimiter,
                                                            chunk):
    """A range's first row under "in" comes from the walk: from any offset, its row ends
    are those RowSplitter finds in the same bytes after an opening quote (which starts it
    inside a quoted field), with multi-byte characters and reads of 3 bytes."""
    q, d = quote.encode(), delimiter.encode()
    text = data.replace(b'"', q).replace(b",", d)
    at = min(at, len(text))
    saved, cr._CHUNK = cr._CHUNK, chunk
    try:
        events = list(cr._Walk(bytes_reader(text), cr.Dialect(q, d), at, True))
    finally:
        cr._CHUNK = saved
    splitter = RowSplitter(io.BytesIO(q + text[at:]), q, d, LIMIT)
    ends, offset = [], at - len(q)
    for row in splitter:
        offset += len(row) if type(row) is bytes else row.size
        if type(row) is bytes or row.complete:
            ends.append(offset)
    assert [o for kind, o in events if kind == cr._ROW] == ends


@settings(max_examples=60, deadline=None)
@given(data=ANY, draw=st.data())
def test_small_reads_cross_buffer_boundaries(data, draw):
    """Reading the file 3 bytes at a time changes nothing (a CR, a quote or a two-byte
    delimiter cut between reads)."""
    text = data.replace(b'"', "§".encode()).replace(b",", "é".encode())
    saved, cr._CHUNK = cr._CHUNK, 3
    try:
        either_equal_or_refused(text, cuts_of(text, draw.draw),
                                cr.Dialect("§".encode(), "é".encode()))
    finally:
        cr._CHUNK = saved


def test_rows_longer_than_the_limit_keep_their_place():
    """A row over max_record_bytes is a RowSpan without data in both reads, same offsets."""
    data = b"h\n" + b"x" * 50 + b"\n" + b'"' + b"y\n" * 30 + b'"\nz\n'
    for split in range(1, len(data) + 1):
        assert either_equal_or_refused(data, plan_ranges(len(data), split), cr.Dialect(),
                                       limit=20)


# -- fixed cases ------------------------------------------------------------------------------

CASES = {
    "quoted line breaks": b'id,t\n1,"a\nb\nc"\n2,"d\r\ne"\r\n3,f\n',
    "doubled quotes": b'id,t\n1,"say ""hi""\nthere"\n2,"""\n"""\n3,x',
    "cr only": b'id,t\r1,"a\rb"\r2,c\r',
    "unterminated": b'id,t\n1,a\n2,"never\nclosed\n3,x\n',
    "bom": BOM + b'id,t\n1,"a\nb"\n',
    "empty lines": b"id\n\n\n1\n\r\n\r2\n",
    "quote in unquoted field": b'id,t\n1,a"b\n2,"c\nd"\n',
    "closing quote then text": b'id,t\n1,"a"b\nc\n2,x\n',
    "ends after a closing quote": b'id,t\n1,"a\nb"',
    "no line end at all": b"id,t",
    "empty": b"",
    "only a bom": BOM,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixed_cases_split_at_every_byte_and_every_size(name):
    """Regression texts: two ranges cut at every byte, and ranges of every size."""
    data = CASES[name]
    for point in range(len(data) + 1):
        either_equal_or_refused(data, cut_at(len(data), [point]), cr.Dialect())
    for split in range(1, len(data) + 1):
        either_equal_or_refused(data, plan_ranges(len(data), split), cr.Dialect())


def test_fixed_text_cases_join_up_everywhere():
    """The cases a CSV writer makes from text columns never need the error."""
    for name in ("quoted line breaks", "cr only", "bom"):
        data = CASES[name]
        for point in range(len(data) + 1):
            assert either_equal_or_refused(data, cut_at(len(data), [point]), cr.Dialect(),
                                           ncols=2 if name != "cr only" else None), (name, point)


def test_a_wrong_guess_is_a_loud_error_naming_file_and_byte():
    """A quoted field longer than the lookahead with nothing in it to tell: the second
    range guesses "a row starts here", and the join check refuses it."""
    data = b'id,t\n1,"' + b"words\n" * 40 + b'"\n2,x\n'
    cuts = [ByteRange(0, 20), ByteRange(20, len(data))]
    with pytest.raises(RangeError, match=r"^f\.csv: byte 20: range 1 assumed a row start "
                                         r"there, but the range before it found the inside "
                                         r"of a quoted field: .* source\.split_bytes"):
        ranged_rows(data, cuts, cr.Dialect(), lookahead=32)
    assert ranged_rows(data, cuts, cr.Dialect()) == whole_rows(data, cr.Dialect())


def test_the_start_says_what_it_assumed_and_why():
    """Inside a quoted field the "in" parse meets no irregular quoting, the "out" parse a
    quote inside an unquoted field; the two agree from the next row."""
    data = b'id,t\n1,"a\nb",c\n2,d\n'
    start = cr.csv_range_start(bytes_reader(data), 9, cr.Dialect())
    assert (start.point, start.state, start.first, start.agreed) == (10, cr.IN, 15, 15)
    assert start.hypotheses == (cr.Hypothesis(cr.OUT, 10, 1, 0), cr.Hypothesis(cr.IN, 15, 0, 0))


@pytest.mark.parametrize("offset,point", [(0, 0), (1, 5), (5, 5), (6, 10), (9, 10), (10, 10),
                                          (11, 12), (12, 12), (13, 14), (14, 14)])
def test_points_follow_lf_lone_cr_and_whole_crlf(offset, point):
    data = b"id,t\n1,a\r\n2\r3\n"  # points: after the LF (5), the CRLF (10), the CR (12)
    assert cr.point_at(bytes_reader(data), offset) == point


def test_a_range_without_a_line_end_passes_the_state_on():
    """A range with no point before its end owns nothing and assumes nothing."""
    data = b"id\n" + b"x" * 30 + b"\n1\n"
    read_at = bytes_reader(data)
    start = cr.csv_range_start(read_at, 10, cr.Dialect())
    owned = cr.RangeRows(read_at, start, 20, cr.Dialect(), LIMIT)
    assert list(owned) == [] and owned.link.passes


def test_a_quoted_field_longer_than_the_lookahead_is_told_by_the_headers_width():
    """Past the lookahead the "in" parse has seen no quote at all; the "out" parse reads the
    field's lines as rows of one cell where the header has two, so "in" wins -- and the
    range's first row is found beyond the lookahead."""
    data = b'id,t\n1,"' + b"some words here\n" * 2000 + b'"\n2,x\n'
    cuts = [ByteRange(0, 1000), ByteRange(1000, len(data))]
    assert ranged_rows(data, cuts, cr.Dialect(), ncols=2, lookahead=4096) == whole_rows(
        data, cr.Dialect())
    start = cr.csv_range_start(bytes_reader(data), 1000, cr.Dialect(), ncols=2,
                               lookahead=4096)
    assert (start.state, start.first) == (cr.IN, len(data) - 4)



@FAST
@given(text=written_csv(), lookahead=st.sampled_from([1, 8, 64]), quiet=st.sampled_from(
    [0, 4, 32]), draw=st.data())
def test_short_lookahead_and_quiet_only_make_more_refusals(text, lookahead, quiet, draw):
    """However little the two parses are compared, a wrong guess is refused, never used."""
    data, ncols = text
    saved, cr.QUIET = cr.QUIET, quiet
    try:
        either_equal_or_refused(data, cuts_of(data, draw.draw), cr.Dialect(), ncols=ncols,
                                lookahead=lookahead)
    finally:
        cr.QUIET = saved


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(written_csv(tame=True), min_size=1, max_size=6), draw=st.data())
def test_longer_text_files_always_join_up(texts, draw):
    """Several written files' rows one after another under one header: longer files with
    more cuts, and still never a refusal."""
    ncols = texts[0][1]
    parts = [text.removeprefix(BOM).split(b"\n", 1) for text, n in texts if n == ncols]
    data = parts[0][0] + b"\n" + b"".join(
        rows if rows.endswith(b"\n") else rows + b"\n" for _, rows in
        (p for p in parts if len(p) == 2) if rows)
    assert either_equal_or_refused(data, cuts_of(data, draw.draw), cr.Dialect(), ncols=ncols)


@pytest.mark.parametrize("name,splits", [("people.csv", (7, 100, 1000)),
                                         ("demo.csv", (20000, 100000))])
def test_the_sample_files_split_without_refusal(name, splits):
    """The project's sample CSVs (a BOM, CRLF, quoted JSON arrays; 370 KB of plain rows)."""
    data = (pathlib.Path(__file__).resolve().parents[3] / "configs" / "data" / name
            ).read_bytes()
    ncols = len(data.split(b"\n", 1)[0].split(b","))
    for split in splits:
        assert either_equal_or_refused(data, plan_ranges(len(data), split), cr.Dialect(),
                                       ncols=ncols)
