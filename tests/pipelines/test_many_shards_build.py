"""A build of about 2,000 shards through the command line's own ``run_build``, in-process: a
small input and a band of two records a shard.

The manifest lists every shard and nothing else is in the split folder, ``verify`` passes,
and what the build asks of storage does not grow with the shard count: the commit lists the
same folders as a build of 20 shards, and no step looks a file up per shard. Counted, not
timed (bench/many_shards.py measures the times, up to 100,000 shards).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
import yaml

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.verify import verify_path
from beam_tfrecords.runtime import gcs, storage
from beam_tfrecords.sinks import dataset
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder
from beam_tfrecords.transforms.codec.specs import parse_features

FEATURES = {"id": {"type": "bytes"}}
PER_SHARD = 2
_LISTINGS = ("list_files", "match", "delete_tree")


def build(folder, shards: int, monkeypatch) -> tuple[dict, Counter, Counter]:
    """Build ``shards`` shards; returns the manifest, the whole build's storage calls and the
    commit's."""
    rows = folder / "rows.csv"
    rows.write_text("id\n" + "".join(f"{i:08d}\n" for i in range(shards * PER_SHARD)))
    framed = len(ExampleEncoder(parse_features(FEATURES)).encode({"id": b"00000000"}))
    config = folder / "c.yaml"
    config.write_text(yaml.safe_dump({
        "name": "many", "source": {"format": "csv", "path": str(rows)}, "features": FEATURES,
        "output": {"path": str(folder / "out"), "statistics": False,
                   "shard_size": {"target": PER_SHARD * (framed + tff.FRAME_OVERHEAD)}}}))
    calls, in_commit = Counter(), Counter()
    committing = []

    def counted(owner, name, key):
        original = getattr(owner, name)

        def counting(*args, **kwargs):
            calls[key] += 1
            if committing:
                in_commit[key] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counting)

    for name in (*_LISTINGS, "exists", "rename"):
        counted(storage, name, name)
    for name in ("list_below", "identities"):
        counted(gcs, name, name)
    for name in ("scandir", "listdir"):
        counted(os, name, "folder listing")
    commit = dataset.commit_version

    def commit_version(*args, **kwargs):
        committing.append(True)
        try:
            return commit(*args, **kwargs)
        finally:
            committing.clear()

    monkeypatch.setattr(dataset, "commit_version", commit_version)
    manifest = cli.run_build(["--config", str(config), "--version", "v"])
    monkeypatch.undo()
    return manifest, calls, in_commit


@pytest.mark.slow
def test_two_thousand_shards_are_listed_verified_and_cost_no_call_per_shard(tmp_path,
                                                                          monkeypatch):
    (tmp_path / "few").mkdir()
    (tmp_path / "many").mkdir()
    _, few_calls, few_commit = build(tmp_path / "few", 20, monkeypatch)
    manifest, calls, in_commit = build(tmp_path / "many", 2_000, monkeypatch)

    shards = manifest["splits"]["train"]["shards"]
    assert len(shards) == 2_000
    assert manifest["counts"]["read"] == manifest["counts"]["written"] == 2_000 * PER_SHARD
    assert all(s["records"] == PER_SHARD for s in shards)
    version = tmp_path / "many" / "out" / "v"
    assert sorted(os.listdir(version / "train")) == sorted(
        s["path"].split("/", 1)[1] for s in shards)
    checks = verify_path(str(version))
    assert all(check.ok for check in checks), [c for c in checks if not c.ok][:3]
    assert sum(c.records for c in checks) == 2_000 * PER_SHARD

    listings = (*_LISTINGS, "list_below", "identities", "folder listing")
    assert {k: in_commit[k] for k in listings} == {k: few_commit[k] for k in listings}
    assert in_commit["exists"] == few_commit["exists"]
    # The whole build: a lookup or a rename per shard would add ~2,000.
    assert calls["exists"] + calls["rename"] < few_calls["exists"] + few_calls["rename"] + 20
