"""A stalled lease holder can neither corrupt nor wedge the output (sinks/lease.py ``fence``,
sinks/commit.py, sinks/ownership.py).

A build that stalls past its lease's expiry -- a suspended laptop, a stopped process -- loses
the lease to the next build. These tests stall a holder exactly where it matters: right before
a fenced step (``lease.before_fence``, the seam for it), after its last check. It must then do
nothing, say in one line whom it lost the lease to, and what it wrote before must be removable
by the next build even when the build that took over had already removed its marker. And a
lease object no build wrote (corrupt, hand-edited, a non-finite or absurd expiry) is taken
over with one line, never reported as "leased until nan".

Local disk gives the real lock (the check and the step cannot interleave with a takeover);
Cloud Storage has none, so there the tests show that the check is a write conditional on the
generation held (the fake enforces preconditions; the emulator ignores them, NOTES.md) and that
a takeover during the step is reported after it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

from beam_tfrecords.pipelines import cli
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks import commit, conditional
from beam_tfrecords.sinks import lease as lease_mod
from beam_tfrecords.sinks.format.layout import Layout
from beam_tfrecords.sinks.lease import (
    Former,
    Lease,
    LeaseLost,
    current,
    former_holders,
    lease_path,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo.yaml"
A, B, C = "a" * 32, "b" * 32, "c" * 32


def _load(name: str):
    """A test module of this folder, loaded by path (tests/ is not a package)."""
    key = f"beam_tfrecords_tests_{name}"
    if key not in sys.modules:
        path = pathlib.Path(__file__).with_name(f"{name}.py")
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


_lease_tests = _load("test_lease")
Clock = _lease_tests.Clock
fake_gcs = _lease_tests.fake_gcs  # fixtures, shared
_default_ttl = _lease_tests._default_ttl


@pytest.fixture(params=["local", "fake"])
def place(request, tmp_path):
    """Places whose storage enforces what the fence relies on: local disk, the fake."""
    return _lease_tests._place(request.param, request, tmp_path)


@pytest.fixture(params=["local", "emulator"])
def shared_place(request, tmp_path):
    """Places the commit module can write whole folders to: local disk, the emulator."""
    return _lease_tests._place(request.param, request, tmp_path)


@pytest.fixture
def stall(monkeypatch):
    """Install a ``before_fence`` hook for one build: ``stall(build_id, action)``."""
    calls: list[str] = []

    def install(build_id: str, action) -> list[str]:
        def hook(lease: Lease, step: str) -> None:
            calls.append(step)
            if lease.build_id == build_id and len(calls) == 1:
                action()

        monkeypatch.setattr(lease_mod, "before_fence", hook)
        return calls

    return install


# --- the fence, at the lease --------------------------------------------------------------------


def test_a_holder_stalled_before_a_fenced_step_does_nothing_after_a_takeover(place, stall):
    clock = Clock()
    first = Lease(place.root, A, ttl=10, clock=clock)
    first.acquire()
    first.record_version("va")
    taken = []

    def taken_over_meanwhile() -> None:  # the stall outlasts the TTL; B takes over
        clock.now += 11
        taken.append(Lease(place.root, B, ttl=10, clock=clock).acquire())

    stall(A, taken_over_meanwhile)
    ran = []
    with pytest.raises(LeaseLost) as caught:
        with first.fence("the commit"):
            ran.append("the step")
    assert ran == []
    message = str(caught.value)
    assert message.startswith(f"lost the lease to build bbbbbbbb on output {place.root}")
    assert "\n" not in message
    assert [t.build_id for t in taken] == [A]
    assert current(place.root).build_id == B
    assert former_holders(place.root) == (Former(A, "va", B),)


def test_the_stalled_holder_learns_whom_it_lost_to_after_that_build_ended(place):
    clock = Clock()
    first = Lease(place.root, A, ttl=10, clock=clock)
    first.acquire()
    clock.now += 11
    second = Lease(place.root, B, ttl=10, clock=clock)
    second.acquire()
    second.release()
    assert current(place.root) is None  # released, but the history stays in the object
    assert former_holders(place.root) == (Former(A, "", B),)
    with pytest.raises(LeaseLost, match=r"^lost the lease to build bbbbbbbb on output .*: "
                                        r"that build has ended since$"):
        first.check()
    third = Lease(place.root, C, ttl=10, clock=clock)
    assert third.acquire() is None  # a released lease is free; its history goes on
    assert current(place.root).history == (Former(A, "", B),)


def test_a_fence_may_take_an_absent_lease_but_never_a_released_or_foreign_one(place):
    """A job that outlived the process that took its lease finds none, and takes it; a
    released lease or another build's means the lease was lost."""
    worker = Lease(place.root, A, ttl=10)
    with pytest.raises(LeaseLost, match="released or deleted"):
        worker.check()
    with worker.fence("the commit", take_if_absent=True) as info:
        assert info.build_id == A and current(place.root).build_id == A
    worker.release()
    clock = Clock()
    Lease(place.root, A, ttl=10, clock=clock).acquire()
    clock.now += 11
    taker = Lease(place.root, B, ttl=10, clock=clock)
    taker.acquire()
    taker.release()  # released, with A in its history
    with pytest.raises(LeaseLost, match="lost the lease to build bbbbbbbb"):
        with Lease(place.root, A, ttl=10, clock=clock).fence("x", take_if_absent=True):
            pass
    Lease(place.root, C, ttl=10, clock=clock).acquire()
    with pytest.raises(LeaseLost, match="lost the lease to build bbbbbbbb .*now held by "
                                        "build cccccccc"):
        Lease(place.root, A, ttl=10, clock=clock).check(take_if_absent=True)


