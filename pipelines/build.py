"""The build pipeline: config -> sources -> BuildExamples -> sharded TFRecords -> manifest.

``build_pipeline(p, config, layout, input_files)`` adds the steps to a Beam pipeline and
returns the interesting PCollections, so tests can assert on what was built; :func:`run`
parses the command line, prepares the output location and runs it.

Commit protocol (the output contract in the README): shards and dead letters reach their
final names inside a fresh version directory; the ``Commit`` step then checks the counts
(read = written + rejected, and the bad-record threshold), writes ``feature_spec.json``, then
``manifest.json`` -- the commit point -- then moves ``LATEST``, and finally removes staging.
It runs inside the pipeline, so a runner that only stages a job (a Dataflow template) commits
nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import sys
import uuid
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystem import FileMetadata
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from beam_tfrecords.errors import UserError
from beam_tfrecords.pipelines import output_guard, signals
from beam_tfrecords.pipelines.config import (
    FORMAT_SUFFIXES,
    Config,
    check_columns,
    check_seed,
    load_config,
)
from beam_tfrecords.pipelines.flags import CommandParser, check_pipeline_flags
from beam_tfrecords.pipelines.launch_check import check_sample
from beam_tfrecords.pipelines.runners import check_runner, runner_for, runs_in_process
from beam_tfrecords.sinks import storage
from beam_tfrecords.sinks.commit import (
    Build,
    CommitSpec,
    fail_stopped_early,
    make_commit_spec,
    read_latest,
    start_build,
)
from beam_tfrecords.sinks.dataset import WriteDataset
from beam_tfrecords.sinks.format import manifest as mf
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.sinks.format.file_identity import FileIdentity, not_a_file
from beam_tfrecords.sinks.format.layout import PROGRESS, InvalidName, Layout, check_name
from beam_tfrecords.sinks.format.redact import redact
from beam_tfrecords.sinks.lease import Lease, LeaseHeld, LeaseLost
from beam_tfrecords.transforms.codec.feature_spec import tf_parse_spec
from beam_tfrecords.transforms.codec.label_order import is_class_ordered
from beam_tfrecords.transforms.codec.reader_files import image_features, reader_documents
from beam_tfrecords.transforms.codec.splits import SplitSpec
from beam_tfrecords.transforms.compute_statistics import empty_statistics, statistics_kinds
from beam_tfrecords.transforms.drift_gate import DriftGate
from beam_tfrecords.transforms.readers import top_level_fields
from beam_tfrecords.transforms.readers.events import HEAD_BYTES, unreadable_text
from beam_tfrecords.transforms.readers.framework import COUNTS, REJECTED
from beam_tfrecords.transforms.readers.read_avro import ReadAvro
from beam_tfrecords.transforms.readers.read_csv import ReadCsv, read_csv_header
from beam_tfrecords.transforms.readers.read_images import (
    RESERVED,
    ImagePlan,
    ReadImages,
    list_images,
    plan_images,
)
from beam_tfrecords.transforms.readers.read_jsonl import ReadJsonl
from beam_tfrecords.transforms.readers.read_parquet import ReadParquet
from beam_tfrecords.transforms.to_examples import ToExamples
from beam_tfrecords.transforms.version_report import VersionReport

__all__ = ["BuildError", "build_pipeline", "commit_spec", "input_fingerprint", "run"]

_LOG = logging.getLogger(__name__)


class BuildError(UserError):
    """A build that must not start or commit; the message is the one line a scheduler log
    shows."""


def input_fingerprint(pattern: str, metadata: Sequence[Any] | None = None
                      ) -> tuple[list[str], dict[str, Any]]:
    """The matched input files and a fingerprint of them (paths, sizes, modification times).

    ``metadata`` (Beam FileMetadata) when the caller has listed the files already.
    """
    metadata = storage.match(pattern) if metadata is None else list(metadata)
    if not metadata:
        raise BuildError(f"no input files match {pattern!r}")
    digest = hashlib.sha256()
    for m in metadata:
        digest.update(f"{m.path}\0{m.size_in_bytes}\0{m.last_updated_in_seconds}\n".encode())
    return [m.path for m in metadata], {
        "pattern": pattern,
        "files": len(metadata),
        "bytes": sum(m.size_in_bytes for m in metadata),
        "sha256": digest.hexdigest(),
    }


def list_inputs(pattern: str, fmt: str) -> tuple[list[FileIdentity], dict[str, Any]]:
    """The input files as listed at launch -- each with its identity, which travels with its
    work item so the worker that reads it can tell whether it changed -- and their
    fingerprint. A folder, a FIFO, a device or a socket among them is refused in one line,
    never opened."""
    def folder_slip(folder: str) -> BuildError:
        folder = folder.rstrip("/") or "/"
        return BuildError(f"input {folder} is a directory, not a file or a glob of files; use "
                          f"a glob of its files, e.g. "
                          f"{folder.rstrip('/')}/*{FORMAT_SUFFIXES.get(fmt, '')}")

    metadata = storage.match(pattern)
    if not metadata:
        if storage.is_gcs(pattern) and "*" not in pattern and storage.exists(pattern):
            raise folder_slip(pattern)  # a prefix with objects below it
        raise BuildError(f"no input files match {pattern!r}")
    listed = storage.identify(metadata)
    for identity in listed:
        if identity.kind == "directory":
            folder = identity.path  # as the user wrote it when it is the pattern itself
            same = storage.is_local(pattern) and os.path.normpath(folder) == os.path.normpath(
                pattern)
            raise folder_slip(pattern if same else folder)
        why = not_a_file(identity)
        if why is not None:
            raise BuildError(f"input {why}")
    # The fingerprint's sizes are those the readers compare with (os.stat's, not Beam's).
    _, fingerprint = input_fingerprint(pattern, [
        FileMetadata(m.path, i.size, m.last_updated_in_seconds)
        for m, i in zip(metadata, listed, strict=True)])
    return listed, fingerprint


def read_source(p: beam.Pipeline, config: Config, input_files: Sequence[str | FileIdentity],
                images: ImagePlan | None = None):
    """The public source the format calls for (``btf.ReadCsv`` ...), with the config's options,
    on the files listed at launch; its result is ``records`` (RecordChunks), ``rejected``
    (dead-letter rows) and ``counts`` whatever the format."""
    source = config.source
    if source.format == "images":
        if images is None:
            raise ValueError("an images source needs the ImagePlan made at launch")
        return p | "ReadImages" >> ReadImages(images,
                                              check_complete=source.images.check_complete,
                                              read_threads=source.images.read_threads)
    reader = file_source(config, input_files)
    return p | type(reader).__name__ >> reader  # stable step labels: ReadCsv, ReadParquet ...


def file_source(config: Config, input_files: Sequence[str | FileIdentity]) -> Any:
    """The public source (``btf.ReadCsv`` ...) of a file format, with the config's options,
    on ``input_files`` (paths, or identities as :func:`list_inputs` lists them)."""
    source = config.source
    files, features = list(input_files), config.features
    extra = tuple(path[0] for path in (config.splits.key, config.splits.field) if path)
    # A CSV header may name a column "meta.label" literally (check_columns accepts it).
    literal = tuple(sep.join(path) for path in (config.splits.key, config.splits.field)
                    if path and len(path) > 1 for sep in "./")
    limit = source.max_record_bytes
    readers = {
        # extra_fields names the split key: the reader then types only the columns named
        # (time grows with them, not with the file's width).
        "csv": lambda: ReadCsv(files, features, extra_fields=extra + literal,
                               **dataclasses.asdict(source.csv)),
        "jsonl": lambda: ReadJsonl(files, features, max_depth=source.jsonl.max_depth,
                                   max_record_bytes=source.jsonl.max_line_bytes),
        "parquet": lambda: ReadParquet(files, features, extra_fields=extra,
                                       max_record_bytes=limit),
        "avro": lambda: ReadAvro(files, features, max_record_bytes=limit),
    }
    return readers[source.format]()


def commit_spec(config: Config, layout: Layout, build_id: str, inputs: dict,
                runner: str = "DirectRunner", keep: int = 5,
                images: ImagePlan | None = None, use_lease: bool = True,
                baseline_statistics: str | None = None) -> CommitSpec:
    """What the commit step needs to know about this build (sinks/commit.py);
    ``baseline_statistics``: the statistics folder of a baseline built without them."""
    extra = {}
    if images is not None:  # image labels: the int label is the index into this list
        extra["label_vocabulary"] = list(images.vocabulary)
    documents, tfds_note = reader_documents(
        config.features, image_features(config.features, config.source.format))
    statistics = gate = None
    if config.output.statistics:
        statistics = empty_statistics(statistics_kinds(config.features), config.splits.names)
        if config.validate is not None:
            gate = DriftGate(config.validate, baseline_statistics)
    return make_commit_spec(
        layout=layout, build_id=build_id, name=config.name,
        compression=config.output.compression, feature_spec=tf_parse_spec(config.features),
        config=config.resolved(), config_sha256=config.sha256(), inputs=inputs,
        runner=runner, max_bad_fraction=config.errors.max_bad_fraction,
        max_unread_fraction=config.errors.max_unread_fraction,
        abort_window=config.errors.abort_window, keep=keep, extra=extra, use_lease=use_lease,
        documents=documents, tfds_note=tfds_note, shuffle_seed=config.output.shuffle_seed,
        statistics=statistics, gate=gate, report=VersionReport(baseline_statistics),
        about=dataclasses.asdict(config.about),
    )


def warn_if_class_ordered(config: Config, images: ImagePlan | None) -> bool:
    """Log one warning when an unshuffled build would write images class by class."""
    if images is None or config.output.shuffle_seed is not None:
        return False
    if not is_class_ordered([e.label for e in images.entries]):
        return False
    _LOG.warning(
        "%s lists its %d images class by class, and output.shuffle is off: the shards will "
        "hold the classes in that order, and a reader that interleaves a few shards with a "
        "shuffle buffer trains on batches of one or two classes. Add output.shuffle: "
        "{seed: N} to the config (or --shuffle-seed N) to write them in a seeded random order.",
        images.source, len(images.entries))
    return True


def build_pipeline(p: beam.Pipeline, config: Config, spec: CommitSpec,
                   input_files: Sequence[str], images: ImagePlan | None = None
                   ) -> dict[str, Any]:
    """Adds the build to ``p``; returns its main PCollections by name.

    ``spec``: the commit's (:func:`commit_spec`); ``images``: the plan :func:`plan_inputs`
    made at launch for an images source.
    """
    # The public transforms (btf.ReadCsv ..., btf.ToExamples), then the commit. The source's
    # rejects and counts go to WriteDataset beside ToExamples', not merged by a Flatten:
    # Beam's local runner materializes one, and the dead letters and the early stop
    # (sinks/early_stop.py) would wait for the whole input.
    read = read_source(p, config, input_files, images)
    built = read["records"] | "BuildExamples" >> ToExamples(
        config.features, config.splits, max_record_bytes=config.output.shard_size.max,
        statistics=spec.statistics is not None)
    parts = {"examples": built.examples, "rejected": (read[REJECTED], built.rejected),
             "counts": (read[COUNTS], built.counts)}
    if "statistics" in built:  # (split, serialized statistics)
        parts["statistics"] = built["statistics"]
    manifest = parts | "WriteDataset" >> WriteDataset(
        spec, config.splits.names, config.output.shard_size, config.output.index,
        config.output.shard_name)
    return {"examples": built.examples, "manifest": manifest}


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What a build reads, found at launch: the files, their fingerprint, the image plan."""

    files: list[str | FileIdentity]  # an images source: paths; any other: identities
    fingerprint: dict[str, Any]
    images: ImagePlan | None = None


