"""One table of overflow and underflow rules (coercion.RANGE_RULES), held by every format.

Each example of each rule goes in as a CSV cell (the columnar and the per-row reader), a JSON
number (both JSON Lines paths), a Python value given to the API (a Decimal always; a float and
an int where they hold it exactly), and an Arrow column (what Parquet hands over: float64, and
decimal128 where it fits) -- and comes out as the rule says: a dead letter with the rule's
reason, or the value the rule stores. Plus the bound that keeps text away from Arrow's decimal
cast where that cast crashes or wraps around (text_values.decimal_text), as a property.
"""

from __future__ import annotations

import decimal
import json
import math
import struct

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_tfrecords.pipelines.config import CsvOptions, JsonlOptions
from beam_tfrecords.transforms.build_examples import _BuildExamplesFn
from beam_tfrecords.transforms.codec import text_values as tv
from beam_tfrecords.transforms.codec.coercion import RANGE_RULES, to_float, to_int64
from beam_tfrecords.transforms.codec.example_codec import ExampleDecoder
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec as F
from beam_tfrecords.transforms.codec.splits import SplitSpec
from beam_tfrecords.transforms.readers.framework import REJECTED, RecordChunk
from beam_tfrecords.transforms.readers.read_csv import _ReadCsvFile
from beam_tfrecords.transforms.readers.read_jsonl import _ReadJsonlFile

RULES = [pytest.param(rule, id=f"{rule.dtype}{rule.scale or ''}-{rule.case[:40]}")
         for rule in RANGE_RULES]
JSON_WORDS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _features(rule):
    return [F("id", "int64"), F("v", rule.dtype, scale=rule.scale)]


def _expected(rule, text):
    """What the rule stores for ``text``: an int, or a float32's bits; None: a dead letter."""
    if rule.refused:
        return None
    if rule.dtype == "int64":
        return int(tv.decimal_of(text).scaleb(rule.scale))
    return _bits(float(text))


def _bits(value):
    return struct.pack("<f", np.float32(value)) if isinstance(value, float) else value


def _outcomes(rule, chunks):
    """{id: stored value (floats as float32 bits)} and {id-or-row: reason} of built chunks."""
    fn = _BuildExamplesFn(_features(rule), SplitSpec())
    fn.setup()
    decoder = ExampleDecoder(_features(rule))
    values, reasons = {}, {}
    for chunk in chunks:
        for out in fn.process(chunk):
            if isinstance(out, beam.pvalue.TaggedOutput):
                if out.tag == REJECTED:
                    reasons[out.value["row"]] = out.value["reason"]
                continue
            for data in out[1]:
                decoded = decoder.decode(data)
                values[decoded["id"]] = _bits(decoded["v"])
    return values, reasons


def _read(fn, path):
    chunks, reasons = [], {}
    for out in fn.process(str(path)):
        if isinstance(out, RecordChunk):
            chunks.append(out)
        elif out.tag == REJECTED:
            reasons[out.value["row"]] = out.value["reason"]
    return chunks, reasons


def _check(rule, examples, values, reasons, where):
    """``examples`` maps a row number (= the record's id) to its text."""
    for row, text in examples.items():
        want = _expected(rule, text)
        if want is None:
            assert row in reasons and rule.refused in reasons[row], (where, text, reasons)
            assert row not in values, (where, text)
        else:
            assert values.get(row) == want and row not in reasons, (where, text, values,
                                                                     reasons)


_GOOD = {"int64": "7", "float": "2.5"}


def _through_reader(rule, reader, path, header, line):
    """Each example after a good value (so the columnar paths see an ordinary column), one
    record per row whose id is its row number (``line(id, text)``), read by ``reader`` and
    built, then checked against the rule."""
    lines, examples = [header] if header else [], {}
    for k, text in enumerate(rule.examples):
        lines += [line(2 * k + 1, _GOOD[rule.dtype]), line(2 * k + 2, text)]
        examples[2 * k + 2] = text
    path.write_text("\n".join(lines) + "\n")
    chunks, reasons = _read(reader, path)
    values, built = _outcomes(rule, chunks)
    _check(rule, examples, values, {**reasons, **built}, path.name)