@pytest.mark.slow
def test_no_takeover_falls_between_the_fence_check_and_its_step(tmp_path):
    """Local disk: the check and the step hold the lock every lease write takes."""
    root = str(tmp_path / "out")
    first = Lease(root, A, ttl=5)
    first.acquire()
    order: list[str] = []
    future = Clock(time.time() + 1000)  # to B, A's lease has long expired

    def take_over() -> None:
        Lease(root, B, ttl=5, clock=future).acquire()
        order.append("B took over")

    with first.fence("the commit"):
        taker = threading.Thread(target=take_over)
        taker.start()
        taker.join(timeout=1.0)
        assert taker.is_alive()  # waiting for the lock: the lease is still ours
        assert current(root).build_id == A
        order.append("A's step")
    taker.join(timeout=30)
    assert order == ["A's step", "B took over"]
    assert current(root).build_id == B
    with pytest.raises(LeaseLost, match="lost the lease to build bbbbbbbb"):
        with first.fence("retention"):
            order.append("never")
    assert order[-1] != "never"


def test_fences_nest_and_other_threads_of_the_build_wait(tmp_path):
    """The lock is re-entrant in the fencing thread (LATEST's swap inside the commit takes
    it again) while the build's own renewal thread waits for it."""
    root = str(tmp_path / "out")
    held = Lease(root, A, ttl=60)
    held.acquire()
    renewer = Lease(root, A, ttl=60)
    renewed = threading.Event()
    with held.fence("the commit"):
        assert conditional.create(storage.join(root, "LATEST"), b"v1\n") is not None
        found = conditional.read(storage.join(root, "LATEST"))
        assert conditional.replace(storage.join(root, "LATEST"), b"v2\n", found[1])
        thread = threading.Thread(target=lambda: (renewer.renew(), renewed.set()))
        thread.start()
        assert not renewed.wait(0.5)
    thread.join(timeout=30)
    assert renewed.is_set()


def test_on_gcs_the_fence_check_is_conditional_on_the_generation_held(fake_gcs, monkeypatch):
    """The check is a write of the lease with ifGenerationMatch = the generation we hold."""
    root = "gs://fake-bucket/fenced"
    first = Lease(root, A, ttl=60)
    first.acquire()
    uploads = []
    blob_type = type(fake_gcs.bucket("b").blob("x"))
    upload = blob_type.upload_from_string

    def spy(self, data, *args, **kwargs):
        uploads.append((self.name, kwargs.get("if_generation_match")))
        return upload(self, data, *args, **kwargs)

    monkeypatch.setattr(blob_type, "upload_from_string", spy)
    held = int(first._generation)
    with first.fence("the commit"):
        assert uploads == [("fenced/.lease", held)]


