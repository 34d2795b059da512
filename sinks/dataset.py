"""``WriteDataset``: serialized Examples, dead letters and counts -> one committed version.

The sink's whole job after encoding, in one transform: sized shards (sinks/tfrecord_sink.py),
staged dead-letter files (sinks/dead_letters.py), and the commit step (sinks/commit.py) that
checks the counts and thresholds and writes ``feature_spec.json``, ``manifest.json`` and
``LATEST``. Its input is what ``ToExamples`` (or the command's readers plus ``BuildExamples``)
produce:

- ``examples``: ``(split, SerializedBatch | bytes)`` elements;
- ``rejected``: dead-letter rows (dicts), optional;
- ``counts``: ``(name, n)`` pairs the commit adds up (``read``, ``built``, ``rejected_at_*``,
  ``unread_*``), optional;
- ``statistics``: ``(split, serialized DatasetFeatureStatisticsList)``, one per split that
  holds Examples (``ToExamples``' output), written by the commit when ``spec.statistics`` is
  on; optional.

With ``spec.duplicates`` the shard writers fingerprint every record and the commit records
the duplicates per split and the records in several splits (sinks/duplicates.py).

``rejected`` and ``counts`` may each be a tuple of PCollections (a source's and ToExamples'):
each is then written and counted in the stage that makes it, not after a Flatten.

Its first step, ``InitializeWrite``, runs when the pipeline runs, as Beam's own file sinks
initialise (apache_beam/io/iobase.py): it takes the output's lease for the job, prepares the
output and claims the version folder (:func:`sinks.commit.initialize_write`; a no-op but for
the lease when the launcher did that already), and every step that writes waits for it (a
side input). So a pipeline that is built and never run touches nothing. The writing steps
keep the lease alive from their bundles (``sinks/lease.JobLease``), and the commit, fenced on
it, releases it. The result is a PCollection of one element, the manifest document.

With ``spec.abort_window`` the dead-letter writers and a step on the counts keep a worker's
running counts and stop a doomed build early (sinks/early_stop.py); the launcher then calls
:func:`sinks.commit.fail_stopped_early`. With ``--tfrecords_progress_dir`` the writers leave
their running count of rejects for the progress line, as the shard writers do for theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import apache_beam as beam

from beam_tfrecords.errors import UserError
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks import early_stop
from beam_tfrecords.sinks.commit import CommitSpec, commit_version, initialize_write
from beam_tfrecords.sinks.dead_letters import WatchCounts, WriteDeadLetters
from beam_tfrecords.sinks.format.shard_plan import ShardSize
from beam_tfrecords.sinks.lease import run_held
from beam_tfrecords.sinks.progress_files import ProgressOptions
from beam_tfrecords.sinks.shuffled_shards import WriteShuffledShards
from beam_tfrecords.sinks.tfrecord_sink import WriteTFRecordShards

__all__ = ["UNSUPPORTED_RUNNERS", "UnsupportedRunner", "WriteDataset", "refuse_unsupported"]

# Runners known not to run a build, by their class name in lower case, and what they lack
# (NOTES.md).
UNSUPPORTED_RUNNERS = {
    "daskrunner": "Beam's DaskRunner translates only Create, ParDo, GroupByKey and Flatten: it "
                  "drops Impulse, hands every tagged output of a multi-output step to every "
                  "consumer and loses what finish_bundle emits, so every build would fail "
                  "(use DirectRunner, PortableRunner, DataflowRunner or FlinkRunner)",
}
UNSUPPORTED_RUNNERS["dask"] = UNSUPPORTED_RUNNERS["daskrunner"]


class UnsupportedRunner(UserError):
    """A runner that cannot run a build: known not to, or one Beam cannot load."""


def refuse_unsupported(name: str, prefix: str = "") -> None:
    """:class:`UnsupportedRunner` when the runner named ``name`` (a class name, qualified or
    not) is known not to run a build.

    Args:
        name: the runner's name (``DirectRunner``, ``apache_beam.runners...InteractiveRunner``).
        prefix: put before the message, such as the flag that named the runner.

    Raises:
        UnsupportedRunner: the runner cannot run a build; the message says why.
    """
    reason = UNSUPPORTED_RUNNERS.get(name.rsplit(".", 1)[-1].lower())
    if reason is not None:
        raise UnsupportedRunner(f"{prefix}{name}: {reason}")


def _commit(_impulse: Any, *, spec: CommitSpec, shards: dict, dead: list, counts: list,
            started: str, statistics: list = (), duplicates: list = ()) -> dict:
    # the lease is renewed while it runs; the commit releases it
    return run_held(spec.job_lease, commit_version, spec, shards, dead, counts, statistics,
                    duplicates)


def _initialize(_impulse: Any, spec: CommitSpec) -> str:
    return initialize_write(spec)


def _sources(value: Any) -> tuple:
    """A PCollection, or a tuple of them, as a tuple; None as ()."""
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


class _WriteDeadLetterFiles(beam.PTransform):
    """Dead-letter rows from one or more PCollections -> DeadLetterFiles: a writer applied to
    each, so each runs in the stage that rejects its rows (no Flatten first, which Beam's
    local runner materializes: the rows would wait for the whole input, and so would the
    counting that stops a doomed build)."""

    def __init__(self, staging: str, stop: early_stop.StopPolicy | None,
                 progress_dir: str | None, lease: Any = None, after: Any = None) -> None:
        super().__init__()
        self._args = (staging, stop, progress_dir, lease)
        self._after = after  # a PCollection the writers wait for (a side input), or None

    def expand(self, sources):
        after = () if self._after is None else (beam.pvalue.AsSingleton(self._after),)
        files = [source | f"Write[{index}]" >> beam.ParDo(WriteDeadLetters(*self._args), *after)
                 for index, source in enumerate(sources)]
        return files[0] if len(files) == 1 else tuple(files) | "Files" >> beam.Flatten()


class WriteDataset(beam.PTransform):
    """``{"examples", "rejected", "counts"}`` PCollections -> the committed manifest.

    Args:
      spec: the build's settings (``sinks.commit.make_commit_spec``): where (its layout,
        claimed by the first step unless the launcher did), the build id, the
        name, the feature spec, thresholds and retention (sinks/commit.py).
      splits: every split name, so an empty split still appears in the manifest.
      shard_size: the band on stored bytes per shard.
      index: write ``offset length`` index sidecars (uncompressed only).
      shard_name: the shards' file name prefix (default: ``spec.name``).

    With ``spec.shuffle_seed`` the shards hold their records in the seed's pseudo-random
    order (sinks/shuffled_shards.py); without, in the order they arrive.
    """

    def __init__(self, spec: CommitSpec, splits: tuple[str, ...],
                 shard_size: ShardSize = ShardSize(), index: bool = False,
                 shard_name: str | None = None) -> None:
        super().__init__()
        self._spec = spec
        self._splits = tuple(splits)
        self._shard_size = shard_size
        self._index = index
        self._shard_name = shard_name or spec.name

    def expand(self, parts: Mapping[str, Any]):
        layout = self._spec.layout
        lease = self._spec.job_lease
        pipeline = parts["examples"].pipeline
        refuse_unsupported(type(pipeline.runner).__name__)
        started = (pipeline
                   | "InitializeTrigger" >> beam.Impulse()
                   | "InitializeWrite" >> beam.Map(_initialize, self._spec))  # the version
        # Every step that writes below the version takes ``started`` as a side input: the
        # runner runs none of them before InitializeWrite has claimed the folder.
        examples = parts["examples"]
        # Duplicates: counted by the writers from the records' bytes, unless the encoder
        # counted them by a key's values (``parts["duplicates"]``).
        by_key = parts.get("duplicates")
        by_writers = self._spec.duplicates is not None and by_key is None
        if self._spec.shuffle_seed is None:
            shards = examples | "WriteShards" >> WriteTFRecordShards(
                layout.version_dir, layout.staging, self._shard_name, self._splits,
                self._spec.compression, self._shard_size, self._index, lease=lease,
                after=started, duplicates=by_writers,
            )  # {split: [ShardInfo]}
        else:
            shards = examples | "WriteShuffledShards" >> WriteShuffledShards(
                layout.version_dir, layout.staging, self._shard_name, self._splits,
                self._spec.shuffle_seed, self._spec.compression, self._shard_size, self._index,
                lease=lease, after=started, duplicates=by_writers,
            )
        rejected = _sources(parts.get("rejected")) or (
            pipeline | "NoRejects" >> beam.Create([]),)
        counts = _sources(parts.get("counts")) or (
            pipeline | "NoCounts" >> beam.Create([]),)
        stop = None
        if self._spec.abort_window > 0:
            stop = early_stop.StopPolicy(self._spec.abort_window, self._spec.max_bad_fraction,
                                         storage.join(layout.staging, early_stop.FOLDER),
                                         self._spec.build_id)
            for index, source in enumerate(counts):  # records built, beside the rejected
                _ = source | f"WatchCounts[{index}]" >> beam.ParDo(
                    WatchCounts(stop), beam.pvalue.AsSingleton(started))
        progress_dir = (pipeline.options.view_as(ProgressOptions).tfrecords_progress_dir
                        if pipeline.options is not None else None)
        dead = rejected | "WriteDeadLetters" >> _WriteDeadLetterFiles(
            layout.staging, stop, progress_dir, lease, after=started)  # DeadLetterFile each
        if len(counts) > 1:
            counts = (counts | "MergeCounts" >> beam.Flatten(),)
        side = {}
        if self._spec.statistics is not None and parts.get("statistics") is not None:
            side["statistics"] = beam.pvalue.AsList(parts["statistics"])  # (split, bytes)
        if self._spec.duplicates is not None:  # BucketResult per bucket
            side["duplicates"] = beam.pvalue.AsList(
                shards.duplicates if by_key is None else by_key)
        # The small descriptors reach the commit as side inputs of one Impulse: Beam's ToList
        # and CombinePerKey cost ~10 transforms each to construct and translate.
        return (
            pipeline
            | "CommitTrigger" >> beam.Impulse()
            | "Commit" >> beam.Map(
                _commit, spec=self._spec,
                shards=beam.pvalue.AsSingleton(shards),
                dead=beam.pvalue.AsList(dead),
                counts=beam.pvalue.AsList(counts[0]),
                started=beam.pvalue.AsSingleton(started),
                **side,
            )
        )  # one element: the manifest document
