"""A table of bad inputs, one build per source format: each bad record lands in the dead letter
with its row, feature and reason, every good record is written, and read = written + rejected.

The cases are the ones our users meet: a value of the wrong type, an integer beyond int64, a
float beyond float32, a required field missing, a malformed CSV line, a malformed JSON line,
JSON nested deeper than allowed, an unreadable or truncated image, and invalid UTF-8 for a
string feature.
"""

from __future__ import annotations

import json
import pathlib
import struct
import sys
import zlib

import pytest

from beam_tfrecords.pipelines import cli
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.transforms.codec import wire

NOTHING_UNREAD = {"files": 0, "bytes": 0, "rows": 0}


ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import make_sample_data  # noqa: E402


def _config(tmp_path: pathlib.Path, source: dict, features: dict) -> pathlib.Path:
    path = tmp_path / "config.json"  # JSON is YAML
    path.write_text(json.dumps({
        "name": "bad",
        "source": source,
        "features": features,
        "output": {"path": str(tmp_path / "out")},
        "errors": {"max_bad_fraction": 1.0},
    }))
    return path


def _build(config: pathlib.Path):
    manifest = cli.run_build(["--config", str(config), "--version", "v1"])
    version_dir = config.parent / "out" / "v1"
    written = []
    for info in manifest["splits"].values():
        for shard in info["shards"]:
            path = version_dir / shard["path"]
            with open(path, "rb") as handle:
                written += [wire.decode_example(r) for r in tff.iter_records(handle)]
    dead = [json.loads(line) for entry in manifest["dead_letter"]
            for line in (version_dir / entry["path"]).read_text().splitlines()]
    return manifest, written, dead


def _check(manifest, written, dead, cases, good_ids, id_of):
    """Every case is one dead-letter row; the good records, and only they, were written."""
    by_row = {row["row"]: row for row in dead}
    assert len(by_row) == len(dead), "one dead-letter row per rejected record"
    for row, feature, reason in cases:
        assert row in by_row, f"row {row} ({reason}) not in the dead letters: {dead}"
        entry = by_row[row]
        assert entry["feature"] == feature, entry
        assert reason in entry["reason"], entry
        assert entry["source"] and entry["record"] is not None, entry
    assert len(dead) == len(cases)
    assert sorted(id_of(example) for example in written) == sorted(good_ids)
    assert manifest["counts"] == {"read": len(good_ids) + len(cases),
                                  "written": len(good_ids), "rejected": len(cases),
                                  "unread": NOTHING_UNREAD}


# (data row, feature, reason) -- rows are 1-based data rows (the header is not a row); a line
# that cannot be parsed names no feature ("")
CSV_CASES = [
    (2, "score", "not a number"),
    (3, "count", "int64"),
    (4, "score", "float32"),
    (5, "name", "missing"),
    (6, "", "cells"),
    (7, "name", "UTF-8"),
]


def test_csv(tmp_path):
    lines = [
        b"id,name,score,count",
        b"1,good,1.5,3",
        b"2,wrong type,abc,3",
        b"3,int64 overflow,1.0,99999999999999999999",
        b"4,float32 overflow,1e40,1",
        b"5,NA,1.0,1",
        b"6,too few cells,1.0",
        b"7,\xff\xfe bad utf-8,1.0,1",
        b"8,good again,-2.5e-3,0",
        b'9,"quoted, fine",inf,1',
    ]
    (tmp_path / "data.csv").write_bytes(b"\n".join(lines) + b"\n")
    config = _config(tmp_path, {"format": "csv", "path": str(tmp_path / "data.csv"),
                                "csv": {"null_values": ["NA"]}},
                     {"id": {"type": "int64"}, "name": {"type": "string"},
                      "score": {"type": "float"}, "count": {"type": "int64"}})
    manifest, written, dead = _build(config)
    _check(manifest, written, dead, CSV_CASES, [1, 8, 9], lambda ex: ex["id"][1][0])


JSONL_CASES = [
    (2, "", "JSON"),
    (3, "id", "int64"),
    (4, "name", "missing"),
    (5, "", "deep"),
    (6, "id", "int64"),
]