@pytest.mark.parametrize("columnar", [True, False])
@pytest.mark.parametrize("rule", RULES)
def test_a_csv_cell_follows_the_rule(rule, columnar, tmp_path):
    _through_reader(rule, _ReadCsvFile(CsvOptions(), _features(rule), columnar=columnar),
                    tmp_path / "in.csv", "id,v", lambda row, text: f"{row},{text}")


@pytest.mark.parametrize("columnar", [True, False])
@pytest.mark.parametrize("rule", RULES)
def test_a_json_number_follows_the_rule(rule, columnar, tmp_path):
    _through_reader(rule, _ReadJsonlFile(JsonlOptions(), _features(rule), columnar=columnar),
                    tmp_path / "in.jsonl", "",
                    lambda row, text: f'{{"id": {row}, "v": {JSON_WORDS.get(text, text)}}}')


def _python_values(rule, text):
    """The Python values of ``text``: its Decimal; a float where a double holds it (exactly,
    or -- for a float feature -- as that double is what a float32 is rounded from; nan and
    inf as themselves); an int where it is an integer literal."""
    exact = tv.decimal_of(text)
    values = [exact]
    number = tv.json_number(text)
    if isinstance(number, float) and (rule.dtype == "float" or not exact.is_finite()
                                      or decimal.Decimal(number) == exact):
        values.append(number)
    if text.lstrip("-").isdigit() and len(text) < 4000:  # int() reads at most 4300 digits
        values.append(int(text))
    return values


