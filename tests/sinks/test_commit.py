"""The commit protocol (sinks/commit.py) driven step by step, as Beam's filebasedsink tests
drive ``initialize_write`` / ``open_writer`` / ``finalize_write`` by hand: the job's first
step begins the build, the writer's bundles stage parts under the version's staging, the
steps after the writers give them their final names, and the commit publishes them -- or
refuses in one line, leaving ``LATEST`` and the committed versions as they were.

No pipeline runs, so each step's effect on the output is checked on its own; the Beam glue
around these steps is tested in tests/sinks/test_tfrecord_sink.py and the launch in
tests/sinks/test_launch.py.
"""

from __future__ import annotations

import json
import pathlib
import time

import pytest
from beam_tfrecords_tests_helpers import read_examples

from beam_tfrecords.pipelines.verify import verify_path
from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.sinks import tfrecord_sink as sink
from beam_tfrecords.sinks.commit import (
    CommitError,
    begin_build,
    commit_version,
    initialize_write,
    make_commit_spec,
    read_latest,
)
from beam_tfrecords.sinks.format import layout as lay
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.sinks.format.layout import Layout
from beam_tfrecords.sinks.format.shard_plan import ShardSize
from beam_tfrecords.sinks.lease import Lease
from beam_tfrecords.sinks.shard_writers import group_shards
from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec as F
from beam_tfrecords.transforms.codec.feature_spec import tf_parse_spec

A, B, C = "a" * 32, "b" * 32, "c" * 32
SPECS = [F("id", "int64"), F("name", "string")]
SPLITS = ("train", "eval")
BAND = ShardSize(target=600, min=300, max=1_200)  # a few rows a shard: several per split
ROWS = {"train": [{"id": i, "name": f"row {i}"} for i in range(60)],
        "eval": [{"id": i, "name": f"row {i}"} for i in range(60, 75)]}


def make_spec(root: pathlib.Path, version: str, build_id: str = A):
    return make_commit_spec(
        layout=Layout(str(root), version), build_id=build_id, name="ds",
        compression=tff.NONE, feature_spec=tf_parse_spec(SPECS), config={"name": "ds"},
        inputs={"patterns": ["rows.jsonl"], "bytes": 4_096}, runner="by hand")


def stage_parts(spec, rows=ROWS):
    """The writer's bundles (one per split, renewing the job's lease as they write): the
    staged parts, ``(split, Part)``."""
    encoder = ExampleEncoder(SPECS)
    writer = sink._WriteParts(spec.layout.staging, spec.compression, BAND, lease=spec.job_lease)
    parts = []
    for split, split_rows in rows.items():
        writer.start_bundle()
        writer.process((split, SerializedBatch.from_records([encoder.encode(r)
                                                             for r in split_rows])))
        parts.extend(value.value for value in writer.finish_bundle())
    return parts


def finalize(spec, parts):
    """The steps after the writers: plan the final shards, give the parts their names."""
    planned = sink._plan(parts, SPLITS, spec.layout.version_dir, spec.name, spec.compression,
                         BAND)
    return group_shards([sink._finalize_shard(entry) for entry in planned], SPLITS)


def counts(rows=ROWS):
    read = sum(len(r) for r in rows.values())
    return [("read", read), ("built", read)]


def commit_one(root: pathlib.Path, version: str, build_id: str = A) -> dict:
    spec = make_spec(root, version, build_id)
    initialize_write(spec)
    return commit_version(spec, finalize(spec, stage_parts(spec)), [], counts())


