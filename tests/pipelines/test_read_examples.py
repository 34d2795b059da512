"""``btf.read_examples``: our own reader, no TensorFlow, gives what TensorFlow's parse with the
exported spec gives, for every sample config's data set and every compression; shards are
divided among DataLoader workers and distributed ranks without duplicates; the PyTorch wrapper
exists only where torch does."""

from __future__ import annotations

import base64
import importlib.util
import json
import math
import sys
import types
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
import yaml

import beam_tfrecords as btf
from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines import read as rd

ROOT = Path(__file__).resolve().parents[2]
# Each sample config, with the compression it is built with here: every codec is read.
SAMPLES = {"csv": "gzip", "jsonl": "zlib", "parquet": "none", "avro": "gzip",
           "images": "none", "images_manifest": "zlib"}


def jsonable(value):
    """Our arrays in the JSON form tests/tf_oracle/read_with_tf.py gives TensorFlow's."""
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def tf_form(record: dict) -> dict:
    return {k: jsonable(v) for k, v in record.items()}


def nan_as_text(value):
    if isinstance(value, list):
        return [nan_as_text(v) for v in value]
    if isinstance(value, dict):
        return {k: nan_as_text(v) for k, v in value.items()}
    return "NaN" if isinstance(value, float) and math.isnan(value) else value


def manifest_files(version: Path) -> list[Path]:
    manifest = json.loads((version / "manifest.json").read_text())
    return [version / s["path"] for split in sorted(manifest["splits"])
            for s in manifest["splits"][split]["shards"]]


@pytest.fixture(scope="module", params=sorted(SAMPLES))
def sample(request, tmp_path_factory):
    name = request.param
    raw = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
    raw.setdefault("output", {})["compression"] = SAMPLES[name]
    folder = tmp_path_factory.mktemp(name)
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    cli.run_build(["--config", str(config), "--input", str(ROOT / raw["source"]["path"]),
                   "--output", str(folder / "out"), "--version", "v1"])
    return name, folder / "out" / "v1"


def test_every_sample_data_set_reads_as_tensorflow_parses_it(sample, read_with_tf):
    name, version = sample
    ours = [tf_form(r) for r in btf.read_examples(str(version))]
    theirs = read_with_tf(manifest_files(version), spec=version / "feature_spec.json",
                          compression=SAMPLES[name])
    assert len(ours) == theirs["count"] > 0
    assert ours == nan_as_text(theirs["records"]), name


def test_a_split_and_an_output_root(sample):
    name, version = sample
    manifest = json.loads((version / "manifest.json").read_text())
    for split, info in manifest["splits"].items():
        assert len(list(btf.read_examples(str(version), split))) == info["records"]
    (version.parent / "LATEST").write_text("v1\n")
    everything = list(btf.read_examples(str(version.parent)))  # the root: LATEST's version
    assert len(everything) == manifest["counts"]["written"]
    with pytest.raises(rd.ReadError, match="not in"):
        next(btf.read_examples(str(version), "nope"))


SHAPES = {
    "id": {"type": "int64"},
    "label": {"type": "string"},
    "emb": {"type": "float", "shape": [3]},
    "grid": {"type": "int64", "shape": [2, 2]},
    "tokens": {"type": "int64", "shape": [-1]},
    "rows3": {"type": "float", "shape": [-1, 3]},
    "ragged": {"type": "int64", "shape": [-1, -1]},
    "deep": {"type": "int64", "shape": [-1, 2, -1]},
    "note": {"type": "string", "missing": "omit"},
    "maybe": {"type": "int64", "shape": [2], "missing": "empty"},
    "words": {"type": "bytes", "shape": [-1, -1], "missing": "empty"},
}


def shaped_rows(n: int = 40) -> list[dict]:
    rows = []
    for i in range(n):
        rows.append({
            "id": i, "label": f"l{i % 3}", "emb": [i, -i, 0.5], "grid": [[i, 1], [2, 3]],
            "tokens": list(range(i % 4)), "rows3": [[i, i, i]] * (i % 3),
            "ragged": [list(range(k)) for k in range(i % 4)],
            "deep": [[[i], []], [[1, 2], [3]]][: i % 3],
            "note": None if i % 2 else f"n{i}", "maybe": None if i % 3 else [i, i],
            "words": None if i % 4 else [[b"a", b"\x00b"], []],
        })
    return rows


