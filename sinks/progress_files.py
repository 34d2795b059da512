"""Running totals of the sink's writers, left in small files for a launcher's progress line.

A build's work may run in other processes (DirectRunner ``multi_processing``, a portable
worker pool), so the launcher cannot count what is written. Each writer instance owns one file
``<directory>/<random>.json`` holding ``{"records": n, "bytes": b}`` -- its running totals --
rewritten atomically at most every :data:`PERIOD` seconds; the caller checks the clock once
per batch, never per record. The launcher sums the files with :func:`read_totals`.

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
from collections.abc import Callable

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecords.sinks import storage

__all__ = ["PERIOD", "ProgressFile", "ProgressOptions", "read_totals"]

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
    """One writer's totals file. Create it in the process that writes (its name is random)."""

    def __init__(self, directory: str, period: float = PERIOD,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = storage.join(directory, uuid.uuid4().hex + _SUFFIX)
        self._period = period
        self._clock = clock
        self._next = clock() + period

    def due(self) -> bool:
        """Whether :meth:`write` should run now; one clock read."""
        return self._clock() >= self._next

    def write(self, records: int, nbytes: int) -> None:
        self._next = self._clock() + self._period
        try:
            storage.write_atomic(self.path, json.dumps({"records": records,
                                                        "bytes": nbytes}).encode())
        except Exception as err:  # progress is best effort
            _LOG.debug("cannot write progress file %s: %s", self.path, err)


def read_totals(directory: str) -> tuple[int, int]:
    """(records, bytes) summed over every writer's file under ``directory``; (0, 0) if none."""
    records = nbytes = 0
    for path in storage.list_files(directory):
        if not path.endswith(_SUFFIX):
            continue  # a temporary file of an atomic write in flight
        try:
            doc = json.loads(storage.read_text(path))
            records += int(doc["records"])
            nbytes += int(doc["bytes"])
        except Exception as err:  # gone with staging, or unreadable: skip it this time
            _LOG.debug("cannot read progress file %s: %s", path, err)
    return records, nbytes
