"""Running totals of the sink's writers, left in small files for a launcher's progress line.

A build's work may run in other processes (DirectRunner ``multi_processing``, a portable
worker pool), so the launcher cannot count what is written. Each writer instance owns one file
``<directory>/<random>.json`` holding ``{"records": n, "bytes": b}`` -- its running totals --
rewritten atomically at most every :data:`PERIOD` seconds; the caller checks the clock once
per batch, never per record. Dead-letter writers add ``"rejected"`` and their most frequent
``"reasons"`` (``[[reason, n], ...]``). The launcher sums the files with :func:`read_totals`.

The totals are best effort (a retried bundle counts twice); the manifest, not these files, is
the record of what was written. A file that cannot be written or read is skipped: progress
never fails a build. Reporting is on when the pipeline option ``--tfrecords_progress_dir``
names a directory (the build puts it under its staging directory, which the commit removes).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import NamedTuple

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecords.runtime import storage

__all__ = ["PERIOD", "ProgressFile", "ProgressOptions", "Totals", "read_totals"]

_LOG = logging.getLogger(__name__)
PERIOD = 2.0  # seconds between rewrites of one writer's file; the launcher polls less often
_SUFFIX = ".json"


class ProgressOptions(PipelineOptions):
    """``--tfrecords_progress_dir``: where writers leave their running totals (off if unset)."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument(
            "--tfrecords_progress_dir", default=None,
            help="directory (local or gs://) where the TFRecord writers leave their running "
                 f"totals every {PERIOD:g} s for a progress line; unset: no progress files")


class ProgressFile:
    """One writer's totals file. Create it in the process that writes (its name is random).

    Args:
        directory: the build's progress folder.
        period: seconds between writes.
        clock: seconds, monotonic; tests pass a fake one.
    """

    def __init__(self, directory: str, period: float = PERIOD,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = storage.join(directory, uuid.uuid4().hex + _SUFFIX)
        self._period = period
        self._clock = clock
        self._next = clock() + period

    def due(self) -> bool:
        """Whether :meth:`write` should run now; one clock read.

        Returns:
            True once ``period`` has passed since the last write.
        """
        return self._clock() >= self._next

    def write(self, records: int, nbytes: int, rejected: int = 0,
              reasons: Sequence[tuple[str, int]] = ()) -> None:
        """Replace the file with this writer's totals so far; a failure is logged, never raised.

        Args:
            records: records written so far.
            nbytes: bytes written so far.
            rejected: records rejected so far.
            reasons: the most frequent reasons, ``(reason, rows)``.
        """
        self._next = self._clock() + self._period
        doc: dict = {"records": records, "bytes": nbytes}
        if rejected:
            doc.update(rejected=rejected, reasons=[list(pair) for pair in reasons])
        try:
            storage.write_atomic(self.path, json.dumps(doc).encode())
        except Exception as err:  # progress is best effort
            _LOG.debug("cannot write progress file %s: %s", self.path, err)


class Totals(NamedTuple):
    """Every writer's running totals, summed: records and bytes written, records rejected,
    and the most frequent reasons of the rejects (``(reason, n)``, most frequent first; from
    each dead-letter writer's own most frequent, so an estimate)."""

    records: int = 0
    bytes: int = 0
    rejected: int = 0
    reasons: tuple[tuple[str, int], ...] = ()


def read_totals(directory: str) -> Totals:
    """The totals of every writer's file under ``directory``; zeros if there is none.

    Args:
        directory: the build's progress folder.

    Returns:
        Records, bytes and rejected records summed, and the three most frequent reasons.
    """
    records = nbytes = rejected = 0
    reasons: Counter = Counter()
    for path in storage.list_files(directory):
        if not path.endswith(_SUFFIX):
            continue  # a temporary file of an atomic write in flight
        try:
            doc = json.loads(storage.read_text(path))
            counts = int(doc["records"]), int(doc["bytes"]), int(doc.get("rejected", 0))
            found = Counter({str(reason): int(n) for reason, n in doc.get("reasons", ())})
        except Exception as err:  # gone with staging, or unreadable: skip it this time
            _LOG.debug("cannot read progress file %s: %s", path, err)
            continue
        records, nbytes, rejected = records + counts[0], nbytes + counts[1], rejected + counts[2]
        reasons.update(found)
    top = tuple(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:3])
    return Totals(records, nbytes, rejected, top)
