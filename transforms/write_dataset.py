"""``WriteTFRecordDataset``: the whole sink, as one library transform for any Beam pipeline.

Rows go through ``ToExamples`` when ``features`` are given, then
:class:`sinks.dataset.WriteDataset` writes sized shards, dead letters and the commit.
Applying the transform only checks (the arguments, the runner, that the output holds nothing
foreign) and writes nothing: the output's lease, the preparation of the output and the claim
of the version folder are the pipeline's first step, when it runs
(``sinks/commit.initialize_write``), and the job's writing steps keep the lease alive
wherever they run until its commit releases it. ``beam_tfrecords.pipelines.api`` re-exports
it under its former path, which Beam YAML files name.
"""

from __future__ import annotations

import dataclasses
import uuid
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.transforms.display import DisplayDataItem

from beam_tfrecords.errors import UserError
from beam_tfrecords.runtime.bundle_output import finish_bundle_outputs
from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.sinks.commit import CommitError, check_output, default_version, make_commit_spec
from beam_tfrecords.sinks.dataset import WriteDataset, refuse_unsupported
from beam_tfrecords.sinks.format.layout import Layout, check_name
from beam_tfrecords.sinks.format.shard_plan import ShardSize, derive_band, parse_size
from beam_tfrecords.sinks.format.shuffle_plan import MAX_SEED
from beam_tfrecords.sinks.format.tfrecord_format import normalize_compression
from beam_tfrecords.transforms.build_examples import record_size_error
from beam_tfrecords.transforms.codec.feature_spec import tf_parse_spec
from beam_tfrecords.transforms.codec.reader_files import reader_documents
from beam_tfrecords.transforms.codec.specs import FeaturesLike, SplitsLike
from beam_tfrecords.transforms.codec.splits import SplitSpec
from beam_tfrecords.transforms.compute_statistics import empty_statistics
from beam_tfrecords.transforms.drift_gate import DriftGate, DriftGateError, check_gate
from beam_tfrecords.transforms.readers.framework import COUNTS, REJECTED, dead_letter
from beam_tfrecords.transforms.stats.drift import Thresholds
from beam_tfrecords.transforms.to_examples import (
    ToExamples,
    as_feature_specs,
    as_split_spec,
    is_read_result,
)
from beam_tfrecords.transforms.version_report import KeyPreview, VersionReport, record_preview

__all__ = ["DatasetError", "DriftGateError", "ShardSizeLike", "WriteTFRecordDataset"]

DEFAULT_SPLIT = "train"
# ``{"target": "150MB", "min": "100MB", "max": "200MB"}`` (sizes as strings or bytes), or a
# ShardSize.
ShardSizeLike = Mapping[str, int | str] | ShardSize
# The transforms applied already: each one writes one version, so a second application
# (which would write the same version under the same build) is refused.
_APPLIED: weakref.WeakSet = weakref.WeakSet()


class DatasetError(UserError, ValueError):
    """A WriteTFRecordDataset argument that cannot work; the message names it."""


def _shard_size(value: ShardSizeLike | None) -> ShardSize:
    if value is None:
        return ShardSize()
    if isinstance(value, ShardSize):
        return value
    if not isinstance(value, Mapping) or not set(value) <= {"target", "min", "max"}:
        raise DatasetError(f"shard_size must be a mapping with target, min and max, not "
                           f"{value!r}")
    try:
        return derive_band({k: parse_size(v) for k, v in value.items()})
    except ValueError as err:
        raise DatasetError(f"shard_size {dict(value)!r}: {err}") from None


def _thresholds(value: bool | Mapping[str, Any] | Thresholds) -> Thresholds | None:
    """The drift gate's thresholds: True the defaults, False or None no gate, a mapping
    (the config's ``validate:`` keys) or Thresholds."""
    if value is None or value is False:
        return None
    if value is True:
        return Thresholds()
    if isinstance(value, Thresholds):
        return value
    if not isinstance(value, Mapping):
        raise DatasetError(f"validate must be True, False or a mapping of thresholds, not "
                           f"{value!r}")
    fields = {f.name for f in dataclasses.fields(Thresholds)}
    unknown = sorted(set(value) - fields)
    if unknown:
        raise DatasetError(f"validate: unknown threshold(s) {unknown}; known: "
                           f"{sorted(fields)}")
    items = {k: tuple(v) if k == "ignore" else v for k, v in value.items()}
    return Thresholds(**items)