@pytest.mark.parametrize("rule", RULES)
def test_a_python_value_follows_the_rule(rule):
    """Per row (dicts: the API's records, Avro's values) and, where Arrow types the rows, as
    a column (what a Parquet file's float64 or decimal128 column gives)."""
    rows, examples = [], {}
    for text in rule.examples:
        for value in _python_values(rule, text):
            examples[len(rows) + 1] = text
            rows.append({"id": len(rows) + 1, "v": value})
    values, reasons = _outcomes(rule, [RecordChunk("api", 1, rows)])
    _check(rule, examples, values, reasons, "python rows")
    checked = 0
    for value_type in (pa.float64(), None):  # None: decimal128, as Arrow infers it
        kept = []
        for row in rows:
            try:
                column = pa.array([row["v"]], value_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
                continue
            if value_type is None and not pa.types.is_decimal(column.type):
                continue
            kept.append((row["id"], column))
        for row_id, column in kept:
            batch = pa.RecordBatch.from_arrays([pa.array([row_id]), column], names=["id", "v"])
            values, reasons = _outcomes(rule, [RecordChunk("arrow", row_id, [], batch=batch)])
            _check(rule, {row_id: examples[row_id]}, values, reasons, f"arrow {column.type}")
            checked += 1
    assert checked  # every rule has an example an Arrow column holds


@pytest.mark.parametrize("text,int64,float32", [
    ("0e-999999999", 0, 0.0), ("-0e-99999", 0, -0.0), ("1e-40", None, 1e-40),
    ("1e-2147483647", None, 0.0), ("1e999999999999", None, None), ("1e400", None, None),
])
def test_the_one_value_coercers_agree(text, int64, float32):
    """The coercers themselves on a Decimal of each text: the table's verdicts, no hang on
    10**999999999999 (never expanded)."""
    number = decimal.Decimal(text)
    if int64 is None:
        with pytest.raises(ValueError):
            to_int64("v", number)
    else:
        assert to_int64("v", number) == int64
    if float32 is None:
        with pytest.raises(ValueError, match=tv.FLOAT32_RANGE):
            to_float("v", number)
    else:
        got = to_float("v", number)
        assert _bits(got) == _bits(float32) and math.copysign(1, got) == math.copysign(1,
                                                                                        float32)
    assert to_float("v", decimal.Decimal("Infinity")) == math.inf  # an explicit inf: a value


def test_json_numbers_no_double_holds_are_their_decimal():
    load = lambda text: json.loads(text, parse_float=tv.json_number)  # noqa: E731
    assert load("1e400") == decimal.Decimal("1e400")
    assert load("-1e-400") == decimal.Decimal("-1e-400")
    assert load("0e-999999999") == 0.0 and isinstance(load("0e-999999999"), float)
    assert repr(load("-0.0")) == "-0.0" and load("1.5") == 1.5


# -- the bound on Arrow's decimal cast --------------------------------------------------------

EXPONENT = st.one_of(st.integers(-10**10, 10**10), st.sampled_from(
    [-2147483647, -2147483648, 2147483647, -999999999, 999999999, -4234375, -9999, 9999,
     -10000, 10000, 0]))
MANTISSA = st.one_of(
    st.from_regex(r"[+-]?[0-9]{1,45}(\.[0-9]{0,45})?", fullmatch=True),
    st.sampled_from(["0", "-0", "1", "0.000", "1." + "0" * 39, "5" + "0" * 39, ".5", "1."]))


@st.composite
def number_text(draw):
    """Decimal text with every kind of exponent: huge, negative, zero-padded, missing."""
    mantissa = draw(MANTISSA)
    if draw(st.integers(0, 4)) == 0:
        return mantissa
    exponent = draw(EXPONENT)
    digits = str(abs(exponent)).zfill(draw(st.integers(0, 6)))
    sign = "-" if exponent < 0 else draw(st.sampled_from(["", "+"]))
    return f"{mantissa}{draw(st.sampled_from('eE'))}{sign}{digits}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(number_text(), min_size=1, max_size=20))
@pytest.mark.slow
def test_only_bounded_text_reaches_the_decimal_cast(texts):
    """What decimal_text admits, Arrow's decimal cast reads exactly as Decimal() does or
    refuses (checked here, in-process: the bound is what makes that safe); an exponent of
    five digits or more, or more than 38 digits, is never admitted; whole_values, which casts
    only what is admitted, agrees with the exact per-value reading."""
    cells = pa.array(texts, pa.string())
    admitted = tv.decimal_text(cells)
    for text, ok in zip(texts, admitted):
        mantissa, _, exponent = text.lower().partition("e")
        digits = sum(c.isdigit() for c in mantissa)
        if len(exponent.lstrip("+-")) > tv.DECIMAL_EXPONENT_DIGITS or digits > tv.DECIMAL_DIGITS:
            assert not ok, text
        if not ok:
            continue
        exact = decimal.Decimal(text)
        try:
            got = pc.cast(pa.array([text]), pa.decimal128(38, 0))[0].as_py()
        except pa.ArrowInvalid:
            assert exact != exact.to_integral_value() or abs(exact) >= 10**38, text
        else:
            assert got == exact, text
    values, decided = tv.whole_values(cells)
    assert not (decided & ~admitted).any()
    for i, text in enumerate(texts):
        if decided[i]:
            assert values[i] == tv.parse_whole(text), text


@pytest.mark.parametrize("text,value", [
    ("1." + "0" * 39, 1),  # Arrow's cast read this as 0
    ("1" + "0" * 41 + "e-40", 10),  # past 38 digits: wrapped around, or refused
    ("-7" + "0" * 45 + "e-45", -7),
    ("0e-999999999", 0),  # ... and crashed on this
])
def test_whole_number_text_past_the_bounds_keeps_its_value(text, value, tmp_path):
    """Text that only Decimal reads exactly gets its exact value column-wise too: left to
    parse_whole by whole_values, and so through the CSV reader on both paths."""
    values, decided = tv.whole_values(pa.array([text, "5"]))
    assert not decided[0] and decided[1] and values[1] == 5
    path = tmp_path / "in.csv"
    path.write_text("id,v\n" + "".join(f"{i},{i}\n" for i in range(1, 50)) + f"50,{text}\n")
    features = [F("id", "int64"), F("v", "int64")]
    for columnar in (True, False):
        chunks, reasons = _read(_ReadCsvFile(CsvOptions(), features, columnar=columnar), path)
        assert not reasons
        last = [r for c in chunks for r in c.records() if r["id"] == 50]
        assert last == [{"id": 50, "v": value}], (columnar, last)
