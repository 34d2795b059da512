"""End to end on DirectRunner: the demo config -> TFRecords + manifest, read back by us and
by real TensorFlow with the feature_spec.json we export, value by value against the CSV."""

from __future__ import annotations

import base64
import csv
import json
import pathlib
import re
import struct
from collections import Counter

import pytest
from beam_tfrecords_tests_helpers import checked_records, read_records, shard_paths

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.config import load_config
from beam_tfrecords.sinks import commit
from beam_tfrecords.transforms.codec.example_codec import ExampleDecoder
from beam_tfrecords.transforms.codec.splits import key_bytes

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo.yaml"
DEMO_CSV = ROOT / "configs" / "data" / "demo.csv"


def f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def source_rows_by_split():
    """What the CSV says each split must hold, as sorted (feature0..3) tuples."""
    config = load_config(str(DEMO))
    expected: dict[str, list] = {name: [] for name in config.splits.names}
    with open(DEMO_CSV, newline="") as handle:
        for row in csv.DictReader(handle):
            split = config.splits.choose(key_bytes(row["id"]))
            expected[split].append((int(row["feature0"] == "true"), int(row["feature1"]),
                                    row["feature2"], f32(float(row["feature3"]))))
    return {split: sorted(rows) for split, rows in expected.items()}


@pytest.fixture(scope="module")
def demo_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "out"
    manifest = cli.run_build(["--config", str(DEMO), "--output", str(out), "--version", "v1"])
    return out, manifest


def test_manifest_contract(demo_build):
    out, manifest = demo_build
    assert (out / "LATEST").read_text().strip() == "v1"
    version_dir = out / "v1"
    on_disk = json.loads((version_dir / "manifest.json").read_text())
    assert on_disk == manifest
    for key in ("name", "version", "created", "compression", "counts", "splits", "feature_spec",
                "config_sha256", "inputs", "tool_version", "runner"):
        assert key in manifest, key
    assert manifest["counts"] == {"read": 10000, "written": 10000, "rejected": 0,
                                  "unread": {"files": 0, "bytes": 0, "rows": 0}}
    assert set(manifest["splits"]) == {"train", "eval"}
    assert json.loads((version_dir / "feature_spec.json").read_text()) == manifest["feature_spec"]
    assert not (version_dir / ".staging").exists()
    assert not (version_dir / "dead_letter").exists()
    total = 0
    for info in manifest["splits"].values():
        assert info["records"] == sum(s["records"] for s in info["shards"])
        for shard in info["shards"]:
            path = version_dir / shard["path"]
            assert path.name.startswith("demo-") and "-of-" in path.name
            checked_records(path, shard)  # size, crc32c and record count as the manifest says
        total += info["records"]
    assert total == 10000


def _our_rows(version_dir, manifest, split):
    config = load_config(str(DEMO))
    decoder = ExampleDecoder(config.features)
    rows = []
    for path in shard_paths(version_dir, manifest, split):
        for record in read_records(path):
            v = decoder.decode(record)
            rows.append((v["feature0"], v["feature1"], v["feature2"], v["feature3"]))
    return sorted(rows)


def test_every_value_read_back_by_our_reader(demo_build):
    out, manifest = demo_build
    expected = source_rows_by_split()
    for split in expected:
        assert _our_rows(out / "v1", manifest, split) == expected[split]


def test_tensorflow_parses_every_value_with_our_spec(demo_build, read_with_tf):
    out, manifest = demo_build
    version_dir = out / "v1"
    expected = source_rows_by_split()
    for split, rows in expected.items():
        files = shard_paths(version_dir, manifest, split)
        parsed = read_with_tf(files, spec=version_dir / "feature_spec.json")
        assert parsed["count"] == len(rows)
        got = sorted(
            (r["feature0"], r["feature1"], base64.b64decode(r["feature2"]).decode(), r["feature3"])
            for r in parsed["records"]
        )
        assert got == rows


def test_split_assignment_is_stable_across_builds(demo_build, tmp_path):
    _, first = demo_build
    second = cli.run_build(["--config", str(DEMO), "--output", str(tmp_path), "--version", "v2"])
    for split in first["splits"]:
        assert first["splits"][split]["records"] == second["splits"][split]["records"]
        assert [s["crc32c"] for s in first["splits"][split]["shards"]] == [
            s["crc32c"] for s in second["splits"][split]["shards"]]


def test_committed_version_is_not_overwritten(demo_build):
    out, _ = demo_build
    with pytest.raises(commit.CommitError, match="already committed"):
        cli.run_build(["--config", str(DEMO), "--output", str(out), "--version", "v1"])


