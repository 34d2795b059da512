"""Cloud Storage (``gs://``) through ``google-cloud-storage``: what FileSystems cannot do well.

``runtime/storage.py`` is the facade every caller uses; it comes here for ``gs://`` paths:

- :func:`compose` joins objects server-side (no bytes through the worker) and returns the
  crc32c Cloud Storage computed for the result; :func:`size_and_crc32c` reads an object's
  size and crc32c from its metadata;
- :func:`exists`, :func:`list_below` and :func:`delete_objects` treat a name prefix as a
  directory, as on local disk (Cloud Storage has no directories, and FileSystems only knows
  objects);
- :func:`upload` writes an object in one retried request (it appears only once complete);
- :func:`identities` and :func:`identity` give objects' sizes and generations, for the
  input-identity checks.

Every request goes through one retry policy (:func:`retry_policy`) and, when the retries run
out, one line naming the request (:func:`errors_named`). The client is built lazily, once
per process (never at import, never pickled). When ``STORAGE_EMULATOR_HOST`` is set, both
our client and Beam's run anonymously against that emulator; otherwise our client uses the
application default credentials. ``sinks/conditional.py`` uses the client directly, for
writes that carry generation preconditions.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from beam_tfrecords.errors import UserError
from beam_tfrecords.sinks.format.file_identity import MISSING, FileIdentity
from beam_tfrecords.sinks.format.redact import redact_text

__all__ = ["COMPOSE_LIMIT", "EMULATOR_ENV", "RETRY_INITIAL_ENV", "RETRY_MAXIMUM_ENV",
           "RETRY_TIMEOUT_ENV", "SCHEME", "StorageUnavailable", "blob_crc32c", "client",
           "compose", "delete_objects", "errors_named", "exists", "identities", "identity",
           "list_below", "path_of", "quiet_beam_credentials", "rename_objects", "retry_policy",
           "retry_timeout",
           "size_and_crc32c", "split_path", "upload"]

_LOG = logging.getLogger(__name__)
SCHEME = "gs://"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
COMPOSE_LIMIT = 32  # source objects per compose request, fixed by Cloud Storage
_DELETE_BATCH = 100  # objects per batch request


class StorageUnavailable(UserError, OSError):
    """Cloud Storage kept failing a request until the retries ran out (network, credentials,
    an outage): one line naming the request and its last error."""


_clients: dict[tuple[int, str], Any] = {}
_clients_lock = threading.Lock()


def split_path(path: str) -> tuple[str, str]:
    """``gs://bucket/name`` -> ``(bucket, name)``; the name may be empty.

    Args:
        path: a ``gs://`` path.

    Returns:
        The bucket and the object name (or prefix) within it.
    """
    bucket, _, name = path[len(SCHEME):].partition("/")
    if not bucket:
        raise ValueError(f"{path!r} names no bucket")
    return bucket, name


def path_of(bucket: str, name: str) -> str:
    """The ``gs://`` path of an object.

    Args:
        bucket: the bucket's name.
        name: the object's name within it.

    Returns:
        ``gs://<bucket>/<name>``.
    """
    return f"{SCHEME}{bucket}/{name}"


RETRY_TIMEOUT_ENV = "BEAM_TFRECORDS_GCS_RETRY_TIMEOUT"  # seconds, default 120
RETRY_INITIAL_ENV = "BEAM_TFRECORDS_GCS_RETRY_INITIAL"  # first backoff, seconds, default 1
RETRY_MAXIMUM_ENV = "BEAM_TFRECORDS_GCS_RETRY_MAXIMUM"  # longest backoff, seconds, default 60


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    if not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected a number of seconds") from None
    if not value > 0:
        raise ValueError(f"{name}={raw!r}: expected a positive number of seconds")
    return value


def retry_timeout() -> float:
    """How long one request of ours is retried before the build gives up.

    Returns:
        Seconds: ``BEAM_TFRECORDS_GCS_RETRY_TIMEOUT``, else 120.
    """
    return _env_seconds(RETRY_TIMEOUT_ENV, 120.0)


def retry_policy():
    """The retry policy for every request we send ourselves.

    google-cloud-storage's default policy (exponential backoff on 408/429/5xx and dropped or
    timed-out connections). It is passed explicitly because the library applies it to
    compose, copy and uploads only when a generation precondition is given. Every request we
    retry is safe to repeat: compose reads immutable staged parts, uploads carry the whole
    content, deletes tolerate a lost 404.

    The overall deadline and the backoff bounds come from the environment
    (``BEAM_TFRECORDS_GCS_RETRY_TIMEOUT``, ``..._INITIAL``, ``..._MAXIMUM``; defaults 120 s,
    1 s, 60 s as in the library), so a scheduler can bound how long a build waits on an outage
    and tests can make persistent errors fail fast. Workers inherit the environment.

    Returns:
        A ``google.api_core.retry.Retry``.
    """
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY.with_timeout(retry_timeout()).with_delay(
        initial=_env_seconds(RETRY_INITIAL_ENV, 1.0),
        maximum=_env_seconds(RETRY_MAXIMUM_ENV, 60.0))


@contextlib.contextmanager
def errors_named(action: str, path: str) -> Iterator[None]:
    """Turn retries that ran out into one clear line naming the request and the last error.

    Args:
        action: the request, as the message names it (``"upload of"``, ``"list"``).
        path: the object or prefix it was about.

    Returns:
        A context manager raising :class:`StorageUnavailable` for a ``RetryError`` inside it.
    """
    from google.api_core.exceptions import RetryError

    try:
        yield
    except RetryError as error:
        cause = error.cause
        last = f"{type(cause).__name__}: {cause}" if cause is not None else str(error)
        last = " ".join(last.split())[:300]
        raise StorageUnavailable(redact_text(
            f"Cloud Storage {action} {path} still failing after {retry_timeout():g} s of "
            f"retries (last error: {last})")) from None


def quiet_beam_credentials() -> None:
    """Against an emulator, stop Beam from searching for credentials it cannot use.

    Beam looks for application default credentials before its first ``gs://`` request in
    every process; without any it retries with backoff for ~22 s and then connects
    anonymously anyway. google-cloud-storage goes anonymous at once when
    ``STORAGE_EMULATOR_HOST`` is set; this makes Beam do the same, by marking its
    credential cache as resolved to "no credentials". Only with the emulator variable set.
    """
    if not os.environ.get(EMULATOR_ENV):
        return
    try:
        from apache_beam.internal.gcp import auth

        cache = auth._Credentials  # pylint: disable=protected-access
        with cache._credentials_lock:
            if not cache._credentials_init:
                cache._credentials = None
                cache._credentials_init = True
    except (ImportError, AttributeError):  # a Beam without this cache: slower, not wrong
        pass


def client():
    """This process's ``google.cloud.storage.Client``, built on first use.

    One per process and emulator setting: a forked worker builds its own, and a test that
    points ``STORAGE_EMULATOR_HOST`` elsewhere gets a client for that endpoint.

    Returns:
        The client.
    """
    emulator = os.environ.get(EMULATOR_ENV, "")
    key = (os.getpid(), emulator)
    made = _clients.get(key)
    if made is not None:
        return made
    with _clients_lock:
        made = _clients.get(key)
        if made is None:
            from google.cloud import storage as gcs

            if emulator:
                from google.auth.credentials import AnonymousCredentials

                # The library reads STORAGE_EMULATOR_HOST itself for the endpoint.
                made = gcs.Client(credentials=AnonymousCredentials())
            else:
                made = gcs.Client()
            _clients[key] = made
    return made


def blob_crc32c(blob) -> int:
    """An object's CRC-32C (Cloud Storage reports base64 of the big-endian 4 bytes).

    Args:
        blob: a ``google.cloud.storage.Blob`` with its metadata loaded.

    Returns:
        The CRC-32C of the whole object, as an integer.
    """
    if not blob.crc32c:
        raise OSError(f"{path_of(blob.bucket.name, blob.name)} has no crc32c in its metadata")
    return int.from_bytes(base64.b64decode(blob.crc32c), "big")


def list_below(prefix: str) -> list[str]:
    """Every object below a directory-like prefix.

    Args:
        prefix: ``gs://bucket/folder`` (with a trailing ``/`` or not); ``gs://bucket``: all.

    Returns:
        Their ``gs://`` paths, sorted.
    """
    bucket, name = split_path(prefix)
    below = name.rstrip("/") + "/" if name.rstrip("/") else ""
    with errors_named("list", prefix):
        blobs = client().list_blobs(bucket, prefix=below, retry=retry_policy())
        return sorted(path_of(bucket, b.name) for b in blobs)


def delete_objects(paths: Sequence[str]) -> None:
    """Delete objects in batches; a missing object counts as deleted; other failures raise.

    Args:
        paths: ``gs://`` paths of objects.
    """
    if not paths:
        return
    from apache_beam.io.gcp.gcsio import GcsIO

    io = GcsIO(storage_client=client(), pipeline_options={})  # {}: not sys.argv
    failed = []
    for start in range(0, len(paths), _DELETE_BATCH):
        failed += [(p, e) for p, e in io.delete_batch(list(paths[start:start + _DELETE_BATCH]))
                   if e is not None]
    if failed:
        raise OSError(f"could not delete {len(failed)} object(s), e.g. {failed[0][0]} "
                      f"(HTTP {failed[0][1]})")


def rename_objects(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Move objects in batches: a batch of copies, then a batch of deletes of what was copied,
    per ``_DELETE_BATCH`` pairs -- no request per object before it (Beam's rename looks each
    object up first).

    Args:
        pairs: ``(source, destination)`` ``gs://`` paths.

    Returns:
        The pairs whose source did not exist (nothing was done for them).

    Raises:
        OSError: a copy or a delete failed for another reason, naming the first.
    """
    if not pairs:
        return []
    from apache_beam.io.gcp.gcsio import GcsIO

    io = GcsIO(storage_client=client(), pipeline_options={})  # {}: not sys.argv
    missing, failed = [], []
    for start in range(0, len(pairs), _DELETE_BATCH):
        copied = []
        for source, destination, error in io.copy_batch(list(pairs[start:start + _DELETE_BATCH])):
            if error == 404:
                missing.append((source, destination))
            elif error is not None:
                failed.append((source, error))
            else:
                copied.append(source)
        failed += [(p, e) for p, e in io.delete_batch(copied) if e is not None]
    if failed:
        raise OSError(f"could not move {len(failed)} object(s), e.g. {failed[0][0]} "
                      f"(HTTP {failed[0][1]})")
    return missing


