"""sinks/conditional.py: one contract, three places -- local disk, the GCS emulator, a fake.

The same backend-contract tests run against local disk, the Cloud Storage backend over the
real emulator (``gcp-storage-emulator``), and the Cloud Storage backend over ``FakeGcs``, a
fake client that enforces generation preconditions exactly as the service does (HTTP 412
when ``ifGenerationMatch`` does not hold; 404 for a pinned generation that is gone). The
emulator ignores preconditions (NOTES.md), so every test that needs a refused write is
skipped there, with that reason; ``test_the_emulator_ignores_preconditions`` checks the
reason still holds. Races: processes on local disk, threads on the fake.
"""

from __future__ import annotations

import collections
import itertools
import multiprocessing
import os
import random
import threading
import time
import uuid

import pytest
from google.api_core.exceptions import NotFound, PreconditionFailed, ServiceUnavailable

from beam_tfrecords.runtime import gcs
from beam_tfrecords.sinks import conditional

EMULATOR_IGNORES = ("gcp-storage-emulator ignores ifGenerationMatch preconditions "
                    "(NOTES.md); the fake backend shows this")


# --- a Cloud Storage that enforces preconditions ----------------------------------------------


class FakeGcs:
    """The part of ``google.cloud.storage.Client`` that conditional.py uses, with Cloud
    Storage's precondition semantics: generations are new numbers on every write;
    ``ifGenerationMatch=0`` requires absence; any other value requires the live object to
    be at that generation (absent: 412); a pinned-generation download of a replaced object
    is 404; a delete of an absent object is 404. Requests are atomic (one lock) and take
    the ``retry`` policy as the library does: ``retry(request)()``.

    ``fail(op, when)`` makes the next request of ``op`` ("upload", "download", "metadata",
    "delete") answer 503, either ``"before"`` it takes effect or ``"after"`` (the answer
    is lost: the request succeeded but the client sees an error and retries).
    """

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], tuple[int, bytes]] = {}
        self.lock = threading.Lock()
        self._generations = itertools.count(1_700_000_000_000_000 + random.randrange(10**6))
        self.faults: dict[str, list[str]] = collections.defaultdict(list)
        self.requests: collections.Counter = collections.Counter()

    def bucket(self, name: str) -> FakeBucket:
        return FakeBucket(self, name)

    def fail(self, op: str, when: str) -> None:
        self.faults[op].append(when)

    def request(self, op: str, retry, apply):
        def attempt():
            with self.lock:
                self.requests[op] += 1
                fault = self.faults[op].pop(0) if self.faults[op] else None
            if fault == "before":
                raise ServiceUnavailable(f"injected before {op}")
            time.sleep(random.uniform(0, 0.0005))  # let racing threads interleave
            with self.lock:
                result = apply()
            if fault == "after":
                raise ServiceUnavailable(f"injected after {op} took effect")
            return result

        return retry(attempt)() if retry is not None else attempt()


class FakeBucket:
    def __init__(self, service: FakeGcs, name: str) -> None:
        self.service = service
        self.name = name

    def blob(self, name: str, generation: int | None = None) -> FakeBlob:
        return FakeBlob(self, name, generation)

    def get_blob(self, name: str, retry=None, **_) -> FakeBlob | None:
        def apply():
            live = self.service.objects.get((self.name, name))
            return None if live is None else FakeBlob(self, name, live[0])

        return self.service.request("metadata", retry, apply)


