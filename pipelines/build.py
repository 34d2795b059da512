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
import datetime
import hashlib
import json
import logging
import re
import sys
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

import beam_tfrecords
from beam_tfrecords.pipelines import output_guard
from beam_tfrecords.pipelines.config import Config, check_columns, load_config
from beam_tfrecords.pipelines.runners import runner_for
from beam_tfrecords.sinks import manifest as mf
from beam_tfrecords.sinks import storage
from beam_tfrecords.sinks import tfrecord_format as tff
from beam_tfrecords.sinks.redact import redact
from beam_tfrecords.sinks.tfrecord_sink import WriteTFRecordShards
from beam_tfrecords.transforms.build_examples import BuildExamples
from beam_tfrecords.transforms.feature_spec import tf_parse_spec
from beam_tfrecords.transforms.images import (
    RESERVED,
    ImagePlan,
    ReadImages,
    list_images,
    plan_images,
)
from beam_tfrecords.transforms.sources import COUNTS, REJECTED, ReadCsv
from beam_tfrecords.transforms.splits import SplitSpec
from beam_tfrecords.transforms.tabular_sources import (
    ReadAvro,
    ReadJsonl,
    ReadParquet,
    top_level_fields,
)

__all__ = ["BuildError", "Layout", "build_pipeline", "input_fingerprint", "run"]

_LOG = logging.getLogger(__name__)
STAGING = ".staging"
_VERSION_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")


class BuildError(RuntimeError):
    """A build that must not commit; the message is the one line a scheduler log shows."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where one build writes: ``<root>/<version>/`` with staging inside it."""

    root: str
    version: str

    @property
    def version_dir(self) -> str:
        return storage.join(self.root, self.version)

    @property
    def staging(self) -> str:
        return storage.join(self.version_dir, STAGING)