def plan_inputs(config: Config) -> tuple[Config, Inputs]:
    """List the inputs and check the config against the first one, before any pipeline.

    An images source is listed (folders) or read (manifest CSV) here: its fingerprint covers
    every image file, and a folder layout with ``<split>/`` levels supplies the splits when
    the config names none.
    """
    source = config.source
    if source.format != "images":
        files, fingerprint = list_inputs(source.path, source.format)
        first = files[0].path
        columns = first_columns(config, first)
        if columns is not None:
            check_columns(config, columns, first)
        if config.features:
            check_sample(config.features, file_source(config, files).file_reader(), first,
                         config.errors.max_bad_fraction)
        return config, Inputs(list(files), fingerprint)
    opts = source.images
    try:
        if opts.layout == "folders":  # one listing serves the plan and the fingerprint
            root = source.path.rstrip("/")
            listed = storage.match(root + "/**")
            plan = plan_images(opts, root, paths=[m.path for m in listed])
        else:
            plan = list_images(source.path, opts)
    except (ValueError, OSError) as err:
        raise BuildError(f"source {source.path!r}: {err}") from None
    image_paths = sorted({entry.path for entry in plan.entries})
    if opts.layout != "folders":
        listed = _manifest_metadata(config, image_paths)
    for identity in storage.identify([m for m in listed if storage.is_local(m.path)]):
        why = not_a_file(identity)  # a FIFO among the images would hang its reader
        if why is not None:
            raise BuildError(f"input {why}")
    _, fingerprint = input_fingerprint(source.path, listed)
    if plan.splits and config.splits == SplitSpec():
        config = dataclasses.replace(config, splits=_splits_named_by(plan, source.path))
    fields = list(RESERVED) + (["split"] if plan.splits else [])
    fields += [name for name, _ in (plan.entries[0].extra if plan.entries else ())]
    check_columns(config, fields, source.path)
    return config, Inputs(image_paths, fingerprint, plan)


