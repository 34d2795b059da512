"""``btf.read_examples``: a committed version's records as dicts of numpy arrays, without
TensorFlow; and ``btf.TFRecordIterableDataset``, a thin PyTorch wrapper (only where torch is
installed).

What comes back is what ``tf.io.parse_example`` with the version's ``feature_spec.json`` gives
(the spec is the contract, so a version is read the same way by both):

- ``FixedLenFeature``: an array of the spec's shape (a scalar is a 0-d array); an absent key
  takes the spec's ``default_value``, else the record is an error, as in TensorFlow;
- ``VarLenFeature``: a 1-D array (empty when the record has no value or no key);
- ``RaggedFeature``: rebuilt from its values and partitions -- an array when every partition
  is a uniform row length (``shape: [-1, 3]`` -> an ``(n, 3)`` array), else a list with one
  entry per outer row, each a numpy array (1-D, or 2-D where a uniform inner length follows)
  or, where more than one dimension varies, a nested list whose innermost items are arrays;
- SequenceExamples: context features as above and, per sequence feature, a ``(steps, *shape)``
  array (``FixedLenSequenceFeature``) or a list of 1-D arrays, one per step (``VarLenFeature``).

int64 -> ``int64``, float -> ``float32``, bytes and string -> object arrays of ``bytes`` (as
TensorFlow gives them; ``.decode()`` string features yourself). Every compression is read
(the manifest says which; the bytes are checked: CRCs and framing, as ``verify`` does).

Shards are divided among readers without duplicates: the shard list (in manifest order, or
shuffled by ``seed`` when ``shuffle_files``, the same permutation in every reader) is dealt
round-robin over ``world_size * num_workers`` readers. The rank comes from ``rank`` /
``world_size`` or the environment's ``RANK`` / ``WORLD_SIZE`` (torchrun's); the worker from
``worker`` / ``num_workers`` or, when torch is importable and called inside a DataLoader
worker, ``torch.utils.data.get_worker_info()``.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from beam_tfrecords.errors import UserError
from beam_tfrecords.pipelines.verify import ManifestError, check_manifest, version_at
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.format import layout as lay
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.transforms.codec import wire

__all__ = ["ExampleParser", "ReadError", "read_examples", "resolve_version", "shard_files",
           "shards_for_reader"]

_NUMPY = {"int64": np.int64, "float32": np.float32, "string": object}
_KIND = {"int64": "int64_list", "float32": "float_list", "string": "bytes_list"}


class ReadError(UserError, ValueError):
    """A path, split or reader assignment that cannot be read; the message says why."""


# -- where the records are ----------------------------------------------------------------------

def resolve_version(path: str) -> str:
    """The version directory at ``path``: itself when it holds a manifest, else the version
    its ``LATEST`` names (an output root).

    Args:
        path: a version folder or an output root.

    Returns:
        The version folder.

    Raises:
        ReadError: neither, or LATEST names no usable version.
    """
    try:
        found = version_at(path)
    except ManifestError as err:
        raise ReadError(str(err)) from None
    if found is None:
        raise ReadError(f"{path.rstrip('/') or '/'} is neither a committed version (no "
                        "manifest.json) nor an output root (no LATEST)")
    return found


def shard_files(version_dir: str, split: str | None = None
                ) -> tuple[list[str], str, dict[str, Any]]:
    """(shard paths in manifest order, compression, the feature spec document) of a version;
    every split's, in sorted split order, when ``split`` is None.

    Args:
        version_dir: the version's folder.
        split: the split to read, or None for all.

    Returns:
        The shard paths, their compression and the feature spec document.

    Raises:
        ManifestError: the manifest is unusable.
        ReadError: the split is not in the version.
    """
    path = storage.join(version_dir, lay.MANIFEST)
    try:  # the same checks as verify: shard paths stay inside the version directory
        manifest = check_manifest(json.loads(storage.read_text(path)))
    except ValueError as err:
        raise ManifestError(f"{path}: unusable manifest: {err}") from None
    splits = manifest.get("splits", {})
    if split is not None and split not in splits:
        raise ReadError(f"split {split!r} is not in {version_dir}; it has "
                        f"{', '.join(sorted(splits)) or 'none'}")
    chosen = [split] if split is not None else sorted(splits)
    files = [storage.join(version_dir, shard["path"]) for name in chosen
             for shard in splits[name]["shards"]]
    spec = manifest.get("feature_spec")
    if not isinstance(spec, dict):
        spec = json.loads(storage.read_text(storage.join(version_dir, lay.FEATURE_SPEC)))
    return files, manifest.get("compression", "auto"), spec


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ReadError(f"environment variable {name}={value!r} is not an integer") from None


def _pair(label: str, index: int | None, count: int | None) -> tuple[int, int]:
    if index is None and count is None:
        return 0, 1
    if index is None or count is None:
        raise ReadError(f"give both {label} and its count, or neither")
    for value in (index, count):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ReadError(f"{label} {index!r} of {count!r}: integers needed")
    if count < 1 or not 0 <= index < count:
        raise ReadError(f"{label} {index} of {count}: need 0 <= {label} < count")
    return int(index), int(count)


def _torch_worker() -> tuple[int | None, int | None]:
    try:
        from torch.utils.data import get_worker_info
    except ImportError:
        return None, None
    info = get_worker_info()
    return (None, None) if info is None else (info.id, info.num_workers)


def shards_for_reader(files: Sequence[str], *, shuffle_files: bool = False, seed: int = 0,
                      worker: int | None = None, num_workers: int | None = None,
                      rank: int | None = None, world_size: int | None = None) -> list[str]:
    """This reader's share of ``files``: the (seeded) order dealt round-robin over
    ``world_size * num_workers`` readers, reader ``rank * num_workers + worker``.

    Args:
        files: the shard paths, in manifest order.
        shuffle_files: shuffle the order with ``seed`` before dealing.
        seed: the shuffle's seed.
        worker: this data-loader worker's index; None: from PyTorch, else 0.
        num_workers: the data-loader workers; None: from PyTorch, else 1.
        rank: this process's rank; None: from ``RANK``, else 0.
        world_size: the processes; None: from ``WORLD_SIZE``, else 1.

    Returns:
        The shard paths this reader reads.

    Raises:
        ReadError: an index given without its count, or out of range.
    """
    if worker is None and num_workers is None:
        worker, num_workers = _torch_worker()
    if rank is None and world_size is None:
        rank, world_size = _env_int("RANK"), _env_int("WORLD_SIZE")
        if rank is None and world_size is not None:
            rank = 0 if world_size == 1 else None
    worker, num_workers = _pair("worker", worker, num_workers)
    rank, world_size = _pair("rank", rank, world_size)
    order = list(files)
    if shuffle_files:
        random.Random(seed).shuffle(order)
    return order[rank * num_workers + worker::world_size * num_workers]


# -- records to arrays --------------------------------------------------------------------------

def _values(raw: tuple[str | None, list] | None, dtype: str, key: str) -> np.ndarray:
    if raw is None:
        return np.empty(0, dtype=_NUMPY[dtype])
    kind, values = raw
    if kind not in (None, _KIND[dtype]):
        raise ReadError(f"feature {key!r} is stored as {kind}, the spec says {dtype}")
    if dtype == "string":
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array
    return np.asarray(values, dtype=_NUMPY[dtype])


def _fixed(name: str, entry: Mapping[str, Any], raw: Any) -> np.ndarray:
    shape = tuple(entry.get("shape", ()))
    dtype = entry["dtype"]
    if raw is None:
        if entry.get("default_value") is None:
            raise ReadError(f"feature {name!r} is required (FixedLenFeature) and absent")
        return np.asarray(entry["default_value"], dtype=_NUMPY[dtype]).reshape(shape)
    values = _values(raw, dtype, name)
    if values.size != int(np.prod(shape, dtype=np.int64)):
        raise ReadError(f"feature {name!r} holds {values.size} values, its shape "
                        f"{list(shape)} needs {int(np.prod(shape, dtype=np.int64))}")
    return values.reshape(shape)


def _split_rows(current: Any, lengths: Sequence[int], name: str) -> list:
    total = len(current)
    if sum(lengths) != total or any(n < 0 for n in lengths):
        raise ReadError(f"feature {name!r}: row lengths {list(lengths)[:8]} do not add up to "
                        f"its {total} values")
    bounds = np.cumsum([0, *lengths]).tolist()
    return [current[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _ragged(name: str, entry: Mapping[str, Any], features: Mapping[str, Any]) -> Any:
    dtype = entry["dtype"]
    key = entry.get("value_key") or name
    current: Any = _values(features.get(key), dtype, key)
    for part in reversed(entry.get("partitions", [])):  # innermost first
        if part["type"] == "UniformRowLength":
            length = int(part["length"])
            if len(current) % length:
                raise ReadError(f"feature {name!r}: {len(current)} rows do not divide into "
                                f"rows of {length}")
            if isinstance(current, np.ndarray):
                current = current.reshape(-1, length, *current.shape[1:])
            else:
                current = [current[i:i + length] for i in range(0, len(current), length)]
        else:
            lengths = _values(features.get(part["key"]), "int64", part["key"]).tolist()
            current = _split_rows(current, lengths, name)
    return current


def _varlen(name: str, entry: Mapping[str, Any], raw: Any) -> np.ndarray:
    return _values(raw, entry["dtype"], name)


def _context(spec: Mapping[str, Mapping[str, Any]], features: Mapping[str, Any]
             ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, entry in spec.items():
        kind = entry["type"]
        if kind == "FixedLenFeature":
            out[name] = _fixed(name, entry, features.get(name))
        elif kind == "VarLenFeature":
            out[name] = _varlen(name, entry, features.get(name))
        elif kind == "RaggedFeature":
            out[name] = _ragged(name, entry, features)
        else:
            raise ReadError(f"feature {name!r}: {kind} is not a feature type of an Example")
    return out


def _sequence(spec: Mapping[str, Mapping[str, Any]], lists: Mapping[str, list]
              ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, entry in spec.items():
        steps = lists.get(name)
        dtype = entry["dtype"]
        if entry["type"] == "FixedLenSequenceFeature":
            shape = tuple(entry.get("shape", ()))
            if steps is None and not entry.get("allow_missing", False):
                raise ReadError(f"sequence feature {name!r} is required and absent")
            rows = [_fixed(name, entry, step) for step in steps or []]
            out[name] = (np.stack(rows) if rows
                         else np.empty((0, *shape), dtype=_NUMPY[dtype]))
        elif entry["type"] == "VarLenFeature":
            out[name] = [_values(step, dtype, name) for step in steps or []]
        else:
            raise ReadError(f"sequence feature {name!r}: {entry['type']} is not supported")
    return out


class ExampleParser:
    """One serialized record -> a dict shaped by a feature_spec.json document, as
    :func:`read_examples` yields it (numpy arrays; what ``tf.io.parse_example`` gives).

    For records read some other way -- Beam's ``ReadFromTFRecord`` above all::

        spec = json.load(open(f"{version}/feature_spec.json"))
        records | beam.Map(btf.ExampleParser(spec))

    It holds only the spec, so it pickles small for Beam workers.

    Args:
      spec: a version's ``feature_spec.json`` document (the manifest's ``feature_spec``).

    Calling it with one serialized record returns that record as a dict: feature name ->
    numpy array (or, for a ragged or sequence feature, a list), as :func:`read_examples`
    yields them.
    """

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.sequence = spec.get("example_type", "Example") == "SequenceExample"
        self.features = dict(spec.get("features", {}))
        self.sequence_features = dict(spec.get("sequence_features", {}))

    def __call__(self, record: bytes) -> dict[str, Any]:
        if not self.sequence:
            return _context(self.features, wire.decode_example(record))
        context, lists = wire.decode_sequence_example(record)
        return {**_context(self.features, context), **_sequence(self.sequence_features, lists)}


# -- the reader ---------------------------------------------------------------------------------

def read_examples(path: str, split: str | None = None, *, shuffle_files: bool = False,
                  seed: int = 0, worker: int | None = None, num_workers: int | None = None,
                  rank: int | None = None, world_size: int | None = None
                  ) -> Iterator[dict[str, np.ndarray | list]]:
    """Yield the records of a committed version as dicts of numpy arrays, without TensorFlow.

    Args:
      path: a version directory (or its manifest.json), or an output root (its ``LATEST``
        version is read); local or ``gs://``.
      split: the split to read; None reads every split, in sorted order.
      shuffle_files: deal the shards in an order shuffled by ``seed``.
      seed: the shuffle's seed; the same in every reader, so the division stays without
        duplicates (vary it per epoch).
      worker: this reader's index among the DataLoader workers of one process; default:
        ``torch.utils.data.get_worker_info()`` where torch is importable, else 0.
      num_workers: the DataLoader workers of one process; default as ``worker``, else 1.
      rank: this process's index among distributed processes; default: the ``RANK``
        environment variable, else 0.
      world_size: the distributed processes; default: ``WORLD_SIZE``, else 1.

    Yields:
      One dict per record: feature name -> numpy array (a list for ragged and sequence
      features), as :class:`ExampleParser` decodes it.

    Records within a shard keep their order; each reader reads whole shards, so with more
    readers than shards some read nothing. See the module's documentation for the arrays.
    """
    version_dir = resolve_version(path)
    files, compression, spec = shard_files(version_dir, split)
    mine = shards_for_reader(files, shuffle_files=shuffle_files, seed=seed, worker=worker,
                             num_workers=num_workers, rank=rank, world_size=world_size)
    decode = ExampleParser(spec)
    for file in mine:
        with storage.open_read(file) as handle:
            for record in tff.iter_records(handle, compression, path=file):
                yield decode(record)


try:  # the PyTorch wrapper exists only where torch does; torch is never a dependency
    from torch.utils.data import IterableDataset as _IterableDataset
except ImportError:
    _IterableDataset = None

if _IterableDataset is not None:
    __all__.append("TFRecordIterableDataset")

    class TFRecordIterableDataset(_IterableDataset):  # type: ignore[misc, valid-type]
        """``read_examples`` as a PyTorch ``IterableDataset``: each DataLoader worker (and
        each distributed rank) reads its own shards, none twice. ``set_epoch(n)`` reshuffles
        the shard order when ``shuffle_files`` is set."""

        def __init__(self, path: str, split: str | None = None, *,
                     shuffle_files: bool = False, seed: int = 0, rank: int | None = None,
                     world_size: int | None = None) -> None:
            super().__init__()
            self.path, self.split = path, split
            self.shuffle_files, self.seed, self.epoch = shuffle_files, seed, 0
            self.rank, self.world_size = rank, world_size

        def set_epoch(self, epoch: int) -> None:
            self.epoch = int(epoch)

        def __iter__(self) -> Iterator[dict[str, Any]]:
            return read_examples(self.path, self.split, shuffle_files=self.shuffle_files,
                                 seed=self.seed + self.epoch, rank=self.rank,
                                 world_size=self.world_size)


def __getattr__(name: str) -> Any:
    if name == "TFRecordIterableDataset":
        raise AttributeError("TFRecordIterableDataset needs PyTorch, which is not installed "
                             "(pip install torch); btf.read_examples reads the same records "
                             "without it")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