class _SerializedToBatches(beam.DoFn):
    """``bytes`` or ``(split, bytes)`` elements -> ``(split, SerializedBatch)`` per split and
    bundle, counting them; a record too large to write, or a bad split name, is a dead
    letter."""

    def __init__(self, default_split: str, max_record_bytes: int | None, batch: int = 4096,
                 splits: Sequence[str] = ()) -> None:
        self._default = default_split
        self._max = max_record_bytes
        self._batch = batch
        self._splits = frozenset(splits)

    def start_bundle(self) -> None:
        self._pending: dict[str, list[bytes]] = {}
        self._seen = 0

    def process(self, element: Any) -> Iterator[Any]:
        self._seen += 1
        split, record = ((element[0], element[1]) if isinstance(element, tuple)
                         and len(element) == 2 else (self._default, element))
        reason = ""
        if isinstance(record, (bytearray, memoryview)):
            record = bytes(record)
        if not isinstance(record, bytes):
            reason = (f"not a serialized record: a {type(record).__name__} (expected bytes or "
                      "(split, bytes))")
        elif self._splits and split not in self._splits:
            reason = f"split {split!r} is not one of {sorted(self._splits)}"
        else:
            try:
                check_name("split", split)
            except ValueError as err:
                reason = str(err)
        if not reason:
            reason = record_size_error(len(record), self._max)
        yield beam.pvalue.TaggedOutput(COUNTS, ("read", 1))
        if reason:
            yield beam.pvalue.TaggedOutput(COUNTS, ("rejected_at_build", 1))
            shown = record if not isinstance(record, bytes) else f"{len(record)} bytes"
            yield beam.pvalue.TaggedOutput(REJECTED, dead_letter(
                "pcollection", self._seen, "", reason, shown, ""))
            return
        pending = self._pending.setdefault(split, [])
        pending.append(record)
        if len(pending) >= self._batch:
            yield from self._emit(split)

    def _emit(self, split: str) -> Iterator[Any]:
        records = self._pending.pop(split, [])
        if records:
            yield beam.pvalue.TaggedOutput(COUNTS, ("built", len(records)))
            yield split, SerializedBatch.from_records(records)

    def finish_bundle(self) -> Iterator[Any]:
        for split in list(self._pending):
            yield from finish_bundle_outputs(self._emit(split))


def _is_serialized(pcoll: Any) -> bool:
    """Whether a PCollection is typed as serialized records, ``bytes`` or ``(str, bytes)``:
    then ``features`` only describe them (feature_spec.json) and are not applied as to rows."""
    from apache_beam.typehints import typehints

    kind = getattr(pcoll, "element_type", None)
    return kind is not None and kind != typehints.Any and typehints.is_consistent_with(
        kind, typehints.Union[bytes, typehints.Tuple[str, bytes]])


def _duplicates_preview(parts: Mapping[str, Any]) -> Any:
    """How the commit shows a duplicate's example: the key's value when ToExamples counted
    them by a key (``duplicate_key``), else the record's features."""
    key = getattr(parts.get("duplicates"), "duplicate_key", None)
    return KeyPreview(key) if key else record_preview