class FakeBlob:
    def __init__(self, bucket: FakeBucket, name: str, generation: int | None) -> None:
        self.bucket = bucket
        self.name = name
        self.generation = generation

    @property
    def _key(self) -> tuple[str, str]:
        return self.bucket.name, self.name

    def upload_from_string(self, data, content_type=None, if_generation_match=None,
                           retry=None, **_) -> None:
        objects = self.bucket.service.objects

        def apply():
            live = objects.get(self._key)
            if if_generation_match is not None:
                if if_generation_match == 0 and live is not None:
                    raise PreconditionFailed(f"{self.name} exists")
                if if_generation_match != 0 and (live is None
                                                 or live[0] != if_generation_match):
                    raise PreconditionFailed(f"{self.name} is not at {if_generation_match}")
            generation = next(self.bucket.service._generations)
            objects[self._key] = (generation, bytes(data))
            return generation

        self.generation = self.bucket.service.request("upload", retry, apply)

    def download_as_bytes(self, retry=None, **_) -> bytes:
        def apply():
            live = self.bucket.service.objects.get(self._key)
            if live is None or (self.generation is not None and live[0] != self.generation):
                raise NotFound(f"{self.name} (generation {self.generation})")
            return live[1]

        return self.bucket.service.request("download", retry, apply)

    def delete(self, if_generation_match=None, retry=None, **_) -> None:
        objects = self.bucket.service.objects

        def apply():
            live = objects.get(self._key)
            if live is None:
                raise NotFound(self.name)
            if if_generation_match is not None and live[0] != if_generation_match:
                raise PreconditionFailed(f"{self.name} is not at {if_generation_match}")
            del objects[self._key]

        self.bucket.service.request("delete", retry, apply)


@pytest.fixture
def fake_gcs(monkeypatch) -> FakeGcs:
    """``gcs.client()`` answers with a FakeGcs; retries are fast."""
    fake = FakeGcs()
    monkeypatch.setattr(gcs, "client", lambda: fake)
    monkeypatch.setenv(gcs.RETRY_INITIAL_ENV, "0.01")
    monkeypatch.setenv(gcs.RETRY_MAXIMUM_ENV, "0.05")
    monkeypatch.setenv(gcs.RETRY_TIMEOUT_ENV, "5")
    return fake


class Place:
    """Where a test writes: ``root`` (fresh), and whether preconditions are enforced."""

    def __init__(self, kind: str, root: str) -> None:
        self.kind = kind
        self.root = root
        self.enforces = kind != "emulator"

    def path(self, name: str = "obj") -> str:
        return f"{self.root}/{name}"

    def needs_preconditions(self) -> None:
        if not self.enforces:
            pytest.skip(EMULATOR_IGNORES)


@pytest.fixture(params=["local", "emulator", "fake"])
def place(request, tmp_path) -> Place:
    if request.param == "local":
        return Place("local", str(tmp_path / "out"))
    if request.param == "emulator":
        emulator = request.getfixturevalue("gcs_emulator")
        return Place("emulator", emulator.unique_prefix("conditional"))
    request.getfixturevalue("fake_gcs")
    return Place("fake", f"gs://fake-bucket/conditional-{uuid.uuid4().hex[:12]}")


# --- the contract -----------------------------------------------------------------------------


def test_read_of_an_absent_object_is_none(place):
    assert conditional.read(place.path()) is None


def test_create_then_read_gives_the_same_generation(place):
    generation = conditional.create(place.path("a/b/obj"), b"one")
    assert isinstance(generation, str) and generation
    assert conditional.read(place.path("a/b/obj")) == (b"one", generation)


def test_create_refuses_an_existing_object(place):
    place.needs_preconditions()
    first = conditional.create(place.path(), b"first")
    assert conditional.create(place.path(), b"second") is None
    assert conditional.read(place.path()) == (b"first", first)


def test_replace_at_the_current_generation(place):
    first = conditional.create(place.path(), b"first")
    second = conditional.replace(place.path(), b"second", first)
    assert second is not None and second != first
    assert conditional.read(place.path()) == (b"second", second)


def test_every_write_makes_a_new_generation_even_with_the_same_bytes(place):
    generations = [conditional.create(place.path(), b"same")]
    for _ in range(12):
        generations.append(conditional.replace(place.path(), b"same", generations[-1]))
    assert None not in generations
    assert len(set(generations)) == len(generations)
    assert conditional.read(place.path()) == (b"same", generations[-1])