def default_version(root: str) -> str:
    """A UTC timestamp that sorts in build order, ``20261122T083000Z``; a second build in
    the same second gets ``20261122T083000Z-1``."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    version, n = stamp, 0
    while storage.exists(storage.join(root, version, mf.MANIFEST)):
        n += 1
        version = f"{stamp}-{n}"
    return version


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


class _WriteDeadLetters(beam.DoFn):
    """Dead-letter rows -> one staged JSONL file per bundle; emits (path, rows).

    Rows are redacted (sinks/redact.py): a source path may carry a token or a signature."""

    def __init__(self, staging: str) -> None:
        self._staging = staging

    def start_bundle(self) -> None:
        self._handle = None
        self._rows = 0

    def process(self, row: dict) -> None:
        if self._handle is None:
            self._path = storage.join(self._staging, "dead_letter", f"{uuid.uuid4().hex}.jsonl")
            self._handle = storage.open_write(self._path)
        self._handle.write(json.dumps(redact(row), ensure_ascii=False, default=repr).encode()
                           + b"\n")
        self._rows += 1

    def finish_bundle(self):
        if self._handle is not None:
            self._handle.close()
            yield beam.utils.windowed_value.WindowedValue(
                (self._path, self._rows), -1, [beam.transforms.window.GlobalWindow()])
            self._handle = None


def check_counts(counts: dict[str, int], written: int, dead_letters: int) -> None:
    """Every record read is written or rejected, once; anything else is a bug, never a build."""
    read = counts.get("read", 0)
    rejected = counts.get("rejected_at_read", 0) + counts.get("rejected_at_build", 0)
    problems = []
    if counts.get("built", 0) != written:
        problems.append(f"{counts.get('built', 0)} examples were built but the shards hold "
                        f"{written}")
    if rejected != dead_letters:
        problems.append(f"{rejected} records were rejected but the dead letters hold "
                        f"{dead_letters}")
    if read != written + rejected:
        problems.append(f"read {read} != written {written} + rejected {rejected}")
    if problems:
        raise BuildError("record counts do not add up: " + "; ".join(problems))


def sum_counts(pairs: Iterable[tuple[str, int]]) -> dict[str, int]:
    """The partial counts the steps emit, ``(name, n)`` per chunk, summed by name."""
    totals: dict[str, int] = {}
    for name, n in pairs:
        totals[name] = totals.get(name, 0) + n
    return totals


def _commit(_: Any, *, shards: dict, dead: list, counts: Iterable[tuple[str, int]],
            config: Config, layout: Layout, inputs: dict, runner: str, keep: int = 5,
            vocabulary: Sequence[str] | None = None) -> dict:
    """Check the counts, move dead letters, write the spec, the manifest, then LATEST."""
    counts = sum_counts(counts)
    written = sum(info.records for infos in shards.values() for info in infos)
    rejected = sum(rows for _, rows in dead)
    check_counts(counts, written, rejected)
    read = counts.get("read", 0)
    if read and rejected / read > config.errors.max_bad_fraction:
        raise BuildError(
            f"{rejected} of {read} records were rejected ({rejected / read:.4%}), more than "
            f"errors.max_bad_fraction={config.errors.max_bad_fraction}; see the dead letters "
            f"under {layout.staging}/dead_letter"
        )
    finals = []
    for index, (path, rows) in enumerate(sorted(dead)):
        final = storage.join(layout.version_dir, "dead_letter",
                             f"rejected-{index:05d}-of-{len(dead):05d}.jsonl")
        if storage.exists(path):
            storage.rename(path, final)
        finals.append((final, rows))
    spec = tf_parse_spec(config.features)
    storage.write_atomic(storage.join(layout.version_dir, mf.FEATURE_SPEC),
                         (json.dumps(spec, indent=2) + "\n").encode())
    document = mf.make_manifest(
        name=config.name, version=layout.version, version_dir=layout.version_dir,
        created=mf.utc_now(), compression=config.output.compression,
        counts={"read": read, "written": written, "rejected": rejected},
        shards=shards, dead_letters=finals, feature_spec=spec, config=config.resolved(),
        config_sha256=config.sha256(), inputs=inputs,
        tool_version=beam_tfrecords.__version__, runner=runner,
    )
    if vocabulary is not None:  # image labels: the int label is the index into this list
        document["label_vocabulary"] = list(vocabulary)
    storage.write_atomic(storage.join(layout.version_dir, mf.MANIFEST), mf.dumps(document))
    storage.write_atomic(storage.join(layout.root, mf.LATEST), (layout.version + "\n").encode())
    storage.delete_tree(layout.staging)
    apply_retention(layout.root, keep, layout.version)
    return document


def committed_versions(root: str) -> list[tuple[str, str]]:
    """(created, version) of every committed version under ``root``, oldest first."""
    found = []
    for version_dir in _version_dirs(root):
        manifest_path = storage.join(version_dir, mf.MANIFEST)
        if storage.exists(manifest_path):
            created = json.loads(storage.read_text(manifest_path)).get("created", "")
            found.append((created, version_dir.rstrip("/").rsplit("/", 1)[-1]))
    return sorted(found)


def apply_retention(root: str, keep: int, latest: str) -> list[str]:
    """Delete all but the newest ``keep`` committed versions; never the one LATEST names.

    A version's manifest goes first, so a deletion cut short leaves something that no longer
    looks like a data set (and the next build removes the rest), never a broken one that does.
    """
    versions = [v for _, v in committed_versions(root)]
    doomed = [v for v in versions[:max(len(versions) - keep, 0)] if v != latest]
    for version in doomed:
        version_dir = storage.join(root, version)
        storage.delete([storage.join(version_dir, mf.MANIFEST)])
        storage.delete_tree(version_dir)
        _LOG.info("retention: removed version %s", version)
    return doomed


def read_source(p: beam.Pipeline, config: Config, input_files: Sequence[str],
                images: ImagePlan | None = None):
    """The reader the source format calls for; its outputs are ``records`` (RecordChunks),
    ``rejected`` (dead-letter rows) and ``counts`` whatever the format."""
    source = config.source
    if source.format == "images":
        if images is None:
            raise ValueError("an images source needs the ImagePlan made at launch")
        return p | "ReadImages" >> ReadImages(images,
                                              check_complete=source.images.check_complete,
                                              read_threads=source.images.read_threads)
    extra = tuple(path[0] for path in (config.splits.key, config.splits.field) if path)
    readers = {
        "csv": lambda: ("ReadCsv", ReadCsv(source.csv, config.features)),
        "jsonl": lambda: ("ReadJsonl", ReadJsonl(source.jsonl, config.features, extra)),
        "parquet": lambda: ("ReadParquet", ReadParquet(source.parquet, config.features, extra)),
        "avro": lambda: ("ReadAvro", ReadAvro(source.avro, config.features, extra)),
    }
    label, reader = readers[source.format]()
    files = p | "ListInputs" >> beam.Create(sorted(input_files))  # file paths
    return files | label >> reader


def build_pipeline(p: beam.Pipeline, config: Config, layout: Layout, input_files: Sequence[str],
                   inputs: dict, runner: str = "DirectRunner", keep: int = 5,
                   images: ImagePlan | None = None) -> dict[str, Any]:
    """Adds the build to ``p``; returns its main PCollections by name.

    ``images``: the plan :func:`plan_inputs` made at launch for an images source.
    """
    read = read_source(p, config, input_files, images)
    built = read.records | "BuildExamples" >> BuildExamples(
        config.features, config.splits, max_record_bytes=config.output.shard_size.max)
    shards = built.examples | "WriteShards" >> WriteTFRecordShards(
        layout.version_dir, layout.staging, config.output.shard_name, config.splits.names,
        config.output.compression, config.output.shard_size, config.output.index,
    )  # {split: [ShardInfo]}
    dead = (
        (read[REJECTED], built[REJECTED])
        | "MergeRejects" >> beam.Flatten()
        | "WriteDeadLetters" >> beam.ParDo(_WriteDeadLetters(layout.staging))
    )  # (staged path, rows) per file
    counts = (
        (read[COUNTS], built[COUNTS]) | "MergeCounts" >> beam.Flatten()
    )  # (counter name, partial count), summed by the commit
    # The small descriptors reach the commit as side inputs of one Impulse: Beam's ToList
    # and CombinePerKey cost ~10 transforms each to construct and translate (bench/README.md).
    manifest = (
        p
        | "CommitTrigger" >> beam.Impulse()
        | "Commit" >> beam.Map(
            _commit,
            shards=beam.pvalue.AsSingleton(shards),
            dead=beam.pvalue.AsList(dead),
            counts=beam.pvalue.AsList(counts),
            config=config, layout=layout, inputs=inputs, runner=runner, keep=keep,
            vocabulary=images.vocabulary if images is not None else None,
        )
    )
    return {"shards": shards, "dead_letters": dead, "manifest": manifest}


def prepare_output(layout: Layout, allow_non_empty: bool = False) -> None:
    """Refuse to overwrite a committed version, or to write into a non-empty location that is
    not ours (unless ``allow_non_empty``); clean what our failed builds left behind -- only
    that, never files of others (pipelines/output_guard.py)."""
    if storage.exists(storage.join(layout.version_dir, mf.MANIFEST)):
        raise BuildError(f"version {layout.version!r} is already committed at "
                         f"{layout.version_dir}; choose another --version")
    files = storage.list_files(layout.root) if storage.exists(layout.root) else []
    try:
        state = output_guard.check_output_state(layout.root, files, allow_non_empty)
    except output_guard.OutputGuardError as err:
        raise BuildError(str(err)) from None
    latest = read_latest(layout.root)
    for name in state.leftovers:
        if name != latest:
            version_dir = storage.join(layout.root, name)
            _LOG.info("removing leftovers of an unfinished build: %s", version_dir)
            storage.delete_tree(version_dir)


def _version_dirs(root: str) -> list[str]:
    if not storage.exists(root):
        return []
    dirs = set()
    prefix = root.rstrip("/") + "/"
    for path in storage.list_files(root):
        rest = path[len(prefix):] if path.startswith(prefix) else ""
        if "/" in rest:
            dirs.add(prefix + rest.split("/", 1)[0])
    return sorted(dirs)


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What a build reads, found at launch: the files, their fingerprint, the image plan."""

    files: list[str]
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
        files, fingerprint = input_fingerprint(source.path)
        columns = first_columns(config, files[0])
        if columns is not None:
            check_columns(config, columns, files[0])
        return config, Inputs(files, fingerprint)
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
    _, fingerprint = input_fingerprint(source.path, listed)
    if plan.splits and config.splits == SplitSpec():
        share = 100.0 / len(plan.splits)
        config = dataclasses.replace(config, splits=SplitSpec(
            shares=tuple((name, share) for name in plan.splits), field=("split",)))
    fields = list(RESERVED) + (["split"] if plan.splits else [])
    fields += [name for name, _ in (plan.entries[0].extra if plan.entries else ())]
    check_columns(config, fields, source.path)
    return config, Inputs(image_paths, fingerprint, plan)


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


