"""kill -9 during writing and during finalize: the previous version and LATEST stay intact, no
new manifest appears, and the next build succeeds and removes the leftovers -- on local disk
and on gs:// (the GCS emulator; the killed subprocess inherits STORAGE_EMULATOR_HOST).

The build runs in a process of its own whose storage layer (the filesystem boundary) is
wrapped so that the N-th call of one operation signals the test and then hangs; the test kills
the process with SIGKILL at exactly that moment, with no race against the pipeline's speed.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from beam_tfrecords.pipelines import cli
from beam_tfrecords.runtime import storage

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo.yaml"

# The fault point: one storage operation, wrapped so that its nth call on a matching path
# writes a marker and hangs (the environment of hang_env below says which).
_HANG = """
import os, time

_OP = os.environ.get("BTF_TEST_HANG_OP")


def _patch(storage):
    match, nth = os.environ["BTF_TEST_HANG_MATCH"], int(os.environ["BTF_TEST_HANG_NTH"])
    marker, after = os.environ["BTF_TEST_HANG_MARKER"], os.environ.get("BTF_TEST_HANG_AFTER")
    original, calls = getattr(storage, _OP), []

    def hanging(*args, **kwargs):
        if (not after or os.path.exists(after)) and match in str(args[-1]):
            calls.append(args)
            if len(calls) == nth:
                if _OP == "rename_many":  # a batch: hang part way, past the first match
                    pairs = list(args[0])
                    first = next(i for i, pair in enumerate(pairs) if match in str(pair))
                    original(pairs[:first + 1])
                with open(marker, "w") as handle:
                    handle.write(repr(args))
                time.sleep(600)
        return original(*args, **kwargs)

    setattr(storage, _OP, hanging)
"""

# The command users start is the one signalled: the installed console script, whose entry()
# claims the signals before its first import (a test calling cli.main() in-process never
# exercises that). So there the fault point is put in place by a sitecustomize module on
# PYTHONPATH that wraps the storage operation once the command imports it (an import hook:
# importing storage itself would import numpy before entry() runs), and the test signals the
# build while that operation hangs -- reading an input, renaming a shard into place during
# finalize. BTF_TEST_IMPORT_NUMPY starts OpenBLAS's thread before entry() instead, as a site
# hook or an embedding program might.
_SITECUSTOMIZE = """
import importlib.abc, importlib.util, os, sys

if os.environ.get("BTF_TEST_IMPORT_NUMPY"):
    import numpy  # noqa: F401 -- its OpenBLAS thread now exists, signals unblocked
""" + _HANG + """

class _PatchStorage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "beam_tfrecords.runtime.storage":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


if _OP:
    sys.meta_path.insert(0, _PatchStorage())
"""

CONSOLE_SCRIPT = pathlib.Path(sys.executable).with_name("beam-tfrecords")


def site_env(tmp_path: pathlib.Path) -> dict[str, str]:
    """The environment of a command that loads the sitecustomize module above."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(site), os.environ.get("PYTHONPATH")])))


def hang_env(tmp_path: pathlib.Path, operation: str, match: str, nth: int,
             after: pathlib.Path | None = None) -> dict[str, str]:
    """The environment of a command whose ``nth`` call of storage.``operation`` on a path
    containing ``match`` (counted once ``after`` exists) writes ``tmp_path/hung`` and hangs."""
    return dict(site_env(tmp_path), BTF_TEST_HANG_OP=operation, BTF_TEST_HANG_MATCH=match,
                BTF_TEST_HANG_NTH=str(nth), BTF_TEST_HANG_MARKER=str(tmp_path / "hung"),
                BTF_TEST_HANG_AFTER=str(after or ""))


# SIGKILL cannot be caught: what a kill -9 leaves depends on the build's progress, not on how
# the program started. So the killed build is the console script's entry() forked from the
# `preforked` server (Beam imported once), its storage operation wrapped before entry() runs.
_KILLED_BUILD = _HANG + """
from beam_tfrecords.runtime import storage
_patch(storage)
from beam_tfrecords.pipelines.cli import entry
entry()
"""


