"""A Cloud Storage emulator for the tests: ``gcp-storage-emulator`` in a subprocess on 127.0.0.1.

``start()`` launches the emulator on a free loopback port, waits until it answers, points
this process at it (``STORAGE_EMULATOR_HOST``, ``NO_GCE_CHECK``; child processes such as
Beam's multi-process workers inherit both), skips the credential lookup Beam would otherwise
spend ~22 s on, and creates a bucket. ``GcsEmulator.stop()`` undoes all of it.

``GcsEmulator.fault_proxy()`` puts a small HTTP proxy in front of the emulator that fails
chosen requests (HTTP 503/429, a dropped connection, or a slow answer) -- the emulator
injects no faults itself -- so retries can be tested.

Loaded by ``tests/conftest.py`` (the ``gcs_emulator`` fixture); nothing here is installed.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import importlib.util
import inspect
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator

HOST = "127.0.0.1"
START_TIMEOUT_S = float(os.environ.get("BEAM_TFRECORDS_EMULATOR_TIMEOUT", "30"))
_ATTEMPTS = 3  # a free port can be taken between choosing it and the emulator binding it
_ENV = ("STORAGE_EMULATOR_HOST", "NO_GCE_CHECK", "NO_PROXY", "no_proxy")


class EmulatorError(RuntimeError):
    """The emulator could not be started; the message says why and shows its log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/", timeout=1) as response:  # its health check
            return response.status == 200 and response.read().strip() == b"OK"
    except (urllib.error.URLError, OSError):
        return False


