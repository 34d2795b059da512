"""Dead letters: rejected records and unread input, as staged JSONL files with their tallies.

Each bundle writes its rows to one file under ``<staging>/dead_letter/`` and emits a
:class:`DeadLetterFile`: the path, the row count and the count of each reason, so the commit
can name the most frequent reasons of a failed build without reading the files again. Rows
are redacted first (sinks/format/redact.py): a source path may carry a token or a signature.

The writer is also where a worker's rejects are counted while the build runs: for the
progress line (its running count and most frequent reasons, in a progress file) and, with
:class:`WatchCounts` counting the records built, to stop a doomed build early
(sinks/early_stop.py).
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import apache_beam as beam

from beam_tfrecords.runtime import storage
from beam_tfrecords.runtime.bundle_output import finish_bundle_outputs
from beam_tfrecords.sinks import early_stop
from beam_tfrecords.sinks.format.layout import DEAD_LETTER, resolve_in_version
from beam_tfrecords.sinks.format.redact import redact
from beam_tfrecords.sinks.lease import JobLease
from beam_tfrecords.sinks.progress_files import ProgressFile

__all__ = ["DeadLetterFile", "WatchCounts", "WriteDeadLetters", "reason_key",
           "staged_dead_letters", "top_reasons"]

_REASON_CHARS = 120  # a reason's key for tallies: long reasons quote values
_REASONS_PER_FILE = 64  # distinct reasons a file keeps a count for; the rest are "(others)"
_GOT_TYPE = re.compile(r"\bgot \S+ ")


@dataclasses.dataclass(frozen=True)
class DeadLetterFile:
    """A staged dead-letter file: where, how many rows, and how many of each reason."""

    path: str
    rows: int
    reasons: tuple[tuple[str, int], ...] = ()


def reason_key(row: Mapping) -> str:
    """The tally key of a dead-letter row: its feature (if any) and its reason, shortened,
    without the value when the reason quotes it -- ``got str …``, not ``got str 'x17'`` --
    so that one mistake over many values is one reason, not 64 and ``(others)``.

    Args:
        row: a dead-letter row (``reason``, optional ``feature`` and ``value``).

    Returns:
        The key, at most ``_REASON_CHARS`` characters of reason.
    """
    reason = str(row.get("reason", ""))
    value = row.get("value")
    got = _GOT_TYPE.search(reason)  # "got <type> <value>", as FeatureValueError says
    if got and isinstance(value, str) and value and reason.startswith(value, got.end()):
        reason = f"{reason[:got.end()]}…{reason[got.end() + len(value):]}"
    if len(reason) > _REASON_CHARS:
        reason = reason[:_REASON_CHARS - 1] + "…"
    feature = row.get("feature") or ""
    return f"{feature}: {reason}" if feature and f"'{feature}'" not in reason else reason


def top_reasons(files: Iterable[DeadLetterFile], n: int = 3) -> list[tuple[str, int]]:
    """The ``n`` most frequent reasons over files, most frequent first (ties by reason).

    Args:
        files: the dead-letter files, with their reasons counted.
        n: how many reasons to return.

    Returns:
        ``(reason, rows)`` pairs.
    """
    total: Counter = Counter()
    for f in files:
        total.update(dict(f.reasons))
    return sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def _tally(reasons: Counter, key: str) -> None:
    if key in reasons or len(reasons) < _REASONS_PER_FILE:
        reasons[key] += 1
    else:
        reasons["(others)"] += 1


class WriteDeadLetters(beam.DoFn):
    """Dead-letter rows -> one staged JSONL file per bundle; emits a DeadLetterFile each.

    ``stop`` (an :class:`early_stop.StopPolicy`): the rejected rows count in the process's
    :class:`early_stop.Watch`, which stops the build when its records so far cannot meet the
    threshold (sinks/early_stop.py); apply it in the stage that rejects the rows, with no
    Flatten before it. ``progress_dir``: it leaves its running count of rejected records and
    their most frequent reasons there every few seconds, for the progress line
    (sinks/progress_files.py). ``lease``: its bundles keep the job's lease on the output
    alive while they write (sinks/lease.JobLease).

    Args:
        staging: the build's staging folder; files go under its ``dead_letter/``.
        stop: the early-stop policy, or None to never stop early.
        progress_dir: where the progress files go, or None for no progress.
        lease: the job's lease, kept alive while bundles write; None without a lease.
    """

    def __init__(self, staging: str, stop: early_stop.StopPolicy | None = None,
                 progress_dir: str | None = None, lease: JobLease | None = None) -> None:
        self._lease = lease
        self._staging = staging
        self._stop = stop
        self._progress_dir = progress_dir

    def setup(self) -> None:
        self._watch = early_stop.watch(self._stop) if self._stop is not None else None
        self._progress = ProgressFile(self._progress_dir) if self._progress_dir else None
        self._rejected = 0  # this instance's, across bundles, for the progress file
        self._all_reasons: Counter = Counter()

    def start_bundle(self) -> None:
        if self._lease is not None:
            self._lease.begin(self)
        self._handle = None
        self._rows = 0
        self._reasons: Counter = Counter()

    def process(self, row: dict, after: Any = None) -> None:
        # ``after``: the claim of the version folder, a side input only waited for.
        if self._handle is None:
            self._path = resolve_in_version(self._staging, DEAD_LETTER, f"{uuid.uuid4().hex}.jsonl")
            self._handle = storage.open_write(self._path)
            if self._watch is not None:  # closed by whichever step stops the build
                self._watch.holding(self, self._close)
        self._handle.write(json.dumps(redact(row), ensure_ascii=False, default=repr).encode()
                           + b"\n")
        self._rows += 1
        key = reason_key(row)
        _tally(self._reasons, key)
        if row.get("kind") != "rejected":  # unread input: not a record
            return
        self._rejected += 1
        _tally(self._all_reasons, key)
        if self._progress is not None and self._progress.due():
            self._report()
        if self._watch is not None:
            self._watch.add(rejected=1)  # raises StoppedEarly to stop the build

    def _close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        self._report()

    def _report(self) -> None:
        if self._progress is not None and self._rejected:
            self._progress.write(0, 0, rejected=self._rejected,
                                 reasons=self._all_reasons.most_common(3))

    def finish_bundle(self):
        self._report()
        if self._handle is not None:
            self._handle.close()
            if self._watch is not None:
                self._watch.holding(self, None)
            yield from finish_bundle_outputs([
                DeadLetterFile(self._path, self._rows, tuple(sorted(self._reasons.items())))])
            self._handle = None
        if self._lease is not None:
            self._lease.end(self)


class WatchCounts(beam.DoFn):
    """``(name, n)`` counts -> nothing: ToExamples' ``("built", n)`` count in the process's
    :class:`early_stop.Watch`, beside the rejected rows the dead-letter writers count. Apply
    it to the counts in the stage that produces them.

    Args:
        stop: the early-stop policy whose :class:`early_stop.Watch` counts.
    """

    def __init__(self, stop: early_stop.StopPolicy) -> None:
        self._stop = stop

    def setup(self) -> None:
        self._watch = early_stop.watch(self._stop)

    def process(self, count: tuple[str, int], after: Any = None) -> None:
        # ``after``: the claim of the version folder, a side input only waited for.
        name, n = count
        self._watch.add(built=n if name == "built" else 0)  # raises StoppedEarly to stop


def staged_dead_letters(staging: str) -> list[DeadLetterFile]:
    """The dead-letter files staged under ``staging`` (by bundles that never finished, when a
    build stopped early), each with its rows and reasons counted from its complete lines.

    Args:
        staging: the build's staging folder.

    Returns:
        One :class:`DeadLetterFile` per staged file.
    """
    found = []
    for path in storage.list_files(storage.join(staging, DEAD_LETTER)):
        if not path.endswith(".jsonl"):
            continue
        rows, reasons = 0, Counter()
        with storage.open_read(path) as handle:
            for line in handle:
                try:
                    row = json.loads(line)
                except ValueError:  # cut short by a killed writer
                    continue
                rows += 1
                _tally(reasons, reason_key(row))
        found.append(DeadLetterFile(path, rows, tuple(sorted(reasons.items()))))
    return found
