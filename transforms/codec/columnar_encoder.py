"""Arrow record batches -> serialized Examples, column by column, without per-row objects.

Why: building Examples one record at a time costs microseconds of Python per row per feature;
a batch of a few thousand rows is cheaper to encode as a handful of numpy operations per
feature. The output is byte-identical to :class:`example_codec.ExampleEncoder` (and so to
deterministic protobuf serialization) for every row, and the rows it rejects are exactly the
rows that encoder rejects, with the same error (rejected rows are re-encoded one by one to get
the exact message).

How: every row's bytes are a fixed sequence of *blocks* -- the Example tag and length, then
for each stored key in sorted order the map entry's tags, varint lengths, key, list payload.
A block holds, per row, a short byte string: either a padded ``(rows, width)`` matrix plus a
length per row (tags, varints, float32 values, small strings) or a slice of a flat buffer
(string data, packed lists). Lengths are computed first, column-wise; then the rows are laid
out by one boolean compaction of the padded matrices (row-major order concatenates each
row's blocks) or, when long values are involved, by scattering each block into one output
buffer at offsets from a cumulative sum.

What is columnar (``plan``): top-level columns and struct fields (``source: a.b``) of integer,
float32/64, bool, string/large_string, binary/large_binary/fixed_size_binary, timestamp (every
unit and time zone), date32/64, time32/64, decimal, null and dictionary type, and list /
large_list / fixed_size_list of those (dictionaries at any level), into scalar, fixed-shape,
``[-1, ...]`` and ragged features (``<name>/flat_values`` and ``<name>/row_lengths_<k>`` from
the list levels' sizes) with every missing and NaN policy and ``scale``. The list levels are
the shape's dimensions (one level for several dimensions: the values already flat); a column
nested more or less deeply than the shape is columnar too, its rows that hold something where
the two part rejected. A value type that can never be coerced (a string into an int64
feature) is columnar too: its rows are rejected -- unless the feature has a date ``format``:
then the strings are dates and datetimes, parsed over the whole column by
:mod:`text_values`. A batch whose values the vectorised conversion cannot match exactly (a
decimal wider than 53 bits into a float, a timestamp past the year 9999, a time of day
outside one day, a float that scales past 2**50) encodes that feature per row. Everything
else -- maps, paths that go through non-struct values -- is encoded per row for that
feature only and merged in key order; SequenceExamples and specs whose stored keys collide
are encoded per row entirely. The choice and its reason are logged once per feature and
schema (:meth:`plan`).

Pure: pyarrow and numpy, no Beam, no I/O.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.transforms.codec import wire
from beam_tfrecords.transforms.codec.arrow_columns import (
    Columns,
    Unsupported,
    binary_layout,
    check_type,
    child_layout,
    clock_values,
    column_type,
    decimal_values,
    decoded,
    leaf_kind,
    list_depth,
    never_coerces,
    numbers,
    resolve,
    scaled_floats,
    take_rows,
    temporal_values,
    valid_mask,
)
from beam_tfrecords.transforms.codec.coercion import FLOAT32_OVERFLOW, FeatureValueError
from beam_tfrecords.transforms.codec.columnar_layout import (
    Block,
    Flat,
    Padded,
    assemble,
    const,
    exclusive_cumsum,
    segments,
    varints,
)
from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder, _FeaturePlan
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec, stored_keys
from beam_tfrecords.transforms.codec.text_values import text_times

__all__ = ["COLUMNAR", "PER_ROW", "ColumnarEncoder", "FeatureChoice", "StoredColumn"]

_LOG = logging.getLogger(__name__)

COLUMNAR = "columnar"
PER_ROW = "per_row"
_TWO63 = 2.0**63
# The leaf type standing in for "no values" (a list column nested unlike the shape).
_EMPTY_LEAF = {"int64": pa.int64(), "float": pa.float64(), "bytes": pa.binary(),
               "string": pa.string()}
_MAX_SCHEMAS = 64


@dataclasses.dataclass(frozen=True)
class FeatureChoice:
    """How one feature is encoded for one schema, and why."""

    feature: str
    mode: str  # COLUMNAR or PER_ROW
    reason: str


@dataclasses.dataclass(frozen=True)
class StoredColumn:
    """The values one stored key holds in the rows of an encoded batch, as written (after
    coercion: int64 as the integers stored, floats as float32, strings as their bytes), for
    statistics taken from the same pass. Valid in the rows the encoder accepted.

    Attributes:
      values: the values of the rows holding their own value, in row order: a numpy array
        (int64 or float32) or an Arrow binary array. With ``owner`` None, one slot per row of
        the batch (meaningful where ``present``).
      owner: the row of each value (non-decreasing); None: value ``i`` is row ``i``'s.
      present: per row, whether it holds its own value (the key's entry is written from it).
      default_rows: per row, whether it holds the feature's default instead (None: none).
      default: the default's values for this key (``missing: default`` or ``empty``).
    """

    values: Any
    owner: np.ndarray | None
    present: np.ndarray
    default_rows: np.ndarray | None = None
    default: tuple = ()


# -- the encoder ------------------------------------------------------------------------------

class _Encoded:
    """One columnar feature over all rows of a batch: per stored key its map entry's blocks
    (empty in rows without the feature), and the entries' total length per row; with
    ``capture``, the values written (:class:`StoredColumn`)."""

    def __init__(self, n: int, capture: bool = False) -> None:
        self.bad = np.zeros(n, dtype=bool)  # rows the per-row encoder would reject
        self.blocks: dict[str, list[Block]] = {}
        self.entry_lens: np.ndarray | int = 0
        self.capture = capture
        self.values: Any = None  # the leaf values written, when captured


class ColumnarEncoder:
    """Encodes ``pyarrow.RecordBatch`` es the way :class:`ExampleEncoder` encodes their rows.

    ``encode(batch)`` -> (SerializedBatch of the accepted rows in row order, their indices in
    the batch, [(row index, error)] for the rejected ones, the error being the very
    FeatureValueError (or TypeError) ``ExampleEncoder.encode`` raises for that row).
    The plan is made once per schema and cached.

    Args:
        features: the features to encode, in the config's order.
    """

    def __init__(self, features: Sequence[FeatureSpec]) -> None:
        self.specs = tuple(features)
        self._row_encoder = ExampleEncoder(self.specs)
        self._plans = {spec.name: _FeaturePlan(spec) for spec in self.specs}
        keys = [key for spec in self.specs for key in stored_keys(spec)]
        self._whole_row_reason = ""
        if self._row_encoder.sequence:
            self._whole_row_reason = "SequenceExamples are encoded per row"
        elif len(set(keys)) != len(keys):
            self._whole_row_reason = "two features write the same key"
        self._choices: dict[pa.Schema, dict[str, tuple[FeatureChoice, Any]]] = {}

    # -- planning ---------------------------------------------------------------------------

    def plan(self, schema: pa.Schema) -> dict[str, FeatureChoice]:
        """Per feature name, whether it is encoded column-wise for ``schema``, and why.

        Args:
            schema: the batches' schema.

        Returns:
            Feature name to its :class:`FeatureChoice`.
        """
        return {name: choice for name, (choice, _) in self._plan(schema).items()}

    def _plan(self, schema: pa.Schema) -> dict[str, tuple[FeatureChoice, Any]]:
        cached = self._choices.get(schema)
        if cached is not None:
            return cached
        if len(self._choices) >= _MAX_SCHEMAS:  # sources with drifting schemas
            self._choices.clear()
        out: dict[str, tuple[FeatureChoice, Any]] = {}
        columns = Columns(schema)  # once per schema: each feature is then one lookup
        for spec in self.specs:
            try:
                if self._whole_row_reason:
                    raise Unsupported(self._whole_row_reason)
                how, steps = resolve(columns, spec.source)
                if how == "absent":
                    reason = f"no column {'.'.join(spec.source)!r}: missing in every row"
                else:
                    reason = check_type(spec, column_type(schema, steps))
                choice = FeatureChoice(spec.name, COLUMNAR, reason)
            except Unsupported as err:
                choice, steps = FeatureChoice(spec.name, PER_ROW, str(err)), None
            if choice.mode == PER_ROW:
                _LOG.info("feature %r is encoded per row: %s", spec.name, choice.reason)
            out[spec.name] = (choice, steps)
        self._choices[schema] = out
        return out

    # -- encoding ---------------------------------------------------------------------------

    def encode(self, batch: pa.RecordBatch, columns: dict[str, StoredColumn] | None = None
               ) -> tuple[SerializedBatch, np.ndarray, list[tuple[int, Exception]]]:
        """(accepted rows' Examples in row order, their row indices, [(row, error)]).

        ``columns``: a dict to fill with the :class:`StoredColumn` of every stored key encoded
        column-wise (a key left out was encoded per row, or a row was rescued: then
        ``columns`` stays empty, and the serialized Examples are the only truth).

        Args:
            batch: the rows to encode.
            columns: a dict to fill, or None.

        Returns:
            The accepted rows' Examples, their row indices (int64), and each rejected row with its
            error.
        """
        n = batch.num_rows
        plan = self._plan(batch.schema)
        if self._whole_row_reason:
            return self._encode_rows(batch)
        capture = columns is not None
        captured: dict[str, StoredColumn] = {}
        bad = np.zeros(n, dtype=bool)
        by_key: dict[str, list[Block]] = {}
        body = np.zeros(n, dtype=np.int64)  # Features bytes per row
        row_specs = []
        for spec in self.specs:
            choice, steps = plan[spec.name]
            if choice.mode == PER_ROW:
                row_specs.append(spec)
                continue
            try:
                enc = self._encode_column(spec, batch, steps, n, captured if capture else None)
            except Unsupported:  # a value this batch holds (a decimal past 53 bits, a year
                row_specs.append(spec)  # past 9999): this feature goes per row, this batch
                for key in stored_keys(spec):
                    captured.pop(key, None)
                continue
            bad |= enc.bad
            by_key.update(enc.blocks)
            body += enc.entry_lens
        if row_specs:
            fallback_bad, fallback = self._encode_features_per_row(row_specs, batch)
            bad |= fallback_bad
            for key, block in fallback.items():
                by_key[key] = [block]
                body += block.lens
        header, _ = varints(body)
        blocks: list[Block] = [const(b"\x0a"), header]
        for key in sorted(by_key):
            blocks.extend(by_key[key])
        payload, offsets = assemble(blocks, n)
        out, good, rejects = self._select(batch, payload, offsets, bad)
        if capture and len(rejects) == int(np.count_nonzero(bad)):  # none rescued per row
            columns.update(captured)
        return out, good, rejects

    def _select(self, batch: pa.RecordBatch, payload: np.ndarray, offsets: np.ndarray,
                bad: np.ndarray) -> tuple[SerializedBatch, np.ndarray, list]:
        """Keep the rows without a flagged problem; re-encode flagged rows for their error."""
        if not bad.any():
            return SerializedBatch(payload.tobytes(), offsets), np.arange(batch.num_rows), []
        rejects: list[tuple[int, Exception]] = []
        rescued: dict[int, bytes] = {}
        flagged = np.flatnonzero(bad)
        # One take for all flagged rows: a slice per row cost ~50 us of ~120 us per reject.
        records = take_rows(batch, pa.array(flagged)).to_pylist()
        for index, record in zip(flagged.tolist(), records):
            try:
                rescued[index] = self._row_encoder.encode(record)
            except (FeatureValueError, TypeError) as err:
                # Without its traceback: each one's frames would hold this list, a cycle
                # per reject for the garbage collector (2.5 s for 64k of them at exit).
                rejects.append((index, err.with_traceback(None)))
        if rescued:  # a check was stricter than the policy: the per-row bytes are the truth
            _LOG.warning("columnar checks flagged %d rows the per-row encoder accepts",
                         len(rescued))
        keep = ~bad
        for index in rescued:
            keep[index] = True
        good = np.flatnonzero(keep)
        lens = np.diff(offsets)
        if not rescued:
            mask = np.repeat(keep, lens)
            out = payload[mask]
            offs = np.zeros(good.size + 1, dtype=np.int64)
            np.cumsum(lens[good], out=offs[1:])
            return SerializedBatch(out.tobytes(), offs), good, rejects
        raw = payload.tobytes()
        records = [rescued[i] if i in rescued else raw[offsets[i]:offsets[i + 1]]
                   for i in good.tolist()]
        return SerializedBatch.from_records(records), good, rejects

    def _encode_rows(self, batch: pa.RecordBatch):
        records, good, rejects = [], [], []
        for index, record in enumerate(batch.to_pylist()):
            try:
                records.append(self._row_encoder.encode(record))
                good.append(index)
            except (FeatureValueError, TypeError) as err:
                rejects.append((index, err.with_traceback(None)))  # no cycle: see _select
        return SerializedBatch.from_records(records), np.asarray(good, dtype=np.int64), rejects

    def _encode_features_per_row(self, specs: list[FeatureSpec], batch: pa.RecordBatch):
        """Map entries of the per-row features: per stored key, a flat block over rows."""
        n = batch.num_rows
        columns = Columns(batch.schema)
        wanted: dict[str, None] = {}  # in order, each once
        for spec in specs:
            for name in (spec.source[0], ".".join(spec.source), "/".join(spec.source)):
                if columns.find(name) is not None:
                    wanted[name] = None
        records = batch.select(list(wanted)).to_pylist() if wanted else [{}] * n
        bad = np.zeros(n, dtype=bool)
        parts: dict[str, list[bytes]] = {key: [b""] * n for s in specs for key in stored_keys(s)}
        plans = [self._plans[spec.name] for spec in specs]
        for row, record in enumerate(records):
            try:
                for plan in plans:
                    for key, pieces in plan.items(record):  # no sequence features here
                        parts[key][row] = wire.map_entry(key, pieces)
            except (FeatureValueError, TypeError):
                bad[row] = True
        blocks = {}
        for key, values in parts.items():
            lens = np.fromiter((len(v) for v in values), dtype=np.int64, count=n)
            data = np.frombuffer(b"".join(values), dtype=np.uint8)
            blocks[key] = Flat(data, exclusive_cumsum(lens), lens)
        return bad, blocks

    # -- one columnar feature ---------------------------------------------------------------

    def _encode_column(self, spec: FeatureSpec, batch: pa.RecordBatch, steps: Any,
                       n: int, captured: dict[str, StoredColumn] | None = None) -> _Encoded:
        enc = _Encoded(n, captured is not None)
        if steps is None:  # no such column: missing everywhere
            arr: pa.Array = pa.nulls(n)
        else:
            arr = decoded(batch.column(steps[0]))
            for i in steps[1:]:
                arr = decoded(arr.flatten()[i])
        valid = valid_mask(arr)
        depth, _ = list_depth(arr.type)
        empty = ([], 0, None)
        lengths: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # ragged dim -> (counts, owner)
        if bool(spec.shape) != bool(depth):
            # A list where a single value belongs, or the reverse: every present row fails.
            enc.bad |= valid
            body = empty
            lengths = {dim: (np.zeros(0, np.int64),) * 2 for dim in spec.ragged_dims}
        else:
            if depth:
                leaf_arr, idx, owner = self._flatten_lists(spec, arr, depth, valid, enc,
                                                           lengths)
                leaf_valid = valid_mask(leaf_arr)[idx] if idx.size else np.ones(0, dtype=bool)
                enc.bad[owner[~leaf_valid]] = True  # a null inside a list
            else:  # scalars: one slot per row, nulls included (the missing policy decides)
                leaf_arr, idx, owner, leaf_valid = arr, None, None, valid
            kind = leaf_kind(leaf_arr.type)
            if never_coerces(spec, kind):
                enc.bad[valid if owner is None else owner] = True
                body = empty
            else:
                body = self._payload(spec, leaf_arr, kind, idx, owner, leaf_valid, n, enc)
        blocks, body_len, nan_rows = body
        missing = ~valid if nan_rows is None else ~valid | nan_rows
        default_rows = None
        if spec.missing == "error":
            enc.bad |= missing
        elif spec.missing in ("default", "empty") and missing.any():  # a constant Feature
            default_rows = missing
        bodies = [(spec.values_key, spec.kind, blocks, body_len)]
        for dim in spec.ragged_dims:  # <name>/row_lengths_<dim>: an int64 list per row
            counts, owner = lengths[dim]
            element, elen = varints(counts)
            bodies.append((spec.row_lengths_key(dim), "int64_list",
                           *self._packed(element, elen, owner, n)))
        total: np.ndarray | int = 0
        for key, list_kind, key_blocks, key_len in bodies:
            enc.blocks[key], entry_lens = self._entry_blocks(
                spec, key, list_kind, key_blocks, key_len, missing, default_rows)
            total = total + entry_lens
        enc.entry_lens = total
        if captured is not None:
            self._capture(spec, enc, captured, lengths, missing, default_rows, n)
        return enc

    def _capture(self, spec: FeatureSpec, enc: _Encoded, captured: dict[str, StoredColumn],
                 lengths: dict, missing: np.ndarray, default_rows: np.ndarray | None,
                 n: int) -> None:
        """The :class:`StoredColumn` of each of ``spec``'s stored keys, into ``captured``."""
        present = ~missing
        defaults: dict[str, tuple] = {}
        if default_rows is not None:
            for key, pieces in self._plans[spec.name].items({}):
                feature = b"".join(pieces)
                defaults[key] = tuple(wire._decode_feature(feature, 0, len(feature))[1])
        values, owner = enc.values if enc.values is not None else (None, None)
        if values is None:  # no value could be coerced: only missing rows are accepted
            values = (pa.array([], pa.binary()) if spec.dtype in ("bytes", "string")
                      else np.zeros(0, np.int64 if spec.dtype == "int64" else np.float32))
            owner = np.zeros(0, np.int64)
        keys = [(spec.values_key, values, owner)]
        keys += [(spec.row_lengths_key(dim), *lengths[dim]) for dim in spec.ragged_dims]
        for key, key_values, key_owner in keys:
            captured[key] = StoredColumn(key_values, key_owner, present, default_rows,
                                         defaults.get(key, ()))

    def _flatten_lists(self, spec: FeatureSpec, arr: pa.Array, depth: int, valid: np.ndarray,
                       enc: _Encoded, lengths: dict
                       ) -> tuple[pa.Array, np.ndarray, np.ndarray]:
        """Walk the list levels like ExampleEncoder's shape check, flagging rows that fail.

        Returns the leaf array, the indices of every present row's leaves in row-major order,
        and the row owning each leaf; fills ``lengths`` with the (sizes, owning rows) of the
        lists at each ragged dimension, in row-major order: its row lengths.
        """
        shape = spec.shape
        nodes = np.flatnonzero(valid).astype(np.int64)
        owner = nodes.copy()
        level = arr
        # One list level for a shape of several dimensions is its values already flat (not for
        # a ragged shape). Otherwise the levels are the shape's dimensions: a value nested less
        # or more deeply than the shape fails in every row that holds anything at the depth
        # where the two part (the row path's walk finds a value or a null where a list
        # belongs, or a list where a value does), and the other rows hold no values.
        flat = depth == 1 and len(shape) > 1 and not spec.is_ragged
        walked = min(depth, len(shape))
        for dim in range(walked):
            starts, counts = child_layout(level, nodes)
            if not flat:  # each level's size checked
                if shape[dim] != -1:
                    enc.bad[owner[counts != shape[dim]]] = True
                if dim in spec.ragged_dims:
                    lengths[dim] = (counts, owner)
            else:  # one level holding the whole shape, already flat: whole rows only
                inner = int(np.prod(shape[1:]))
                wrong = counts % inner != 0
                if shape[0] != -1:
                    wrong |= counts != int(np.prod(shape))
                enc.bad[owner[wrong]] = True
            nodes = segments(starts, counts)
            owner = np.repeat(owner, counts)
            level = decoded(level.values)
            if dim < walked - 1 and nodes.size:  # a null inner list fails
                enc.bad[owner[~valid_mask(level)[nodes]]] = True
        if flat or depth == len(shape):
            return level, nodes, owner
        enc.bad[owner] = True  # anything at the depth where value and shape part
        for dim in spec.ragged_dims:
            lengths.setdefault(dim, (np.zeros(0, np.int64),) * 2)
        none = np.zeros(0, np.int64)
        return pa.array([], _EMPTY_LEAF[spec.dtype]), none, none

    def _payload(self, spec: FeatureSpec, leaf_arr: pa.Array, kind: str,
                 idx: np.ndarray | None, owner: np.ndarray | None, leaf_valid: np.ndarray,
                 n: int, enc: _Encoded) -> tuple[list[Block], np.ndarray | int, Any]:
        """(list body blocks, list body length per row, rows whose NaN means missing).

        The list body is what follows the Feature's kind tag and length: for numbers
        ``0x0a len packed`` (nothing when empty), for bytes ``0x0a len value`` per value.
        ``idx``/``owner`` None: a scalar, one slot per row.
        """
        scalar = owner is None
        if spec.dtype in ("bytes", "string"):
            if enc.capture:
                enc.values = (leaf_arr if idx is None else leaf_arr.take(pa.array(idx)), owner)
            data, starts, lens = binary_layout(leaf_arr, idx)
            if kind == "binary" and spec.dtype == "string":
                self._check_utf8(leaf_arr, data, starts, lens,
                                 np.arange(n) if scalar else owner, leaf_valid, enc)
            if leaf_arr.null_count:
                lens = np.where(leaf_valid, lens, 0)
            vlen_block, vlen = varints(lens)
            elements = [const(b"\x0a"), vlen_block, Flat(data, starts, lens)]
            if scalar:
                return elements, 1 + vlen + lens, None
            elem_data, elem_offsets = assemble(elements, idx.size)
            body_len = np.bincount(owner, weights=np.diff(elem_offsets), minlength=n
                                   ).astype(np.int64)
            first = np.searchsorted(owner, np.arange(n))  # each row's first leaf
            return [Flat(elem_data, elem_offsets[first], body_len)], body_len, None
        nan_rows = None
        checked = leaf_valid if leaf_arr.null_count else None
        if kind in ("time", "date"):  # int64 only (never_coerces refuses the rest)
            values, overflow = temporal_values(leaf_arr, idx, spec.unit)
            if overflow.any():
                self._flag(enc, owner, overflow, checked)
        elif kind == "clock":  # int64 only
            values = clock_values(leaf_arr, idx, spec.unit)
        elif kind == "decimal":
            values, refused = decimal_values(leaf_arr, idx, spec.dtype, spec.scale)
            if refused.any():
                self._flag(enc, owner, refused, checked)
        elif kind == "text":  # int64 with a date format (never_coerces refuses the rest)
            values, refused = text_times(leaf_arr, spec.unit, spec.format)
            if idx is not None:
                values, refused = values[idx], refused[idx]
            if refused.any():
                self._flag(enc, owner, refused, checked)
        else:
            values = numbers(leaf_arr, idx)
        if spec.dtype == "int64":
            if spec.scale and kind in ("int", "uint"):  # times 10**scale, in range
                limit = (2**63 - 1) // 10**spec.scale  # symmetric: 10**k never divides 2**63
                if kind == "uint":
                    wrong = values.astype(np.uint64) > np.uint64(limit)
                else:
                    wide = values.astype(np.int64)
                    wrong = (wide > limit) | (wide < -limit)
                if wrong.any():
                    self._flag(enc, owner, wrong, checked)
                    values = np.where(wrong, 0, values)
                values = values.astype(np.int64) * 10**spec.scale
            elif spec.scale and kind == "float":  # the decimal each float is written as
                values, wrong = scaled_floats(values, spec.scale)
                if wrong.any():
                    self._flag(enc, owner, wrong, checked)
            elif kind == "uint":
                self._flag(enc, owner, values > np.uint64(2**63 - 1), checked)
            elif kind == "float":
                with np.errstate(invalid="ignore"):
                    wrong = (~np.isfinite(values) | (values != np.floor(values))
                             | (values >= _TWO63) | (values < -_TWO63))
                if wrong.any():
                    self._flag(enc, owner, wrong, checked)
                    values = np.where(wrong, 0.0, values)
            stored = values.astype(np.int64)
            if enc.capture:
                enc.values = (stored, owner)
            element, elen = varints(stored)
        else:
            values = values.astype(np.float64, copy=False)
            with np.errstate(invalid="ignore"):
                overflow = np.abs(values) >= FLOAT32_OVERFLOW
                overflow &= np.isfinite(values)
                nan = np.isnan(values)
            if overflow.any():
                self._flag(enc, owner, overflow, checked)
                values = np.where(overflow, 0.0, values)
            if nan.any():
                if checked is not None:
                    nan &= checked
                if spec.nan == "error":
                    self._flag(enc, owner, nan, None)
                elif spec.nan == "missing":  # scalars only (FeatureSpec checks it)
                    nan_rows = nan
            f32 = values.astype("<f4")
            if enc.capture:
                enc.values = (f32, owner)
            elen = 4
            element = Padded(f32.view(np.uint8).reshape(-1, 4), 4)
        if scalar:  # one value per row: the padded value is the packing (1 to 10 bytes)
            if isinstance(elen, int):
                return [const(b"\x0a\x04"), element], 6, nan_rows
            return [const(b"\x0a"), varints(elen)[0], element], 2 + elen, nan_rows
        return (*self._packed(element, elen, owner, n), nan_rows)

    @staticmethod
    def _packed(element: Padded, elen: np.ndarray | int, owner: np.ndarray, n: int
                ) -> tuple[list[Block], np.ndarray]:
        """(list body blocks, body length per row) of a packed number list per row: the
        elements (one each, owned by the rows ``owner``, sorted) as ``0x0a len packed``,
        nothing for a row without any."""
        m = owner.size
        elens = np.full(m, elen, np.int64) if isinstance(elen, int) else elen
        packed_len = np.bincount(owner, weights=elens, minlength=n).astype(np.int64)
        flat = assemble([element], m)[0]
        first = np.searchsorted(owner, np.arange(n))  # each row's first element
        starts = np.append(exclusive_cumsum(elens), flat.size)[first]
        nonempty = packed_len > 0
        plen_block, plen = varints(packed_len)
        body_len = np.where(nonempty, 1 + plen + packed_len, 0)
        return [const(b"\x0a", nonempty), plen_block.only(nonempty),
                Flat(flat, starts, packed_len)], body_len

    @staticmethod
    def _flag(enc: _Encoded, owner: np.ndarray | None, flags: np.ndarray,
              valid: np.ndarray | None) -> None:
        if valid is not None:
            flags = flags & valid
        if owner is None:
            enc.bad |= flags
        else:
            enc.bad[owner[flags]] = True

    @staticmethod
    def _check_utf8(leaf_arr: pa.Array, data: np.ndarray, starts: np.ndarray, lens: np.ndarray,
                    owner: np.ndarray, leaf_valid: np.ndarray, enc: _Encoded) -> None:
        """Binary values into a string feature must be UTF-8 (Arrow strings already are)."""
        try:
            leaf_arr.cast(pa.large_string())  # validates every value at C speed
            return
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        buf = memoryview(data)
        for i, (start, length) in enumerate(zip(starts.tolist(), lens.tolist())):
            if leaf_valid[i]:
                try:
                    str(buf[start:start + length], "utf-8")
                except UnicodeDecodeError:
                    enc.bad[owner[i]] = True

    def _entry_blocks(self, spec: FeatureSpec, stored_key: str, list_kind: str,
                      body_blocks: list[Block], body_len: np.ndarray | int,
                      missing: np.ndarray, default_rows: np.ndarray | None
                      ) -> tuple[list[Block], np.ndarray | int]:
        """(blocks, length per row) of the map entry ``0x0a len {0x0a keylen key 0x12 len
        Feature}`` of one stored key in every row.

        ``Feature`` is the ``list_kind`` tag, the list body's length and the body -- or, in
        rows using the default, the default's pre-encoded Feature for this key.
        """
        n = missing.size
        key = stored_key.encode("utf-8")
        key_part = b"\x0a" + wire.varint(len(key)) + key + b"\x12"
        value_on = None if not missing.any() else ~missing  # rows holding their own value
        if isinstance(body_len, int) and value_on is None:  # e.g. float scalars: all constant
            feature = wire.KIND_TAG[list_kind] + wire.varint(body_len)
            entry_len = len(key_part) + len(wire.varint(body_len + len(feature))) + (
                body_len + len(feature))
            head = (b"\x0a" + wire.varint(entry_len) + key_part
                    + wire.varint(body_len + len(feature)) + feature)
            return [const(head), *body_blocks], len(head) + body_len
        if isinstance(body_len, int):
            body_len = np.full(n, body_len, dtype=np.int64)
        blen_block, blen = varints(body_len)
        feature_len = 1 + blen + body_len
        feature = [const(wire.KIND_TAG[list_kind]), blen_block, *body_blocks]
        written = value_on  # rows with an entry
        if default_rows is not None:
            pieces = dict(self._plans[spec.name].items({}))[stored_key]  # checked by the plan
            default = b"".join(pieces)
            feature_len = np.where(default_rows, len(default), feature_len)
            feature = [b.only(value_on) for b in feature] + [const(default, default_rows)]
            written = None
        elif value_on is not None:
            feature = [b.only(value_on) for b in feature]
        flen_block, flen = varints(feature_len)
        entry_len = len(key_part) + flen + feature_len
        elen_block, elen = varints(entry_len)
        head = [const(b"\x0a"), elen_block, const(key_part), flen_block]
        if written is not None:
            head = [b.only(written) for b in head]
        piece = 1 + elen + entry_len
        return head + feature, piece if written is None else np.where(written, piece, 0)
