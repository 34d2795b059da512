"""Type mistakes found at launch: a sample of the first input, read and encoded for real.

A feature declared ``int64`` over a column of text, a fixed shape that no row has, a list
feature over a scalar column: each rejects every record, and without this check a full pass over
a large input would be the first sign. Before the pipeline starts, :func:`check_sample` reads
the first records of the first input with the format's own reader (the same DoFn the pipeline
runs, called directly, so CSV cells are typed, Parquet and Avro columns read, JSON lines parsed
exactly as they will be) and encodes each feature of each sampled record alone with the real
encoder. A feature whose every sampled value is refused -- by the reader (a CSV cell its type
cannot parse) or by the encoder -- is a one-line error naming the feature, its source column,
what was declared and what the data holds, unless ``errors.max_bad_fraction`` lets every record
be rejected.

Bounded: at most ``SAMPLE_RECORDS`` records; each reader already holds at most
``source.max_record_bytes`` of one record, and a columnar chunk is cut to the sample before it
becomes Python objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

from beam_tfrecords.errors import UserError
from beam_tfrecords.runtime import storage
from beam_tfrecords.transforms.codec.coercion import FeatureValueError, is_missing, type_name
from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder, lookup
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.readers.events import Reject
from beam_tfrecords.transforms.readers.framework import ReadFileFn, RecordChunk

__all__ = ["SAMPLE_RECORDS", "FeatureTally", "TypeMistake", "check_sample", "mistakes",
           "sample_events"]

SAMPLE_RECORDS = 1000
# Fewer refused values than this prove nothing (a sample of two nulls and one typo must not
# stop a build), and a file this small is cheap to build in full: its dead letters say it all.
MIN_EVIDENCE = 20


class TypeMistake(UserError):
    """A feature that every sampled record would be rejected for; one line."""


@dataclasses.dataclass
class FeatureTally:
    """What the sample says about one feature: values it took, values it refused, and the
    first refusal (row, reason, the value's type) to show."""

    accepted: int = 0
    refused: int = 0
    row: int | None = None
    reason: str = ""
    value_type: str = ""

    def refuse(self, row: int | None, reason: str, value_type: str) -> None:
        """Count one refused value; the first one's row, reason and type are kept.

        Args:
            row: its row number (None where the reader cannot tell).
            reason: why the encoder refused it.
            value_type: the type the value held.
        """
        self.refused += 1
        if self.row is None and not self.reason:
            self.row, self.reason, self.value_type = row, reason, value_type


def sample_events(reader: ReadFileFn, path: str, limit: int = SAMPLE_RECORDS
                  ) -> Iterator[tuple[int | None, Any]]:
    """``(row, record)`` or ``(row, Reject)`` for the first ``limit`` records of ``path``.

    Args:
        reader: the format's file reader (set up).
        path: the file to sample.
        limit: records to read at most.

    Yields:
        ``(row, record)`` or ``(row, Reject)``.
    """
    seen = 0
    with storage.open_read(path) as handle:
        for event in reader.events(path, handle):
            if isinstance(event, RecordChunk):
                take = min(len(event), limit - seen)
                rows = (event.batch.slice(0, take).to_pylist() if event.batch is not None
                        else event.rows[:take])
                for index, record in enumerate(rows):
                    yield event.row_number(index), record
                seen += take
            elif isinstance(event, Reject):
                yield event.row, event
                seen += 1
            elif isinstance(event, tuple):
                yield event
                seen += 1
            if seen >= limit:
                return


def tally(specs: Sequence[FeatureSpec], events: Iterator[tuple[int | None, Any]]
          ) -> tuple[int, dict[str, FeatureTally]]:
    """Encode each feature of each sampled record on its own; the number of records and a
    tally per feature.

    A feature is a mistake only if *every* sampled value is refused, so one accepted value
    clears it: it is not encoded again, and once every feature is cleared the sample stops
    (a correct config costs about one record's encoding, not the whole sample's features
    each encoded alone, which is a sizable share of a small build of wide rows). The tallies
    of cleared features therefore count up to their first acceptance.

    Args:
        specs: the config's features.
        events: what :func:`sample_events` yields.

    Returns:
        ``(records sampled, {feature: FeatureTally})``.
    """
    encoders = {spec.name: ExampleEncoder([spec]) for spec in specs if not spec.sequence}
    tallies = {name: FeatureTally() for name in encoders}
    pending = [spec for spec in specs if spec.name in encoders]
    records = 0
    for row, record in events:
        records += 1
        if isinstance(record, Reject):
            if record.feature in tallies and not tallies[record.feature].accepted:
                tallies[record.feature].refuse(row, record.reason, type_name(record.value))
            continue
        cleared = False
        for spec in pending:
            value = lookup(record, spec.source)
            if is_missing(value):
                continue  # the missing policy decides; nothing about the type
            try:
                encoders[spec.name].encode(record)
            except FeatureValueError as err:
                tallies[spec.name].refuse(row, str(err), err.value_type)
            else:
                tallies[spec.name].accepted += 1
                cleared = True
        if cleared:
            pending = [spec for spec in pending if not tallies[spec.name].accepted]
            if not pending:
                break
    return records, tallies


def mistakes(specs: Sequence[FeatureSpec], tallies: dict[str, FeatureTally], records: int,
             where: str) -> list[str]:
    """One line per feature that every sampled value refused (with enough of them).

    Args:
        specs: the config's features.
        tallies: :func:`tally`'s per feature.
        records: how many records were sampled.
        where: the file named in the lines.

    Returns:
        The lines, one per mistaken feature.
    """
    lines = []
    by_name = {spec.name: spec for spec in specs}
    for name, t in tallies.items():
        if t.accepted or t.refused < MIN_EVIDENCE:
            continue  # a small input is cheap to build: its dead letters say it all
        spec = by_name[name]
        shape = f", shape {list(spec.shape)}" if spec.shape else ""
        lines.append(
            f"features.{name}: declared {spec.dtype}{shape} over source "
            f"{'.'.join(spec.source)!r}, but all {t.refused} values in the first {records} "
            f"records of {where} are refused (they hold {t.value_type}); e.g. row {t.row}: "
            f"{t.reason}")
    return lines


def check_sample(specs: Sequence[FeatureSpec], reader: ReadFileFn, path: str,
                 max_bad_fraction: float, limit: int = SAMPLE_RECORDS) -> int:
    """Raise :class:`TypeMistake` when a feature would reject every record.

    Args:
        specs: the config's features.
        reader: the format's file reader.
        path: the first input file.
        max_bad_fraction: the config's threshold (1.0: every record may be rejected, so
            nothing is sampled).
        limit: records to sample at most.

    Returns:
        The number of records sampled.
    """
    if max_bad_fraction >= 1.0:
        return 0  # every record may be rejected: nothing to refuse
    reader.setup()
    try:
        records, tallies = tally(specs, sample_events(reader, path, limit))
    finally:
        reader.teardown()
    found = mistakes(specs, tallies, records, path)
    if found:
        more = f" (and {len(found) - 1} more: {'; '.join(found[1:])})" if len(found) > 1 else ""
        raise TypeMistake(found[0] + more)
    return records