def _splits_named_by(plan: ImagePlan, path: str) -> SplitSpec:
    """The splits an image plan's ``split`` values name, taken from its records' own field.

    A value that cannot be a split name (``..``, ``a/b``, ``.staging``) names no split: the
    records that carry it become dead letters saying why. A plan with no usable split name at
    all is refused here, in one line, since every record would be rejected.
    """
    usable, refused = [], {}
    for name in plan.splits:
        try:
            usable.append(check_name("split", name))
        except InvalidName as err:
            refused[name] = str(err)
    if not usable:
        why = next(iter(refused.values()))
        raise BuildError(f"source {path!r}: no image names a usable split ({len(refused)} "
                         f"refused; {why})")
    share = 100.0 / len(usable)
    try:
        return SplitSpec(shares=tuple((name, share) for name in usable), field=("split",))
    except ValueError as err:
        raise BuildError(f"source {path!r}: {err}") from None


def _manifest_metadata(config: Config, image_paths: Sequence[str]) -> list:
    """FileMetadata of a manifest CSV and the image files it names, for the fingerprint.

    One listing of the images' common folder instead of one request per image; a file the
    listing lacks is simply absent (its read becomes a dead letter).
    """
    opts = config.source.images
    manifest = storage.match(opts.manifest or config.source.path)
    dirs = [path.split("/")[:-1] for path in image_paths]
    common = dirs[0] if dirs else []
    for parts in dirs[1:]:
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    if len([c for c in common if c and not c.endswith(":")]) < 1:  # no folder in common
        found = [m for path in image_paths for m in storage.match(path)]
    else:
        wanted = set(image_paths)
        found = [m for m in storage.match("/".join(common) + "/**") if m.path in wanted]
    return sorted(found + manifest, key=lambda m: m.path)


