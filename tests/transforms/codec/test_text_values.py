"""Text -> int64 (transforms/codec/text_values.py): whole numbers and dates as a Parquet double
or timestamp of the same value gives them, and the column-wise versions against the per-value
reference -- what they decide is the reference's value, what they leave is finished one by
one, and an ordinary column is decided whole."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_tfrecords.transforms.codec import text_values as tv
from beam_tfrecords.transforms.codec.arrow_columns import temporal_values
from beam_tfrecords.transforms.codec.coercion import to_int64

UNITS = ["s", "ms", "us", "ns", "days"]


def reference(text, unit, fmt=tv.ISO8601):
    try:
        return tv.parse_time(text, unit, fmt)
    except tv.TextValueError as err:
        return ("refused", err.reason)


# -- one value: as a Parquet timestamp of the same instant ---------------------------------------

# (text, the instant as ISO-8601 UTC nanoseconds numpy parses, the offset it carries in minutes)
INSTANTS = [
    ("2024-03-01", "2024-03-01T00:00:00", 0),
    ("2024-03-01T12:34:56", "2024-03-01T12:34:56", 0),
    ("2024-03-01 12:34:56.123456", "2024-03-01T12:34:56.123456", 0),
    ("2024-03-01T12:34:56Z", "2024-03-01T12:34:56", 0),
    ("2024-03-01T12:34:56+02:00", "2024-03-01T12:34:56", 120),
    ("2024-03-01T12:34:56+0200", "2024-03-01T12:34:56", 120),
    ("2024-03-01T12:34:56-05", "2024-03-01T12:34:56", -300),
    ("2024-03-01T12:34", "2024-03-01T12:34:00", 0),
    ("2024-03-01T12", "2024-03-01T12:00:00", 0),
    ("2024-03-01T12:34:56.123456789-05:30", "2024-03-01T12:34:56.123456789", -330),
    ("1969-12-31T23:59:59.5", "1969-12-31T23:59:59.5", 0),  # floors to second -1
    ("1969-12-31T23:59:59.999999999", "1969-12-31T23:59:59.999999999", 0),
    ("2000-02-29T23:59:59+23:59", "2000-02-29T23:59:59", 23 * 60 + 59),
    ("1677-09-22T00:00:00", "1677-09-22T00:00:00", 0),
    ("  2024-03-01T00:00:00Z ", "2024-03-01T00:00:00", 0),  # surrounding spaces
]


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("text,instant,offset", INSTANTS, ids=[c[0].strip() for c in INSTANTS])
def test_text_gives_what_a_parquet_timestamp_of_that_instant_gives(text, instant, offset, unit):
    ns = (np.datetime64(instant, "ns") - np.timedelta64(offset, "m")).astype(np.int64)
    stamps = pa.array([int(ns)], pa.timestamp("ns", tz="UTC"))
    values, overflow = temporal_values(stamps, None, unit)
    assert not overflow.any()
    assert tv.parse_time(text, unit) == int(values[0])


@pytest.mark.parametrize("unit", UNITS)
def test_microsecond_text_gives_what_a_python_datetime_gives(unit):
    # The per-row encoder's own ladder for datetime values (and Avro's timestamps).
    for text in ("2024-03-01T12:34:56.123456+02:00", "0001-01-01T00:00:00", "9999-12-31",
                 "1969-12-31T23:59:59.999999"):
        stamp = datetime.datetime.fromisoformat(text)
        try:
            want = to_int64("f", stamp, unit)
        except ValueError:  # years 1 and 9999 in nanoseconds
            want = ("refused", "outside the int64 range [-2**63, 2**63-1]")
        assert reference(text, unit) == want, text


@pytest.mark.parametrize("text,fmt,unit,expected", [
    ("01/03/2024 12:34", "%d/%m/%Y %H:%M", "s", 1709296440),
    ("1/3/2024 12:34", "%d/%m/%Y %H:%M", "s", 1709296440),  # strptime reads unpadded fields
    ("20240301", "%Y%m%d", "days", 19783),
    ("2024-03-01 12:34:56.5", "%Y-%m-%d %H:%M:%S.%f", "ms", 1709296496500),
    ("2024-03-01 12:34:56 +0200", "%Y-%m-%d %H:%M:%S %z", "s", 1709289296),
    ("01.03.2024", "%d.%m.%Y", "ns", 1709251200 * 10**9),
])
def test_strptime_formats(text, fmt, unit, expected):
    assert tv.parse_time(text, unit, fmt) == expected


@pytest.mark.parametrize("text,fmt,unit,words", [
    ("2024-02-30", tv.ISO8601, "s", "day is out of range for month"),
    ("0000-01-01", tv.ISO8601, "s", "year 0 is out of range"),
    ("2024-03-01T24:00", tv.ISO8601, "s", "not a valid time of day"),
    ("2024-03-01T23:59:60", tv.ISO8601, "s", "not a valid time of day"),
    ("2024-03-01T12:00+24:00", tv.ISO8601, "s", "not a valid UTC offset"),
    ("2024-03-01T12:34:56.1234567891", tv.ISO8601, "s", "not an ISO-8601 date"),  # 10 digits
    ("2024-3-1", tv.ISO8601, "s", "not an ISO-8601 date"),
    ("2024-03-01t12:00", tv.ISO8601, "s", "not an ISO-8601 date"),
    ("2024-03-01Z", tv.ISO8601, "s", "not an ISO-8601 date"),  # an offset needs a time
    ("1709251200", tv.ISO8601, "s", "not an ISO-8601 date"),
    ("2300-01-01", tv.ISO8601, "ns", "outside the int64 range"),
    ("32/01/2024", "%d/%m/%Y", "s", "not a date or datetime in format '%d/%m/%Y'"),
    ("01/01/2024 x", "%d/%m/%Y", "s", "unconverted data remains"),
])
def test_refusals_say_why(text, fmt, unit, words):
    with pytest.raises(tv.TextValueError, match=words.replace("(", r"\(")):
        tv.parse_time(text, unit, fmt)


@pytest.mark.parametrize("text,expected", [
    ("517.0", 517), ("1e3", 1000), ("-2.0E+2", -200), ("  12 ", 12), ("1.", 1), (".5e1", 5),
    ("-0.0", 0), ("00012.000", 12), ("9223372036854775807.0", 2**63 - 1),
    ("-9223372036854775808e0", -(2**63)), ("9007199254740993.0", 9007199254740993),  # exact
    ("\u0663.0", 3),  # a non-ASCII digit, as int() reads it
])
def test_whole_numbers(text, expected):
    assert tv.parse_whole(text) == expected


@pytest.mark.parametrize("text,words", [
    ("517.5", "fractional part"),
    ("1.0000000000000000001", "fractional part"),  # a double rounds it to 1.0; we do not
    ("1e-400", "fractional part"),  # a double would be 0.0
    ("9223372036854775808.0", "outside the int64 range"),
    ("1e19", "outside the int64 range"),
    ("1e999999999", "outside the int64 range"),  # never expanded
    ("nan", "not a finite number"),
    ("-Infinity", "not a finite number"),
    ("0x1f", "not a number"),
])
def test_whole_number_refusals(text, words):
    with pytest.raises(tv.TextValueError, match=words):
        tv.parse_whole(text)


def test_formats_are_checked():
    assert tv.check_format("iso8601") == "iso8601"
    assert tv.check_format("%d/%m/%Y %H:%M") == "%d/%m/%Y %H:%M"
    for bad, words in (("", "strptime layout"), ("dd/mm/yyyy", "no strptime directive"),
                       ("%d/%m/%Q", "%Q is not"), ("%Y %Y", "redefinition"),
                       ("%Y%", "not a strptime directive")):
        with pytest.raises(ValueError, match=words):
            tv.check_format(bad)


# -- whole columns against the reference --------------------------------------------------------

TWO = st.integers(0, 99).map(lambda n: f"{n:02d}")


@st.composite
def iso_like(draw):
    """ISO-8601 text, near misses and edges: impossible days and times, year 0000, 10
    fraction digits, lower-case separators, bad offsets, spaces around."""
    year = draw(st.one_of(st.sampled_from(["0000", "0001", "1677", "1969", "1970", "2024",
                                           "2262", "9999"]),
                          st.integers(0, 9999).map(lambda n: f"{n:04d}")))
    month = draw(st.one_of(st.sampled_from(["01", "02", "12"]), TWO))
    day = draw(st.one_of(st.sampled_from(["01", "28", "29", "30", "31"]), TWO))
    text = f"{year}-{month}-{day}"
    if draw(st.booleans()):
        text += draw(st.sampled_from(["T", " ", "T", "t", "_"]))
        fields = [draw(st.one_of(st.sampled_from(["00", "12", "23", "59"]), TWO))
                  for _ in range(draw(st.integers(1, 3)))]
        text += ":".join(fields)
        if len(fields) == 3 and draw(st.booleans()):
            text += "." + draw(st.text("0123456789", max_size=10))
        text += draw(st.sampled_from(["", "", "Z", "z", "+02", "-05:30", "+0530", "+24:00",
                                      "+02:60", "-00:00", "+23:59", "-2", "+02:3"]))
    return draw(st.sampled_from(["", "", " "])) + text + draw(st.sampled_from(["", "", "\t"]))


CELL = st.one_of(iso_like(), st.none(), st.text(max_size=12),
                 st.sampled_from(["", "2024-03-01", "2024-03-01T00:00:00Z"]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(CELL, max_size=40), st.sampled_from(UNITS), st.booleans(), st.integers(0, 2))
@pytest.mark.slow
def test_iso_columns_agree_with_the_reference(texts, unit, large, skip):
    arr = pa.array([None] * skip + texts, pa.large_string() if large else pa.string())
    arr = arr.slice(skip)  # an offset into the buffers, as list leaves have
    values, decided = tv.time_values(arr, unit)
    finished, refused = tv.text_times(arr, unit)
    for i, text in enumerate(texts):
        if text is None:
            assert not decided[i] and not refused[i] and finished[i] == 0
            continue
        want = reference(text, unit)
        if decided[i]:
            assert values[i] == want, (text, unit)
        if isinstance(want, tuple):
            assert refused[i], (text, want)
        else:
            assert not refused[i] and finished[i] == want, (text, unit)


FORMATS = ["%d/%m/%Y %H:%M", "%Y%m%d", "%Y-%m-%d %H:%M:%S", "%d.%m.%Y", "%Y-%m-%dT%H:%M:%S%z"]
MOMENT = st.datetimes(min_value=datetime.datetime(1, 1, 1),
                      max_value=datetime.datetime(9999, 12, 31, 23, 59, 59))


@st.composite
def formatted(draw, fmt):
    """Text in ``fmt`` and near misses: unpadded fields, impossible days, year 0000, spaces."""
    moment = draw(MOMENT)
    text = moment.strftime(fmt).replace("+0000", draw(st.sampled_from(["+0000", "Z", "+0230"])))
    if moment.year < 1000:
        text = text.replace(str(moment.year), f"{moment.year:04d}", 1)
    how = draw(st.sampled_from(["as is", "as is", "unpadded", "day 31", "year 0", "spaces"]))
    if how == "unpadded":
        text = text.replace("/0", "/").replace(".0", ".")
    elif how == "day 31":
        text = moment.replace(day=1).strftime(fmt).replace("01", "31", 1)
    elif how == "year 0":
        text = text.replace(f"{moment.year:04d}", "0000", 1)
    elif how == "spaces":
        text = " " + text.replace(" ", "  ")
    return text


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FORMATS).flatmap(
    lambda fmt: st.tuples(st.just(fmt), st.lists(st.one_of(formatted(fmt), st.none(),
                                                           st.text(max_size=8)), max_size=30))),
    st.sampled_from(UNITS))
@pytest.mark.slow
def test_strptime_columns_agree_with_the_reference(drawn, unit):
    fmt, texts = drawn
    arr = pa.array(texts, pa.string())
    values, decided = tv.time_values(arr, unit, fmt)
    finished, refused = tv.text_times(arr, unit, fmt)
    for i, text in enumerate(texts):
        if text is None:
            continue
        want = reference(text, unit, fmt)
        if decided[i]:
            assert values[i] == want, (text, fmt, unit)
        if isinstance(want, tuple):
            assert refused[i], (text, fmt, want)
        else:
            assert not refused[i] and finished[i] == want, (text, fmt, unit)


NUMBER_TEXT = st.one_of(
    st.text("0123456789+-.eE \u0663", max_size=14),
    st.integers(-(2**63), 2**63 - 1).map(lambda n: f"{n}.0"),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["9223372036854775807.0", "-9223372036854775808.0",
                     "9223372036854775808.0", "-9223372036854775809e0", "1e18", "1e19",
                     "1.0000000000000000001", "1e-400", "0.5e1", "-0.0", "1e999999999"]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(NUMBER_TEXT, max_size=40))
@pytest.mark.slow
def test_whole_number_columns_agree_with_the_reference(texts):
    values, decided = tv.whole_values(pa.array(texts, pa.string()))
    for i, text in enumerate(texts):
        if decided[i]:
            assert values[i] == tv.parse_whole(text), text


def test_an_ordinary_column_is_decided_whole():
    """Only values Arrow cannot prove go one by one: a column of mixed ISO forms, offsets and
    fraction lengths with a few bad values leaves at most a handful per bad value."""
    rng = np.random.default_rng(7)
    seconds = rng.integers(-2 * 10**9, 4 * 10**9, 3000)
    stamps = np.datetime64("1970-01-01T00:00:00", "s") + seconds.astype("timedelta64[s]")
    texts = [str(s) for s in stamps]
    for i in range(0, 3000, 3):
        texts[i] = texts[i].replace("T", " ") + ".123456789"[: 2 + i % 9] + "Z"
    for i in range(1, 3000, 7):
        texts[i] = texts[i][:10]
    bad = [17, 1500, 2999]
    for i in bad:
        texts[i] = "2024-02-30"
    _, decided = tv.time_values(pa.array(texts), "ms")
    assert decided.sum() >= len(texts) - 2 * tv._LEAF * len(bad)
    whole = [f"{n}.0" for n in seconds.tolist()] + ["1e3", "-2.0E+2", "517.5"]
    values, decided = tv.whole_values(pa.array(whole))
    assert decided.sum() >= len(whole) - 2 * tv._LEAF
    assert values[:3].tolist() == seconds[:3].tolist()
    fmt_texts = [str(s).replace("T", " ")[:16] for s in stamps[:1000]]
    _, decided = tv.time_values(pa.array(fmt_texts), "s", "%Y-%m-%d %H:%M")
    assert decided.all()
    fmt_texts[5] = fmt_texts[5].replace("-", "/")
    _, decided = tv.time_values(pa.array(fmt_texts, pa.large_string()).slice(3), "s",
                                "%Y-%m-%d %H:%M")  # gathered, not reshaped
    assert decided.sum() == 996 and not decided[2]
    _, decided = tv.time_values(pa.array([str(n) for n in seconds]), "s")  # epoch numbers
    assert not decided.any()