def exists(path: str) -> bool:
    """Whether there is an object, or objects below a directory-like prefix.

    Args:
        path: ``gs://bucket/name``; ``gs://bucket`` asks for the bucket.

    Returns:
        True for an object of that name, objects below ``name/``, or an existing bucket.
    """
    bucket, name = split_path(path)
    service = client()
    with errors_named("exists", path):
        if not name.rstrip("/"):
            return service.bucket(bucket).exists(retry=retry_policy())
        if not name.endswith("/") and service.bucket(bucket).blob(name).exists(
                retry=retry_policy()):
            return True
        below = service.list_blobs(bucket, prefix=name.rstrip("/") + "/", max_results=1,
                                   retry=retry_policy())
        return any(True for _ in below)


def identities(paths: Sequence[str]) -> dict[str, FileIdentity]:
    """Size and generation of the objects ``paths`` name, from one listing per bucket (of
    the names' common prefix), not one request per object.

    Args:
        paths: ``gs://`` paths of objects.

    Returns:
        ``{path: FileIdentity}`` for those that exist.
    """
    by_bucket: dict[str, list[str]] = {}
    for path in paths:
        bucket, name = split_path(path)
        by_bucket.setdefault(bucket, []).append(name)
    found: dict[str, FileIdentity] = {}
    for bucket, names in by_bucket.items():
        wanted = set(names)
        prefix = os.path.commonprefix(names)
        with errors_named("list", path_of(bucket, prefix)):
            for blob in client().list_blobs(bucket, prefix=prefix, retry=retry_policy()):
                if blob.name in wanted:
                    path = path_of(bucket, blob.name)
                    found[path] = FileIdentity(path, int(blob.size or 0),
                                               generation=blob.generation)
    return found