def files_under(folder: pathlib.Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_each_step_leaves_what_the_next_one_needs_and_the_commit_publishes_it(tmp_path):
    root = tmp_path / "out"
    spec = make_spec(root, "v1")
    version_dir = root / "v1"

    assert initialize_write(spec) == "v1"  # the lease taken, the folder claimed
    assert (root / lay.LEASE).exists() and (version_dir / lay.MARKER).exists()
    assert read_latest(str(root)) is None

    parts = stage_parts(spec)
    assert len(parts) > len(SPLITS)  # the band rolled parts
    assert all(part.path.startswith(spec.layout.staging) for _, part in parts)
    shards = finalize(spec, parts)
    assert len(shards["train"]) > 1 and len(shards["eval"]) == 1
    assert not (version_dir / lay.MANIFEST).exists()  # finalized is not committed

    document = commit_version(spec, shards, [], counts())

    assert read_latest(str(root)) == "v1"
    assert json.loads((version_dir / lay.MANIFEST).read_text()) == document
    assert document["counts"]["read"] == document["counts"]["written"] == 75
    assert document["counts"]["rejected"] == 0
    assert document["build_id"] == A
    shard_files = {f"{split}/{pathlib.Path(info.path).name}"
                   for split in SPLITS for info in shards[split]}
    assert files_under(version_dir) == {lay.MANIFEST, lay.FEATURE_SPEC, lay.MARKER,
                                        *shard_files}
    for split in SPLITS:
        entries = document["splits"][split]["shards"]
        assert [e["path"] for e in entries] == [f"{split}/ds-{k:05d}-of-{len(entries):05d}"
                                                f"{tff.file_suffix(tff.NONE)}"
                                                for k in range(len(entries))]
        ids = [example["id"][1] for e in entries
               for example in read_examples(version_dir / e["path"])]
        assert sorted(ids) == [[r["id"]] for r in ROWS[split]]
    assert all(check.ok for check in verify_path(str(root))), verify_path(str(root))
    # The commit released the lease: the next build takes it at once.
    begin_build(str(root), "v2", B).lease.release(build_done=True)


def test_a_later_version_moves_latest_and_keeps_the_earlier_one(tmp_path):
    root = tmp_path / "out"
    commit_one(root, "v1")
    commit_one(root, "v2", B)
    assert read_latest(str(root)) == "v2"
    assert (root / "v1" / lay.MANIFEST).exists()


def test_a_missing_part_is_refused_and_the_next_build_removes_what_was_written(tmp_path):
    root = tmp_path / "out"
    commit_one(root, "v1")
    latest = (root / lay.LATEST).read_bytes()
    spec = make_spec(root, "v2", B)
    initialize_write(spec)
    parts = stage_parts(spec)
    lost = next(part for split, part in parts if split == "train")
    shards = finalize(spec, [(s, p) for s, p in parts if p is not lost])

    with pytest.raises(CommitError, match=rf"record counts do not add up: 75 examples were "
                                          rf"built but the shards hold {75 - lost.records}"):
        commit_version(spec, shards, [], counts())

    assert not (root / "v2" / lay.MANIFEST).exists()
    assert (root / lay.LATEST).read_bytes() == latest
    build = begin_build(str(root), "v3", C)  # the lease was released: no wait
    assert build.prepared.removed == (("v2", B),)
    assert not (root / "v2").exists()
    build.lease.release(build_done=True)


def test_a_second_commit_or_claim_of_a_committed_version_is_refused(tmp_path):
    root = tmp_path / "out"
    spec = make_spec(root, "v1")
    initialize_write(spec)
    shards = finalize(spec, stage_parts(spec))
    commit_version(spec, shards, [], counts())
    manifest = (root / "v1" / lay.MANIFEST).read_bytes()

    with pytest.raises(CommitError, match="lost the lease .* released .* not committing"):
        commit_version(spec, shards, [], counts())  # the first commit released the lease
    Lease(str(root), A, job=True).acquire()  # even with the lease taken again
    with pytest.raises(CommitError, match="a committed version is never rewritten"):
        commit_version(spec, shards, [], counts())
    with pytest.raises(CommitError, match="'v1' is already committed"):
        initialize_write(make_spec(root, "v1", B))

    assert (root / "v1" / lay.MANIFEST).read_bytes() == manifest
    assert read_latest(str(root)) == "v1"


def test_a_build_that_lost_the_lease_does_not_commit(tmp_path):
    root = tmp_path / "out"
    commit_one(root, "v1")
    spec = make_spec(root, "v2")
    initialize_write(spec)
    shards = finalize(spec, stage_parts(spec))
    # Another build finds the lease expired (its clock is far ahead) and takes it over.
    Lease(str(root), B, ttl=60, clock=lambda: time.time() + 10_000).acquire()

    with pytest.raises(CommitError, match=r"lost the lease to build bbbbbbbb .*not committing "
                                          r".*v2"):
        commit_version(spec, shards, [], counts())

    assert not (root / "v2" / lay.MANIFEST).exists()
    assert read_latest(str(root)) == "v1"
    assert (root / lay.LEASE).exists() and B in (root / lay.LEASE).read_text()


def test_an_early_stop_counts_the_dead_letters_of_a_worker_that_left_no_note(tmp_path):
    """One worker stopped the build and left its note (10 read, 10 rejected); another was torn
    down by the runner before it looked for the note, leaving only 4 staged dead letters.
    The failure still says read = written + rejected, and rejected = the rows kept."""
    from beam_tfrecords.sinks import early_stop
    from beam_tfrecords.sinks.commit import fail_stopped_early

    spec = make_spec(tmp_path, "v1")
    initialize_write(spec)
    early_stop.write_note(f"{spec.layout.staging}/{early_stop.FOLDER}", 10, 10, "stopped early")
    for worker, rows in (("w1", 10), ("w2", 4)):
        path = pathlib.Path(spec.layout.staging) / lay.DEAD_LETTER / f"{worker}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"reason": "bad", "row": i}) + "\n"
                                for i in range(rows)))
    error = fail_stopped_early(spec)
    assert isinstance(error, CommitError) and str(error).startswith("stopped early")
    (failed,) = (tmp_path / ".failed").iterdir()
    doc = json.loads((failed / lay.FAILURE).read_text())
    assert doc["counts"] == {"read": 14, "written": 0, "rejected": 14}
    assert doc["stopped_early"]["rejected_without_note"] == 4
    assert sum(f["records"] for f in doc["dead_letter"]) == 14
    assert read_latest(str(tmp_path)) is None  # nothing committed
