"""``WriteDataset``: serialized Examples, dead letters and counts -> one committed version.

The sink's whole job after encoding, in one transform: sized shards (sinks/tfrecord_sink.py),
staged dead-letter files (sinks/dead_letters.py), and the commit step (sinks/commit.py) that
checks the counts and thresholds and writes ``feature_spec.json``, ``manifest.json`` and
``LATEST``. Its input is what ``ToExamples`` (or the command's readers plus ``BuildExamples``)
produce:

- ``examples``: ``(split, SerializedBatch | bytes)`` elements;
- ``rejected``: dead-letter rows (dicts), optional;
- ``counts``: ``(name, n)`` pairs the commit adds up (``read``, ``built``, ``rejected_at_*``,
  ``unread_*``), optional.

The version folder must be claimed, and the output's lease held, before the pipeline runs
(:func:`sinks.commit.prepare_output`, :func:`sinks.commit.claim_version`): a pipeline step
cannot take a lease for the launcher. The result is a PCollection of one element, the
manifest document.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import apache_beam as beam

from beam_tfrecords.sinks.commit import CommitSpec, commit_version
from beam_tfrecords.sinks.dead_letters import WriteDeadLetters
from beam_tfrecords.sinks.format.shard_plan import ShardSize
from beam_tfrecords.sinks.tfrecord_sink import WriteTFRecordShards

__all__ = ["WriteDataset"]


def _commit(_impulse: Any, *, spec: CommitSpec, shards: dict, dead: list, counts: list
            ) -> dict:
    return commit_version(spec, shards, dead, counts)


class WriteDataset(beam.PTransform):
    """``{"examples", "rejected", "counts"}`` PCollections -> the committed manifest.

    Args:
      spec: the commit's settings: where (its layout, already claimed), the build id, the
        name, the feature spec, thresholds and retention (sinks/commit.py).
      splits: every split name, so an empty split still appears in the manifest.
      shard_size: the band on stored bytes per shard.
      index: write ``offset length`` index sidecars (uncompressed only).
      shard_name: the shards' file name prefix (default: ``spec.name``).
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
        pipeline = parts["examples"].pipeline
        shards = parts["examples"] | "WriteShards" >> WriteTFRecordShards(
            layout.version_dir, layout.staging, self._shard_name, self._splits,
            self._spec.compression, self._shard_size, self._index,
        )  # {split: [ShardInfo]}
        rejected = parts.get("rejected")
        if rejected is None:
            rejected = pipeline | "NoRejects" >> beam.Create([])
        dead = rejected | "WriteDeadLetters" >> beam.ParDo(
            WriteDeadLetters(layout.staging))  # DeadLetterFile per staged file
        counts = parts.get("counts")
        if counts is None:
            counts = pipeline | "NoCounts" >> beam.Create([])
        # The small descriptors reach the commit as side inputs of one Impulse: Beam's ToList
        # and CombinePerKey cost ~10 transforms each to construct and translate.
        return (
            pipeline
            | "CommitTrigger" >> beam.Impulse()
            | "Commit" >> beam.Map(
                _commit, spec=self._spec,
                shards=beam.pvalue.AsSingleton(shards),
                dead=beam.pvalue.AsList(dead),
                counts=beam.pvalue.AsList(counts),
            )
        )  # one element: the manifest document