def test_replace_at_a_stale_generation_is_refused(place):
    place.needs_preconditions()
    first = conditional.create(place.path(), b"first")
    second = conditional.replace(place.path(), b"second", first)
    assert conditional.replace(place.path(), b"third", first) is None
    assert conditional.read(place.path()) == (b"second", second)


def test_replace_of_an_absent_object_is_refused(place):
    place.needs_preconditions()
    generation = conditional.create(place.path(), b"x")
    assert conditional.delete(place.path(), generation)
    assert conditional.replace(place.path(), b"back", generation) is None
    assert conditional.replace(place.path("never/there"), b"x", generation) is None
    assert conditional.read(place.path()) is None


def test_delete_at_a_stale_generation_is_refused(place):
    place.needs_preconditions()
    first = conditional.create(place.path(), b"first")
    second = conditional.replace(place.path(), b"second", first)
    assert conditional.delete(place.path(), first) is False
    assert conditional.read(place.path()) == (b"second", second)


def test_delete_at_the_current_generation_and_again(place):
    generation = conditional.create(place.path(), b"x")
    assert conditional.delete(place.path(), generation) is True
    assert conditional.read(place.path()) is None
    assert conditional.delete(place.path(), generation) is True  # already gone
    assert conditional.create(place.path(), b"again") is not None


def test_a_generation_from_elsewhere_matches_nothing(place):
    place.needs_preconditions()
    conditional.create(place.path(), b"x")
    for bogus in ("0", "-1", "not-a-generation", ""):
        assert conditional.replace(place.path(), b"y", bogus) is None
        assert conditional.delete(place.path(), bogus) is False
    assert conditional.read(place.path())[0] == b"x"


def test_the_emulator_ignores_preconditions(gcs_emulator):
    """Why the precondition tests skip the emulator; fails once it enforces them."""
    path = gcs_emulator.unique_prefix("conditional") + "/obj"
    first = conditional.create(path, b"first")
    assert conditional.create(path, b"second") is not None  # the service would answer 412
    assert conditional.read(path)[0] == b"second"
    assert conditional.replace(path, b"third", first) is not None


def test_other_filesystems_are_refused_by_name():
    with pytest.raises(NotImplementedError, match=r"s3://.*local disk and gs:// only"):
        conditional.read("s3://bucket/out/.lease")
    with pytest.raises(NotImplementedError, match="hdfs://"):
        conditional.check_supported("hdfs://nn/out/.lease")
    conditional.check_supported("/tmp/out/.lease")
    conditional.check_supported("gs://bucket/out/.lease")


# --- local disk specifics ---------------------------------------------------------------------


def test_local_writes_leave_no_temporary_files(tmp_path):
    path = str(tmp_path / "dir" / "obj")
    generation = conditional.create(path, b"a")
    assert conditional.create(path, b"b") is None
    assert conditional.replace(path, b"c", "stale") is None
    generation = conditional.replace(path, b"d", generation)
    assert conditional.delete(path, "stale") is False
    assert os.listdir(tmp_path / "dir") == ["obj"]
    assert conditional.delete(path, generation)
    assert os.listdir(tmp_path / "dir") == []


def _race(path: str, data: bytes, generation: str | None, barrier, results) -> None:
    barrier.wait()
    if generation is None:
        results.put((data, conditional.create(path, data)))
    else:
        results.put((data, conditional.replace(path, data, generation)))