@pytest.fixture(scope="module")
def shaped(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("shaped")
    with beam.Pipeline() as p:
        _ = p | beam.Create(shaped_rows()) | btf.WriteTFRecordDataset(
            output=str(out), name="shapes", features=SHAPES, version="v1",
            splits={"key": "id", "train": 50, "eval": 50},
            shard_size={"target": "2KB", "min": "1KB", "max": "4KB"})
    return out / "v1"


def test_every_shape_reads_as_tensorflow_parses_it(shaped, read_with_tf):
    ours = list(btf.read_examples(str(shaped)))
    theirs = read_with_tf(manifest_files(shaped), spec=shaped / "feature_spec.json")
    assert [tf_form(r) for r in ours] == theirs["records"]
    by_id = {int(r["id"]): r for r in ours}
    r = by_id[5]
    assert r["id"].shape == () and r["id"].dtype == np.int64
    assert r["label"].dtype == object and r["label"][()] == b"l2"
    assert r["emb"].dtype == np.float32 and r["emb"].shape == (3,)
    assert r["grid"].shape == (2, 2) and r["tokens"].tolist() == [0]
    assert r["rows3"].shape == (2, 3)  # a uniform inner length: one array
    assert [a.tolist() for a in by_id[3]["ragged"]] == [[], [0], [0, 1]]  # a list of arrays
    assert [a.tolist() for a in by_id[2]["deep"][1]] == [[1, 2], [3]]
    assert r["note"].tolist() == [] and by_id[4]["note"].tolist() == [b"n4"]  # omitted: empty
    assert r["maybe"].tolist() == [] and by_id[3]["maybe"].tolist() == [3, 3]
    assert by_id[4]["words"][0].tolist() == [b"a", b"\x00b"]  # trailing NULs kept
    assert by_id[5]["words"] == []


# -- dividing the shards --------------------------------------------------------------------------

FILES = [f"s{i}" for i in range(11)]


@pytest.mark.parametrize("world_size,num_workers", [(1, 1), (1, 3), (2, 2), (3, 5), (4, 4)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_every_shard_goes_to_exactly_one_reader(world_size, num_workers, shuffle, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    shares = [rd.shards_for_reader(FILES, shuffle_files=shuffle, seed=7, worker=w,
                                   num_workers=num_workers, rank=r, world_size=world_size)
              for r in range(world_size) for w in range(num_workers)]
    got = [f for share in shares for f in share]
    assert sorted(got) == sorted(FILES)
    assert max(map(len, shares)) - min(map(len, shares)) <= 1  # dealt evenly
    if shuffle:
        assert rd.shards_for_reader(FILES, shuffle_files=True, seed=7) != FILES
        assert rd.shards_for_reader(FILES, shuffle_files=True, seed=7) == \
            rd.shards_for_reader(FILES, shuffle_files=True, seed=7)


def test_ranks_from_the_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert rd.shards_for_reader(FILES) == FILES[1::2]
    assert rd.shards_for_reader(FILES, worker=1, num_workers=2) == FILES[3::4]
    assert rd.shards_for_reader(FILES, rank=0, world_size=1) == FILES  # arguments win
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(rd.ReadError, match="RANK"):
        rd.shards_for_reader(FILES)


@pytest.mark.parametrize("kwargs,words", [
    ({"worker": 1}, "both"), ({"worker": 2, "num_workers": 2}, "0 <= worker"),
    ({"rank": -1, "world_size": 2}, "0 <= rank"), ({"worker": 0, "num_workers": 0}, "count"),
    ({"worker": True, "num_workers": 2}, "integers"),
])
def test_impossible_assignments_are_refused(kwargs, words, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(rd.ReadError, match=words):
        rd.shards_for_reader(FILES, **kwargs)


def test_readers_of_a_version_read_each_record_once(shaped, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert len(manifest_files(shaped)) > 3
    ids = [int(r["id"]) for w in range(3) for r in btf.read_examples(
        str(shaped), shuffle_files=True, seed=1, worker=w, num_workers=3)]
    assert sorted(ids) == list(range(40))


# -- the PyTorch wrapper ---------------------------------------------------------------------------

def test_the_wrapper_needs_torch():
    assert importlib.util.find_spec("torch") is None  # CI has no torch: keep it that way
    with pytest.raises(AttributeError, match="needs PyTorch"):
        btf.TFRecordIterableDataset  # noqa: B018
    assert "TFRecordIterableDataset" not in btf.__all__ and "read_examples" in btf.__all__


def test_the_wrapper_splits_by_torchs_worker_info(shaped, monkeypatch):
    """With a stand-in for torch.utils.data, the wrapper is defined and each DataLoader worker
    (as get_worker_info() names it) reads its own shards."""
    current = {"info": None}
    data = types.ModuleType("torch.utils.data")
    data.IterableDataset = type("IterableDataset", (), {})
    data.get_worker_info = lambda: current["info"]
    utils = types.ModuleType("torch.utils")
    utils.data = data
    torch = types.ModuleType("torch")
    torch.utils = utils
    for name, module in (("torch", torch), ("torch.utils", utils), ("torch.utils.data", data)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    spec = importlib.util.spec_from_file_location("read_with_torch", rd.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert issubclass(module.TFRecordIterableDataset, data.IterableDataset)
    dataset = module.TFRecordIterableDataset(str(shaped), shuffle_files=True)
    dataset.set_epoch(3)
    ids = []
    for worker in range(2):
        current["info"] = types.SimpleNamespace(id=worker, num_workers=2)
        ids += [int(r["id"]) for r in dataset]
    assert sorted(ids) == list(range(40))