@pytest.mark.parametrize("kind", ["fake", "emulator"])
def test_on_gcs_a_takeover_during_the_step_is_reported_after_it(kind, request, tmp_path):
    root = _lease_tests._place(kind, request, tmp_path).root
    first = Lease(root, A, ttl=60)
    first.acquire()
    with pytest.raises(LeaseLost, match="lost the lease to build bbbbbbbb") as caught:
        with first.fence("the commit"):
            Lease(root, B, ttl=60, clock=Clock(time.time() + 1000)).acquire()
    assert caught.value.after_step == "the commit"
    assert current(root).build_id == B


# --- leases no build wrote ----------------------------------------------------------------------

_GOOD = {"build_id": "d" * 32, "host": "elsewhere", "pid": 7, "pid_start": "", "machine": "",
         "acquired": 1_700_000_000.0, "expires": 1_700_000_120.0}


def _lease_text(**changes) -> str:
    return json.dumps({**_GOOD, **changes})


CORRUPT = {
    "nan": _lease_text().replace("1700000120.0", "NaN"),
    "inf": _lease_text().replace("1700000120.0", "Infinity"),
    "minus inf": _lease_text().replace("1700000120.0", "-Infinity"),
    "1e400": _lease_text().replace("1700000120.0", "1e400"),
    "a 400-digit integer": _lease_text().replace("1700000120.0", "9" * 400),
    "year 9999": _lease_text(expires=253402300799.0),
    "non-numeric": _lease_text(expires="soon"),
    "a boolean": _lease_text(expires=True),
    "acquired nan": _lease_text().replace("1700000000.0", "NaN"),
    "truncated JSON": _lease_text()[:57],
    "not JSON": "lease held by bob",
    "empty": "",
    "binary": "\x00\xff\x00",
    "a list": "[1, 2]",
    "a bad history": _lease_text(history=[{"build_id": 5}]),
    "a bad version": _lease_text(version=["x"]),
}


@pytest.mark.parametrize("content", list(CORRUPT.values()), ids=list(CORRUPT))
def test_a_lease_no_build_wrote_counts_as_expired_in_one_line(content, place, caplog):
    root = place.root
    path = lease_path(root)
    assert conditional.create(path, content.encode("latin-1")) is not None
    with caplog.at_level(logging.WARNING, logger=lease_mod.__name__):
        previous = Lease(root, "new-build").acquire()  # never LeaseHeld, never a wait
    assert previous is not None and previous.build_id == ""
    assert previous.describe() == "an unreadable lease"
    assert current(root).build_id == "new-build"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "\n" not in lines[0] and path in lines[0] and "treating it as expired" in lines[0]
    for shown in ("until nan", "until inf", "until -inf", "nan (epoch"):
        assert shown not in lines[0]


def test_a_lease_with_a_past_or_negative_expiry_is_simply_expired(tmp_path, caplog):
    root = str(tmp_path / "out")
    conditional.create(lease_path(root), _lease_text(expires=-5.0).encode())
    with caplog.at_level(logging.WARNING, logger=lease_mod.__name__):
        previous = Lease(root, "new-build").acquire()
    assert previous.build_id == "d" * 32
    assert [r.getMessage().count("\n") for r in caplog.records] == [0]


def test_the_history_is_bounded_newest_first_and_survives_release(tmp_path):
    root = str(tmp_path / "out")
    clock = Clock()
    builds = [f"build-{i:02d}" for i in range(20)]
    for i, build in enumerate(builds):
        clock.now += 11
        taker = Lease(root, build, ttl=10, clock=clock)
        taker.acquire()
        taker.record_version(f"v{i}")
    history = former_holders(root)
    assert len(history) == lease_mod.HISTORY_SIZE
    assert history[0] == Former("build-18", "v18", "build-19")
    assert [f.build_id for f in history] == builds[-2:-2 - lease_mod.HISTORY_SIZE:-1]
    taker.release()
    assert current(root) is None and former_holders(root) == history


def test_the_ttl_cannot_be_set_beyond_what_a_reader_accepts(monkeypatch, tmp_path):
    monkeypatch.setenv(lease_mod.TTL_ENV, str(lease_mod.MAX_TTL * 2))
    with pytest.raises(ValueError, match="at most"):
        Lease(str(tmp_path), "b")