def test_rejected_records_go_to_dead_letters_and_are_counted(tmp_path):
    data = tmp_path / "in.csv"
    data.write_text("id,feature0,feature1,feature2,feature3\n"
                    "1,true,1,dog,0.5\n"
                    "2,maybe,1,dog,0.5\n"         # not an integer or true/false
                    "3,false,2,chicken,1e40\n"    # beyond float32
                    "4,false\n"                   # malformed line
                    "5,true,4,goat,-1.25\n")
    config = tmp_path / "c.yaml"
    config.write_text(DEMO.read_text().replace("max_bad_fraction: 0.0", "max_bad_fraction: 0.9"))
    manifest = cli.run_build(["--config", str(config), "--input", str(data),
                              "--output", str(tmp_path / "out"), "--version", "v"])
    assert manifest["counts"] == {"read": 5, "written": 2, "rejected": 3,
                                  "unread": {"files": 0, "bytes": 0, "rows": 0}}
    dead_dir = tmp_path / "out" / "v" / "dead_letter"
    rows = [json.loads(line) for f in sorted(dead_dir.iterdir()) for line in f.open()]
    by_row = {r["row"]: r for r in rows}
    assert set(by_row) == {2, 3, 4}
    assert by_row[2]["feature"] == "feature0" and "true/false" in by_row[2]["reason"]
    assert by_row[3]["feature"] == "feature3" and "float32" in by_row[3]["reason"]
    assert "malformed line" in by_row[4]["reason"]
    assert all(r["source"].endswith("in.csv") for r in rows)
    assert sum(d["records"] for d in manifest["dead_letter"]) == 3


def test_bad_fraction_over_threshold_fails_without_commit(tmp_path):
    data = tmp_path / "in.csv"
    data.write_text("id,feature0,feature1,feature2,feature3\n1,true,1,dog,0.5\n2,x,1,dog,0.5\n")
    out = tmp_path / "out"
    with pytest.raises(Exception, match="max_bad_fraction"):
        cli.run_build(["--config", str(DEMO), "--input", str(data), "--output", str(out),
                       "--version", "v"])
    assert not (out / "v" / "manifest.json").exists()
    assert not (out / "LATEST").exists()
    assert not (out / "v").exists()  # rolled back; its dead letters are kept apart
    (kept,) = (out / ".failed").iterdir()
    # The next build succeeds and keeps the failed build's dead letters.
    data.write_text("id,feature0,feature1,feature2,feature3\n1,true,1,dog,0.5\n")
    manifest = cli.run_build(["--config", str(DEMO), "--input", str(data), "--output", str(out),
                              "--version", "w"])
    assert manifest["counts"]["written"] == 1
    assert Counter(p.name for p in out.iterdir()) == Counter(["LATEST", "w", ".failed"])
    assert [p.name for p in (out / ".failed").iterdir()] == [kept.name]
    assert (kept / "dead_letter" / "rejected-00000-of-00001.jsonl").exists()


@pytest.mark.parametrize("counts,written,dead,needle", [
    ({"read": 10, "built": 9, "rejected_at_read": 1}, 8, 1, "9 examples were built but the shards"),
    ({"read": 10, "built": 9, "rejected_at_build": 1}, 9, 0, "dead letters hold 0"),
    ({"read": 11, "built": 9, "rejected_at_read": 1}, 9, 1, "read 11 != written 9 + rejected 1"),
])
def test_counts_that_do_not_add_up_refuse_to_commit(counts, written, dead, needle):
    with pytest.raises(commit.CommitError, match=re.escape(needle)):
        commit.check_counts(counts, written, dead)
    commit.check_counts({"read": 10, "built": 9, "rejected_at_build": 1}, 9, 1)


@pytest.mark.slow
def test_versions_latest_retention_and_skip_if_unchanged(tmp_path, capsys):
    from beam_tfrecords.pipelines import cli

    data = tmp_path / "in.csv"
    data.write_text("id,feature0,feature1,feature2,feature3\n1,true,1,dog,0.5\n")
    out = tmp_path / "out"
    config = tmp_path / "demo.yaml"  # the data changes on purpose: no drift gate
    config.write_text(DEMO.read_text() + "validate: false\n")
    base = ["build", "--config", str(config), "--input", str(data), "--output", str(out),
            "--keep-versions", "2"]
    assert cli.main(base + ["--version", "a"]) == 0
    assert cli.main(base + ["--version", "b"]) == 0
    assert (out / "LATEST").read_text().strip() == "b"
    capsys.readouterr()
    # Nothing changed: the third build is skipped and writes nothing.
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert cli.main(base + ["--version", "c", "--skip-if-unchanged"]) == 0
    assert "unchanged since version b" in capsys.readouterr().out
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    # A changed input builds; retention keeps the newest two, LATEST names the newest.
    data.write_text("id,feature0,feature1,feature2,feature3\n1,true,1,dog,0.5\n2,true,1,x,1\n")
    assert cli.main(base + ["--version", "d", "--skip-if-unchanged"]) == 0
    assert (out / "LATEST").read_text().strip() == "d"
    assert sorted(p.name for p in out.iterdir()) == ["LATEST", "b", "d"]


