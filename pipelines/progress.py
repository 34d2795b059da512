"""Progress of a long build: one line per interval with the totals of every writer.

On DirectRunner the work may run in other processes (``multi_processing``), so the launcher
cannot count records itself. The sink's writers leave their running totals in small files
(``sinks/progress_files.py``); the launcher polls them and prints one aggregated line (here
in two), e.g.

    progress: 1,234,567 records, 456.7 MB written, 0 rejected, 98,765 records/s, 36.5 MB/s,
    0:01:40 elapsed

and, once records are rejected, their most frequent reason at the end
(``; top reason: 12,000 x feature 'age': expected int64, got str …``).

This module is the launcher's side and is free of Beam and of I/O: :class:`ProgressMeter`
turns successive totals into a line (rates over the last interval), and
:class:`ProgressReporter` is the thread that polls and prints, given the functions to do so.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from beam_tfrecords.sinks.format.shard_plan import format_bytes

__all__ = ["ProgressMeter", "ProgressReporter", "format_bytes", "format_duration",
           "format_progress"]

_LOG = logging.getLogger(__name__)
DEFAULT_INTERVAL = 10.0  # seconds between lines


def format_duration(seconds: float) -> str:
    """``8.2 s`` under a minute, ``1:02:03`` (h:mm:ss) from then on.

    Args:
        seconds: a duration.

    Returns:
        It as text.
    """
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def format_progress(records: int, nbytes: int, records_per_s: float, bytes_per_s: float,
                    elapsed: float, rejected: int = 0,
                    top_reason: tuple[str, int] | None = None) -> str:
    """The line; ``top_reason``: the most frequent reason of the rejects and its count.

    Args:
        records: records written so far.
        nbytes: bytes stored so far.
        records_per_s: the recent record rate.
        bytes_per_s: the recent byte rate.
        elapsed: seconds since the build started.
        rejected: records rejected so far.
        top_reason: the most frequent reject reason and its count, or None.

    Returns:
        One ``progress:`` line.
    """
    line = (f"progress: {records:,} records, {format_bytes(nbytes)} written, {rejected:,} "
            f"rejected, {records_per_s:,.0f} records/s, {format_bytes(bytes_per_s)}/s, "
            f"{format_duration(elapsed)} elapsed")
    if rejected and top_reason is not None:
        line += f"; top reason: {top_reason[1]:,} x {top_reason[0]}"
    return line


class ProgressMeter:
    """Successive (time, records, bytes, rejected) totals -> progress lines.

    Totals never go backwards on the line: a writer's file that cannot be read at one poll
    (or staging removed by the commit) must not make the count drop. Rates are over the last
    interval, so a stall shows as 0 records/s rather than a slowly sinking average.

    Args:
        start: when the build started, in the clock's seconds.
    """

    def __init__(self, start: float) -> None:
        self._start = start
        self._last_time = start
        self._records = 0
        self._bytes = 0
        self._rejected = 0
        self._top: tuple[str, int] | None = None

    def update(self, now: float, records: int, nbytes: int, rejected: int = 0,
               reasons: Sequence[tuple[str, int]] = ()) -> str:
        """The progress line for the totals at ``now``.

        Args:
            now: the time, in the clock's seconds.
            records: records written so far, over all writers.
            nbytes: bytes written so far.
            rejected: records rejected so far.
            reasons: the most frequent rejection reasons, ``(reason, rows)``.

        Returns:
            The line.
        """
        records, nbytes = max(records, self._records), max(nbytes, self._bytes)
        span = now - self._last_time
        rate = (records - self._records) / span if span > 0 else 0.0
        byte_rate = (nbytes - self._bytes) / span if span > 0 else 0.0
        self._last_time, self._records, self._bytes = now, records, nbytes
        if rejected >= self._rejected:  # else a file was unreadable at this poll: keep the last
            self._rejected, self._top = rejected, (tuple(reasons[0]) if reasons else self._top)
        return format_progress(records, nbytes, rate, byte_rate, now - self._start,
                               self._rejected, self._top)


class ProgressReporter:
    """A daemon thread that every ``interval`` seconds polls the totals and emits one line.

    ``poll`` returns ``(records, bytes)`` or ``(records, bytes, rejected, reasons)`` across all
    writers (``progress_files.Totals``); ``emit`` prints a line. A poll that fails is skipped:
    progress must never fail a build. Use as a context manager around the pipeline run;
    nothing is emitted after it exits (its last line, at the exit, has the final totals).

    Args:
        poll: returns the totals.
        emit: prints a line.
        interval: seconds between lines.
        clock: seconds, monotonic; tests pass a fake one.

    Raises:
        ValueError: an interval that is not positive.
    """

    def __init__(self, poll: Callable[[], Sequence], emit: Callable[[str], None],
                 interval: float = DEFAULT_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if interval <= 0:
            raise ValueError(f"a progress interval must be positive, got {interval}")
        self._poll = poll
        self._emit = emit
        self._interval = interval
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self, meter: ProgressMeter) -> None:
        while not self._stop.wait(self._interval):
            totals = self._totals()
            if totals is not None and not self._stop.is_set():
                self._shown = tuple(totals)
                self._emit(meter.update(self._clock(), *totals))

    def _totals(self) -> Sequence | None:
        try:
            return self._poll()
        except Exception as err:  # progress is best effort, the build is what matters
            _LOG.debug("progress poll failed: %s", err)
            return None

    def start(self) -> ProgressReporter:
        """Start the thread; ``__enter__`` calls it.

        Returns:
            This reporter.
        """
        self._meter = ProgressMeter(self._clock())
        self._shown: tuple | None = None
        self._thread = threading.Thread(target=self._loop, args=(self._meter,),
                                        name="beam-tfrecords-progress", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling. When lines were shown and the totals moved since the last one, one
        more line shows the final totals: a build that ends between two polls (rejects are
        reported after the records they came with) never leaves a stale last line."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if self._shown is not None:
                totals = self._totals()
                if totals is not None and tuple(totals) != self._shown:
                    self._shown = tuple(totals)
                    self._emit(self._meter.update(self._clock(), *totals))

    def __enter__(self) -> ProgressReporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