def _jsonl_fields(path: str, lines: int = 100,
                  max_record_bytes: int | None = None) -> list[str] | None:
    """The top-level keys of the first ``lines`` JSON objects of a JSON Lines file; None when
    none of them parses (the readers report bad lines, this check is only a shortcut: a required
    field that none of the first records has would reject them all). Reads at most
    ``max_record_bytes`` (default: source.max_record_bytes's) of a line: the first line longer
    than that (the reader's dead letter) ends the look, so no more than ``lines`` times the
    limit is ever read."""
    from beam_tfrecords.transforms.readers.events import DEFAULT_MAX_RECORD_BYTES

    limit = DEFAULT_MAX_RECORD_BYTES if max_record_bytes is None else max_record_bytes
    fields: dict[str, None] = {}
    with storage.open_read(path) as handle:
        for _ in range(lines):
            raw = handle.readline(limit + 1)
            if not raw or len(raw) > limit:
                break
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError):  # too deep: the reader's dead letter
                continue
            if isinstance(record, dict):
                fields.update(dict.fromkeys(record))
    return list(fields) or None


def first_columns(config: Config, path: str) -> list[str] | None:
    """The field names of the first input, to validate the config before the pipeline (for
    JSON Lines, those of its first records); None when there is nothing to check against.
    Reads at most about ``source.max_record_bytes`` of any one record, as the readers do."""
    limit = config.source.max_record_bytes
    if config.source.format in ("csv", "jsonl"):  # UTF-16 or gzip would give garbled names
        with storage.open_read(path) as raw:
            foreign = unreadable_text(raw.read(HEAD_BYTES))
        if foreign is not None:
            raise BuildError(f"{path}: {foreign}")
    if config.source.format == "jsonl":
        return _jsonl_fields(path, max_record_bytes=limit)
    if config.source.format != "csv":
        try:
            return top_level_fields(config.source.format, path, limit)
        except Exception as err:  # not a Parquet/Avro file, unreadable: say which
            raise BuildError(f"cannot read the schema of {path!r} "
                             f"({config.source.format}): {err}") from None
    opts = config.source.csv
    if not opts.header:
        return list(opts.columns)
    with storage.open_read(path) as raw:
        # Only the header matters here; a bad byte further down is the reader's dead letter,
        # not a reason to refuse the build. A header longer than the limit, or malformed,
        # gives no columns; the reader reports that file as unread.
        return read_csv_header(raw, opts, limit)