# --- the commit module ----------------------------------------------------------------------


def _put(path: str, data: bytes = b"x") -> None:
    if storage.is_local(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    storage.write_atomic(path, data)


def _files(root: str) -> set[str]:
    prefix = root.rstrip("/") + "/"
    return {p[len(prefix):] for p in storage.list_files(root)} if storage.exists(root) else set()


LATE = ("feature_spec.json", "schema.pbtxt", "train/demo-00000-of-00001.tfrecord",
        ".staging/train/part-0.tfrecord", "dead_letter/rejected-00000-of-00001.jsonl")


def _lost_to_b(root: str, version: str) -> Clock:
    """Build A claimed ``version`` and lost the lease to B, which ended; as a real takeover."""
    clock = Clock()
    first = Lease(root, A, ttl=10, clock=clock)
    first.acquire()
    commit.claim_version(Layout(root, version), A, "test", lease=first)
    clock.now += 11
    second = Lease(root, B, ttl=10, clock=clock)
    assert second.acquire().build_id == A
    commit.prepare_output(Layout(root, "vb"), B, lease=second)  # removes A's marker
    second.release()
    return clock


@pytest.mark.slow
def test_the_next_build_removes_what_a_stalled_build_wrote_after_losing_its_marker(
        shared_place):
    root = shared_place.root
    clock = _lost_to_b(root, "va")
    assert _files(root) == {".lease"}  # B removed A's folder, marker and all
    for name in LATE:  # then A woke and went on writing
        _put(f"{root}/va/{name}")
    _put(f"{root}/vx/feature_spec.json")  # the same names in a folder nobody claimed
    third = Lease(root, C, ttl=10, clock=clock)
    third.acquire()
    prepared = commit.prepare_output(Layout(root, "vc"), C, allow_non_empty=True, lease=third)
    assert prepared.removed == (("va", A),) and prepared.foreign == ("vx/",)
    assert _files(root) == {".lease", "vx/feature_spec.json"}
    with pytest.raises(commit.CommitError, match=r"found vx/\)"):  # only vx is not ours
        commit.prepare_output(Layout(root, "vc"), C, lease=third)


def test_a_file_not_at_a_build_name_keeps_the_folder_foreign(shared_place):
    root = shared_place.root
    clock = _lost_to_b(root, "va")
    _put(f"{root}/va/feature_spec.json")
    _put(f"{root}/va/notes.txt")  # not something a build writes: nothing is proven ours
    third = Lease(root, C, ttl=10, clock=clock)
    third.acquire()
    with pytest.raises(commit.CommitError, match=r"beam-tfrecords output \(found va/\)"):
        commit.prepare_output(Layout(root, "vc"), C, lease=third)
    assert _files(root) == {".lease", "va/feature_spec.json", "va/notes.txt"}


def test_a_build_that_lost_the_lease_cleans_nothing(tmp_path, stall):
    """Cleanup is fenced too: a build stalled before it must not delete the folder that the
    build which took over has just claimed."""
    root = str(tmp_path / "out")
    clock = Clock()
    first = Lease(root, A, ttl=10, clock=clock)
    first.acquire()

    def taken_over_meanwhile() -> None:
        clock.now += 11
        second = Lease(root, B, ttl=10, clock=clock)
        second.acquire()
        commit.claim_version(Layout(root, "vb"), B, "test", lease=second)
        _put(f"{root}/vb/.staging/train/part-0.tfrecord")

    stall(A, taken_over_meanwhile)
    with pytest.raises(LeaseLost, match="lost the lease to build bbbbbbbb"):
        commit.prepare_output(Layout(root, "va"), A, lease=first)
    assert _files(root) == {".lease", "vb/.beam-tfrecords-build",
                            "vb/.staging/train/part-0.tfrecord"}


# --- a build, in process and through the console script ------------------------------------


small_csv = _load("test_trust").small_csv  # a fixture, shared


def _build(data, out, version) -> list[str]:
    return ["build", "--config", str(DEMO), "--input", str(data), "--output", str(out),
            "--version", version, "--progress-interval", "0"]


@pytest.mark.slow
def test_a_build_stalled_at_its_commit_does_not_commit_after_a_takeover(small_csv, tmp_path,
                                                                        monkeypatch, capsys):
    out = tmp_path / "out"
    holder: list[str] = []

    def taken_over_meanwhile(lease: Lease, step: str) -> None:
        if step != "the commit" or holder:
            return
        holder.append(lease.build_id)
        # B's build, as far as it touches the output; to B, A's lease has long expired.
        second = Lease(str(out), B, clock=Clock(time.time() + 1000))
        assert second.acquire().build_id == lease.build_id
        commit.prepare_output(Layout(str(out), "vb"), B, lease=second)
        second.release()

    monkeypatch.setattr(lease_mod, "before_fence", taken_over_meanwhile)
    assert cli.main(_build(small_csv, out, "va")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "lost the lease to build bbbbbbbb" in err and "not committing" in err
    assert not (out / "va" / "manifest.json").exists() and not (out / "LATEST").exists()
    assert former_holders(str(out))[0].build_id == holder[0]

    monkeypatch.setattr(lease_mod, "before_fence", None)
    assert cli.main(_build(small_csv, out, "vc")) == 0
    assert commit.read_latest(str(out)) == "vc"
    assert not (out / "va").exists()


STALL_SITE = '''
import os, signal

if os.environ.get("STALL_AT_COMMIT"):
    from beam_tfrecords.sinks import commit

    _checked = commit._fence

    def _fence(spec):
        _checked(spec)  # the commit's first check passed: stop here, as a suspended laptop
        if not os.path.exists(os.environ["STALL_AT_COMMIT"]):
            open(os.environ["STALL_AT_COMMIT"], "w").close()
            os.kill(os.getpid(), signal.SIGSTOP)

    commit._fence = _fence
'''


def _console() -> str:
    return str(pathlib.Path(sys.executable).with_name("beam-tfrecords"))


@pytest.mark.slow
def test_a_stopped_build_resumed_after_a_takeover_exits_in_one_line_and_is_cleaned_up(
        small_csv, tmp_path, monkeypatch):
    """Through the console script: build A is stopped (SIGSTOP) right after its commit's
    first check, its lease expires, build B takes over, removes A's folder and commits; A is
    resumed, writes its feature spec and reader files into a folder that has no marker any
    more -- which used to make every later build refuse the output -- and must not commit:
    one line, "lost the lease to build B". Build C then removes A's late files. (B and C run
    in this process: what they do to the output is the same, and only A's line and exit
    status are the console script's to show.)"""
    out = tmp_path / "out"
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(STALL_SITE)
    stalled = tmp_path / "stalled"
    env = {**os.environ, "STALL_AT_COMMIT": str(stalled), lease_mod.TTL_ENV: "2",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(site),
                                                       os.environ.get("PYTHONPATH")]))}
    first = subprocess.Popen([_console(), *_build(small_csv, out, "va")], cwd=tmp_path,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not stalled.exists():
            assert first.poll() is None, first.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "build A never reached its commit"
            time.sleep(0.05)
        while current(str(out)).expires >= time.time() - 0.5:  # A renews no more
            time.sleep(0.1)
        assert cli.main(_build(small_csv, out, "vb")) == 0
        assert commit.read_latest(str(out)) == "vb"
        assert not (out / "va").exists()  # B removed A's leftovers, marker included
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    try:
        _, err = first.communicate(timeout=180)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    b_id = json.loads((out / "vb" / "manifest.json").read_text())["build_id"]
    assert first.returncode == 1, err
    assert err.count("\n") == 1, err
    assert f"lost the lease to build {b_id[:8]}" in err and "not committing" in err
    late = {p.relative_to(out / "va").as_posix() for p in (out / "va").rglob("*")
            if p.is_file()}
    assert "feature_spec.json" in late and ".beam-tfrecords-build" not in late
    assert "manifest.json" not in late and commit.read_latest(str(out)) == "vb"

    monkeypatch.setenv(lease_mod.TTL_ENV, "2")
    assert cli.main(_build(small_csv, out, "vc")) == 0
    assert commit.read_latest(str(out)) == "vc"
    assert not (out / "va").exists()
