"""sinks/lease.py: one build at a time per output, on local disk, the GCS emulator and a fake.

Each behaviour runs on local disk, on gs:// over the real emulator, and on gs:// over the
precondition-enforcing fake from tests/sinks/test_conditional.py. Races need preconditions the
emulator ignores (NOTES.md): they run on local disk (processes) and the fake (threads) and are
skipped on the emulator with that reason. Expiry uses an injected clock, so nothing waits for
a TTL; the kill -9 test kills a real process holding a lease with the default TTL.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import multiprocessing
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from beam_tfrecords.runtime import gcs
from beam_tfrecords.sinks import conditional
from beam_tfrecords.sinks.lease import (
    DEFAULT_TTL,
    TTL_ENV,
    Lease,
    LeaseHeld,
    LeaseInfo,
    LeaseLost,
    _machine,
    _pid_start,
    current,
    default_ttl,
    is_live,
    lease_path,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
HOST = socket.gethostname()


def _conditional_tests():
    """tests/sinks/test_conditional.py (for FakeGcs), loaded by path: tests/ is not a package."""
    name = "beam_tfrecords_tests_conditional"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, pathlib.Path(__file__).with_name("test_conditional.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class Clock:
    """An injected clock; ``sleep`` advances it and runs ``on_sleep`` hooks."""

    def __init__(self, now: float = 1_900_000_000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []
        self.on_sleep = lambda: None

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        self.on_sleep()


@pytest.fixture
def fake_gcs(monkeypatch):
    fake = _conditional_tests().FakeGcs()
    monkeypatch.setattr(gcs, "client", lambda: fake)
    monkeypatch.setenv(gcs.RETRY_INITIAL_ENV, "0.01")
    monkeypatch.setenv(gcs.RETRY_MAXIMUM_ENV, "0.05")
    monkeypatch.setenv(gcs.RETRY_TIMEOUT_ENV, "5")
    return fake


@pytest.fixture(autouse=True)
def _default_ttl(monkeypatch):
    monkeypatch.delenv(TTL_ENV, raising=False)


class Place:
    def __init__(self, kind: str, root: str) -> None:
        self.kind, self.root = kind, root

    def needs_preconditions(self) -> None:
        if self.kind == "emulator":
            pytest.skip(_conditional_tests().EMULATOR_IGNORES)


def _place(kind: str, request, tmp_path) -> Place:
    if kind == "local":
        return Place(kind, str(tmp_path / "out"))
    if kind == "emulator":
        return Place(kind, request.getfixturevalue("gcs_emulator").unique_prefix("lease"))
    request.getfixturevalue("fake_gcs")
    return Place(kind, f"gs://fake-bucket/lease-{uuid.uuid4().hex[:12]}")


@pytest.fixture(params=["local", "emulator", "fake"])
def place(request, tmp_path) -> Place:
    return _place(request.param, request, tmp_path)


@pytest.fixture(params=["local", "emulator"])
def process_place(request, tmp_path) -> Place:
    """Places another process can reach (the fake lives in this process only)."""
    return _place(request.param, request, tmp_path)


def _utc(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S UTC")


# --- basics -----------------------------------------------------------------------------------


def test_acquire_and_release(place):
    lease = Lease(place.root, "build-aaaa-0001")
    before = time.time()
    assert lease.acquire() is None
    info = current(place.root)
    assert info == lease.info
    assert (info.build_id, info.host, info.pid) == ("build-aaaa-0001", HOST, os.getpid())
    assert info.pid_start == _pid_start(os.getpid()) != ""
    assert before <= info.acquired <= time.time()
    assert info.expires == pytest.approx(info.acquired + DEFAULT_TTL)
    assert is_live(info)
    lease.release()
    assert current(place.root) is None and lease.info is None
    assert Lease(place.root, "build-bbbb-0002").acquire() is None


def test_a_second_build_refuses_with_one_line_naming_the_holder_and_expiry(place):
    clock = Clock()
    first = Lease(place.root, "aaaaaaaa-1111", ttl=90, clock=clock)
    first.acquire()
    clock.now += 5
    with pytest.raises(LeaseHeld) as caught:
        Lease(place.root, "bbbbbbbb-2222", clock=clock, sleep=clock.sleep).acquire()
    assert str(caught.value) == (
        f"output {place.root} is leased by build aaaaaaaa ({HOST}:{os.getpid()}) until "
        f"{_utc(1_900_000_090.0)}; --wait-for-lease waits for it")
    assert caught.value.holder == first.info
    assert clock.sleeps == []
    assert current(place.root) == first.info


def test_waiting_succeeds_when_the_holder_releases_within_the_wait(place):
    clock = Clock()
    first = Lease(place.root, "first-build", clock=clock)
    first.acquire()
    second = Lease(place.root, "second-build", clock=clock, sleep=clock.sleep)
    clock.on_sleep = lambda: len(clock.sleeps) == 3 and first.release()
    assert second.acquire(wait=60, poll=2) is None
    assert clock.sleeps == [2, 2, 2]
    assert current(place.root).build_id == "second-build"


def test_waiting_gives_up_after_the_wait(place):
    clock = Clock()
    Lease(place.root, "first-build", clock=clock).acquire()
    with pytest.raises(LeaseHeld, match=r"still leased after waiting 5 s, by build first-bu"):
        Lease(place.root, "second-build", clock=clock, sleep=clock.sleep).acquire(wait=5,
                                                                                  poll=2)
    assert clock.sleeps == [2, 2, 1]


def test_waiting_in_real_time_for_a_release_from_another_thread(tmp_path):
    root = str(tmp_path / "out")
    first = Lease(root, "first-build")
    first.acquire()
    timer = threading.Timer(0.3, first.release)
    timer.start()
    started = time.monotonic()
    assert Lease(root, "second-build").acquire(wait=10, poll=0.05) is None
    assert 0.25 < time.monotonic() - started < 5
    timer.join()


def test_an_expired_lease_is_taken_over_and_its_holder_returned(place):
    clock = Clock()
    first = Lease(place.root, "first-build", ttl=10, clock=clock)
    first.acquire()
    clock.now += 10
    with pytest.raises(LeaseHeld):  # expires at t+10: not yet expired at t+10
        Lease(place.root, "second-build", clock=clock).acquire()
    assert is_live(first.info, clock.now)
    clock.now += 0.5
    assert not is_live(first.info, clock.now)
    second = Lease(place.root, "second-build", clock=clock)
    assert second.acquire() == first.info
    assert current(place.root) == second.info


def test_renew_after_a_takeover_raises_lease_lost(place):
    place.needs_preconditions()  # the emulator lets the stale renewal overwrite the taker
    clock = Clock()
    first = Lease(place.root, "first-build", ttl=10, clock=clock)
    first.acquire()
    clock.now += 3
    assert first.renew().expires == clock.now + 10
    clock.now += 11
    second = Lease(place.root, "second-build", clock=clock)
    second.acquire()
    with pytest.raises(LeaseLost, match=r"now held by build second-b"):
        first.renew()
    first.release()  # never deletes someone else's
    assert current(place.root) == second.info


def test_check_extends_the_lease_it_proves_ours(place):
    clock = Clock()
    first = Lease(place.root, "first-build", ttl=10, clock=clock)
    first.acquire()
    clock.now += 8
    assert first.check().expires == clock.now + 10  # proven by a write that extends it
    assert current(place.root) == first.info
    worker = Lease(place.root, "first-build", ttl=10, clock=clock)  # never acquired
    assert worker.check().build_id == "first-build"


def test_check_after_a_takeover_or_a_removal_raises_lease_lost(place):
    place.needs_preconditions()
    clock = Clock()
    first = Lease(place.root, "first-build", ttl=10, clock=clock)
    first.acquire()
    clock.now += 11
    Lease(place.root, "second-build", clock=clock).acquire()
    with pytest.raises(LeaseLost) as caught:
        first.check()
    assert caught.value.holder.build_id == "second-build"
    assert "\n" not in str(caught.value)

    third = Lease(place.root, "third-build", clock=clock)
    clock.now += 1000
    third.acquire()
    found = conditional.read(lease_path(place.root))
    assert conditional.delete(lease_path(place.root), found[1])  # removed by hand
    with pytest.raises(LeaseLost, match="released or deleted by someone else"):
        third.check()


def test_release_leaves_someone_elses_lease(place):
    first = Lease(place.root, "first-build")
    first.acquire()
    Lease(place.root, "second-build").release()
    assert current(place.root) == first.info


def test_reentrant_acquire_in_one_process(place):
    clock = Clock()
    first = Lease(place.root, "same-build", ttl=10, clock=clock)
    first.acquire()
    clock.now += 4
    again = Lease(place.root, "same-build", ttl=10, clock=clock)
    assert again.acquire() is None
    assert again.info.expires == clock.now + 10
    assert again.info.acquired == first.info.acquired
    assert first.renew().expires == clock.now + 10  # the first object follows the change


def test_an_unreadable_lease_counts_as_expired(place):
    conditional.create(lease_path(place.root), b"{not json")
    assert current(place.root).describe() == "an unreadable lease"
    previous = Lease(place.root, "new-build").acquire()
    assert previous.build_id == "" and current(place.root).build_id == "new-build"


# --- processes --------------------------------------------------------------------------------

CHILD = """
import json, os, sys, time
from beam_tfrecords.sinks.lease import Lease, current
lease = Lease(sys.argv[1], sys.argv[2])
previous = lease.acquire()
print(json.dumps({"previous": previous and previous.build_id, "pid": os.getpid(),
                  "stored_pid": current(sys.argv[1]).pid}), flush=True)