def make_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="beam-tfrecords build",
        description="Build a TFRecord data set from a config. Any Beam pipeline option is "
                    "accepted too (e.g. --runner DataflowRunner --project P --region R); "
                    "another flag is a usage error. Flags after a lone -- go to the runner "
                    "unchecked (a job service's own options).",
    )
    parser.add_argument("--config", required=True, help="data set config (YAML), local or gs://")
    parser.add_argument("--input", help="override source.path (a glob, local or gs://)")
    parser.add_argument("--output", help="override output.path (local or gs://)")
    parser.add_argument("--version", help="version directory name (default: UTC timestamp)")
    parser.add_argument("--keep-versions", type=int, default=5, metavar="N",
                        help="committed versions to keep after a build (default 5); the one "
                             "LATEST names is never deleted")
    parser.add_argument("--allow-non-empty-output", action="store_true",
                        help="write into an output location that holds files which are not "
                             "beam-tfrecords versions (refused by default); those files are "
                             "left alone")
    parser.add_argument("--wait-for-lease", type=float, default=0.0, metavar="SECONDS",
                        help="when another build holds the output's lease, wait up to this "
                             "many seconds for it instead of refusing at once (default 0)")
    shuffle = parser.add_mutually_exclusive_group()
    shuffle.add_argument("--shuffle-seed", type=int, metavar="N",
                         help="write every shard's records in this seed's pseudo-random order, "
                              "the same bytes on every runner (overrides output.shuffle)")
    shuffle.add_argument("--no-shuffle", action="store_true",
                         help="write records in the order they arrive (overrides "
                              "output.shuffle)")
    parser.add_argument("--baseline-statistics", metavar="DIR",
                        help="the statistics of the version LATEST names when it was built "
                             "without them (the folder beam-tfrecords stats --out wrote), for "
                             "the drift gate and the report")
    parser.add_argument("--skip-if-unchanged", action="store_true",
                        help="exit 0 without writing anything when the inputs fingerprint and "
                             "the config hash equal those of the version LATEST names")
    return parser


