"""Whole builds on gs:// through a fault proxy in front of the GCS emulator.

Transient errors (503, 429, dropped connections, slow answers) spread over every kind of
request a build makes -- listing and reading inputs, staging parts, renames, the manifest and
LATEST uploads -- are retried: the build commits and ``verify`` passes. A persistent error is
reported as one clear line after bounded retries, and nothing is committed: no manifest, LATEST
unchanged. Retry deadlines come from the environment (runtime/gcs.py) so this stays fast.
"""

from __future__ import annotations

import itertools
import pathlib
import threading

import pytest

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.verify import verify_path
from beam_tfrecords.runtime import gcs, storage

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo.yaml"
DEMO_CSV = ROOT / "configs" / "data" / "demo.csv"
ROWS = 2000


@pytest.fixture
def fast_retries(monkeypatch):
    """Our retry policy with short backoff and a 2 s deadline (the production defaults are
    1 s, 60 s and 120 s)."""
    monkeypatch.setenv(gcs.RETRY_INITIAL_ENV, "0.05")
    monkeypatch.setenv(gcs.RETRY_MAXIMUM_ENV, "0.2")
    monkeypatch.setenv(gcs.RETRY_TIMEOUT_ENV, "2")


@pytest.fixture
def setup(gcs_emulator, tmp_path):
    """A small-band config, its input (the demo's first rows) on gs://, a fresh output root."""
    lines = DEMO_CSV.read_bytes().splitlines(keepends=True)
    source = gcs_emulator.unique_prefix("faults-in") + "/demo.csv"
    gcs_emulator.upload(source, b"".join(lines[:ROWS + 1]))
    config = tmp_path / "demo.yaml"
    config.write_text(DEMO.read_text().replace(
        "shard_size: {target: 150MB, min: 100MB, max: 200MB}",
        "shard_size: {target: 20KB, min: 12KB, max: 40KB}"))
    out = gcs_emulator.unique_prefix("faults-out")
    return config, source, out


def args(config, source, out, version):
    return ["build", "--config", str(config), "--input", source, "--output", out,
            "--version", version]


def test_transient_errors_everywhere_are_retried_and_the_build_verifies(
        gcs_emulator, setup, fast_retries, monkeypatch, capsys):
    config, source, out = setup
    faults = itertools.cycle([503, 429, "drop", ("slow", 0.3)])
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def fault(method, path):
        kind = _kind(method, path)
        with lock:
            # The 1st, 3rd, 5th and 7th request of each kind; a retry is the next request
            # of its kind, so it passes.
            seen[kind] = n = seen.get(kind, 0) + 1
            return next(faults) if n % 2 == 1 and n <= 7 else None

    with gcs_emulator.fault_proxy(fault) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        code = cli.main(args(config, source, out, "v1"))
        captured = capsys.readouterr()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.url)
    assert code == 0, captured.err
    injected = {_kind(m, p) for m, p, _ in proxy.injected}
    assert {"list", "read", "upload", "copy", "batch"} <= injected, seen
    assert {a if isinstance(a, int | str) else a[0] for *_, a in proxy.injected} == {
        503, 429, "drop", "slow"}
    assert storage.read_text(f"{out}/LATEST").strip() == "v1"
    checks = verify_path(f"{out}/v1")
    assert all(c.ok for c in checks), [c.problems for c in checks if not c.ok]
    assert sum(c.records for c in checks) == ROWS
    assert not [n for n in gcs_emulator.names(out) if ".staging" in n or ".tmp-" in n]


def _kind(method: str, path: str) -> str:
    """What a JSON API request does, roughly, for the test's coverage check."""
    path = path.split("?")[0]
    if path.startswith("/upload/") or method == "PUT":
        return "upload"
    if "/copyTo/" in path or "/rewriteTo/" in path or path.endswith("/compose"):
        return "copy"
    if path.startswith("/batch/"):
        return "batch"  # Beam's renames and deletes, many objects per request
    if method == "DELETE":
        return "delete"
    if path.endswith("/o"):
        return "list"
    return "read"


def test_persistent_errors_fail_clearly_and_commit_nothing(gcs_emulator, setup, fast_retries,
                                                           monkeypatch, capsys):
    config, source, out = setup
    assert cli.main(args(config, source, out, "good")) == 0
    before = {n: storage.read_text(f"gs://{gcs_emulator.bucket}/{n}")
              for n in gcs_emulator.names(out) if n.endswith((".json", "LATEST"))}
    capsys.readouterr()

    def manifest_upload_fails(method, path, body):
        return 503 if method == "POST" and b"manifest.json" in body else None

    with gcs_emulator.fault_proxy(manifest_upload_fails) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        code = cli.main(args(config, source, out, "bad"))
        err = capsys.readouterr().err
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.url)
    assert code == 1
    assert err.count("\n") == 1, err  # one line for the scheduler's log
    assert "still failing after 2 s of retries" in err and "manifest.json" in err, err
    assert "503" in err
    assert 1 < len(proxy.injected) < 100  # retried, and the retries were bounded
    assert storage.read_text(f"{out}/LATEST").strip() == "good"
    assert not storage.exists(f"{out}/bad/manifest.json")
    after = {n: storage.read_text(f"gs://{gcs_emulator.bucket}/{n}")
             for n in gcs_emulator.names(out) if n.endswith((".json", "LATEST"))
             and "/bad/" not in n}
    assert after == before

    # Cloud Storage unreachable from the start: the first request fails the same way.
    with gcs_emulator.fault_proxy(lambda method, path: 503) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        code = cli.main(args(config, str(DEMO_CSV), out, "never"))
        err = capsys.readouterr().err
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.url)
    assert code == 1 and err.count("\n") == 1 and "still failing after 2 s" in err, err
    assert storage.read_text(f"{out}/LATEST").strip() == "good"
    assert gcs_emulator.names(f"{out}/never") == []

    # The outage over, the next build commits and removes the failed build's leftovers.
    assert cli.main(args(config, source, out, "next")) == 0
    assert storage.read_text(f"{out}/LATEST").strip() == "next"
    assert gcs_emulator.names(f"{out}/bad") == []
