"""kill -9 during writing and during finalize: the previous version and LATEST stay intact, no
new manifest appears, and the next build succeeds and removes the leftovers -- on local disk
and on gs:// (the GCS emulator; the killed subprocess inherits STORAGE_EMULATOR_HOST).

The build runs in a subprocess whose storage layer (the filesystem boundary) is wrapped so that
the N-th call of one operation signals the test and then hangs; the test kills the process
with SIGKILL at exactly that moment, with no race against the pipeline's speed.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from beam_tfrecords.pipelines import build
from beam_tfrecords.sinks import storage

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEMO = ROOT / "configs" / "demo.yaml"

_HANG = """
import os, sys, time
from beam_tfrecords.sinks import storage

operation, nth, marker, subtree = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
original = getattr(storage, operation)
calls = []

def hanging(*args, **kwargs):
    if subtree in str(args[-1]):
        calls.append(args)
        if len(calls) == nth:
            with open(marker, "w") as handle:
                handle.write(repr(args))
            time.sleep(600)
    return original(*args, **kwargs)

setattr(storage, operation, hanging)
from beam_tfrecords.pipelines.cli import main
sys.exit(main(sys.argv[5:]))
"""


def kill_during(operation: str, nth: int, subtree: str, out: pathlib.Path | str,
                config: pathlib.Path, tmp_path: pathlib.Path) -> None:
    marker = tmp_path / f"hung-{operation}"
    args = [sys.executable, "-c", _HANG, operation, str(nth), str(marker), subtree,
            "build", "--config", str(config), "--output", str(out), "--version", "killed"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"build ended before the fault: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("the fault point was never reached")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL


@pytest.fixture
def small_shards_config(tmp_path) -> pathlib.Path:
    """The demo with a small band, so the build has many parts and shards to finalize."""
    config = tmp_path / "demo.yaml"
    config.write_text(DEMO.read_text().replace(
        "shard_size: {target: 150MB, min: 100MB, max: 200MB}",
        "shard_size: {target: 20KB, min: 12KB, max: 40KB}"))
    return config


@pytest.mark.parametrize("operation,nth,subtree", [
    ("open_write", 5, ".staging"),    # while writing staged parts
    ("rename", 4, "/train/"),         # during finalize: some final shards already visible
])
def test_kill_leaves_previous_version_and_latest_intact(tmp_path, small_shards_config,
                                                        operation, nth, subtree):
    out = tmp_path / "out"
    first = build.run(["--config", str(small_shards_config), "--output", str(out),
                       "--version", "good"])
    before = {p: p.read_bytes() for p in (out / "good").rglob("*") if p.is_file()}

    kill_during(operation, nth, subtree, out, small_shards_config, tmp_path)

    assert (out / "LATEST").read_text().strip() == "good"
    assert {p: p.read_bytes() for p in (out / "good").rglob("*") if p.is_file()} == before
    assert (out / "killed").exists()  # leftovers of the killed build ...
    assert not (out / "killed" / "manifest.json").exists()  # ... that are not a data set
    if operation == "rename":
        assert list((out / "killed" / "train").glob("*-of-*"))  # finalize had started

    after = build.run(["--config", str(small_shards_config), "--output", str(out),
                       "--version", "next"])
    assert (out / "LATEST").read_text().strip() == "next"
    assert not (out / "killed").exists()  # the next build removed the leftovers
    assert after["counts"] == first["counts"]
    assert json.loads((out / "good" / "manifest.json").read_text()) == first


@pytest.fixture
def small_gcs_config(tmp_path, small_shards_config) -> pathlib.Path:
    """The small-band demo over its first 3,000 rows: enough parts and shards to kill in the
    middle of, few enough that the single-threaded emulator keeps the test short."""
    rows = (ROOT / "configs" / "data" / "demo.csv").read_text().splitlines(keepends=True)
    data = tmp_path / "demo-3000.csv"
    data.write_text("".join(rows[:3001]))
    config = tmp_path / "demo-gcs.yaml"
    config.write_text(small_shards_config.read_text().replace(
        "path: configs/data/demo.csv", f"path: {data}"))
    return config


def snapshot(emulator, prefix: str) -> dict[str, bytes]:
    """Every object below a gs:// prefix with its content."""
    found = {}
    for name in emulator.names(prefix):
        with storage.open_read(f"gs://{emulator.bucket}/{name}") as handle:
            found[name] = handle.read()
    return found


@pytest.mark.parametrize("operation,nth,subtree", [
    ("open_write", 5, ".staging"),    # while writing staged parts
    ("rename", 4, "/train/"),         # during finalize: some final shards already visible
])
def test_kill_on_gcs_leaves_previous_version_and_latest_intact(gcs_emulator, tmp_path,
                                                               small_gcs_config, operation,
                                                               nth, subtree):
    out = gcs_emulator.unique_prefix("kill")
    first = build.run(["--config", str(small_gcs_config), "--output", out,
                       "--version", "good"])
    before = snapshot(gcs_emulator, f"{out}/good")
    assert before and first is not None

    kill_during(operation, nth, subtree, out, small_gcs_config, tmp_path)

    assert storage.read_text(f"{out}/LATEST").strip() == "good"
    assert snapshot(gcs_emulator, f"{out}/good") == before
    killed = gcs_emulator.names(f"{out}/killed")
    assert killed  # leftovers of the killed build ...
    assert not [n for n in killed if n.endswith("/manifest.json")]  # ... not a data set
    if operation == "rename":
        assert [n for n in killed if "/train/" in n and "-of-" in n]  # finalize had started

    after = build.run(["--config", str(small_gcs_config), "--output", out,
                       "--version", "next"])
    assert storage.read_text(f"{out}/LATEST").strip() == "next"
    assert gcs_emulator.names(f"{out}/killed") == []  # the next build removed the leftovers
    assert after["counts"] == first["counts"]
    assert json.loads(storage.read_text(f"{out}/good/manifest.json")) == first