def _jsonl_fields(path: str, lines: int = 100) -> list[str] | None:
    """The top-level keys of the first ``lines`` JSON objects of a JSON Lines file; None when
    none of them parses (the readers report bad lines, this check is only a shortcut: a required
    field that none of the first records has would reject them all)."""
    fields: dict[str, None] = {}
    with storage.open_read(path) as handle:
        for _, raw in zip(range(lines), handle):
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError):  # too deep: the reader's dead letter
                continue
            if isinstance(record, dict):
                fields.update(dict.fromkeys(record))
    return list(fields) or None


def first_columns(config: Config, path: str) -> list[str] | None:
    """The field names of the first input, to validate the config before the pipeline (for
    JSON Lines, those of its first records); None when there is nothing to check against."""
    import csv
    import io

    if config.source.format == "jsonl":
        return _jsonl_fields(path)
    if config.source.format != "csv":
        try:
            return top_level_fields(config.source.format, path)
        except Exception as err:  # not a Parquet/Avro file, unreadable: say which
            raise BuildError(f"cannot read the schema of {path!r} "
                             f"({config.source.format}): {err}") from None
    opts = config.source.csv
    if not opts.header:
        return list(opts.columns)
    with storage.open_read(path) as raw:
        # Only the header matters here; a bad byte further down is the reader's dead letter,
        # not a reason to refuse the build (the decoder reads ahead a whole buffer).
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline="")
        header = next(csv.reader(text, delimiter=opts.delimiter, quotechar=opts.quotechar), [])
    return header