def kill_during(preforked, operation: str, nth: int, subtree: str, out: pathlib.Path | str,
                config: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """Start ``beam-tfrecords build`` (version "killed") in a session of its own, and kill its
    process group with SIGKILL once the ``nth`` call of storage.``operation`` on a path
    containing ``subtree`` hangs."""
    marker = tmp_path / "hung"
    proc = preforked.start(_KILLED_BUILD, ["build", "--config", str(config), "--output",
                                           str(out), "--version", "killed"],
                           cwd=ROOT, env=hang_env(tmp_path, operation, subtree, nth))
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


def small_band_config(folder: pathlib.Path) -> pathlib.Path:
    """The demo's first 3,000 rows with a small band: enough parts and shards to kill or
    signal in the middle of (writing, finalize), few enough to keep each build short -- and
    the single-threaded GCS emulator."""
    rows = (ROOT / "configs" / "data" / "demo.csv").read_text().splitlines(keepends=True)
    data = folder / "demo-3000.csv"
    data.write_text("".join(rows[:3001]))
    config = folder / "demo.yaml"
    config.write_text(DEMO.read_text().replace(
        "shard_size: {target: 150MB, min: 100MB, max: 200MB}",
        "shard_size: {target: 20KB, min: 12KB, max: 40KB}").replace(
        "path: configs/data/demo.csv", f"path: {data}"))
    return config


@pytest.fixture
def small_shards_config(tmp_path) -> pathlib.Path:
    return small_band_config(tmp_path)


@pytest.fixture(scope="module")
def _good_once(tmp_path_factory) -> tuple[pathlib.Path, dict]:
    """An output holding version "good" of the small-band demo, built once for the module,
    and its manifest."""
    folder = tmp_path_factory.mktemp("good")
    out = folder / "out"
    return out, cli.run_build(["--config", str(small_band_config(folder)), "--output",
                               str(out), "--version", "good"])


@pytest.mark.parametrize("operation,nth,subtree,shuffled", [
    ("open_counted_write", 5, ".staging", False),  # while writing staged parts
    ("rename_many", 1, "/train/", False),  # during finalize: some final shards already visible
    ("open_write", 3, ".staging", True),  # a shuffled build, while writing its sorted runs
    ("rename", 2, "/train/", True),  # a shuffled build's finalize
])
def test_kill_leaves_previous_version_and_latest_intact(preforked, tmp_path,
                                                        small_shards_config, _good_once,
                                                        operation, nth, subtree, shuffled):
    if shuffled:
        small_shards_config.write_text(small_shards_config.read_text().replace(
            "  compression: none\n", "  compression: none\n  shuffle: {seed: 7}\n"))
        assert "shuffle: {seed: 7}" in small_shards_config.read_text()
    out = tmp_path / "out"  # a copy of the output the small-band demo's build "good" left
    shutil.copytree(_good_once[0], out)
    first = _good_once[1]
    before = {p: p.read_bytes() for p in (out / "good").rglob("*") if p.is_file()}

    kill_during(preforked, operation, nth, subtree, out, small_shards_config, tmp_path)

    assert (out / "LATEST").read_text().strip() == "good"
    assert {p: p.read_bytes() for p in (out / "good").rglob("*") if p.is_file()} == before
    assert (out / "killed").exists()  # leftovers of the killed build ...
    assert not (out / "killed" / "manifest.json").exists()  # ... that are not a data set
    if operation.startswith("rename"):
        assert list((out / "killed" / "train").glob("*-of-*"))  # finalize had started

    after = cli.run_build(["--config", str(small_shards_config), "--output", str(out),
                           "--version", "next"])
    assert (out / "LATEST").read_text().strip() == "next"
    assert not (out / "killed").exists()  # the next build removed the leftovers
    assert after["counts"] == first["counts"]
    assert json.loads((out / "good" / "manifest.json").read_text()) == first


def snapshot(emulator, prefix: str) -> dict[str, bytes]:
    """Every object below a gs:// prefix with its content."""
    found = {}
    for name in emulator.names(prefix):
        with storage.open_read(f"gs://{emulator.bucket}/{name}") as handle:
            found[name] = handle.read()
    return found


@pytest.fixture(scope="module")
def _good_on_gcs(gcs_emulator, tmp_path_factory) -> tuple[dict[str, bytes], dict]:
    """An output on the emulator holding version "good" of the small-band demo, built once for
    the module: its objects (name below the output -> content) and its manifest."""
    out = gcs_emulator.unique_prefix("kill-good")
    first = cli.run_build(["--config", str(small_band_config(tmp_path_factory.mktemp("good"))),
                           "--output", out, "--version", "good"])
    prefix = gcs_emulator.name_of(out) + "/"
    return {name[len(prefix):]: data
            for name, data in snapshot(gcs_emulator, out).items()}, first


@pytest.mark.parametrize("operation,nth,subtree", [
    ("open_counted_write", 5, ".staging"),  # while writing staged parts
    ("rename_many", 1, "/train/"),    # during finalize: some final shards already visible
])
def test_kill_on_gcs_leaves_previous_version_and_latest_intact(preforked, gcs_emulator,
                                                               tmp_path, small_shards_config,
                                                               _good_on_gcs, operation, nth,
                                                               subtree):
    out = gcs_emulator.unique_prefix("kill")  # a copy of the output the build "good" left
    for name, data in _good_on_gcs[0].items():
        gcs_emulator.upload(f"{out}/{name}", data)
    first = _good_on_gcs[1]
    before = snapshot(gcs_emulator, f"{out}/good")
    assert before and first is not None

    kill_during(preforked, operation, nth, subtree, out, small_shards_config, tmp_path)

    assert storage.read_text(f"{out}/LATEST").strip() == "good"
    assert snapshot(gcs_emulator, f"{out}/good") == before
    killed = gcs_emulator.names(f"{out}/killed")
    assert killed  # leftovers of the killed build ...
    assert not [n for n in killed if n.endswith("/manifest.json")]  # ... not a data set
    if operation.startswith("rename"):
        assert [n for n in killed if "/train/" in n and "-of-" in n]  # finalize had started

    after = cli.run_build(["--config", str(small_shards_config), "--output", out,
                           "--version", "next"])
    assert storage.read_text(f"{out}/LATEST").strip() == "next"
    assert gcs_emulator.names(f"{out}/killed") == []  # the next build removed the leftovers
    assert after["counts"] == first["counts"]
    assert json.loads(storage.read_text(f"{out}/good/manifest.json")) == first


# --- SIGINT and SIGTERM: one line, exit 130 or 143, workers stopped, the next build cleans up ---

# The command as a terminal or a scheduler starts it: SIGINT and SIGTERM at their default
# actions even when pytest itself runs as a background job, whose SIGINT bash ignores and its
# children inherit (NOTES.md) -- a test started that way would pass for the wrong reason.
# HANG names points where the build waits, after writing a marker, for the test's signals.
_CLI = """
import os, signal, sys, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
markers, hangs = sys.argv[1], sys.argv[2].split(",")

def hang(name, until=None):
    with open(f"{markers}/{name}", "w"):
        pass
    for _ in range(6000):
        time.sleep(0.1)
        if until and os.path.exists(f"{markers}/{until}"):
            raise RuntimeError(f"{until} hung; the build goes on to fail")

if "finalize" in hangs:  # a shuffled build's first shard written, before its rename
    from beam_tfrecords.runtime import storage
    rename = storage.rename
    storage.rename = lambda source, destination: (
        hang("finalize") if ".tmp-" in source and "/train/" in destination
        else rename(source, destination))
if "summary" in hangs:  # after the build returned: committed, lease released
    from beam_tfrecords.pipelines import summary
    summary.format_summary = lambda *args: hang("summary", until="release")
if "release" in hangs:  # the interrupted command's cleanup never finishes
    from beam_tfrecords.sinks.lease import Lease
    release = Lease.release
    Lease.release = lambda self, *args, **kwargs: (
        hang("release") if threading.current_thread().name == "signals-cleanup"
        else release(self, *args, **kwargs))
from beam_tfrecords.pipelines.cli import main
sys.exit(main(sys.argv[3:]))
"""

RUNNER_FLAGS = {
    "in_process": [],
    "multi_processing_2": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    "portable": ["--runner=PortableRunner", "--job_endpoint=embed",
                 "--environment_type=LOOPBACK"],
}
INTERRUPTED = re.compile(r"beam-tfrecords: interrupted \((SIGINT|SIGTERM)\): (.*)")


def start_build(preforked, tmp_path, config, out, *flags, hangs=""):
    """``main()`` in a process of its own, forked from a server that imported Beam once
    (the ``preforked`` fixture): what these tests show is how the build stops, not how the
    program starts -- the tests further down send the same signals to the installed console
    script, ``python -m`` and the Flex Template entry, each started afresh."""
    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    return preforked.start(_CLI, [str(markers), hangs, "build", "--config", str(config),
                                  "--output", str(out), "--progress-interval", "0", *flags],
                           cwd=ROOT)


def wait_for(condition, proc, what, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the build ended before {what}: {proc.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"never saw {what}")
        time.sleep(0.05)


def processes_under(pid: int) -> dict[int, str]:
    """Every process descended from ``pid`` (read from /proc) and its command line."""
    parents = {}
    for entry in pathlib.Path("/proc").iterdir():
        try:
            parents[int(entry.name)] = int((entry / "stat").read_bytes().rsplit(b")", 1)[1]
                                           .split()[1])
        except (ValueError, OSError, IndexError):
            continue
    found, pending = {}, [pid]
    while pending:
        parent = pending.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in found:
                try:
                    found[child] = (pathlib.Path(f"/proc/{child}/cmdline").read_bytes()
                                    .replace(b"\0", b" ").decode(errors="replace"))
                except OSError:
                    found[child] = ""
                pending.append(child)
    return found


def running(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def written(out: pathlib.Path) -> dict[str, int]:
    """Every file under ``out`` and its size, as the build leaves them; a file that goes
    between the listing and its stat (the lease's temporaries, renewed by the running build)
    is left out."""
    sizes = {}
    for folder, _, names in os.walk(out):  # a folder that goes while walked is skipped
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                sizes[os.path.join(folder, name)] = os.stat(os.path.join(folder, name)).st_size
    return sizes


def interrupted_line(stderr: str) -> tuple[str, str]:
    """The one line the command printed; a multi_processing build's workers log two Beam
    warnings each at start-up, in every build, which are not ours to silence here."""
    lines = [line for line in stderr.splitlines()
             if not line.startswith("WARNING:apache_beam.runners.portability")]
    assert len(lines) == 1, stderr[-3000:]
    found = INTERRUPTED.fullmatch(lines[0])
    assert found, lines
    return found.group(1), found.group(2)


def assert_stopped_and_left(proc, signum, stderr: str, children: dict[int, str],
                            out: pathlib.Path) -> str:
    """The build a signal stopped before its commit: exit 130/143, one line naming the
    version it left, the processes it had started stopped, nothing written after it exited,
    its lease released, nothing committed. Returns the version."""
    assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum], stderr
    name, what = interrupted_line(stderr)
    assert name == signal.Signals(signum).name
    killed = re.fullmatch(r"nothing committed; version (\S+) left for the next build to clean"
                          r"(?:; stopped \d+ process(?:es)? it had started)?", what)
    assert killed, what
    assert not [pid for pid in children if running(pid)], children  # workers stopped
    left = written(out)
    time.sleep(1)
    assert written(out) == left  # nobody keeps writing, no writing thread outlived it
    assert not (out / ".lease").exists()  # released: the next build need not wait
    assert not (out / killed.group(1) / "manifest.json").exists()
    assert not (out / "LATEST").exists()
    return killed.group(1)


def assert_next_build_cleans_up(config: pathlib.Path, out: pathlib.Path, left: str) -> None:
    """The next build (no --wait-for-lease) commits and removes the version ``left``."""
    after = cli.run_build(["--config", str(config), "--output", str(out),
                           "--input", str(ROOT / "configs" / "data" / "demo.csv"),
                           "--version", "next"])
    assert after["counts"]["read"] == 10_000
    assert (out / "LATEST").read_text().strip() == "next"
    assert not (out / left).exists()  # the next build removed the leftovers


@pytest.fixture(scope="module")
def long_input(tmp_path_factory) -> pathlib.Path:
    """2,000,000 demo-like rows in 20 hard-linked CSV files: long enough that every local runner
    is still reading seconds after its first shard bytes; made in well under a second."""
    folder = tmp_path_factory.mktemp("long_input")
    rows = (ROOT / "configs" / "data" / "demo.csv").read_text().splitlines(keepends=True)
    (folder / "part-00.csv").write_text(rows[0] + "".join(rows[1:]) * 10)
    for index in range(1, 20):
        os.link(folder / "part-00.csv", folder / f"part-{index:02d}.csv")
    return folder


@pytest.fixture
def long_config(tmp_path, long_input) -> pathlib.Path:
    config = tmp_path / "long.yaml"
    config.write_text(DEMO.read_text().replace("path: configs/data/demo.csv",
                                               f"path: {long_input}/*.csv"))
    return config


@pytest.mark.parametrize("runner,signum,to_group", [
    ("in_process", signal.SIGINT, False),
    ("in_process", signal.SIGTERM, False),
    ("multi_processing_2", signal.SIGINT, True),    # a terminal's Ctrl-C: the whole group
    ("multi_processing_2", signal.SIGTERM, False),  # kill PID: the command alone
    ("portable", signal.SIGTERM, False),
])
def test_a_signal_stops_the_build_in_one_line_and_the_next_build_cleans_up(
        preforked, tmp_path, long_config, runner, signum, to_group):
    out = tmp_path / "out"
    proc = start_build(preforked, tmp_path, long_config, out, *RUNNER_FLAGS[runner])
    wait_for(lambda: any(size > 0 for path, size in written(out).items()
                         if "/.staging/" in path), proc, "the first staged shard bytes")
    if runner.startswith("multi_processing"):
        wait_for(lambda: sum("sdk_worker_main" in command
                             for command in processes_under(proc.pid).values()) >= 2,
                 proc, "two worker processes")
    children = processes_under(proc.pid)

    (os.killpg if to_group else os.kill)(proc.pid, signum)
    started = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    took = time.monotonic() - started

    assert took < 15, took
    version = assert_stopped_and_left(proc, signum, stderr, children, out)
    assert_next_build_cleans_up(long_config, out, version)


def _staged_runs(out: pathlib.Path) -> bool:
    """Whether a shuffled build has staged bytes of its sorted runs."""
    return any(size > 0 and path.endswith(".run")
               for path, size in written(out).items() if "/.staging/" in path)


def _shuffled(config: pathlib.Path, folder: pathlib.Path) -> pathlib.Path:
    shuffled = folder / "shuffled.yaml"
    shuffled.write_text(config.read_text().replace(
        "  compression: none\n", "  compression: none\n  shuffle: {seed: 7}\n"))
    assert "shuffle: {seed: 7}" in shuffled.read_text()
    return shuffled


@pytest.mark.parametrize("phase,signum", [("runs", signal.SIGINT), ("finalize", signal.SIGINT),
                                          ("finalize", signal.SIGTERM)])
def test_a_signal_stops_a_shuffled_build_in_its_runs_or_its_finalize(preforked, tmp_path,
                                                                     long_config, phase,
                                                                     signum):
    """In its runs: while the long input is still being read and spilled. In its finalize:
    once every run is written, the first shard's bytes written under its temporary name in
    the split's folder (outside staging), its rename held until the signal."""
    out = tmp_path / "out"
    if phase == "runs":
        shuffled = _shuffled(long_config, tmp_path)
        proc = start_build(preforked, tmp_path, shuffled, out)
        wait_for(lambda: _staged_runs(out), proc, "the staged bytes of its runs")
    else:  # the small-band demo: every run written soon, then many shards to finalize
        shuffled = _shuffled(small_band_config(tmp_path), tmp_path)
        proc = start_build(preforked, tmp_path, shuffled, out, hangs="finalize")
        wait_for((tmp_path / "markers" / "finalize").exists, proc, "its finalize")
        assert [path for path, size in written(out).items()
                if "/train/" in path and ".tmp-" in path and size > 0]  # a shard being written
    children = processes_under(proc.pid)  # the keyed splits' hashing child
    os.kill(proc.pid, signum)
    _, stderr = proc.communicate(timeout=60)

    version = assert_stopped_and_left(proc, signum, stderr, children, out)
    assert_next_build_cleans_up(shuffled, out, version)


def test_a_signal_after_the_commit_says_the_version_was_committed(preforked, tmp_path):
    out = tmp_path / "out"
    proc = start_build(preforked, tmp_path, DEMO, out, "--version", "done", hangs="summary")
    wait_for((tmp_path / "markers" / "summary").exists, proc, "the summary")
    os.kill(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert interrupted_line(stderr) == ("SIGTERM", "version done was committed (LATEST names it)")
    assert (out / "LATEST").read_text().strip() == "done"


def test_a_second_signal_while_stopping_exits_at_once(preforked, tmp_path):
    out = tmp_path / "out"
    proc = start_build(preforked, tmp_path, DEMO, out, hangs="summary,release")
    wait_for((tmp_path / "markers" / "summary").exists, proc, "the summary")
    os.kill(proc.pid, signal.SIGINT)
    wait_for((tmp_path / "markers" / "release").exists, proc, "the cleanup")  # now stuck
    time.sleep(0.5)  # meanwhile the command itself fails and waits for the cleanup to exit
    os.kill(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 130
    assert interrupted_line(stderr) == (
        "SIGINT", "a second signal while stopping: exited at once; the next build cleans up")


# --- the same through the installed console script and `python -m`, as users start it ---

# Where each moment's fault point is: (operation, a substring of its path, the nth such call).
MOMENTS = {"reading": ("open_read", "long_input", 1),
           "finalize": ("rename_many", "/train/", 1)}


def start_command(tmp_path, config, out, moment=None, how="script", numpy_first=False):
    """``beam-tfrecords build`` (or ``python -m beam_tfrecords.pipelines.cli build``) in a
    session of its own, SIGINT and SIGTERM at their default actions; with ``moment``, it hangs
    at that moment's fault point once it holds the output's lease."""
    env = site_env(tmp_path)
    if moment is not None:
        env = hang_env(tmp_path, *MOMENTS[moment], after=out / ".lease")
    if numpy_first:
        env["BTF_TEST_IMPORT_NUMPY"] = "1"
    command = {"script": [str(CONSOLE_SCRIPT), "build"],
               "module": [sys.executable, "-m", "beam_tfrecords.pipelines.cli", "build"],
               "flex": [sys.executable, str(ROOT / "pipelines" / "flex" / "main.py")]}[how]
    return subprocess.Popen(
        [*command, f"--config={config}", f"--output={out}",
         "--progress_interval=0" if how == "flex" else "--progress-interval=0"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
        preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT,
                                                                       signal.SIGTERM)])


# rt_sigtimedwait's number: the watcher waiting in it has the signals unblocked meanwhile.
_SIGTIMEDWAIT = {"x86_64": 128, "aarch64": 137}.get(os.uname().machine)


def threads_taking(pid: int, signum: int) -> int:
    """How many threads of ``pid`` do not block ``signum``, apart from the watcher waiting for
    it in ``sigtimedwait`` (which unblocks what it waits for while it waits)."""
    bit, found = 1 << (signum - 1), 0
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            blocked = [line.split()[1] for line in (task / "status").read_text().splitlines()
                       if line.startswith("SigBlk:")]
            if int(blocked[0], 16) & bit:
                continue
            if int((task / "syscall").read_text().split()[0]) != _SIGTIMEDWAIT:
                found += 1
    return found


def signal_and_check(proc, tmp_path, config, out, signum, to_group):
    """Signal the running build; it must end within seconds, exit 130/143 with one line,
    leave nothing committed and its lease released; the next build then commits and cleans."""
    assert proc.poll() is None  # really running when signalled ...
    assert not list(out.glob("*/manifest.json")) and not (out / "LATEST").exists()
    children = processes_under(proc.pid)
    (os.killpg if to_group else os.kill)(proc.pid, signum)
    started = time.monotonic()
    try:
        _, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("the signal did not stop the build") from None
    assert time.monotonic() - started < 10
    version = assert_stopped_and_left(proc, signum, stderr, children, out)
    assert_next_build_cleans_up(config, out, version)


@pytest.mark.parametrize("moment,signum,to_group", [
    ("reading", signal.SIGTERM, False),   # a scheduler's timeout: kill PID
    ("encoding", signal.SIGINT, True),    # a terminal's Ctrl-C: the whole process group
    ("finalize", signal.SIGINT, True),
    ("finalize", signal.SIGTERM, False),
])
def test_a_signal_stops_the_console_script_at_every_moment(tmp_path, long_config, moment,
                                                           signum, to_group):
    out = tmp_path / "out"
    config = long_config
    if moment == "finalize":  # the small-band demo: many shards to rename, soon
        config = small_band_config(tmp_path)
    proc = start_command(tmp_path, config, out, None if moment == "encoding" else moment)
    if moment == "encoding":  # records read, encoded and written: staged shard bytes
        wait_for(lambda: any(size > 0 for path, size in written(out).items()
                             if "/.staging/" in path), proc, "the first staged shard bytes")
    else:
        wait_for((tmp_path / "hung").exists, proc, f"the {moment} fault point")
    assert threads_taking(proc.pid, signum) == 0  # claimed before any import
    signal_and_check(proc, tmp_path, config, out, signum, to_group)


def test_a_signal_stops_python_dash_m_and_a_build_whose_threads_started_first(tmp_path,
                                                                             long_config):
    """``python -m beam_tfrecords.pipelines.cli``, with numpy (and OpenBLAS's thread, which
    does not block the signals) imported before the command runs: the thread that takes
    SIGTERM must hand it to the watcher, not swallow it."""
    out = tmp_path / "out"
    proc = start_command(tmp_path, long_config, out, "reading", how="module", numpy_first=True)
    wait_for((tmp_path / "hung").exists, proc, "the reading fault point")
    assert threads_taking(proc.pid, signal.SIGTERM) >= 1  # the hard case
    signal_and_check(proc, tmp_path, long_config, out, signal.SIGTERM, to_group=False)


def test_a_signal_stops_the_flex_template_entry(tmp_path, long_config):
    """The script a Flex Template launcher runs, with template parameters."""
    out = tmp_path / "out"
    proc = start_command(tmp_path, long_config, out, "reading", how="flex")
    wait_for((tmp_path / "hung").exists, proc, "the reading fault point")
    assert threads_taking(proc.pid, signal.SIGTERM) == 0  # claimed before any import
    signal_and_check(proc, tmp_path, long_config, out, signal.SIGTERM, to_group=False)