def test_retention_never_deletes_the_version_latest_names(tmp_path):
    for name, created in [("old", "2020"), ("pinned", "2021"), ("new", "2022")]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps({
            "created": created, "format_version": 1, "tool_version": "0.1.0",
            "counts": {}, "splits": {}}))
    assert commit.apply_retention(str(tmp_path), 1, "pinned") == ["old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "pinned"]


def test_missing_source_column_is_a_config_error_before_the_pipeline(tmp_path):
    from beam_tfrecords.pipelines.config import ConfigError

    data = tmp_path / "in.csv"
    data.write_text("id,feature0,feature1,feature2\n1,true,1,dog\n")  # no feature3
    with pytest.raises(ConfigError, match=r"features\.feature3\.source.*no field 'feature3'"):
        cli.run_build(["--config", str(DEMO), "--input", str(data), "--output",
                       str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_csv_split_key_column_not_a_feature_is_still_read(tmp_path):
    # The command's CSV reader types only the named columns; the split key -- here a literal
    # dotted column no feature reads -- must be among them, or every key reads as missing and
    # all records land in one split.
    import yaml

    header = ["meta.label", "x"] + [f"unused{i}" for i in range(50)]
    rows = [[f"k{i}", str(i)] + ["0"] * 50 for i in range(400)]
    (tmp_path / "in.csv").write_text("\n".join(",".join(r) for r in [header, *rows]) + "\n")
    config = {"name": "t", "source": {"format": "csv", "path": str(tmp_path / "in.csv")},
              "features": {"x": {"type": "int64"}},
              "splits": {"key": "meta.label", "train": 50, "eval": 50},
              "output": {"path": str(tmp_path / "out")}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    manifest = cli.run_build(["--config", str(tmp_path / "c.yaml")])
    records = {split: entry["records"] for split, entry in manifest["splits"].items()}
    assert sum(records.values()) == 400
    assert min(records.values()) > 120, records  # ~200 each: the key was read


@pytest.mark.slow
def test_dates_and_whole_numbers_from_text_equal_a_parquet_build(tmp_path):
    """CSV text, JSON Lines text and a Parquet timestamp column of the same instants build the
    same epoch integers; CSV's 517.0 is the int64 a Parquet double 517.0 gives (issue #18,
    item 2)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    from beam_tfrecords import read_examples

    # (text, the same wall time as numpy reads it, the text's UTC offset in minutes)
    cases = [("2024-03-01", "2024-03-01", 0), ("2024-03-01T12:34:56", "2024-03-01T12:34:56", 0),
             ("2024-03-01 12:34:56.123456", "2024-03-01T12:34:56.123456", 0),
             ("2024-03-01T12:34:56Z", "2024-03-01T12:34:56", 0),
             ("2024-03-01T12:34:56.5+02:00", "2024-03-01T12:34:56.5", 120),
             ("1969-12-31T23:59:59.9995", "1969-12-31T23:59:59.9995", 0),
             ("2024-03-01T12:34:56.123456789-05:30", "2024-03-01T12:34:56.123456789", -330),
             ("2024-03-01T23", "2024-03-01T23:00", 0)]
    texts = [text for text, _, _ in cases]
    instants = [int((np.datetime64(wall, "ns") - np.timedelta64(offset, "m")).astype(np.int64))
                for _, wall, offset in cases]
    counts = [f"{k}.0" if k % 2 else f"{k}e0" for k in range(len(texts))]
    (tmp_path / "in.csv").write_text("id,when,count\n" + "".join(
        f"{k},{text},{count}\n" for k, (text, count) in enumerate(zip(texts, counts))))
    (tmp_path / "in.jsonl").write_text("".join(
        json.dumps({"id": k, "when": text, "count": float(count)}) + "\n"
        for k, (text, count) in enumerate(zip(texts, counts))))
    pq.write_table(pa.table({"id": list(range(len(texts))),
                             "when": pa.array(instants, pa.timestamp("ns", tz="UTC")),
                             "count": [float(c) for c in counts]}), tmp_path / "in.parquet")
    built = {}
    for fmt in ("csv", "jsonl", "parquet"):
        config = {"name": "t", "source": {"format": fmt, "path": str(tmp_path / f"in.{fmt}")},
                  "features": {"id": {"type": "int64"}, "when": {"type": "int64", "unit": "ms"},
                               "count": {"type": "int64"}},
                  "output": {"path": str(tmp_path / f"out_{fmt}")}}
        (tmp_path / f"{fmt}.yaml").write_text(yaml.safe_dump(config))
        manifest = cli.run_build(["--config", str(tmp_path / f"{fmt}.yaml"), "--version", "v"])
        assert manifest["counts"]["rejected"] == 0, fmt
        built[fmt] = sorted((int(ex["id"]), int(ex["when"]), int(ex["count"]))
                            for ex in read_examples(str(tmp_path / f"out_{fmt}" / "v"),
                                                    split="train"))
    assert built["csv"] == built["jsonl"] == built["parquet"]
    assert built["csv"][0] == (0, 1709251200000, 0)
    assert built["csv"][4] == (4, 1709289296500, 4)  # the offset applied
    assert built["csv"][5] == (5, -1, 5)  # floored to the millisecond