def read_latest(root: str) -> str | None:
    path = storage.join(root, mf.LATEST)
    return storage.read_text(path).strip() if storage.exists(path) else None


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="beam-tfrecords build",
        description="Build a TFRecord data set from a config. Unrecognised flags are Beam "
                    "pipeline options (e.g. --runner DataflowRunner --project P --region R).",
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
    parser.add_argument("--skip-if-unchanged", action="store_true",
                        help="exit 0 without writing anything when the inputs fingerprint and "
                             "the config hash equal those of the version LATEST names")
    return parser


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


def run(argv: Sequence[str] | None = None, progress_interval: float = 0.0
        ) -> dict[str, Any] | None:
    """Build a data set; returns the manifest when the runner ran the job to completion.

    Raises :class:`Skipped` when ``--skip-if-unchanged`` finds nothing to do. With a progress
    interval (``--progress-interval``; default ``progress_interval``, off for library callers,
    10 s from the command line) a line with the records and bytes written so far, summed over
    every writer process, goes to stderr that often -- except on Dataflow, whose job page
    shows the sink's counters.
    """
    import contextlib

    parser = make_parser()
    parser.add_argument("--progress-interval", type=float, default=progress_interval,
                        metavar="SECONDS", help="seconds between progress lines on stderr "
                        f"(default {progress_interval:g}; 0: none)")
    args, beam_args = parser.parse_known_args(argv)
    if args.progress_interval < 0:
        raise BuildError(f"--progress-interval {args.progress_interval}: use 0 (off) or more")
    config = load_config(args.config)
    if args.input:
        config = dataclasses.replace(config, source=dataclasses.replace(config.source,
                                                                        path=args.input))
    if args.output:
        config = dataclasses.replace(config, output=dataclasses.replace(config.output,
                                                                        path=args.output))
    if args.version is not None and not _VERSION_NAME.match(args.version):
        raise BuildError(f"--version {args.version!r}: use letters, digits, '_', '-' or '.', "
                         "not starting with '.'")
    if args.keep_versions < 1:
        raise BuildError(f"--keep-versions {args.keep_versions}: keep at least 1")
    root = config.output.path.rstrip("/")
    config, found = plan_inputs(config)
    suffix = tff.file_suffix(config.output.compression)
    try:  # the output is not the input, not matched by its glob, does not hold it
        output_guard.check_locations(config.source.path, root, [
            f"v/{mf.MANIFEST}", "v/dead_letter/rejected-00000-of-00001.jsonl",
            *(f"v/{split}/{config.output.shard_name or config.name}-00000-of-00001{suffix}"
              for split in config.splits.names)])
    except output_guard.OutputGuardError as err:
        raise BuildError(str(err)) from None
    if args.skip_if_unchanged:  # the manifest holds the fingerprint redacted
        same = unchanged_since_latest(root, redact(found.fingerprint), config.sha256())
        if same is not None:
            raise Skipped(f"inputs and config are unchanged since version {same}; nothing "
                          "written (--skip-if-unchanged)")
    layout = Layout(root, args.version or default_version(root))
    prepare_output(layout, args.allow_non_empty_output)
    options = PipelineOptions(beam_args)
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    runner = runner if isinstance(runner, str) else type(runner).__name__
    progress: Any = contextlib.nullcontext()
    if args.progress_interval > 0 and "Dataflow" not in runner:
        from beam_tfrecords.pipelines.progress import ProgressReporter
        from beam_tfrecords.sinks.progress_files import ProgressOptions, read_totals

        progress_dir = storage.join(layout.staging, ".progress")  # removed by the commit
        options.view_as(ProgressOptions).tfrecords_progress_dir = progress_dir
        progress = ProgressReporter(lambda: read_totals(progress_dir),
                                    lambda line: print(line, file=sys.stderr, flush=True),
                                    args.progress_interval)
    with progress, beam.Pipeline(runner=runner_for(options), options=options) as p:
        build_pipeline(p, config, layout, found.files, found.fingerprint, runner,
                       args.keep_versions, images=found.images)
    manifest_path = storage.join(layout.version_dir, mf.MANIFEST)
    if not storage.exists(manifest_path):
        return None
    return json.loads(storage.read_text(manifest_path))


def main(argv: Sequence[str] | None = None) -> int:
    from beam_tfrecords.pipelines.cli import main as cli_main

    return cli_main(["build", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