def test_jsonl(tmp_path):
    deep = {"id": 5, "name": "deep", "x": 1}
    for _ in range(10):
        deep = {"nest": deep, "id": 5, "name": "deep"}
    lines = [
        json.dumps({"id": 1, "name": "good"}),
        '{"id": 2, "name": "cut',
        json.dumps({"id": "three", "name": "wrong type"}),
        json.dumps({"id": 4}),
        json.dumps(deep),
        json.dumps({"id": 2**64, "name": "int64 overflow"}),
        json.dumps({"id": 7, "name": "good again", "extra": {"ignored": [1, 2]}}),
    ]
    (tmp_path / "data.jsonl").write_text("\n".join(lines) + "\n")
    config = _config(tmp_path, {"format": "jsonl", "path": str(tmp_path / "data.jsonl"),
                                "jsonl": {"max_depth": 5}},
                     {"id": {"type": "int64"}, "name": {"type": "string"}})
    manifest, written, dead = _build(config)
    _check(manifest, written, dead, JSONL_CASES, [1, 7], lambda ex: ex["id"][1][0])


def test_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({
        "id": pa.array([1, 2, 3, 4], pa.int64()),
        "name": pa.array([b"good", b"\xff\xfe", None, b"fine"], pa.binary()),
        "score": pa.array([1.0, 2.0, 3.0, 1e300], pa.float64()),
    }), tmp_path / "data.parquet")
    config = _config(tmp_path, {"format": "parquet", "path": str(tmp_path / "data.parquet")},
                     {"id": {"type": "int64"}, "name": {"type": "string"},
                      "score": {"type": "float"}})
    manifest, written, dead = _build(config)
    cases = [(2, "name", "UTF-8"), (3, "name", "missing"), (4, "score", "float32")]
    _check(manifest, written, dead, cases, [1], lambda ex: ex["id"][1][0])


def test_images(tmp_path):
    root = tmp_path / "images"
    good = make_sample_data.png(4, 3, 3, seed=1)
    files = {
        "cat/a_good.png": good,
        "cat/b_truncated.png": good[: len(good) - 20],
        "cat/c_not_an_image.png": b"this is text, not a PNG\n",
        "dog/d_empty.png": b"",
        "dog/e_good.bmp": make_sample_data.bmp(2, 2, seed=2),
        "dog/f_bad_header.png": b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR"
        + b"\x00" * 5 + struct.pack(">I", zlib.crc32(b"x")),
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    config = _config(tmp_path, {"format": "images", "path": str(root)},
                     {"image": {"type": "bytes"}, "label": {"type": "int64"},
                      "path": {"type": "string"}})
    manifest, written, dead = _build(config)
    rows = sorted(files)  # the plan lists files in path order; rows are 1-based positions
    bad = {rows.index(name) + 1: name for name in files if "good" not in name}
    cases = [(row, "image", name.split("/")[-1]) for row, name in bad.items()]
    _check(manifest, written, dead, cases, [b"a_good.png", b"e_good.bmp"],
           lambda ex: ex["path"][1][0].rsplit(b"/", 1)[-1])
    reasons = {entry["row"]: entry["reason"] for entry in dead}
    assert "truncated" in reasons[rows.index("cat/b_truncated.png") + 1]


@pytest.mark.parametrize("fraction,fails", [(0.0, True), (0.5, False)])
def test_threshold_names_the_counts_and_the_dead_letter_path(tmp_path, fraction, fails):
    (tmp_path / "data.csv").write_text("id\n1\n2\nx\n4\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "name": "bad", "source": {"format": "csv", "path": str(tmp_path / "data.csv")},
        "features": {"id": {"type": "int64"}}, "output": {"path": str(tmp_path / "out")},
        "errors": {"max_bad_fraction": fraction},
    }))
    if not fails:
        manifest = cli.run_build(["--config", str(config), "--version", "v1"])
        assert manifest["counts"] == {"read": 4, "written": 3, "rejected": 1,
                                      "unread": NOTHING_UNREAD}
        return
    with pytest.raises(Exception, match=r"1 of 4 records were rejected.*dead_letter"):
        cli.run_build(["--config", str(config), "--version", "v1"])
    assert not (tmp_path / "out" / "v1" / "manifest.json").exists()
    assert not (tmp_path / "out" / "LATEST").exists()


def test_a_record_over_the_shard_maximum_is_a_dead_letter(tmp_path):
    (tmp_path / "data.csv").write_text(f"id,text\n1,small\n2,{'x' * 5000}\n3,small too\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "name": "big", "source": {"format": "csv", "path": str(tmp_path / "data.csv")},
        "features": {"id": {"type": "int64"}, "text": {"type": "string"}},
        "output": {"path": str(tmp_path / "out"),
                   "shard_size": {"target": "3KB", "min": "2KB", "max": "4KB"}},
        "errors": {"max_bad_fraction": 0.5},
    }))
    manifest, written, dead = _build(config)
    assert sorted(ex["id"][1][0] for ex in written) == [1, 3]
    assert [row["row"] for row in dead] == [2]
    assert "over the maximum shard size of 4000 bytes" in dead[0]["reason"], dead[0]
