"""Keep credentials out of everything we write: manifests, dead letters, log lines, errors.

Paths and patterns reach us from users and schedulers, and some carry secrets: a signed URL's
``X-Goog-Signature``, an ``access_token=`` or ``key=`` query parameter, ``user:password@`` in
a URL, an OAuth bearer token pasted into an option. Manifests live next to the data for years
and dead letters and logs are shared widely, so every string we write from such a source goes
through :func:`redact_text` first. Only the secret part is replaced (``access_token=REDACTED``),
so the rest of a path still says where things came from.

Pure and Beam-free; :func:`install_log_redaction` adds it to this package's log records,
:class:`SafeLines` to a text stream (the command's stdout and stderr).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO

__all__ = ["REDACTED", "STREAMS_ENV", "SafeLines", "install_log_redaction", "printable",
           "redact", "redact_streams_if_asked", "redact_text", "safe_text"]

REDACTED = "REDACTED"

_SECRET_PARAMS = (
    "x-goog-signature", "x-goog-credential", "x-goog-security-token", "signature", "sig",
    "access_token", "refresh_token", "id_token", "token", "key", "api_key", "apikey",
    "password", "passwd", "client_secret", "secret",
)
# Every parameter of an AWS SigV4 presigned URL (X-Amz-Signature, -Credential,
# -Security-Token, ...): the ones that are not secret say nothing worth keeping.
_AMZ = r"x-amz-[a-z0-9-]+"
# name=value after the start, a separator of a query string, or whitespace.
_PARAM = re.compile(
    r"(?i)(^|[?&;\s,])(" + "|".join([_AMZ, *map(re.escape, _SECRET_PARAMS)])
    + r")=([^&;\s'\"#/,]+)")
# scheme://user[:pw]@host, up to the authority's last @ (a password may hold one).
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s?#'\"]+@")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}")
_OAUTH_TOKEN = re.compile(r"\bya29\.[A-Za-z0-9._-]+")  # Google OAuth access tokens


def redact_text(text: str) -> str:
    """``text`` with every credential we recognise replaced by ``REDACTED``.

    Args:
        text: any text; a non-string or an empty string is returned as it is.

    Returns:
        The redacted text.
    """
    if not text or not isinstance(text, str):
        return text
    text = _PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}={REDACTED}", text)
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    return _OAUTH_TOKEN.sub(REDACTED, text)


# What a terminal acts on or cannot show: C0/C1 controls but tab and newline, line and
# paragraph separators, bidirectional overrides (they reorder what is read), and lone
# surrogates (invalid UTF-8 bytes of a file name, decoded with ``surrogateescape``).
_UNPRINTABLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
    "\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # the byte surrogateescape stood for
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on or could not encode written as
    a backslash escape (``\\x1b``, ``\\xff`` for an invalid UTF-8 byte, ``\\u202e``), so a
    line we print is text, one line per newline, whatever bytes a path or a value held.

    Args:
        text: text as decoded, possibly with surrogate escapes for invalid bytes.

    Returns:
        The escaped text.
    """
    return _UNPRINTABLE.sub(_escape, text)


def safe_text(text: str) -> str:
    """What the command line prints: ``text`` redacted, then made :func:`printable`.

    Args:
        text: a line or more about to be printed.

    Returns:
        The text, safe to print.
    """
    return printable(redact_text(text))


def redact(value: Any) -> Any:
    """A copy of JSON-like data (dicts, lists, tuples, strings) with every string redacted;
    other values are returned as they are.

    Args:
        value: JSON-like data.

    Returns:
        The redacted copy (same container types).
    """
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {redact_text(k) if isinstance(k, str) else k: redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact(v) for v in value)
    return value


_PACKAGE = "beam_tfrecords"
_installed = False


def install_log_redaction() -> None:
    """Redact the final text of every log record from this package's loggers.

    Done in the record factory, so it holds whatever handlers the application or Beam
    installs, in the launcher and in worker processes (which import this module with the
    sink). Idempotent; other loggers' records are untouched.
    """
    global _installed
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if record.name == _PACKAGE or record.name.startswith(_PACKAGE + "."):
            try:
                message = record.getMessage()
            except Exception:  # noqa: BLE001 -- a bad format string: leave it to logging
                return record
            cleaned = redact_text(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
        return record

    logging.setLogRecordFactory(factory)
    _installed = True


# Set by the command for the processes it starts: wrap your stdout and stderr too.
STREAMS_ENV = "BEAM_TFRECORDS_REDACT_STREAMS"


class SafeLines(io.TextIOBase):
    """A text stream that writes ``safe_text`` of each line to ``stream``.

    Args:
        stream: the terminal stream written to (``sys.stdout``, ``sys.stderr``).
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream
        self._pending = ""
        self._lock = threading.Lock()  # the progress line comes from a thread of its own
        self.broken = False  # a write found the reader gone (EPIPE)

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock, self._noting_a_broken_pipe():
            self._pending += text
            if "\n" in text:
                lines, _, self._pending = self._pending.rpartition("\n")
                self.stream.write(safe_text(lines + "\n"))
        return len(text)

    def flush(self) -> None:
        with self._lock, self._noting_a_broken_pipe():
            if self._pending:
                pending, self._pending = self._pending, ""
                self.stream.write(safe_text(pending))
            self.stream.flush()

    @contextlib.contextmanager
    def _noting_a_broken_pipe(self) -> Iterator[None]:
        try:
            yield
        except BrokenPipeError:
            self.broken = True
            raise

    def close(self) -> None:  # the stream underneath is not ours to close
        if not self.stream.closed:
            self.flush()

    @property
    def closed(self) -> bool:
        return self.stream.closed

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:
        return getattr(self.stream, "errors", None)


def redact_streams_if_asked() -> None:
    """In a process the command started (``STREAMS_ENV`` set: a multi_processing worker),
    make ``sys.stdout`` and ``sys.stderr`` :class:`SafeLines`; elsewhere (a notebook, a
    library caller's process) leave them alone."""
    if os.environ.get(STREAMS_ENV) != "1":
        return
    if sys.stdout is not None and not isinstance(sys.stdout, SafeLines):
        sys.stdout = SafeLines(sys.stdout)
    if sys.stderr is not None and not isinstance(sys.stderr, SafeLines):
        sys.stderr = SafeLines(sys.stderr)
