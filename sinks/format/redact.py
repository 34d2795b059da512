"""Keep credentials out of everything we write: manifests, dead letters, log lines, errors.

Paths and patterns reach us from users and schedulers, and some carry secrets: a signed URL's
``X-Goog-Signature``, an ``access_token=`` or ``key=`` query parameter, ``user:password@`` in
a URL, an OAuth bearer token pasted into an option. Manifests live next to the data for years
and dead letters and logs are shared widely, so every string we write from such a source goes
through :func:`redact_text` first. Only the secret part is replaced (``access_token=REDACTED``),
so the rest of a path still says where things came from.

Pure and Beam-free; :func:`install_log_redaction` adds it to this package's log records.
"""

from __future__ import annotations

import logging
import re
from typing import Any

__all__ = ["REDACTED", "install_log_redaction", "redact", "redact_text"]

REDACTED = "REDACTED"

_SECRET_PARAMS = (
    "x-goog-signature", "x-goog-credential", "x-goog-security-token", "x-amz-signature",
    "x-amz-credential", "x-amz-security-token", "signature", "sig", "access_token",
    "refresh_token", "id_token", "token", "key", "api_key", "apikey", "password", "passwd",
    "client_secret", "secret",
)
# name=value after the start, a separator of a query string, or whitespace.
_PARAM = re.compile(
    r"(?i)(^|[?&;\s,])(" + "|".join(re.escape(p) for p in _SECRET_PARAMS) + r")=([^&;\s'\"#/,]+)")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")  # scheme://user[:pw]@host
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}")
_OAUTH_TOKEN = re.compile(r"\bya29\.[A-Za-z0-9._-]+")  # Google OAuth access tokens


def redact_text(text: str) -> str:
    """``text`` with every credential we recognise replaced by ``REDACTED``."""
    if not text or not isinstance(text, str):
        return text
    text = _PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}={REDACTED}", text)
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    return _OAUTH_TOKEN.sub(REDACTED, text)


def redact(value: Any) -> Any:
    """A copy of JSON-like data (dicts, lists, tuples, strings) with every string redacted;
    other values are returned as they are."""
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