def _log_tail(path: pathlib.Path, limit: int = 2000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return text[-limit:] or "(empty log)"


class GcsEmulator:
    """A running emulator: ``url``, ``bucket``, and helpers for tests."""

    def __init__(self, process: subprocess.Popen, port: int, bucket: str,
                 workdir: tempfile.TemporaryDirectory) -> None:
        self.process = process
        self.port = port
        self.host = f"{HOST}:{port}"
        self.url = f"http://{self.host}"
        self.bucket = bucket
        self._workdir = workdir
        self._saved_env: dict[str, str | None] = {}
        self._saved_credentials: tuple | None = None
        self._client = None

    # -- helpers for tests ---------------------------------------------------------------

    def client(self):
        """An anonymous google-cloud-storage client for this emulator (independent of env)."""
        if self._client is None:
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage as gcs

            self._client = gcs.Client(project="test", credentials=AnonymousCredentials(),
                                      client_options={"api_endpoint": self.url})
        return self._client

    def path(self, *parts: str) -> str:
        return "/".join([f"gs://{self.bucket}", *parts])

    def unique_prefix(self, label: str) -> str:
        """A fresh ``gs://bucket/<label>-<id>`` no other test uses."""
        return self.path(f"{label}-{uuid.uuid4().hex[:12]}")

    def name_of(self, gs_path: str) -> str:
        prefix = f"gs://{self.bucket}/"
        assert gs_path.startswith(prefix), gs_path
        return gs_path[len(prefix):]

    def blob(self, gs_path: str):
        """The object's metadata as Cloud Storage reports it, or None."""
        return self.client().bucket(self.bucket).get_blob(self.name_of(gs_path))

    def upload(self, gs_path: str, data: bytes) -> None:
        self.client().bucket(self.bucket).blob(self.name_of(gs_path)).upload_from_string(data)

    def names(self, gs_prefix: str) -> list[str]:
        """Every object name below a prefix, sorted."""
        name = self.name_of(gs_prefix.rstrip("/") + "/")
        return sorted(b.name for b in self.client().list_blobs(self.bucket, prefix=name))

    @contextlib.contextmanager
    def fault_proxy(self, fault: Callable[[str, str], object]) -> Iterator[FaultProxy]:
        """A proxy to this emulator; ``fault(method, path)`` returns None (forward), an
        HTTP status to answer with, ``"drop"`` to close the connection unanswered, or
        ``("slow", seconds)`` to forward after a delay. A ``fault`` taking three arguments
        also gets the request body (an upload names its object there, not in the path)."""
        proxy = FaultProxy(self.port, fault)
        try:
            yield proxy
        finally:
            proxy.close()

    # -- lifecycle -----------------------------------------------------------------------

    def activate(self) -> None:
        """Point this process (and its future children) at the emulator, anonymously."""
        self._saved_env = {k: os.environ.get(k) for k in _ENV}
        os.environ["STORAGE_EMULATOR_HOST"] = self.url
        os.environ["NO_GCE_CHECK"] = "true"
        for key in ("NO_PROXY", "no_proxy"):  # never send loopback traffic through a proxy
            current = os.environ.get(key, "")
            os.environ[key] = ",".join(x for x in (current, HOST, "localhost") if x)
        try:
            from apache_beam.internal.gcp import auth

            cache = auth._Credentials
            with cache._credentials_lock:
                self._saved_credentials = (cache._credentials_init, cache._credentials)
                cache._credentials_init, cache._credentials = True, None
        except (ImportError, AttributeError):
            self._saved_credentials = None

    def stop(self) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env = {}
        if self._saved_credentials is not None:
            from apache_beam.internal.gcp import auth

            with auth._Credentials._credentials_lock:
                (auth._Credentials._credentials_init,
                 auth._Credentials._credentials) = self._saved_credentials
            self._saved_credentials = None
        _terminate(self.process)
        self._workdir.cleanup()


def _terminate(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


def _launch(port: int, workdir: pathlib.Path) -> tuple[subprocess.Popen, pathlib.Path]:
    log = workdir / f"emulator-{port}.log"
    command = [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", HOST,
               "--port", str(port), "--in-memory", "--quiet"]
    env = {k: v for k, v in os.environ.items() if k not in ("STORAGE_EMULATOR_HOST",)}
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, cwd=workdir, stdout=handle,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env)
    return process, log


def start(bucket: str | None = None, timeout: float = START_TIMEOUT_S) -> GcsEmulator:
    """Start an emulator with one bucket and point this process at it."""
    if importlib.util.find_spec("gcp_storage_emulator") is None:
        raise EmulatorError(f"gcp-storage-emulator is not installed for {sys.executable}; "
                            "install the dev extras: pip install -e '.[dev]'")
    bucket = bucket or f"test-{uuid.uuid4().hex[:12]}"
    workdir = tempfile.TemporaryDirectory(prefix="gcs-emulator-")
    failures = []
    for _ in range(_ATTEMPTS):
        port = free_port()
        process, log = _launch(port, pathlib.Path(workdir.name))
        url = f"http://{HOST}:{port}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process.poll() is None and not _answers(url):
            time.sleep(0.05)
        if process.poll() is None and _answers(url):
            emulator = GcsEmulator(process, port, bucket, workdir)
            try:
                emulator.client().create_bucket(bucket)
                emulator.activate()
            except Exception:
                emulator.stop()
                raise
            return emulator
        hung = process.poll() is None
        state = (f"did not answer within {timeout:.0f} s" if hung
                 else f"exited with status {process.returncode}")
        _terminate(process)
        failures.append(f"port {port}: {state}; log:\n{_log_tail(log)}")
        if hung:
            break  # a hang is not a port race: don't wait again
    workdir.cleanup()
    raise EmulatorError("the GCS emulator (gcp-storage-emulator) did not start on "
                        f"{HOST}: " + "\n".join(failures))


class FaultProxy:
    """A loopback HTTP proxy to the emulator that fails the requests ``fault`` picks."""

    _HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "proxy-connection",
                      "upgrade", "te", "trailer", "content-length"})

    def __init__(self, upstream_port: int, fault: Callable[[str, str], object]) -> None:
        self.injected: list[tuple[str, str, object]] = []
        self.forwarded: list[tuple[str, str]] = []
        proxy = self
        with_body = len(inspect.signature(fault).parameters) >= 3

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection: simplest to relay

            def log_message(self, *args) -> None:  # quiet
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                action = (fault(self.command, self.path, body) if with_body
                          else fault(self.command, self.path))
                if isinstance(action, tuple) and action[0] == "slow":
                    proxy.injected.append((self.command, self.path, action))
                    time.sleep(action[1])
                    action = None
                if action == "drop":
                    proxy.injected.append((self.command, self.path, action))
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if isinstance(action, int):
                    proxy.injected.append((self.command, self.path, action))
                    payload = (b'{"error": {"code": %d, "message": "injected by FaultProxy"}}'
                               % action)
                    self.send_response(action)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                proxy.forwarded.append((self.command, self.path))
                upstream = http.client.HTTPConnection(HOST, upstream_port, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in self._HOP_LOWER}
                    headers["Host"] = f"{HOST}:{upstream_port}"
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                    self.send_response(response.status, response.reason)
                    for key, value in response.getheaders():
                        if key.lower() not in self._HOP_LOWER:
                            self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    upstream.close()

            _HOP_LOWER = FaultProxy._HOP
            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _relay

        self._server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://{HOST}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="gcs-fault-proxy")
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