class WriteTFRecordDataset(beam.PTransform):
    """Writes a committed TFRecord data set version: shards, dead letters, manifest, LATEST.

    Apply it to any of:

    - rows (dicts, ``beam.Row`` s, NamedTuples, Arrow batches or tables), with ``features``;
    - the result of ``btf.ToExamples`` (all three outputs, as returned);
    - the result of a source (``btf.ReadCsv``, ``ReadJsonl``, ``ReadParquet``, ``ReadAvro``,
      ``ReadImages``): its records are encoded with ``features`` (or the source's) and its
      rejected rows and counts go into the manifest, so read = written + rejected holds;
    - serialized Examples your own code built: ``bytes`` (all in split ``train``) or
      ``(split, bytes)`` -- a sized, atomically committed drop-in for ``WriteToTFRecord``.

    Args:
      output: the output root, local or ``gs://``; versions go to ``<output>/<version>/``.
      name: the data set's name (the shards' file name prefix).
      features: the ``features:`` mapping of a config (plain dicts) or FeatureSpecs; needed
        for rows, optional for serialized input (then it only describes the data for
        ``feature_spec.json``; the input must be typed ``bytes`` or ``tuple[str, bytes]``, as
        ``beam.Create`` infers it or ``.with_output_types(bytes)`` declares it).
      splits: the ``splits:`` mapping for rows (``{"key": "id", "train": 80, "eval": 20}``);
        for ``(split, bytes)`` input, the list of split names to expect.
      compression: ``none``, ``gzip`` or ``zlib`` (``deflate``, Beam's name for it and the
        shards' suffix, is the same codec).
      shard_size: ``{"target": "150MB", "min": "100MB", "max": "200MB"}`` (the default).
      max_bad_fraction: fail (and keep the dead letters apart) when rejected / read is over.
      max_unread_fraction: fail when the unread bytes of input / all input bytes is over.
      version: the version folder's name; default: a UTC timestamp, chosen when the
        transform is applied.
      keep_versions: committed versions to keep (the one LATEST names is never deleted).
      index: write ``offset length`` index sidecars (uncompressed only).
      allow_non_empty_output: write beside files that are not ours (never touching them).
      wait_for_lease: seconds the job waits when another build holds the output's lease.
      shuffle_seed: an integer: every shard holds its records in this seed's pseudo-random
        order, and the same records with the same seed give the same shard files, byte for
        byte, on every runner (the config's ``output.shuffle: {seed: N}``). None (the
        default): records are written as they arrive.
      validate: the drift gate, where statistics are committed (rows, or ToExamples' whole
        result): True (the default) with the default thresholds, a mapping of the config's
        ``validate:`` keys (``{"max_linf": 0.2}``), or False for none. A version the gate
        holds back is committed, ``LATEST`` stays, the manifest's ``gate`` says
        ``passed: false`` and the pipeline then fails with
        :class:`~beam_tfrecords.transforms.drift_gate.DriftGateError`
        (``btf.DriftGateError``).

    Every argument after ``name`` is keyword-only. A bad argument raises
    :class:`DatasetError` at construction, naming it.

    Nothing is written when the transform is applied: the output's lease, the preparation
    of the output and the claim of the version folder are the pipeline's first step, when it
    runs, so a pipeline built and never run leaves the output as it was. Each transform
    writes one version: applying one twice raises :class:`DatasetError` (make one per write).

    Returns:
      A PCollection holding one element, the committed version's manifest document (its
      ``version``, counts, shards ..., and ``gate``: whether the drift gate passed). Its
      attributes ``version`` and ``version_dir`` name the version folder the pipeline
      writes, known as soon as the transform is applied.
    """

    def __init__(self, output: str, name: str, *, features: FeaturesLike | None = None,
                 splits: SplitsLike | None = None, compression: str = "none",
                 shard_size: ShardSizeLike | None = None, max_bad_fraction: float = 0.0,
                 max_unread_fraction: float = 0.0, version: str | None = None,
                 keep_versions: int = 5, index: bool = False,
                 allow_non_empty_output: bool = False, wait_for_lease: float = 0.0,
                 shuffle_seed: int | None = None,
                 validate: bool | Mapping[str, Any] | Thresholds = True) -> None:
        super().__init__()
        if not isinstance(output, str) or not output.strip():
            raise DatasetError(f"output must be a local or gs:// path, not {output!r}")
        self.output = output.rstrip("/")
        self.name = check_name("data set", name)
        self.features = as_feature_specs(features) if features is not None else None
        self._split_names: tuple[str, ...] = ()
        self.splits = None
        if splits is not None and not isinstance(splits, (Mapping, SplitSpec)):
            if isinstance(splits, str) or not all(isinstance(s, str) for s in splits):
                raise DatasetError("splits is a mapping for rows, or the list of split names "
                                   f"of (split, bytes) input, not {splits!r}")
            self._split_names = tuple(check_name("split", s) for s in splits)
        elif self.features is not None:
            self.splits = as_split_spec(splits)
        elif splits is not None:
            raise DatasetError("without features, splits lists the split names of (split, "
                               f"bytes) input, not {splits!r}")
        try:
            self.compression = normalize_compression(compression)
        except ValueError as err:
            raise DatasetError(f"compression: {err}") from None
        self.shard_size = _shard_size(shard_size)
        for label, fraction in (("max_bad_fraction", max_bad_fraction),
                                ("max_unread_fraction", max_unread_fraction)):
            if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not (
                    0.0 <= fraction <= 1.0):
                raise DatasetError(f"{label} must be a number in [0, 1], not {fraction!r}")
        self.max_bad_fraction = float(max_bad_fraction)
        self.max_unread_fraction = float(max_unread_fraction)
        self.version = check_name("version", version) if version is not None else None
        if not isinstance(keep_versions, int) or keep_versions < 1:
            raise DatasetError(f"keep_versions must be at least 1, not {keep_versions!r}")
        self.keep_versions = keep_versions
        if index and self.compression != "none":
            raise DatasetError("index needs compression none: offsets into a compressed "
                               "stream do not address the file")
        self.index = bool(index)
        self.allow_non_empty_output = bool(allow_non_empty_output)
        self.wait_for_lease = float(wait_for_lease)
        if shuffle_seed is not None and (isinstance(shuffle_seed, bool) or not isinstance(
                shuffle_seed, int) or not 0 <= shuffle_seed <= MAX_SEED):
            raise DatasetError(f"shuffle_seed must be an integer from 0 to {MAX_SEED} or None, "
                               f"not {shuffle_seed!r}")
        self.shuffle_seed = shuffle_seed
        self.validate = _thresholds(validate)

    def _parts(self, pvalueish: Any) -> tuple[dict, tuple[str, ...]]:
        """The examples, rejected and counts PCollections, and the split names."""
        max_record = self.shard_size.max
        if is_read_result(pvalueish):  # a source's result: its records are rows
            return self._rows(pvalueish, getattr(pvalueish["records"], "feature_specs", None))
        if isinstance(pvalueish, beam.pvalue.DoOutputsTuple) or isinstance(pvalueish, dict):
            get = (pvalueish.get if isinstance(pvalueish, dict)
                   else lambda tag: pvalueish[tag])
            parts = {"examples": get("examples"), "rejected": get(REJECTED),
                     "counts": get(COUNTS)}
            if isinstance(pvalueish, dict) and pvalueish.get("statistics") is not None:
                parts["statistics"] = pvalueish["statistics"]  # ToExamples' statistics
            if isinstance(pvalueish, dict) and pvalueish.get("duplicates") is not None:
                parts["duplicates"] = pvalueish["duplicates"]  # counted by a key's values
            names = getattr(parts["examples"], "split_names", None) or (
                self.splits.names if self.splits is not None else (DEFAULT_SPLIT,))
            return parts, tuple(names)
        if self.features is not None and not _is_serialized(pvalueish):
            return self._rows(pvalueish)
        names = self._split_names or (DEFAULT_SPLIT,)
        batched = pvalueish | "BatchRecords" >> beam.ParDo(_SerializedToBatches(
            names[0], max_record, splits=self._split_names)).with_outputs(
            REJECTED, COUNTS, main="examples")
        return ({"examples": batched.examples, "rejected": batched[REJECTED],
                 "counts": batched[COUNTS]}, names)

    def _rows(self, rows: Any, source_features: Any = None) -> tuple[dict, tuple[str, ...]]:
        """Rows, or a source's whole result (its rejects and counts go on), through
        ToExamples with this transform's features, else the source's."""
        features = self.features or source_features
        if features is None:
            raise DatasetError("a source's records need features: give features= here or to "
                               "the source")
        if self.splits is None and self._split_names:
            raise DatasetError("rows need splits as a mapping ({key: id, train: 80, "
                               f"eval: 20}}), not the list {list(self._split_names)}")
        splits = self.splits if self.splits is not None else as_split_spec(None)
        built = rows | "ToExamples" >> ToExamples(features, splits,
                                                  max_record_bytes=self.shard_size.max)
        return dict(built), splits.names

    def display_data(self) -> dict[str, Any]:
        """What the Dataflow job page shows for this step."""
        items = {
            "output": DisplayDataItem(self.output, label="Output root"),
            "name": DisplayDataItem(self.name, label="Data set name"),
            "version": DisplayDataItem(self.version or "(a UTC timestamp)",
                                       label="Version folder"),
            "compression": DisplayDataItem(self.compression, label="Compression"),
            "shard_size": DisplayDataItem(
                f"target {self.shard_size.target} B in [{self.shard_size.min}, "
                f"{self.shard_size.max}] B", label="Shard size (stored bytes)"),
            "max_bad_fraction": DisplayDataItem(self.max_bad_fraction,
                                                label="Largest rejected fraction"),
            "keep_versions": DisplayDataItem(self.keep_versions, label="Versions kept"),
        }
        if self.features is not None:
            items["features"] = DisplayDataItem(", ".join(f.name for f in self.features),
                                                label="Features")
        if self.splits is not None or self._split_names:
            names = self.splits.names if self.splits is not None else self._split_names
            items["splits"] = DisplayDataItem(", ".join(names), label="Splits")
        if self.shuffle_seed is not None:
            items["shuffle_seed"] = DisplayDataItem(self.shuffle_seed, label="Shuffle seed")
        if self.index:
            items["index"] = DisplayDataItem(True, label="Index sidecars")
        return items

    def expand(self, pvalueish):
        return self._apply(pvalueish)[0]

    def _apply(self, pvalueish: Any) -> tuple[Any, dict]:
        """The manifest PCollection and the parts written (examples, rejected, counts);
        DatasetError when this transform was applied before."""
        if self in _APPLIED:
            raise DatasetError(f"this WriteTFRecordDataset (output {self.output!r}) was applied "
                               "already; each one writes one version: make one per write")
        _APPLIED.add(self)
        parts, names = self._parts(pvalueish)
        return self._write(parts, names), parts

    def _write(self, parts: Mapping[str, Any], names: tuple[str, ...]):
        """The read-only checks, then WriteDataset: the manifest PCollection, which names the
        version it writes (``version``, ``version_dir``)."""
        # ToExamples' features describe its examples when none were given here.
        features = self.features or getattr(parts["examples"], "feature_specs", None)
        runner = type(parts["examples"].pipeline.runner).__name__
        refuse_unsupported(runner)  # read-only checks: nothing is written while building
        try:
            check_output(self.output, self.allow_non_empty_output)
        except CommitError as err:
            raise DatasetError(str(err)) from None
        layout = Layout(self.output, self.version or default_version(self.output))
        documents, tfds_note = reader_documents(features or ())
        kinds = getattr(parts.get("statistics"), "statistics_kinds", None)
        spec = make_commit_spec(
            layout=layout, build_id=uuid.uuid4().hex, name=self.name,
            compression=self.compression,
            feature_spec=tf_parse_spec(features) if features else {},
            config={"api": "WriteTFRecordDataset", "output": self.output, "name": self.name,
                    "compression": self.compression,
                    "features": [f.name for f in features or ()],
                    "splits": list(names),
                    **({"shuffle": {"seed": self.shuffle_seed}}
                       if self.shuffle_seed is not None else {})},
            inputs={"source": "pipeline"}, runner=runner,
            max_bad_fraction=self.max_bad_fraction,
            max_unread_fraction=self.max_unread_fraction, keep=self.keep_versions,
            documents=documents, tfds_note=tfds_note, shuffle_seed=self.shuffle_seed,
            allow_non_empty=self.allow_non_empty_output, wait_for_lease=self.wait_for_lease,
            statistics=None if kinds is None else empty_statistics(kinds, names),
            gate=None if kinds is None or self.validate is None else DriftGate(self.validate),
            report=VersionReport(), about={},
            duplicates=None if kinds is None else _duplicates_preview(parts),
        )
        manifest = parts | "Write" >> WriteDataset(spec, names, self.shard_size, self.index)
        if spec.gate is not None:  # after the commit, in a stage of its own: a retry of it
            # re-raises, never re-runs the commit
            _ = (manifest | "AfterCommit" >> beam.Reshuffle()
                 | "CheckDriftGate" >> beam.Map(check_gate, layout.version_dir))
        manifest.version, manifest.version_dir = layout.version, layout.version_dir
        return manifest
