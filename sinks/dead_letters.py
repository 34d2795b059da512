"""Dead letters: rejected records and unread input, as staged JSONL files with their tallies.

Each bundle writes its rows to one file under ``<staging>/dead_letter/`` and emits a
:class:`DeadLetterFile`: the path, the row count and the count of each reason, so the commit
can name the most frequent reasons of a failed build without reading the files again. Rows
are redacted first (sinks/format/redact.py): a source path may carry a token or a signature.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping

import apache_beam as beam

from beam_tfrecords.sinks import storage
from beam_tfrecords.sinks.format.redact import redact

__all__ = ["DeadLetterFile", "WriteDeadLetters", "reason_key", "top_reasons"]

_REASON_CHARS = 120  # a reason's key for tallies: long reasons quote values
_REASONS_PER_FILE = 64  # distinct reasons a file keeps a count for; the rest are "(others)"


@dataclasses.dataclass(frozen=True)
class DeadLetterFile:
    """A staged dead-letter file: where, how many rows, and how many of each reason."""

    path: str
    rows: int
    reasons: tuple[tuple[str, int], ...] = ()


def reason_key(row: Mapping) -> str:
    """The tally key of a dead-letter row: its feature (if any) and its reason, shortened."""
    reason = str(row.get("reason", ""))
    if len(reason) > _REASON_CHARS:
        reason = reason[:_REASON_CHARS - 1] + "…"
    feature = row.get("feature") or ""
    return f"{feature}: {reason}" if feature and f"'{feature}'" not in reason else reason


def top_reasons(files: Iterable[DeadLetterFile], n: int = 3) -> list[tuple[str, int]]:
    """The ``n`` most frequent reasons over files, most frequent first (ties by reason)."""
    total: Counter = Counter()
    for f in files:
        total.update(dict(f.reasons))
    return sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


class WriteDeadLetters(beam.DoFn):
    """Dead-letter rows -> one staged JSONL file per bundle; emits a DeadLetterFile each."""

    def __init__(self, staging: str) -> None:
        self._staging = staging

    def start_bundle(self) -> None:
        self._handle = None
        self._rows = 0
        self._reasons: Counter = Counter()

    def process(self, row: dict) -> None:
        if self._handle is None:
            self._path = storage.join(self._staging, "dead_letter", f"{uuid.uuid4().hex}.jsonl")
            self._handle = storage.open_write(self._path)
        self._handle.write(json.dumps(redact(row), ensure_ascii=False, default=repr).encode()
                           + b"\n")
        self._rows += 1
        key = reason_key(row)
        if key in self._reasons or len(self._reasons) < _REASONS_PER_FILE:
            self._reasons[key] += 1
        else:
            self._reasons["(others)"] += 1

    def finish_bundle(self):
        if self._handle is not None:
            self._handle.close()
            yield beam.utils.windowed_value.WindowedValue(
                DeadLetterFile(self._path, self._rows, tuple(sorted(self._reasons.items()))),
                -1, [beam.transforms.window.GlobalWindow()])
            self._handle = None