if sys.argv[3] == "hold":
    time.sleep(300)
lease.release()
"""


def _child(root: str, build_id: str, mode: str) -> tuple[subprocess.Popen, dict]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, root, build_id, mode], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = child.stdout.readline()
    if not line:
        child.kill()
        raise AssertionError(f"child failed: {child.communicate(timeout=30)[1][-3000:]}")
    return child, json.loads(line)


@pytest.mark.slow
def test_a_killed_holder_on_this_host_frees_the_lease_at_once(process_place):
    child, said = _child(process_place.root, "killed-build", "hold")
    try:
        with pytest.raises(LeaseHeld, match=rf"killed-b \({HOST}:{child.pid}\)"):
            Lease(process_place.root, "survivor").acquire()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.communicate(timeout=30)
    assert said["pid"] == child.pid
    held = current(process_place.root)
    assert held.expires > time.time() + DEFAULT_TTL - 60  # far from expiring
    started = time.monotonic()
    previous = Lease(process_place.root, "survivor").acquire()  # the default TTL
    assert time.monotonic() - started < 5
    assert previous == held and previous.pid == child.pid
    assert current(process_place.root).build_id == "survivor"


def test_a_killed_but_unreaped_holder_counts_as_gone(tmp_path):
    root = str(tmp_path / "out")
    child, _ = _child(root, "zombie-build", "hold")
    try:
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{child.pid}/stat") as handle:
                if handle.read().rpartition(")")[2].split()[0] == "Z":
                    break
            time.sleep(0.01)
        assert Lease(root, "survivor").acquire().pid == child.pid
    finally:
        child.communicate(timeout=30)


def test_a_recycled_pid_or_another_host_is_judged_rightly(tmp_path):
    root = str(tmp_path / "out")
    now = time.time()
    mine = LeaseInfo(build_id="old-build", host=HOST, pid=os.getpid(), pid_start="1",
                     acquired=now, expires=now + 1000, machine=_machine())
    assert not is_live(mine)  # our pid, but another process's start time
    for holder in (LeaseInfo(**{**mine.__dict__, "host": "elsewhere"}),
                   LeaseInfo(**{**mine.__dict__, "machine": "another-boot/pid:[1]"})):
        assert is_live(holder)  # no pid check off this host: only expiry frees it
        generation = conditional.create(lease_path(root), holder.to_json().encode())
        with pytest.raises(LeaseHeld):
            Lease(root, "new-build").acquire()
        assert conditional.delete(lease_path(root), generation)
    conditional.create(lease_path(root), mine.to_json().encode())
    assert Lease(root, "new-build").acquire() == mine


@pytest.mark.slow
def test_reentrant_acquire_from_another_process(process_place):
    lease = Lease(process_place.root, "shared-build")
    lease.acquire()
    child, said = _child(process_place.root, "shared-build", "release")
    child.communicate(timeout=60)
    assert child.returncode == 0
    assert said["previous"] is None and said["pid"] == child.pid
    assert said["stored_pid"] == os.getpid()  # still in the name of the process that took it
    stored = current(process_place.root)
    assert stored is not None and stored.pid == os.getpid()  # the child's release left it
    assert lease.renew().build_id == "shared-build"
    lease.release()
    assert current(process_place.root) is None


def _racer(root: str, build_id: str, barrier, results) -> None:
    barrier.wait()
    try:
        previous = Lease(root, build_id).acquire()
        results.put((build_id, "won", previous and previous.build_id))
    except LeaseHeld as error:
        results.put((build_id, "held", error.holder.build_id))
    barrier.wait()  # the winner lives until all have tried: a dead holder frees the lease


def _expired(root: str) -> None:
    old = LeaseInfo(build_id="expired-build", host="elsewhere", pid=1, pid_start="",
                    acquired=time.time() - 100, expires=time.time() - 1)
    conditional.create(lease_path(root), old.to_json().encode())


@pytest.mark.parametrize("start", ["absent", "expired"])
def test_processes_racing_for_the_lease_one_wins(tmp_path, start):
    root = str(tmp_path / "out")
    if start == "expired":
        _expired(root)
    context = multiprocessing.get_context("fork")
    n = 6
    barrier, results = context.Barrier(n), context.Queue()
    workers = [context.Process(target=_racer, args=(root, f"racer-{i}", barrier, results))
               for i in range(n)]
    for worker in workers:
        worker.start()
    outcome = [results.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    _check_race(root, outcome, start)


@pytest.mark.parametrize("start", ["absent", "expired"])
def test_threads_racing_for_the_lease_one_wins(place, start):
    place.needs_preconditions()
    root = place.root
    if start == "expired":
        _expired(root)
    n = 6
    barrier, outcome = threading.Barrier(n), []

    class Results:
        put = outcome.append

    threads = [threading.Thread(target=_racer, args=(root, f"racer-{i}", barrier, Results))
               for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    _check_race(root, outcome, start)


def _check_race(root: str, outcome: list, start: str) -> None:
    winners = [build for build, result, _ in outcome if result == "won"]
    assert len(winners) == 1, outcome
    assert current(root).build_id == winners[0]
    expected_previous = "expired-build" if start == "expired" else None
    assert [p for _, r, p in outcome if r == "won"] == [expected_previous]
    assert {p for _, r, p in outcome if r == "held"} == {winners[0]}


# --- keep_alive, settings, messages -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["local", "fake"])
def test_keep_alive_renews_and_records_a_loss(kind, request, tmp_path):
    root = _place(kind, request, tmp_path).root
    lease = Lease(root, "kept-build", ttl=0.4)
    lease.acquire()
    first_expiry = lease.info.expires
    with lease.keep_alive():
        time.sleep(0.35)
        assert current(root).expires > first_expiry
        assert lease.lost is None
        future = Clock(time.time() + 100)
        Lease(root, "taker-build", clock=future).acquire()
        deadline = time.monotonic() + 5
        while lease.lost is None and time.monotonic() < deadline:
            time.sleep(0.02)
    assert isinstance(lease.lost, LeaseLost)
    assert "now held by build taker-bu" in str(lease.lost)
    with pytest.raises(LeaseLost):
        lease.check()


def test_the_ttl_comes_from_the_environment(monkeypatch, tmp_path):
    assert default_ttl() == DEFAULT_TTL == 120
    monkeypatch.setenv(TTL_ENV, "7.5")
    assert Lease(str(tmp_path), "b").ttl == 7.5
    assert Lease(str(tmp_path), "b", ttl=3).ttl == 3
    for bad in ("soon", "0", "-1", "inf"):
        monkeypatch.setenv(TTL_ENV, bad)
        with pytest.raises(ValueError, match=TTL_ENV):
            Lease(str(tmp_path), "b")


def test_only_local_disk_and_gcs_support_leases():
    with pytest.raises(NotImplementedError, match=r"s3://.*local disk and gs:// only"):
        Lease("s3://bucket/out", "build")
    assert lease_path("gs://bucket/out/") == "gs://bucket/out/.lease"
    assert lease_path("/data/out") == "/data/out/.lease"


def test_lease_info_round_trips_and_describes_itself():
    info = LeaseInfo(build_id="0123456789abcdef", host="laptop", pid=4242, pid_start="9876",
                     acquired=1_795_000_000.5, expires=1_795_000_120.5, machine="m")
    assert LeaseInfo.from_json(info.to_json()) == info
    assert LeaseInfo.from_json(info.to_json().encode()) == info
    assert info.describe() == f"build 01234567 (laptop:4242) until {_utc(1_795_000_120.5)}"
    legacy = json.loads(info.to_json())
    del legacy["machine"], legacy["pid_start"]
    assert LeaseInfo.from_json(json.dumps(legacy)).pid_start == ""
    for bad in ("[]", "{}", '{"build_id": 1}', "nope",
                info.to_json().replace('"pid": 4242', '"pid": "4242"')):
        with pytest.raises(ValueError, match="not a lease"):
            LeaseInfo.from_json(bad)
    odd = LeaseInfo(build_id="a\nb", host="h\nx", pid=1, pid_start="", acquired=0, expires=0)
    assert "\n" not in odd.describe()
