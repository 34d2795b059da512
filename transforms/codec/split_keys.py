"""Split keys of a whole Arrow column: their canonical bytes, and the raw form a hashing
process reads.

A split keyed on a column hashes :func:`splits.key_bytes` of every value. For the key types
tables use (integers, floats, strings, binary) the same bytes come from the whole column
(:func:`key_bytes_column`: Arrow's casts for integers and text; a float's shortest ``repr`` has
no Arrow kernel, so each distinct float goes through ``key_bytes`` itself), and the column's
own buffers are all a separate hashing process needs (:func:`hash_request`;
``transforms/split_hash_child.py`` reads them): integers as their int64 (or uint64) values,
floats as float64 values, strings and binary as offsets plus bytes. Every path gives exactly
the digests of ``key_bytes`` row by row, so a data set keeps its splits whichever path hashed
it.

Pure: pyarrow and numpy, no Beam, no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_tfrecords.transforms.codec.splits import BYTES_PREFIX, INT_PREFIX, key_bytes

__all__ = ["REQUEST_HEADER", "hash_request", "key_bytes_column", "key_column", "repeats"]

# One request to the hashing process: its kind (b"i" int64 values, b"u" uint64 values, b"f"
# float64 values, b"b" int64 offsets then the bytes), the number of keys and the payload's
# length in bytes.
REQUEST_HEADER = struct.Struct("<cqq")


def key_column(batch: pa.RecordBatch, path: Sequence[str]) -> pa.Array | None:
    """The top-level integer, float, string or binary column ``path`` names, in one chunk and
    dictionary-decoded; None for any other key (nested, absent, repeated names, other types),
    which goes through ``key_bytes`` row by row.

    Args:
        batch: the records, column-wise.
        path: the split key's field names.

    Returns:
        The column, or None.
    """
    if len(path) != 1 or batch.schema.names.count(path[0]) != 1:
        return None
    arr = batch.column(path[0])
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    if pa.types.is_float16(t):
        return arr.cast(pa.float64())  # exact; Arrow's kernels take no half floats
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t) or (
            pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        return arr
    return None


def key_bytes_column(arr: pa.Array) -> pa.Array:
    """``key_bytes`` of every value of a :func:`key_column` (``0x02`` + decimal digits for
    integers and whole floats, ``0x03`` + ``repr`` for other floats, ``0x04`` + the bytes
    otherwise), as large_binary; null where the key is missing.

    Args:
        arr: a :func:`key_column`.

    Returns:
        The key bytes per row.
    """
    if pa.types.is_floating(arr.type):  # each distinct value once, through key_bytes itself
        encoded = arr.dictionary_encode()
        distinct = [key_bytes(v) for v in encoded.dictionary.to_pylist()]
        return pa.array(distinct, pa.large_binary()).take(encoded.indices)
    if pa.types.is_integer(arr.type):
        prefix, text = INT_PREFIX, arr.cast(pa.string()).cast(pa.large_binary())
    else:
        prefix, text = BYTES_PREFIX, arr.cast(pa.large_binary())
    return pc.binary_join_element_wise(pa.scalar(prefix, pa.large_binary()), text,
                                       pa.scalar(b"", pa.large_binary()))


def repeats(keys: pa.Array, sample: int = 4096) -> bool:
    """Do the first ``sample`` keys repeat enough (fewer than a quarter distinct) for hashing
    each distinct key once to pay for finding them?

    Args:
        keys: the batch's :func:`key_column`.
        sample: how many keys to look at.

    Returns:
        Whether to hash distinct keys once.
    """
    head = keys.slice(0, sample)
    return pc.count_distinct(head).as_py() * 4 < len(head)


def hash_request(arr: pa.Array) -> tuple[bytes, list]:
    """A :func:`key_column` without nulls as one request to the hashing process: the header
    and the payload's buffers (views of the column where its layout allows).

    Args:
        arr: a key column without nulls.

    Returns:
        The header and the payload's buffers.

    Raises:
        ValueError: the column holds nulls.
    """
    if arr.null_count:
        raise ValueError("a hash request holds present keys only; drop the nulls first")
    t = arr.type
    if pa.types.is_floating(t):  # float16 and float32 widen to float64 exactly
        kind = b"f"
        buffers = [np.ascontiguousarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)]
    elif pa.types.is_integer(t):
        kind = b"u" if t == pa.uint64() else b"i"
        values = arr.to_numpy(zero_copy_only=False).astype(
            np.uint64 if kind == b"u" else np.int64, copy=False)
        buffers = [np.ascontiguousarray(values)]
    else:
        arr = arr.cast(pa.large_binary())
        offsets = np.frombuffer(arr.buffers()[1], np.int64, len(arr) + 1, arr.offset * 8)
        data = arr.buffers()[2]
        start, stop = int(offsets[0]), int(offsets[-1])
        kind = b"b"
        buffers = [offsets - start if start else offsets,
                   memoryview(data)[start:stop] if data is not None else b""]
    size = sum(memoryview(b).nbytes for b in buffers)
    return REQUEST_HEADER.pack(kind, len(arr), size), buffers
