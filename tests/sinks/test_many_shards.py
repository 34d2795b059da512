"""The steps after the writers and the commit, at many shards: what they ask of storage does
not grow per shard where it need not.

A tiny band makes one staged part per record, so N records are N shards. The finalize and
the commit (with retention removing the previous version) are driven by hand as the
in-process sink runs them, and every storage call they make is counted: on local disk the
folder listings (``storage`` listings, ``os.scandir``/``os.listdir``) and the lookups, on
the Cloud Storage emulator every HTTP request by kind. Counts, not timings: a listing or a
request per shard is a cost that a large build multiplies, whatever the machine.
"""

from __future__ import annotations

import functools
import math
import os
import pathlib
import uuid
from collections import Counter

import pytest

from beam_tfrecords.pipelines.verify import verify_path
from beam_tfrecords.runtime import gcs, storage
from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.sinks import shard_writers
from beam_tfrecords.sinks import tfrecord_sink as sink
from beam_tfrecords.sinks.commit import commit_version, initialize_write, make_commit_spec
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.sinks.format.layout import Layout
from beam_tfrecords.sinks.format.shard_plan import ShardSize
from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec as F
from beam_tfrecords.transforms.codec.feature_spec import tf_parse_spec

SPECS = [F("id", "bytes")]
SPLITS = ("train",)
_LISTINGS = ("list_files", "match", "delete_tree")
_LOOKUPS = ("exists", "rename", "delete")


def record(i: int) -> bytes:
    return ExampleEncoder(SPECS).encode({"id": b"%08d" % i})


BAND = ShardSize(target=len(record(0)) + tff.FRAME_OVERHEAD,
                 min=len(record(0)), max=2 * len(record(0)) + 64)  # one record a part


def build(root: str, version: str, n: int, calls: Counter, keep: int = 5,
          requests: Counter | None = None) -> dict:
    """Stage ``n`` one-record parts, then count what the finalize and commit call (and, in
    ``requests``, send)."""
    spec = make_commit_spec(
        layout=Layout(root, version), build_id=uuid.uuid4().hex, name="ds",
        compression=tff.NONE, feature_spec=tf_parse_spec(SPECS), config={"name": "ds"},
        inputs={"patterns": ["rows"], "bytes": n}, runner="by hand", keep=keep)
    initialize_write(spec)
    writer = sink._WriteParts(spec.layout.staging, tff.NONE, BAND, lease=spec.job_lease)
    writer.start_bundle()
    writer.process(("train", SerializedBatch.from_records([record(i) for i in range(n)])))
    parts = [value.value for value in writer.finish_bundle()]
    assert len(parts) == n
    plan = functools.partial(sink._plan, splits=SPLITS, version_dir=spec.layout.version_dir,
                             name="ds", compression=tff.NONE, size=BAND)
    calls.clear()
    if requests is not None:
        requests.clear()
    shards = shard_writers._plan_finalize_group(
        b"", parts, plan, sink._finalize_shard, SPLITS,
        functools.partial(sink._finalize_shards, index=False))
    document = commit_version(spec, shards, [], [("read", n), ("built", n)])
    assert len(document["splits"]["train"]["shards"]) == n
    return dict(calls)


@pytest.fixture
def calls(monkeypatch) -> Counter:
    """Every storage listing and lookup, and every local folder listing, counted."""
    counted: Counter = Counter()

    def wrap(owner, name, key):
        original = getattr(owner, name)

        def counting(*args, **kwargs):
            counted[key] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counting)

    for name in (*_LISTINGS, *_LOOKUPS):
        wrap(storage, name, name)
    for name in ("scandir", "listdir"):
        wrap(os, name, "folder listing")
    for name in ("list_below", "identities"):
        wrap(gcs, name, name)
    return counted


@pytest.mark.slow
def test_finalize_and_commit_list_no_folder_and_look_up_nothing_per_shard(tmp_path, calls):
    few = build(str(tmp_path / "few"), "v1", 10, calls)
    many = build(str(tmp_path / "many"), "v1", 1_000, calls)
    assert few == many  # the same calls, whether 10 shards or 1,000
    assert sum(many.get(k, 0) for k in (*_LISTINGS, "folder listing")) < 20
    assert all(check.ok for check in verify_path(str(tmp_path / "many" / "v1")))


