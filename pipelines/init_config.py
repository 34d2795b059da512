"""``beam-tfrecords init``: a complete, commented config written from the data itself.

Writing ``features:`` by hand for a 19-column table is the first hour of a new data set, and
each mistake in it costs a full pass. ``init`` reads what the input declares or shows -- a
Parquet file's Arrow schema and its row groups' null counts, an Avro file's records, CSV cells
as Arrow infers them (the null markers it finds included), a sample of JSON lines, an image
folder's layout -- and prints a config that builds that input with no rejects:

* every column is a feature: its type, a shape from its list nesting (``[-1]``, ragged
  ``[-1, -1]``), ``missing: omit`` where values are missing, ``unit:`` for timestamps and
  dates (Parquet and Avro types, and CSV and JSON text that is ISO-8601 in every sampled
  value), dotted sources for nested fields;
* columns it cannot map (maps, lists of records) are listed as comments, why
  included;
* a field whose sampled values mix types (JSON Lines, Avro unions) takes a type that holds
  them all (ints and bools: int64) or is a comment saying why none does (322.5 and ``true``):
  every kept column of sampled records is held to every sampled value as the build encodes
  it (:func:`_fit_records`), as CSV columns are held to our CSV reader (:func:`_check_cells`);
* an id-like column (``id``, ``*_id``: unique and never missing in the sample) becomes the
  split key of an 80/20 train/eval split.

This module reads the sample (per format) and holds the inferred columns to it; the
inference itself is pure over Arrow types and sample statistics (``init_inference.py``), and
the text is written by ``init_render.py``.
"""

from __future__ import annotations

import dataclasses
import decimal
import json
import math
import posixpath
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from beam_tfrecords.pipelines.init_inference import Column, InitError, features_from_arrow
from beam_tfrecords.pipelines.init_render import feature_entry, render, scalar
from beam_tfrecords.runtime import storage

__all__ = ["columns_of", "init_config"]