def identity(path: str) -> FileIdentity:
    """The object's size and generation now.

    Args:
        path: a ``gs://`` object path.

    Returns:
        Its identity (``kind=MISSING`` when there is no such object).
    """
    bucket, name = split_path(path)
    with errors_named("metadata of", path):
        blob = client().bucket(bucket).get_blob(name, retry=retry_policy())
    if blob is None:
        return FileIdentity(path, 0, kind=MISSING)
    return FileIdentity(path, int(blob.size or 0), generation=blob.generation)


def upload(path: str, data: bytes, content_type: str = "application/octet-stream") -> None:
    """Write the object in one request, retried whole: readers see it only once complete.

    Args:
        path: a ``gs://`` object path.
        data: its whole content.
        content_type: the object's content type (``text/html``: a browser opening it from
            the bucket shows the page instead of downloading it).
    """
    bucket, name = split_path(path)
    blob = client().bucket(bucket).blob(name)
    with errors_named("upload of", path):
        blob.upload_from_string(data, content_type=content_type, retry=retry_policy())


def compose(sources: Sequence[str], destination: str) -> tuple[int, int]:
    """Compose ``sources`` into ``destination`` with as few requests as possible.

    A compose request takes at most 32 sources, so longer lists are first reduced: runs of
    consecutive sources are composed into temporary objects (``<destination>.tmp-<id>-<n>``)
    until 32 components remain, keeping the order. The last request composes straight into
    the final name: Cloud Storage creates the composed object atomically (a reader sees no
    object, the previous generation, or the whole new one -- never a part), so composing to
    a temporary name and copying it over would add a request without adding safety.
    Temporary objects are deleted whether or not the compose succeeds.

    Args:
        sources: ``gs://`` objects of one bucket, in order.
        destination: the object to create in the same bucket.

    Returns:
        The composed object's size in bytes and its CRC-32C, as Cloud Storage reports them.
    """
    from google.api_core.exceptions import NotFound

    bucket_name, final_name = split_path(destination)
    bucket = client().bucket(bucket_name)
    token = uuid.uuid4().hex
    temps: list = []

    def compose(components: list, name: str):
        target = bucket.blob(name)
        target.content_type = "application/octet-stream"
        with errors_named("compose of", path_of(bucket_name, name)):
            target.compose(components, retry=retry_policy())
        return target

    components = [bucket.blob(split_path(s)[1]) for s in sources]
    try:
        while len(components) > COMPOSE_LIMIT:
            reduced: list = []
            i = 0
            while i < len(components):
                remaining = len(components) - i
                if len(reduced) + remaining <= COMPOSE_LIMIT:
                    reduced.extend(components[i:])
                    break
                # Merge just enough to reach the limit (at most 32 at a time).
                take = min(COMPOSE_LIMIT, len(reduced) + remaining - COMPOSE_LIMIT + 1)
                temp = compose(components[i:i + take], f"{final_name}.tmp-{token}-{len(temps)}")
                temps.append(temp)
                reduced.append(temp)
                i += take
            components = reduced
        result = compose(components, final_name)
    except NotFound as error:  # a missing source; the final object was not created
        raise FileNotFoundError(f"cannot compose {destination}: a source object is missing "
                                f"({error.message})") from error
    finally:
        if temps:
            try:
                delete_objects([path_of(bucket_name, t.name) for t in temps])
            except Exception:  # noqa: BLE001 -- leftovers under a .tmp- name are harmless
                _LOG.warning("could not delete temporary compose objects of %s", destination,
                             exc_info=True)
    if result.size is None:
        with errors_named("metadata of", destination):
            result.reload(retry=retry_policy())
    return int(result.size), blob_crc32c(result)


def size_and_crc32c(path: str) -> tuple[int, int]:
    """(bytes, crc32c) of an object, from its metadata.

    Args:
        path: a ``gs://`` object path.

    Returns:
        Its size in bytes and its CRC-32C; FileNotFoundError when there is no such object.
    """
    bucket, name = split_path(path)
    with errors_named("metadata of", path):
        blob = client().bucket(bucket).get_blob(name, retry=retry_policy())
    if blob is None:
        raise FileNotFoundError(path)
    return int(blob.size), blob_crc32c(blob)