@pytest.mark.slow
def test_on_cloud_storage_shards_move_and_go_in_batches(gcs_emulator, calls, monkeypatch):
    """Moving N parts to their final names and removing a retired version of N shards cost
    a batch request per 100 objects: no object is looked up, no folder listed, per shard."""
    import requests

    sent: Counter = Counter()
    send = requests.Session.request

    def request(self, method, url, *args, **kwargs):
        path = str(url).split("?", 1)[0]
        sent["list" if method == "GET" and path.rstrip("/").endswith("/o")
             else "batch" if "/batch/" in path else method] += 1
        return send(self, method, url, *args, **kwargs)

    monkeypatch.setattr(requests.Session, "request", request)
    found = {}
    for n in (10, 150):
        root = gcs_emulator.unique_prefix(f"many-{n}")
        build(root, "v1", n, calls)
        made = build(root, "v2", n, calls, keep=1, requests=sent)  # retention removes v1
        found[n] = (dict(sent), made)
        assert storage.list_files(storage.join(root, "v1")) == []
    (few, few_calls), (many, many_calls) = found[10], found[150]
    assert few_calls == many_calls
    assert few["list"] == many["list"]
    assert few.get("GET", 0) == many.get("GET", 0)
    # copies and deletes of the moves, deletes of the retired version: 3 batches per 100
    extra = 3 * (math.ceil(150 / 100) - math.ceil(10 / 100))
    assert many["batch"] - few["batch"] == extra, (few, many)
    assert sum(many.values()) - sum(few.values()) <= extra + 2  # a lease renewal or two


def test_rename_many_moves_what_exists_and_names_what_did_not(tmp_path):
    pairs = [(str(tmp_path / "s" / f"{i}"), str(tmp_path / "d[1]" / f"{i}")) for i in range(3)]
    for source, _ in pairs[:2]:
        pathlib.Path(source).parent.mkdir(exist_ok=True)
        pathlib.Path(source).write_bytes(source.encode())
    assert storage.rename_many(pairs) == [pairs[2]]
    assert [pathlib.Path(d).read_bytes() for _, d in pairs[:2]] == [s.encode()
                                                                    for s, _ in pairs[:2]]
    assert storage.rename_many(pairs[:2]) == pairs[:2]  # moved already: nothing to do


def test_remove_files_takes_each_path_literally(tmp_path):
    kept = tmp_path / "a1"
    gone = tmp_path / "a[1]"
    for path in (kept, gone):
        path.write_bytes(b"x")
    storage.remove_files([str(gone), str(tmp_path / "missing")])
    assert kept.exists() and not gone.exists()  # "a[1]" is a name, not a glob matching a1


def test_shards_past_99999_keep_their_numbers_order():
    total = 100_002
    names = [shard_writers.shard_file_name("ds", i, total, tff.NONE)
             for i in (100_001, 99_999, 100_000, 0, 10_000)]
    shards = [shard_writers.ShardInfo("train", f"v/train/{name}", 1, 1, 0) for name in names]
    grouped = shard_writers.group_shards(shards, SPLITS)["train"]
    assert [s.path.rsplit("/", 1)[1][3:].split("-of-")[0] for s in grouped] == [
        "00000", "10000", "99999", "100000", "100001"]


@pytest.mark.parametrize("batched", [False, True])
def test_finalize_is_safe_to_run_twice_and_names_a_lost_part(tmp_path, batched):
    staging, version = str(tmp_path / "v" / ".staging"), str(tmp_path / "v")
    writer = sink._WriteParts(staging, tff.NONE, BAND)
    writer.start_bundle()
    writer.process(("train", SerializedBatch.from_records([record(i) for i in range(3)])))
    parts = [value.value for value in writer.finish_bundle()]
    entries = list(sink._plan(parts, SPLITS, version, "ds", tff.NONE, BAND))

    def finalize(chosen):
        return (sink._finalize_shards(chosen) if batched
                else [sink._finalize_shard(entry) for entry in chosen])

    first = finalize(entries)
    assert finalize(entries) == first  # a retry finds the parts under their final names
    assert [pathlib.Path(s.path).stat().st_size for s in first] == [s.bytes for s in first]
    pathlib.Path(first[1].path).unlink()
    with pytest.raises(FileNotFoundError, match="are both missing"):
        finalize(entries)