def _race_processes(path: str, generation: str | None, n: int) -> list:
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(n), context.Queue()
    workers = [context.Process(target=_race, args=(path, b"writer-%d" % i, generation,
                                                   barrier, results)) for i in range(n)]
    for worker in workers:
        worker.start()
    outcome = [results.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    return outcome


@pytest.mark.parametrize("round_", range(3))
def test_local_processes_racing_create_and_replace_one_wins(tmp_path, round_):
    path = str(tmp_path / "race" / "obj")
    outcome = _race_processes(path, None, 8)
    winners = [(data, generation) for data, generation in outcome if generation is not None]
    assert len(winners) == 1, outcome
    assert conditional.read(path) == winners[0]

    outcome = _race_processes(path, winners[0][1], 8)
    winners = [(data, generation) for data, generation in outcome if generation is not None]
    assert len(winners) == 1, outcome
    assert conditional.read(path) == winners[0]
    assert os.listdir(tmp_path / "race") == ["obj"]


# --- Cloud Storage specifics (the fake) -------------------------------------------------------


def _race_threads(path: str, generation: str | None, n: int) -> list:
    barrier, results = threading.Barrier(n), []

    def run(i: int) -> None:
        barrier.wait()
        data = b"writer-%d" % i
        results.append((data, conditional.create(path, data) if generation is None
                        else conditional.replace(path, data, generation)))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


@pytest.mark.parametrize("round_", range(3))
def test_gcs_threads_racing_create_and_replace_one_wins(fake_gcs, round_):
    path = f"gs://fake-bucket/race-{uuid.uuid4().hex[:8]}/obj"
    outcome = _race_threads(path, None, 8)
    winners = [(d, g) for d, g in outcome if g is not None]
    assert len(winners) == 1, outcome
    assert conditional.read(path) == winners[0]

    outcome = _race_threads(path, winners[0][1], 8)
    winners = [(d, g) for d, g in outcome if g is not None]
    assert len(winners) == 1, outcome
    assert conditional.read(path) == winners[0]


def test_gcs_transient_errors_are_retried(fake_gcs):
    path = "gs://fake-bucket/retry/obj"
    for op in ("upload", "metadata", "download", "delete"):
        fake_gcs.fail(op, "before")
    generation = conditional.create(path, b"x")
    assert conditional.read(path) == (b"x", generation)
    assert conditional.delete(path, generation)
    assert fake_gcs.requests["upload"] == 2 and fake_gcs.requests["delete"] == 2


def test_gcs_a_lost_answer_to_a_successful_write_is_still_ours(fake_gcs):
    """The retry of a request that took effect fails its precondition; the object holds our
    bytes, so the write is reported as ours with the generation it made."""
    path = "gs://fake-bucket/lost-answer/obj"
    fake_gcs.fail("upload", "after")
    first = conditional.create(path, b"mine")
    assert first is not None and conditional.read(path) == (b"mine", first)

    fake_gcs.fail("upload", "after")
    second = conditional.replace(path, b"mine again", first)
    assert second is not None and conditional.read(path) == (b"mine again", second)

    fake_gcs.fail("delete", "after")
    assert conditional.delete(path, second) is True
    assert conditional.read(path) is None


def test_gcs_someone_elses_write_is_not_mistaken_for_ours(fake_gcs):
    path = "gs://fake-bucket/theirs/obj"
    first = conditional.create(path, b"theirs")
    assert conditional.create(path, b"mine") is None
    second = conditional.replace(path, b"theirs again", first)
    assert conditional.replace(path, b"mine", first) is None
    assert conditional.read(path) == (b"theirs again", second)


def test_gcs_read_of_an_object_replaced_mid_read_returns_one_version(fake_gcs, monkeypatch):
    """Metadata names generation 1, the object is replaced before the download: the pinned
    download is 404, and the read starts over and returns the new version whole."""
    path = "gs://fake-bucket/mid-read/obj"
    first = conditional.create(path, b"old")
    original = FakeBucket.get_blob
    replaced = []

    def get_blob_then_replace(self, name, retry=None, **kwargs):
        found = original(self, name, retry=retry, **kwargs)
        if not replaced:
            replaced.append(conditional.replace(path, b"new", first))
        return found

    monkeypatch.setattr(FakeBucket, "get_blob", get_blob_then_replace)
    assert conditional.read(path) == (b"new", replaced[0])
    assert fake_gcs.requests["download"] == 2