SAMPLE_RECORDS = 10_000
SAMPLE_BYTES = 16 << 20
LIST_ROWS = 5_000_000
# Arrow's CSV null spellings that are missing values to us too; "nan" and friends are not:
# our float parser reads them as NaN values.
_CSV_NULLS = ("", "NA", "N/A", "NULL", "null", "#N/A", "n/a", "None", "none", "-")
_FORMATS = {".csv": "csv", ".tsv": "csv", ".jsonl": "jsonl", ".json": "jsonl",
            ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet", ".avro": "avro"}
_SURROGATE = re.compile("[\uD800-\uDFFF]")


# -- reading the sample -------------------------------------------------------------------------

def _detect(path: str, fmt: str | None) -> str:
    if fmt:
        return fmt
    lowered = path.lower()
    for suffix in (".gz",):
        lowered = lowered.removesuffix(suffix)
    ext = posixpath.splitext(lowered)[1]
    if ext in _FORMATS:
        return _FORMATS[ext]
    raise InitError(f"cannot tell the format of {path!r} from its name; pass --format "
                    f"({', '.join(sorted(set(_FORMATS.values())) + ['images'])})")


def _is_list(pa: Any, t: Any) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _null_counts_parquet(pq_file: Any
                         ) -> tuple[dict[str, int], set[str], dict[str, int], dict[str, float]]:
    """From the row groups' statistics (the whole file): missing values per dotted path (a
    column without a null count counts as having some), the paths without one (INT96
    timestamps, some writers' columns), each path's largest value where the statistics
    give one for an unsigned 64-bit column, and the largest magnitude of a float or decimal
    column's values."""
    counts: dict[str, int] = {}
    unknown: set[str] = set()
    largest: dict[str, int] = {}
    widest: dict[str, float] = {}
    meta = pq_file.metadata
    for group in range(meta.num_row_groups):
        row_group = meta.row_group(group)
        for index in range(row_group.num_columns):
            column = row_group.column(index)
            path = column.path_in_schema
            # list<...> paths hold ".list.element" (or ".list.item") parts: drop them.
            path = re.sub(r"\.(list|bag)\.(element|item|array)", "", path)
            stats = column.statistics
            if stats is not None and stats.has_null_count:
                missing = stats.null_count
            else:
                missing = 1
                unknown.add(path)
            counts[path] = counts.get(path, 0) + missing
            if stats is not None and stats.has_min_max and isinstance(stats.max, int):
                largest[path] = max(largest.get(path, stats.max), stats.max)
            elif stats is not None and stats.has_min_max and isinstance(
                    stats.max, (float, decimal.Decimal)):
                wide = max(abs(float(stats.min)), abs(float(stats.max)))
                widest[path] = max(widest.get(path, wide), wide)
            for prefix in _prefixes(path):
                counts.setdefault(prefix, 0)
    return counts, unknown, largest, widest


def _null_elements(pa: Any, column: Any) -> int:
    """How many elements inside a (nested) list column's lists are null."""
    import pyarrow.compute as pc

    while _is_list(pa, column.type):
        column = pc.list_flatten(column)
    return column.null_count


def _prefixes(path: str) -> Iterable[str]:
    parts = path.split(".")
    return (".".join(parts[:i]) for i in range(1, len(parts)))


def _nulls_of(pa: Any, table: Any) -> dict[str, int]:
    """Missing values per dotted path in a sample table (struct members included)."""
    counts: dict[str, int] = {}

    def visit(array: Any, path: str) -> None:
        counts[path] = array.null_count
        if pa.types.is_struct(array.type):
            for index, child in enumerate(array.type):
                visit(array.field(index), f"{path}.{child.name}")

    for name, column in zip(table.column_names, table.columns):
        visit(column.combine_chunks() if column.num_chunks else pa.array([], column.type),
              name)
    return counts


def _sample_bytes(path: str, limit: int = SAMPLE_BYTES) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of ``path`` cut after the last newline, and whether that is
    the whole file."""
    from beam_tfrecords.transforms.readers.events import HEAD_BYTES, unreadable_text

    with storage.open_read(path) as handle:
        data = handle.read(limit + 1)
    foreign = unreadable_text(data[:HEAD_BYTES])
    if foreign is not None:
        raise InitError(f"{path}: {foreign}")
    if len(data) <= limit:
        return data, True
    return data[: data.rfind(b"\n") + 1], False


# Cell separators init tries when none is given, in order of preference on a tie.
DELIMITERS = (",", "\t", ";", "|")
_SNIFF_LINES = 50
_DECIMAL_COMMA = re.compile(r"[+-]?[0-9]+,[0-9]+\Z")


def sniff_delimiter(text: str) -> str:
    """The separator among :data:`DELIMITERS` that splits the first lines of ``text`` into
    the most columns, the same number in every line (quotes respected, as our reader reads
    them); ``,`` when none splits them into more than one. Pure.

    Args:
        text: the first bytes of a CSV file, decoded.

    Returns:
        The delimiter.
    """
    import csv
    import io

    lines = text.splitlines(keepends=True)[:_SNIFF_LINES]
    if len(lines) > 1 and not text.endswith(("\n", "\r")):
        lines = lines[:-1]  # the sample may cut its last line short
    best, most = ",", 1
    for delimiter in DELIMITERS:
        try:
            widths = {len(row) for row in csv.reader(io.StringIO("".join(lines)),
                                                     delimiter=delimiter) if row}
        except csv.Error:
            continue
        if len(widths) == 1 and (width := widths.pop()) > most:
            best, most = delimiter, width
    return best


def _csv_columns(pa: Any, path: str, delimiter: str | None
                 ) -> tuple[list[Column], dict[str, Any], Any]:
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    data, whole = _sample_bytes(path)
    if not data.strip():
        raise InitError(f"{path}: no rows to learn from")
    if delimiter is None:
        delimiter = sniff_delimiter(data[:1 << 16].decode("utf-8", errors="replace"))
    markers = [m for m in _CSV_NULLS]
    table = pcsv.read_csv(pa.py_buffer(data), parse_options=pcsv.ParseOptions(
        delimiter=delimiter), convert_options=pcsv.ConvertOptions(
        null_values=markers, strings_can_be_null=True, quoted_strings_can_be_null=True))
    as_text = pcsv.read_csv(pa.py_buffer(data), parse_options=pcsv.ParseOptions(
        delimiter=delimiter), convert_options=pcsv.ConvertOptions(
        column_types={n: pa.string() for n in table.column_names}, null_values=[],
        strings_can_be_null=False))
    marker_set = pa.array(markers, pa.string())
    seen = set()
    for column in as_text.columns:
        seen.update(pc.unique(column.filter(pc.is_in(column, value_set=marker_set))).to_pylist())
    absent = pa.array(sorted(seen | {""}), pa.string())
    columns = features_from_arrow(pa, table.schema, _nulls_of(pa, table), text_times=True)
    for column in columns:
        text = as_text.column(column.source[0])
        if column.dtype == "string" and not column.shape:  # JSON array cells: a list
            cells = text.to_pylist()
            _json_list_cells(column, cells, seen)
            present = [c for c in cells if c not in seen and c != ""]
            _date_text(column, present)
            if column.dtype == "string" and present and all(
                    _DECIMAL_COMMA.match(c) for c in present):
                column.note = ("numbers written with a decimal comma (1,5): read as text; "
                               "write them with a point to build numbers")
        elif column.dtype in ("int64", "float"):
            present = text.filter(pc.invert(pc.is_in(text, value_set=absent)))
            _check_cells(column, present.combine_chunks())
    # An empty cell is a missing value (the reader's default) whether or not the sample has one.
    options = {"delimiter": delimiter, "header": True, "null_values": sorted(seen | {""})}
    if not whole:
        options["_partial"] = True
    return columns, options, table


def _date_text(column: Column, cells: Sequence[Any]) -> None:
    """A scalar text column whose every sampled value is ISO-8601 date or datetime text
    becomes an int64 in a unit -- ``days`` for dates, else ``s``, ``ms``, ``us`` or ``ns`` by
    the longest fraction -- as our readers parse it (text_values)."""
    from beam_tfrecords.transforms.codec.text_values import TextValueError, parse_time

    if column.dtype != "string" or column.shape or not cells:
        return
    digits, dates = 0, True
    for cell in cells:
        if not isinstance(cell, str) or not cell[:4].isdigit() or cell[4:5] != "-":
            return
        text = cell.strip()
        dates &= len(text) == 10
        if "." in text:
            digits = max(digits, len(re.match(r"[0-9]*", text.split(".", 1)[1]).group()))
    unit = "days" if dates else ("s", "ms", "ms", "ms", "us", "us", "us", "ns", "ns", "ns")[
        min(digits, 9)]
    try:
        for cell in cells:
            parse_time(cell, unit)
    except TextValueError:
        if unit != "ns":
            return
        unit = "us"  # nanoseconds hold the years 1677 to 2262 only
        try:
            for cell in cells:
                parse_time(cell, unit)
        except TextValueError:
            return
    what = "date" if dates else "date-time"
    column.dtype, column.unit = "int64", unit
    column.note = f"ISO-8601 {what} text -> {unit} since 1970-01-01 UTC (no offset: UTC)"


def _check_cells(column: Column, cells: Any) -> None:
    """Keep a number type only where our CSV reader parses every sampled cell (a pyarrow
    string array) as one (Arrow reads ``0x1F`` as an integer, we do not): else a float, else
    text."""
    from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec

    for dtype in ("int64", "float", "string")[("int64", "float").index(column.dtype):]:
        if dtype == "string":
            column.dtype, column.note = "string", "numbers our CSV reader does not parse"
            return
        if not _reader_parses_all(FeatureSpec(column.name, dtype), cells):
            continue
        if dtype != column.dtype:
            column.dtype, column.note = dtype, ""
        if dtype == "float":
            _fixed_places(column, cells)
        return


def _fixed_places(column: Column, cells: Any) -> None:
    """A float column whose every sampled cell is written with the same k decimal places (a
    price, 12.34) gets a note: as an int64 with ``scale: k`` its values are stored exactly,
    where a float feature keeps a float32 (9999.99 becomes 9999.990234375)."""
    from beam_tfrecords.transforms.readers import csv_typing
    from beam_tfrecords.transforms.readers.csv_columnar import NeedsRows

    if not len(cells):
        return
    try:
        places = csv_typing.decimal_cells(cells, None, column.name).type.scale
    except NeedsRows:  # mixed places, exponents, nan ...
        return
    if places:
        column.note = (f"every sampled value has {places} decimal place"
                       f"{'s' if places > 1 else ''}: {{type: int64, scale: {places}}} would "
                       "store them exactly")


def _reader_parses_all(spec: Any, cells: Any) -> bool:
    """Whether our CSV reader reads every cell as ``spec``'s type: column-wise, as it types a
    block (parse_cell for the cells Arrow's casts do not settle), or cell by cell where the
    reader would read the block per row."""
    import pyarrow as pa

    from beam_tfrecords.transforms.readers import csv_typing
    from beam_tfrecords.transforms.readers.csv_cells import CellError, parse_cell
    from beam_tfrecords.transforms.readers.csv_columnar import NeedsRows

    batch = pa.RecordBatch.from_arrays([cells], names=["c"])
    try:
        _, bad = csv_typing.type_batch(batch, ["c"], {"c": spec}, (), parse_cell, CellError)
        return not bad
    except NeedsRows:  # e.g. an integer past int64, which the per-row reader keeps
        try:
            for cell in cells.to_pylist():
                parse_cell(spec, cell)
        except CellError:
            return False
        return True


def _json_list_cells(column: Column, cells: Sequence[str], nulls: set) -> None:
    values = [c for c in cells if c not in nulls]
    if not values or not all(c.startswith("[") for c in values):
        return
    try:
        parsed = [json.loads(c) for c in values]
    except ValueError:
        return
    flat = [v for cell in parsed for v in (cell if isinstance(cell, list) else [None])]
    if any(isinstance(v, (list, dict)) or v is None for v in flat):
        return
    if all(isinstance(v, bool) or isinstance(v, int) for v in flat):
        column.dtype = "int64"
    elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in flat):
        column.dtype = "float"
    elif not all(isinstance(v, str) for v in flat):
        return
    column.shape, column.note = (-1,), "a JSON array cell -> a variable-length list"


def _arrow_refusals() -> tuple[type[Exception], ...]:
    import pyarrow as pa

    return (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError)


def _records_columns(pa: Any, records: list[dict], where: str) -> tuple[list[Column], Any]:
    """Columns of sampled records (JSON Lines, Avro) and their table: Arrow infers the types
    (field by field, nested records member by member, where it refuses the whole); a key
    absent from some records counts as missing there. Then every column is held to every
    sampled value as the build encodes it (:func:`_fit_records`)."""
    if not records:
        raise InitError(f"{where}: no records to learn from")
    try:
        # pa.array unites the keys of every record (Table.from_pylist keeps the first's).
        table = pa.Table.from_struct_array(pa.array(records))
        columns = features_from_arrow(pa, table.schema, _nulls_of(pa, table))
    except _arrow_refusals():  # one field Arrow cannot type: the others still can
        table, columns = _field_by_field(pa, records)
    for column in columns:
        if (table is not None and len(column.source) == 1 and column.dtype == "string"
                and column.source[0] in table.column_names):
            _date_text(column, table.column(column.source[0]).drop_null().to_pylist())
    _fit_records(columns, records)
    if not any(not column.skip for column in columns):
        raise InitError(f"{where}: no field of the sampled records has one type "
                        f"({'; '.join(c.skip for c in columns)}); write the features by hand")
    return columns, table


def _field_by_field(pa: Any, records: list[dict]) -> tuple[Any, list[Column]]:
    """The columns of every field, typed one by one (:func:`_value_columns`), and a table of
    the top-level fields Arrow could type whole (None if none)."""
    names = list(dict.fromkeys(key for record in records for key in record))
    arrays, kept, columns = [], [], []
    for name in names:
        found, array = _value_columns(pa, (name,), [record.get(name) for record in records])
        columns += found
        if array is not None:
            arrays.append(array)
            kept.append(name)
    return (pa.table(arrays, names=kept) if kept else None), columns


def _value_columns(pa: Any, path: tuple[str, ...], values: list) -> tuple[list[Column], Any]:
    """The columns of the field at ``path`` from its sampled ``values`` (None: missing), and
    its Arrow array when Arrow types it whole. A field of records Arrow refuses is typed
    member by member; any other refused field becomes a column of no type yet (``dtype``
    empty, its shape from its list nesting) for :func:`_fit_records` to type or leave out --
    save integers past 64 bits, which no type holds exactly."""
    try:
        array = pa.array(values)
    except _arrow_refusals() as err:
        present = [value for value in values if value is not None]
        if present and all(isinstance(value, dict) for value in present):
            members = dict.fromkeys(key for value in present for key in value)
            columns = []
            for key in members:
                columns += _value_columns(pa, path + (key,), [
                    value.get(key) if isinstance(value, dict) else None for value in values])[0]
            return columns, None
        from beam_tfrecords.transforms.codec.coercion import INT64_MAX, INT64_MIN

        leaves = [leaf for value in present for leaf in _leaves(value)]
        if leaves and all(type(leaf) is int for leaf in leaves) and not all(
                INT64_MIN <= leaf <= INT64_MAX for leaf in leaves):
            return [Column("_".join(path), path, skip=(
                f"integers from {min(leaves)} to {max(leaves)}, past int64's range: write "
                "them as strings, or hash them"))], None
        depth = max((_depth(value) for value in present), default=0)
        return [Column("_".join(path), path, "", (-1,) * depth,
                       "omit" if len(present) < len(values) else "error",
                       note=f"no one type in the sample ({err})")], None
    top = path[-1]
    columns = features_from_arrow(pa, pa.schema([pa.field(top, array.type)]),
                                  _nulls_of(pa, pa.table([array], names=[top])))
    for column in columns:
        column.source = path[:-1] + column.source
        column.name = "_".join(column.source)
    return columns, array


def _leaves(value: Any) -> Iterable[Any]:
    """The scalars of a (nested) list value, or the value itself."""
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def _depth(value: Any) -> int:
    """How deep lists nest in ``value`` (0: a single value)."""
    if isinstance(value, (list, tuple)):
        return 1 + max((_depth(item) for item in value), default=0)
    return 0


# The types a column may take when the one Arrow inferred refuses a sampled value, in order.
_LADDER = ("int64", "float", "string", "bytes")


def _fit_records(columns: list[Column], records: Sequence[Mapping[str, Any]]) -> None:
    """Hold every column to every sampled record as the build encodes it (the feature as the
    printed config states it, through :class:`ExampleEncoder`): a column that refuses a value
    takes the first type of :data:`_LADDER` that holds them all (322 and ``true``: int64), or
    becomes a comment saying why none does (322.5 and ``true``: float refuses bools, int64
    fractions). So the config init prints never rejects the records it learned from."""
    from beam_tfrecords.transforms.codec.coercion import FeatureValueError
    from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder

    _name_apart(columns)
    todo: list[Column] = []
    for column in columns:
        if column.skip:
            continue
        if not column.dtype or _spec(column) is None:
            _refit(column, records)
        else:
            todo.append(column)
    start = 0
    while todo:
        encoder = ExampleEncoder([_spec(column) for column in todo])
        try:
            for index in range(start, len(records)):
                start = index
                encoder.encode(records[index])
            return
        except FeatureValueError as err:
            bad = [c for c in todo if err.feature in (c.name, ".".join(c.source))] or [
                c for c in todo if not _holds(c, records[start:start + 1])]
            for column in bad:
                todo.remove(column)
                _refit(column, records)


def _spec(column: Column) -> Any:
    """The FeatureSpec the printed config gives ``column`` (its ``features:`` entry parsed by
    the build's own parser), or None when that entry would not parse."""
    from beam_tfrecords.errors import UserError
    from beam_tfrecords.transforms.codec.specs import parse_features

    try:
        return parse_features({column.name: feature_entry(column)})[0]
    except UserError:
        return None


def _holds(column: Column, records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the build encodes ``column`` of every one of ``records``."""
    return _first_refusal(column, records) is None


def _first_refusal(column: Column, records: Sequence[Mapping[str, Any]]) -> Any:
    """The build's error for the first of ``records`` whose ``column`` it refuses, else None."""
    from beam_tfrecords.transforms.codec.coercion import FeatureValueError
    from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder

    spec = _spec(column)
    if spec is None:
        return FeatureValueError(column.name, None, "a feature the config can state",
                                 "its name or source does not parse")
    encoder = ExampleEncoder([spec])
    for record in records:
        try:
            encoder.encode(record)
        except FeatureValueError as err:
            return err
    return None


def _refit(column: Column, records: Sequence[Mapping[str, Any]]) -> None:
    """Give ``column`` the first type of :data:`_LADDER` the build encodes every sampled
    value with (its shape and missing policy kept), or make it a comment naming what each type
    refused."""
    from beam_tfrecords.transforms.codec.coercion import FeatureValueError, preview, type_name
    from beam_tfrecords.transforms.codec.example_codec import lookup

    kinds: dict[str, None] = {}
    present = []
    for record in records:
        try:
            value = lookup(record, column.source)
        except FeatureValueError:
            kinds["record"] = None
            continue
        if isinstance(value, dict):
            kinds["record"] = None
        elif value is not None:
            present.append(value)
            for leaf in _leaves(value):
                kinds[type_name(leaf) if leaf is not None else "null"] = None
    what = ", ".join(sorted(kinds)) or "no values"
    depths = {_depth(value) for value in present if value != []}  # [] fits any list depth
    if "record" in kinds and len(kinds) > 1:
        others = ", ".join(sorted(set(kinds) - {"record"}))
        column.skip = f"a record in some samples and {others} in others: no feature holds both"
        return
    if len(depths) > 1 or (0 in depths and [] in present):
        shown = ", ".join(map(str, sorted(depths | ({1} if [] in present else set()))))
        column.skip = (f"lists nested {shown} deep in different samples (0: a single value): "
                       "no one shape holds them")
        return
    original = column.dtype
    refusals: list[tuple[str, Any]] = []
    for dtype in _LADDER:
        if dtype == original or (dtype == "bytes" and "bytes" not in kinds):
            continue
        trial = dataclasses.replace(column, dtype=dtype, unit="")
        err = _first_refusal(trial, records)
        if err is None:
            column.dtype, column.unit = dtype, ""
            column.note = f"{what} values -> {dtype}" + (
                " (true/false -> 1/0)" if dtype == "int64" and "bool" in kinds else "")
            return
        refusals.append((dtype, err))
    if original:
        refusals.insert(0, (original, _first_refusal(column, records)))
    reasons = {getattr(err, "reason", "") for _, err in refusals}
    if len(reasons) == 1 and refusals:  # not a matter of type: a shape, a null in a list
        err = refusals[0][1]
        column.skip = f"{err.reason or err} ({preview(getattr(err, 'value', None), 40)})"
        return
    column.skip = (f"no one type holds every sampled value ({what}): " + "; ".join(
        f"{dtype} refuses {preview(err.value, 30)} ({err.reason})" for dtype, err in refusals)
        + "; write them as one type")


def _name_apart(columns: list[Column]) -> None:
    """Give every column a name the config can hold once: names from nested paths can meet
    (``a_b`` beside ``a.b``), and a feature name may not start or end with ``/``. A source
    the config cannot spell -- a nested key holding a dot -- makes the column a comment."""
    seen: set[str] = set()
    for column in columns:
        if column.skip:
            continue
        if not all(column.source) or (
                len(column.source) > 1 and any("." in part for part in column.source)):
            column.skip = ("an empty key, or a nested key holding a dot: a source path "
                           "(a.b.c) cannot name it")
            continue
        if any(_SURROGATE.search(part) for part in column.source):
            column.skip = "a key that is not Unicode text (a lone surrogate): no YAML holds it"
            continue
        base = column.name.strip("/") or "field"
        name, count = base, 1
        while name in seen:
            count += 1
            name = f"{base}_{count}"
        seen.add(name)
        column.name = name


def _plain_values(value: Any) -> Any:
    """A sampled record with its UUIDs (Avro's ``uuid`` strings, as fastavro returns them) as
    the text our readers store: Arrow infers an extension type for them that a struct of
    records cannot hold."""
    if isinstance(value, dict):
        return {key: _plain_values(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain_values(item) for item in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _jsonl_records(path: str) -> tuple[list[dict], bool]:
    data, whole = _sample_bytes(path)
    records = []
    for line in data.splitlines()[:SAMPLE_RECORDS]:
        if line.strip():
            try:
                value = json.loads(line)
            except ValueError:
                continue  # the build makes it a dead letter; nothing to learn here
            if isinstance(value, dict):
                records.append(value)
    return records, whole and len(records) < SAMPLE_RECORDS


def columns_of(path: str, fmt: str, delimiter: str | None = None
               ) -> tuple[list[Column], dict, str, Any]:
    """What one file holds, as init reads it.

    Args:
        path: the file (the first a glob matches).
        fmt: its format (``csv``, ``jsonl``, ``parquet`` or ``avro``).
        delimiter: the CSV cell separator; None: sniffed from the first lines.

    Returns:
        The columns, the source's format options (``csv: {...}``), a note on what was read, and
        the sampled rows as an Arrow table (None for Parquet, whose schema was read, not its
        rows).
    """
    import pyarrow as pa

    if fmt == "parquet":
        import pyarrow.parquet as pq

        from beam_tfrecords.transforms.codec.coercion import FLOAT32_OVERFLOW

        with storage.open_read(path) as handle:
            pq_file = pq.ParquetFile(handle)
            schema = pq_file.schema_arrow
            nulls, unknown, largest, widest = _null_counts_parquet(pq_file)
            rows = pq_file.metadata.num_rows
            # A list's leaf statistics count empty lists as nulls, and some columns have no
            # null count: read those and count at the Arrow level (a whole file up to
            # LIST_ROWS rows; past that its first row group, the rest judged by statistics).
            lists = [f.name for f in schema if nulls.get(f.name) and (
                _is_list(pa, f.type) or f.name in unknown)]
            holes: dict[str, int] = {}  # list columns: null elements inside their lists
            if lists:
                read = (pq_file.read(columns=lists) if rows <= LIST_ROWS
                        else pq_file.read_row_group(0, columns=lists))
                for name in lists:
                    if rows <= LIST_ROWS or read.num_rows == rows:
                        nulls[name] = read.column(name).null_count
                    holes[name] = _null_elements(pa, read.column(name))
        columns = features_from_arrow(pa, schema, nulls)
        for column in columns:
            dotted = ".".join(column.source)
            top = largest.get(dotted, 0)
            if column.dtype == "int64" and top > 2**63 - 1:
                column.skip = (f"uint64 values up to {top}, past int64's 2**63-1: no Example "
                               "type holds them (cast the column, or hash it to a string)")
            wide = widest.get(dotted, 0.0)
            if column.dtype == "float" and math.isfinite(wide) and wide >= FLOAT32_OVERFLOW:
                column.skip = (f"values as large as {wide:g}, past float32's range (they would "
                               "become inf): scale them, or cast them to text")
            if column.shape and holes.get(dotted):
                column.skip = (f"null values inside its lists ({holes[dotted]}); only a whole "
                               "value can be missing (drop or fill them first)")
        return columns, {}, f"its schema ({rows} rows)", None
    if fmt == "csv":
        columns, options, table = _csv_columns(pa, path, delimiter)
        partial = options.pop("_partial", False)
        what = "the first 16 MB" if partial else "all of it"
        return columns, options, f"{what}, as Arrow infers CSV", table
    if fmt == "jsonl":
        records, whole = _jsonl_records(path)
        what = "all of it" if whole else f"the first {len(records)} records"
        columns, table = _records_columns(pa, records, path)
        return columns, {}, what, table
    if fmt == "avro":
        from beam_tfrecords.pipelines.launch_check import sample_events
        from beam_tfrecords.transforms.readers.read_avro import ReadAvro

        reader = ReadAvro(path).file_reader()
        records = [_plain_values(r) for _, r in sample_events(reader, path, SAMPLE_RECORDS)
                   if isinstance(r, dict)]
        columns, table = _records_columns(pa, records, path)
        return columns, {}, f"the first {len(records)} records", table
    raise InitError(f"format {fmt!r}: init reads csv, jsonl, parquet, avro and images")


# -- image folders ------------------------------------------------------------------------------

def _image_layout(root: str, asked: bool = True) -> tuple[bool, list[str]]:
    """Whether the folder holds ``<split>/<label>/<file>`` (else ``<label>/<file>``), and its
    first level's names. ``asked``: the user named the format images (else a folder was taken
    for one, and a folder of data files is told so)."""
    from beam_tfrecords.transforms.readers.image_files import DEFAULT_EXTENSIONS

    root = root.rstrip("/")
    depths: set[int] = set()
    first: set[str] = set()
    data: dict[str, int] = {}  # a data file suffix -> how many files have it
    for match in storage.match(root + "/**"):
        relative = match.path[len(root) + 1:]
        suffix = posixpath.splitext(relative.lower().removesuffix(".gz"))[1]
        if suffix in _FORMATS:
            data[suffix] = data.get(suffix, 0) + 1
        if posixpath.splitext(relative)[1].lower() not in DEFAULT_EXTENSIONS:
            continue
        parts = relative.split("/")
        depths.add(len(parts))
        first.add(parts[0])
    if not depths and asked:
        raise InitError(f"{root}: no image files found")
    if not depths:
        suffix = max(sorted(data), key=data.get) if data else ".csv"
        what = (f"of {_FORMATS[suffix]} files ({data[suffix]} x {suffix}), not images" if data
                else "with no image or data files")
        raise InitError(f"{root} is a directory {what}: give a file or a glob of its files, "
                        f"e.g. --input {root}/*{suffix}")
    if depths == {3}:
        return True, sorted(first)
    if depths == {2}:
        return False, sorted(first)
    raise InitError(f"{root}: images at mixed depths {sorted(depths)}; init knows "
                    "<label>/<file> and <split>/<label>/<file>")


def _images_config(root: str, name: str, output: str, asked: bool = True) -> str:
    by_split, first = _image_layout(root, asked)
    lines = [
        f"# beam-tfrecords init: {root} is an image folder laid out as "
        + ("<split>/<label>/<file>" if by_split else "<label>/<file>") + ".",
        f"name: {name}",
        "source:",
        "  format: images",
        f"  path: {scalar(root)}",
        "  images: {layout: folders}",
        "features:",
        "  image_raw: {type: bytes, source: image}   # the file's bytes, unchanged",
        "  label: {type: int64}                      # index into the manifest's label_vocabulary",
        "  label_text: {type: string}                # the label folder's name",
        "  height: {type: int64}                     # from the file header",
        "  width: {type: int64}",
        "  channels: {type: int64}",
        "  format: {type: string}                    # PNG, JPEG, ...",
    ]
    if by_split:
        lines.append(f"# splits: from the folders ({', '.join(first)})")
    else:
        lines += ["splits:", "  key: path   # hash of the file path", "  train: 80",
                  "  eval: 20"]
    lines += ["output:", f"  path: {scalar(output)}",
              "  # The folders are read class by class; shuffled, no shard holds one class.",
              "  shuffle: {seed: 1}"]
    return "\n".join(lines) + "\n"


def _unique_ids(path: str, columns: Sequence[Column], sample: Any) -> dict[str, bool]:
    """Whether each id-like column's sampled values are all different: in the rows
    :func:`columns_of` sampled, or for Parquet (``sample`` None) the first row group."""
    candidates = [c for c in columns if (c.name.lower() == "id" or c.name.lower().endswith("_id"))
                  and not c.skip and not c.shape and c.dtype in ("int64", "string", "bytes")]
    if not candidates:
        return {}
    import pyarrow.compute as pc

    table = sample if sample is not None else _first_row_group(
        path, [c.source[0] for c in candidates if len(c.source) == 1])
    result = {}
    for column in candidates:
        field = ".".join(column.source)
        if table is None or field not in table.column_names:
            continue
        values = table.column(field)
        result[column.name] = len(pc.unique(values)) == len(values) and values.null_count == 0
    return result


def _first_row_group(path: str, fields: Sequence[str]) -> Any:
    import pyarrow.parquet as pq

    with storage.open_read(path) as handle:
        pq_file = pq.ParquetFile(handle)
        if pq_file.metadata.num_row_groups == 0:
            return None
        return pq_file.read_row_group(0, columns=list(fields))


def _name_of(path: str) -> str:
    stem = posixpath.basename(path.rstrip("/").replace("*", "")) or "dataset"
    stem = stem.split(".")[0] or "dataset"
    name = re.sub(r"[^A-Za-z0-9_-]", "_", stem)
    return name if re.match(r"[A-Za-z0-9_]", name) else f"d{name}"


def _is_folder(path: str) -> bool:
    if storage.is_local(path):
        import os

        return os.path.isdir(path)
    return path.endswith("/")


def init_config(pattern: str, fmt: str | None = None, output: str | None = None,
                name: str | None = None, delimiter: str | None = None) -> str:
    """The config text for the input ``pattern``: ``beam-tfrecords init``'s output.

    Args:
        pattern: a file, a glob (its first file is read) or an image folder.
        fmt: the format; None: from the file name (a folder: images).
        output: the data set's output path; None: ``output/<name>``.
        name: the data set's name; None: from the input's name.
        delimiter: the CSV cell separator; None: sniffed.

    Returns:
        The YAML text, comments included. InitError when the input cannot be described.
    """
    if fmt == "images" or (fmt is None and _is_folder(pattern)):
        name = name or _name_of(pattern)
        return _images_config(pattern, name, output or f"output/{name}", fmt == "images")
    if _is_folder(pattern) and storage.is_local(pattern):
        from beam_tfrecords.pipelines.config import FORMAT_SUFFIXES

        raise InitError(f"{pattern.rstrip('/')} is a directory; give a file or a glob of its "
                        f"files, e.g. --input {pattern.rstrip('/')}/*"
                        f"{FORMAT_SUFFIXES.get(fmt, '')}")
    files = sorted(m.path for m in storage.match(pattern))
    if not files:
        raise InitError(f"no input matches {pattern!r}")
    first = files[0]
    refused = storage.not_a_regular_file(first)  # a FIFO would hang, /dev/zero never end
    if refused is not None:
        raise InitError(refused)
    fmt = _detect(first, fmt)
    columns, options, read, sample = columns_of(first, fmt, delimiter)
    _name_apart(columns)
    name = name or _name_of(pattern if "*" not in pattern else first)
    unique = _unique_ids(first, columns, sample)
    return render(name=name, fmt=fmt, path=pattern, output=output or f"output/{name}",
                  columns=columns, options=options, read=read, unique=unique)