def _local_kind(path: str) -> str | None:
    """What is at a local ``path``, for output_guard.check_output_kind (a symbolic link
    counts as what it points to)."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return output_guard.SPECIAL if os.path.islink(path) else None  # a broken link
    except OSError:  # e.g. ENOTDIR: a file on the way; its parent tells
        return None
    if stat.S_ISDIR(mode):
        return output_guard.FOLDER
    return output_guard.FILE if stat.S_ISREG(mode) else output_guard.SPECIAL


def unchanged_since_latest(root: str, inputs: dict, config_sha256: str) -> str | None:
    """The LATEST version when it was built from the same inputs and config, else None."""
    latest = read_latest(root)
    if latest is None:
        return None
    manifest_path = storage.join(root, latest, mf.MANIFEST)
    if not storage.exists(manifest_path):
        return None
    manifest = json.loads(storage.read_text(manifest_path))
    if manifest.get("inputs") == inputs and manifest.get("config_sha256") == config_sha256:
        return latest
    return None


class Skipped(Exception):
    """--skip-if-unchanged found nothing new; carries the message for the user."""


def run(argv: Sequence[str] | None = None, progress_interval: float = 0.0,
        check_flags: bool = True) -> dict[str, Any] | None:
    """Build a data set; returns the manifest when the runner ran the job to completion.

    Raises :class:`Skipped` when ``--skip-if-unchanged`` finds nothing to do. With a progress
    interval (``--progress-interval``; default ``progress_interval``, off for library callers,
    10 s from the command line) a line with the records and bytes written so far, summed over
    every writer process, goes to stderr that often -- except on Dataflow, whose job page
    shows the sink's counters.

    A flag that is neither the build's nor a registered Beam pipeline option is a usage error
    (pipelines/flags.py) unless ``check_flags`` is false (the Flex Template entry, whose
    launcher passes template parameters of its own).
    """
    parser = make_parser()
    parser.add_argument("--progress-interval", type=float, default=progress_interval,
                        metavar="SECONDS", help="seconds between progress lines on stderr "
                        f"(default {progress_interval:g}; 0: none)")
    argv = list(sys.argv[1:] if argv is None else argv)
    end = argv.index("--") if "--" in argv else len(argv)
    args, beam_args = parser.parse_known_args(argv[:end])
    if check_flags:
        check_pipeline_flags(parser, beam_args)
    beam_args += argv[end + 1:]  # after a lone --: the runner's, unchecked
    if args.progress_interval < 0:
        raise BuildError(f"--progress-interval {args.progress_interval}: use 0 (off) or more")
    untested = check_runner(PipelineOptions(beam_args))  # refused before anything is written
    if untested is not None:
        _LOG.warning(untested)
    config = load_config(args.config)
    if args.input:
        config = dataclasses.replace(config, source=dataclasses.replace(config.source,
                                                                        path=args.input))
    if args.output:
        config = dataclasses.replace(config, output=dataclasses.replace(config.output,
                                                                        path=args.output))
    if args.shuffle_seed is not None or args.no_shuffle:
        seed = None if args.no_shuffle else check_seed("--shuffle-seed", args.shuffle_seed)
        config = dataclasses.replace(config, output=dataclasses.replace(
            config.output, shuffle_seed=seed))
    if args.version is not None:
        try:
            check_name("version", args.version)
        except InvalidName as err:
            raise BuildError(f"--version: {err}") from None
    if args.keep_versions < 1:
        raise BuildError(f"--keep-versions {args.keep_versions}: keep at least 1")
    if args.wait_for_lease < 0:
        raise BuildError(f"--wait-for-lease {args.wait_for_lease}: use 0 (refuse at once) or "
                         "more")
    root = config.output.path.rstrip("/")
    try:
        output_guard.check_output_kind(root, _local_kind)
    except output_guard.OutputGuardError as err:
        raise BuildError(str(err)) from None
    config, found = plan_inputs(config)
    suffix = tff.file_suffix(config.output.compression)
    try:  # the output is not the input, not matched by its glob, does not hold it
        output_guard.check_locations(config.source.path, root, [
            f"v/{mf.MANIFEST}", "v/dead_letter/rejected-00000-of-00001.jsonl",
            *(f"v/{folder}{split}/{config.output.shard_name or config.name}-00000-of-00001"
              f"{suffix}{'.index' if folder else ''}"
              for split in config.splits.names for folder in ("", "index/"))])
    except output_guard.OutputGuardError as err:
        raise BuildError(str(err)) from None
    build_id = uuid.uuid4().hex
    try:
        lease = Lease(root, build_id)
    except NotImplementedError as err:  # an output filesystem without conditional writes
        raise BuildError(str(err)) from None
    signals.watch_lease(lease)  # released if the command is interrupted

    def skip_check(layout: Layout, _prepared: Any) -> None:
        if args.skip_if_unchanged:  # the manifest holds the fingerprint redacted
            same = unchanged_since_latest(root, redact(found.fingerprint), config.sha256())
            if same is not None:
                raise Skipped(f"inputs and config are unchanged since version {same}; "
                              "nothing written (--skip-if-unchanged)")

    try:
        with start_build(root, args.version, build_id, lease=lease,
                         allow_non_empty=args.allow_non_empty_output,
                         wait_for_lease=args.wait_for_lease, before_claim=skip_check) as build:
            return _run_started(args, beam_args, config, found, build)
    except LeaseHeld as err:
        raise BuildError(str(err)) from None


def _run_started(args: argparse.Namespace, beam_args: list[str], config: Config,
                 found: Inputs, build: Build) -> dict[str, Any] | None:
    """The part of a build that runs once it has its output (sinks/commit.start_build): the
    pipeline, whose own first step begins the same build again (a no-op but for the lease),
    then the commit. A job the runner only submitted runs on without this process: the
    lease is handed over to it (``Build.hand_over``)."""
    import contextlib

    layout = build.layout
    if build.completed:  # a re-run finished the interrupted commit
        print(f"version {layout.version} was committed by an earlier run whose last step was "
              "cut short; completed its commit (LATEST now names it)", file=sys.stderr)
        return json.loads(storage.read_text(layout.manifest))
    signals.watch_version(layout)  # what an interrupted command reports on
    options = PipelineOptions(beam_args)
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    runner = runner if isinstance(runner, str) else type(runner).__name__
    progress: Any = contextlib.nullcontext()
    if args.progress_interval > 0 and "Dataflow" not in runner:
        from beam_tfrecords.pipelines.progress import ProgressReporter
        from beam_tfrecords.sinks.progress_files import ProgressOptions, read_totals

        progress_dir = storage.join(layout.staging, PROGRESS)  # removed by the commit
        options.view_as(ProgressOptions).tfrecords_progress_dir = progress_dir
        progress = ProgressReporter(lambda: read_totals(progress_dir),
                                    lambda line: print(line, file=sys.stderr, flush=True),
                                    args.progress_interval)
    spec = commit_spec(config, layout, build.build_id, found.fingerprint, runner,
                       args.keep_versions, images=found.images,
                       baseline_statistics=args.baseline_statistics)
    warn_if_class_ordered(config, found.images)
    try:
        with progress, beam.Pipeline(runner=runner_for(options), options=options) as p:
            signals.watch_job(p, remote=not runs_in_process(options))  # cancelled if stopped
            build_pipeline(p, config, spec, found.files, images=found.images)
        state = p.result.state
    except Exception as err:  # a worker that stopped the build early left a note: fail it
        stopped = fail_stopped_early(spec)  # as a threshold failure at the commit does
        if stopped is None:
            raise
        raise stopped from err
    if not _finished(state):  # submitted, not waited for: the job keeps the lease
        with contextlib.suppress(LeaseLost):
            build.hand_over()
    if not storage.exists(layout.manifest):
        return None
    return json.loads(storage.read_text(layout.manifest))


def _finished(state: Any) -> bool:
    """Whether a pipeline's state says it ran to its end (a template run's DONE included:
    nothing ran, nothing holds the lease)."""
    from apache_beam.runners.runner import PipelineState

    return state is None or PipelineState.is_terminal(state)


def main(argv: Sequence[str] | None = None) -> int:
    from beam_tfrecords.pipelines.cli import main as cli_main

    return cli_main(["build", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
