"""The build pipeline: config -> sources -> BuildExamples -> sharded TFRecords -> manifest.

``build_pipeline(p, config, layout, input_files)`` adds the steps to a Beam pipeline and
returns the interesting PCollections, so tests can assert on what was built; :func:`run`
takes the build command's flags (parsed by pipelines/cli.py), plans the inputs
(pipelines/build_inputs.py), prepares the output location and runs it.

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
import json
import logging
import sys
import uuid
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from beam_tfrecords.pipelines import output_guard, signals
from beam_tfrecords.pipelines.build_inputs import BuildError, Inputs
from beam_tfrecords.pipelines.build_launch import Launch, launch_workers, prepare
from beam_tfrecords.pipelines.config import Config
from beam_tfrecords.pipelines.launch_check import check_sample
from beam_tfrecords.pipelines.runners import (
    BuildOptions,
    balanced_split_bytes,
    check_runner,
    runner_for,
    runs_in_process,
    worker_processes,
)
from beam_tfrecords.runtime import fork_server, storage
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
from beam_tfrecords.sinks.format.file_identity import FileIdentity
from beam_tfrecords.sinks.format.layout import PROGRESS, Layout
from beam_tfrecords.sinks.format.redact import redact
from beam_tfrecords.sinks.lease import Lease, LeaseHeld, LeaseLost
from beam_tfrecords.transforms.codec.feature_spec import tf_parse_spec
from beam_tfrecords.transforms.codec.label_order import is_class_ordered
from beam_tfrecords.transforms.codec.reader_files import image_features, reader_documents
from beam_tfrecords.transforms.compute_statistics import empty_statistics, statistics_kinds
from beam_tfrecords.transforms.drift_gate import DriftGate
from beam_tfrecords.transforms.readers.framework import COUNTS, REJECTED
from beam_tfrecords.transforms.readers.read_avro import ReadAvro
from beam_tfrecords.transforms.readers.read_csv import ReadCsv
from beam_tfrecords.transforms.readers.read_images import ImagePlan, ReadImages
from beam_tfrecords.transforms.readers.read_jsonl import ReadJsonl
from beam_tfrecords.transforms.readers.read_parquet import ReadParquet
from beam_tfrecords.transforms.to_examples import ToExamples
from beam_tfrecords.transforms.version_report import KeyPreview, VersionReport, record_preview

__all__ = ["BuildError", "build_pipeline", "commit_spec", "run"]

_LOG = logging.getLogger(__name__)


def read_source(p: beam.Pipeline, config: Config, input_files: Sequence[str | FileIdentity],
                images: ImagePlan | None = None):
    """The public source the format calls for (``btf.ReadCsv`` ...), with the config's options,
    on the files listed at launch.

    Args:
        p: the pipeline to add the read to.
        config: the build's config (its source format and options).
        input_files: the files listed at launch (paths or FileIdentity).
        images: the image plan made at launch, for an images source.

    Returns:
        The source's result: ``records`` (RecordChunks), ``rejected`` (dead-letter rows) and
        ``counts``, whatever the format.
    """
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
    """The public source (``btf.ReadCsv`` ...) of a file format, with the config's options.

    Args:
        config: the build's config (not an images source).
        input_files: paths, or identities as ``build_inputs.list_inputs`` lists them.

    Returns:
        The source transform, not yet applied.
    """
    source = config.source
    files, features = list(input_files), config.features
    extra = tuple(path[0] for path in (config.splits.key, config.splits.field) if path)
    # A CSV header may name a column "meta.label" literally (check_columns accepts it).
    literal = tuple(sep.join(path) for path in (config.splits.key, config.splits.field)
                    if path and len(path) > 1 for sep in "./")
    limit, split = source.max_record_bytes, source.split_bytes
    readers = {
        # extra_fields names the split key: the reader then types only the columns named
        # (time grows with them, not with the file's width).
        "csv": lambda: ReadCsv(files, features, extra_fields=extra + literal,
                               split_bytes=split, **dataclasses.asdict(source.csv)),
        "jsonl": lambda: ReadJsonl(files, features, max_depth=source.jsonl.max_depth,
                                   max_record_bytes=source.jsonl.max_line_bytes,
                                   split_bytes=split),
        "parquet": lambda: ReadParquet(files, features, extra_fields=extra,
                                       max_record_bytes=limit, split_bytes=split),
        "avro": lambda: ReadAvro(files, features, max_record_bytes=limit, split_bytes=split),
    }
    return readers[source.format]()


def commit_spec(config: Config, layout: Layout, build_id: str, inputs: dict,
                runner: str = "DirectRunner", keep: int = 5,
                images: ImagePlan | None = None, use_lease: bool = True,
                baseline_statistics: str | None = None) -> CommitSpec:
    """What the commit step needs to know about this build (sinks/commit.py).

    Args:
        config: the build's config.
        layout: the version's layout on the output.
        build_id: this build's id (the lease holder's).
        inputs: the input fingerprint the manifest records.
        runner: the runner's name, for the manifest.
        keep: versions retention keeps.
        images: the image plan, whose label vocabulary the manifest records.
        use_lease: whether the commit is fenced on the output's lease.
        baseline_statistics: the statistics folder of a baseline built without them.

    Returns:
        The CommitSpec.
    """
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
        duplicates=(None if not config.output.statistics
                    else KeyPreview(config.output.duplicate_key) if config.output.duplicate_key
                    else record_preview),
    )


def warn_if_class_ordered(config: Config, images: ImagePlan | None) -> bool:
    """Log one warning when an unshuffled build would write images class by class.

    Args:
        config: the build's config (its shuffle seed).
        images: the image plan, or None for other sources.

    Returns:
        Whether it warned.
    """
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
    """Adds the build to ``p``.

    Args:
        p: the pipeline.
        config: the build's config.
        spec: the commit's (:func:`commit_spec`).
        input_files: the files listed at launch.
        images: the plan made at launch for an images source.

    Returns:
        Its main PCollections by name: ``examples`` and ``manifest``.
    """
    # The public transforms (btf.ReadCsv ..., btf.ToExamples), then the commit. The source's
    # rejects and counts go to WriteDataset beside ToExamples', not merged by a Flatten:
    # Beam's local runner materializes one, and the dead letters and the early stop
    # (sinks/early_stop.py) would wait for the whole input.
    read = read_source(p, config, input_files, images)
    built = read["records"] | "BuildExamples" >> ToExamples(
        config.features, config.splits, max_record_bytes=config.output.shard_size.max,
        statistics=spec.statistics is not None,
        duplicate_key=".".join(config.output.duplicate_key) or None)
    parts = {"examples": built.examples, "rejected": (read[REJECTED], built.rejected),
             "counts": (read[COUNTS], built.counts)}
    if "statistics" in built:  # (split, serialized statistics)
        parts["statistics"] = built["statistics"]
    if "duplicates" in built:  # counted by the key's values
        parts["duplicates"] = built["duplicates"]
    manifest = parts | "WriteDataset" >> WriteDataset(
        spec, config.splits.names, config.output.shard_size, config.output.index,
        config.output.shard_name)
    return {"examples": built.examples, "manifest": manifest}


def unchanged_since_latest(root: str, inputs: dict, config_sha256: str) -> str | None:
    """The LATEST version when it was built from the same inputs and config, else None.

    Args:
        root: the output root.
        inputs: this build's input fingerprint (redacted, as manifests hold it).
        config_sha256: this build's config hash.

    Returns:
        The version's name, or None.
    """
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


def run(args: argparse.Namespace, beam_args: list[str],
        launch: Launch | None = None) -> dict[str, Any] | None:
    """Build a data set; returns the manifest when the runner ran the job to completion.

    Args:
        args: the build command's parsed flags (``pipelines/cli.py`` defines them, for the
            command line and for library callers alike: ``cli.run_build``).
        beam_args: the pipeline options for Beam, already checked by the caller.
        launch: what pipelines/build_launch.prepare found for them, when the caller has
            checked them already (the command line does, before importing Beam); None:
            checked here.

    Returns:
        The committed manifest, or None when the runner only submitted or staged the job.

    Raises :class:`Skipped` when ``--skip-if-unchanged`` finds nothing to do. With a progress
    interval (``--progress-interval``) a line with the records and bytes written so far,
    summed over every writer process, goes to stderr that often -- except on Dataflow, whose
    job page shows the sink's counters.
    """
    launch = prepare(args, beam_args) if launch is None else launch
    untested = launch.untested
    if not launch.runner_checked:  # no --runner: Beam's default, which the check passes
        untested = check_runner(PipelineOptions(beam_args))
    if untested is not None:
        _LOG.warning(untested)
    config, found, root = launch.config, launch.found, launch.root
    if config.source.format != "images" and config.features:  # a sample, read as the build will
        check_sample(config.features, file_source(config, found.files).file_reader(),
                     found.files[0].path, config.errors.max_bad_fraction)
    workers = launch_workers(launch, beam_args)
    if workers:
        print(f"reading {found.fingerprint.get('bytes', 0)} bytes of input with "
              f"{workers[-1].split('=')[1]} worker processes (--direct_num_workers=1: in one "
              "process)", file=sys.stderr)
        beam_args += workers
    _start_workers_early(beam_args)  # the command line started it already when asked
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


def _start_workers_early(beam_args: list[str]) -> None:
    """With local worker processes, start the server they are forked from now (if the command
    line has not already): its imports then overlap the launch instead of delaying the first
    stage (pipelines/forked_workers.py)."""
    if worker_processes(beam_args) > 1:
        fork_server.start()


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
    options = BuildOptions(beam_args)
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
    # Worker processes get equal shares of the ranges (runners.balanced_split_bytes); the
    # manifest keeps the config as given (spec above).
    split = balanced_split_bytes(
        [f.size if isinstance(f, FileIdentity) else 0 for f in found.files],
        config.source.split_bytes, worker_processes(beam_args))
    read_config = dataclasses.replace(config, source=dataclasses.replace(config.source,
                                                                         split_bytes=split))
    try:
        with progress, beam.Pipeline(runner=runner_for(options), options=options) as p:
            signals.watch_job(p, remote=not runs_in_process(options))  # cancelled if stopped
            build_pipeline(p, read_config, spec, found.files, images=found.images)
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
