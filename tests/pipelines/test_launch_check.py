"""A type mistake that would reject every record stops the build at launch, in one line.

Each case declares a feature the data cannot fill -- text as int64 in CSV, Parquet, Avro and
JSON Lines, a fixed shape no row has, a list over a scalar -- and the build must refuse before
its pipeline starts: no version folder, the error naming the feature, its source, what was
declared and what the data holds. The controls: sparse bad values, values that are all
missing, and ``max_bad_fraction: 1`` run the build as before.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.launch_check import (
    MIN_EVIDENCE,
    FeatureTally,
    TypeMistake,
    mistakes,
    tally,
)
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec

ROOT = Path(__file__).resolve().parents[2]
ROWS = 5000


def config(tmp: Path, source: dict, features: dict, **errors) -> Path:
    raw = {"name": "t", "source": source, "features": features,
           "output": {"path": str(tmp / "out")}}
    if errors:
        raw["errors"] = errors
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def csv_input(tmp: Path, bad_every: int = 0) -> str:
    path = tmp / "in.csv"
    lines = ["id,name,score"]
    for i in range(ROWS):
        name = f"n{i}" if not bad_every or i % bad_every == 0 else str(i)
        lines.append(f"{i},{name},{i / 7}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def refused(path: Path) -> str:
    with pytest.raises(TypeMistake) as err:
        cli.run_build(["--config", str(path)])
    assert not (path.parent / "out").exists()  # refused before anything was claimed
    return str(err.value)


@pytest.mark.slow
def test_csv_text_declared_int64(tmp_path):
    path = config(tmp_path, {"format": "csv", "path": csv_input(tmp_path)},
                  {"id": {"type": "int64"}, "name": {"type": "int64"},
                   "score": {"type": "float"}})
    line = refused(path)
    assert line.startswith("features.name: declared int64 over source 'name'")
    assert "all 1000 values in the first 1000 records of" in line and "in.csv" in line
    assert "row 1: column 'name': not an integer" in line
    assert "\n" not in line


def test_parquet_string_declared_int64(tmp_path):
    table = pa.table({"id": list(range(ROWS)), "carrier": [f"C{i % 9}" for i in range(ROWS)]})
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=1000)
    path = config(tmp_path, {"format": "parquet", "path": str(tmp_path / "in.parquet")},
                  {"id": {"type": "int64"}, "carrier": {"type": "int64"}})
    line = refused(path)
    assert line.startswith("features.carrier: declared int64 over source 'carrier'")
    assert "(they hold str)" in line


def test_avro_string_declared_float(tmp_path):
    raw = yaml.safe_load((ROOT / "configs" / "avro.yaml").read_text())
    raw["source"]["path"] = str(ROOT / raw["source"]["path"])
    text_field = next(name for name, f in raw["features"].items()
                      if f.get("type") == "string" and f.get("missing", "error") == "error")
    raw["features"][text_field] = {**raw["features"][text_field], "type": "float"}
    raw["output"] = {"path": str(tmp_path / "out")}
    path = tmp_path / "avro.yaml"
    path.write_text(yaml.safe_dump(raw))
    line = refused(path)
    assert line.startswith(f"features.{text_field}: declared float")


def _jsonl(tmp: Path, rows) -> str:
    path = tmp / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_jsonl_wrong_fixed_shape_and_list_over_scalar(tmp_path):
    rows = [{"id": i, "v": [i, i + 1, i + 2, i + 3], "s": i} for i in range(ROWS)]
    path = config(tmp_path, {"format": "jsonl", "path": _jsonl(tmp_path, rows)},
                  {"id": {"type": "int64"}, "v": {"type": "int64", "shape": [3]},
                   "s": {"type": "int64", "shape": [-1]}})
    line = refused(path)
    assert line.startswith("features.v: declared int64, shape [3] over source 'v'")
    assert "dimension 0 has length 4, shape [3] needs 3" in line
    assert "(and 1 more: features.s: declared int64, shape [-1]" in line


@pytest.mark.slow
def test_sparse_mistakes_and_missing_values_do_not_stop_the_build(tmp_path):
    # One name in ten is text: the build runs and rejects those rows as dead letters.
    path = config(tmp_path, {"format": "csv", "path": csv_input(tmp_path, bad_every=10)},
                  {"id": {"type": "int64"}, "name": {"type": "int64"},
                   "score": {"type": "float"}}, max_bad_fraction=0.2)
    manifest = cli.run_build(["--config", str(path)])
    assert manifest["counts"]["rejected"] == ROWS // 10


@pytest.mark.slow
def test_values_all_missing_prove_nothing(tmp_path):
    rows = [{"id": i, "note": None} for i in range(ROWS)]
    path = config(tmp_path, {"format": "jsonl", "path": _jsonl(tmp_path, rows)},
                  {"id": {"type": "int64"}, "note": {"type": "int64", "missing": "omit"}})
    assert cli.run_build(["--config", str(path)])["counts"]["written"] == ROWS


@pytest.mark.slow
def test_max_bad_fraction_one_lets_every_record_be_rejected(tmp_path):
    path = config(tmp_path, {"format": "csv", "path": csv_input(tmp_path)},
                  {"id": {"type": "int64"}, "name": {"type": "int64"}}, max_bad_fraction=1.0)
    assert cli.run_build(["--config", str(path)])["counts"]["rejected"] == ROWS


def test_few_refusals_are_not_evidence():
    specs = [FeatureSpec("x", "int64")]
    few = {"x": FeatureTally(refused=MIN_EVIDENCE - 1, row=1, reason="r", value_type="str")}
    assert mistakes(specs, few, records=MIN_EVIDENCE + 5, where="f") == []
    small_file = {"x": FeatureTally(refused=3, row=1, reason="r", value_type="str")}
    assert mistakes(specs, small_file, records=3, where="f") == []  # built, dead-lettered
    enough = {"x": FeatureTally(refused=MIN_EVIDENCE, row=1, reason="r", value_type="str")}
    assert len(mistakes(specs, enough, records=MIN_EVIDENCE, where="f")) == 1
    mixed = {"x": FeatureTally(accepted=1, refused=500, row=1, reason="r", value_type="str")}
    assert mistakes(specs, mixed, records=501, where="f") == []


def test_a_feature_is_cleared_by_one_accepted_value_and_the_sample_stops():
    specs = [FeatureSpec("a", "int64"), FeatureSpec("b", "int64"), FeatureSpec("c", "string")]
    consumed = []

    def events():
        for row in range(1, 1001):
            consumed.append(row)
            # b is missing in the first rows and text in rows 3-4: only row 5 clears it.
            b = None if row < 3 else ("x" if row < 5 else row)
            yield row, {"a": row, "b": b, "c": "t"}

    records, tallies = tally(specs, events())
    assert records == 5 and consumed == [1, 2, 3, 4, 5]
    assert (tallies["a"].accepted, tallies["b"].accepted, tallies["b"].refused) == (1, 1, 2)
    assert mistakes(specs, tallies, records, "f") == []

    def all_text():
        for row in range(1, 101):
            yield row, {"a": "text", "b": 1, "c": "t"}

    records, tallies = tally(specs, all_text())
    assert records == 100 and tallies["a"].refused == 100 and tallies["a"].accepted == 0
    assert len(mistakes(specs, tallies, records, "f")) == 1


@pytest.mark.slow
def test_the_command_says_it_in_one_line(tmp_path):
    path = config(tmp_path, {"format": "csv", "path": csv_input(tmp_path)},
                  {"id": {"type": "int64"}, "name": {"type": "int64"}})
    done = subprocess.run([sys.executable, "-m", "beam_tfrecords.pipelines.cli", "build",
                           "--config", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and "features.name: declared int64" in done.stderr
