"""Our statistics agree with TensorFlow Data Validation's on the same committed data.

Every sample config whose input ships with the repository, and two tables nobody here wrote
(pyarrow's diamonds Parquet test file and numpy's ufunc validation tables, which hold more
distinct strings than the exact-count capacity), is built once; the build commits each
split's statistics (``statistics/Split-<split>/FeatureStats.pb``, from the encoding pass).
TFDV (in .venv-tfdv) then opens those committed
files with ``load_stats_binary``, computes its own over the same shards as
``generate_statistics_from_tfrecord`` does (every split of every case a slice of one run of
TFDV's generators) and compares feature by feature (tests/tfdv_oracle/compare.py says what
and how), all cases in one process; ``validate_statistics`` with the version's
``schema.pbtxt`` finds no anomaly.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from beam_tfrecords_tests_helpers import read_records, shard_paths

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.config import load_config
from beam_tfrecords.transforms.stats.dataset_stats import DatasetAccumulator, kinds_for_specs
from beam_tfrecords.transforms.stats.statistics_wire import encode_statistics_list

pytestmark = pytest.mark.slow  # whole builds, and TFDV's Beam pipelines

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMPARE = ROOT / "tests" / "tfdv_oracle" / "compare.py"
# The sample configs whose input ships with the repository (as
# tests/consumers/test_tfds_ray_loaders.py).
LOCAL = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml")
               if (ROOT / load_config(str(p)).source.path).exists())

DIAMONDS = """name: diamonds
source: {format: parquet, path: diamonds.parquet}
features:
  row: {type: int64, source: __index_level_0__}
  carat: {type: float}
  cut: {type: string}
  color: {type: string}
  clarity: {type: string}
  depth: {type: float}
  price: {type: int64}
splits: {key: __index_level_0__, train: 70, eval: 30}
output: {path: out}
"""
UMATH = """name: umath
source: {format: parquet, path: umath.parquet}
features:
  row: {type: int64}
  dtype: {type: string}
  input: {type: string}
  output: {type: string}
  ulperrortol: {type: int64}
  value: {type: float, missing: omit}
splits: {key: row, train: 80, eval: 20}
output: {path: out}
"""


def _umath_parquet(path: pathlib.Path) -> None:
    """numpy's ufunc validation tables as one Parquet file: their columns, a row number and
    the float32 rows' inputs decoded from their bit patterns (null for the other rows)."""
    folder = pathlib.Path(np.__file__).parent / "_core" / "tests" / "data"
    found = sorted(folder.glob("umath-validation-set-*.csv"))
    assert found, "numpy ships its validation tables in this pinned version"
    tables = []
    for csv in found:
        table = pacsv.read_csv(csv, parse_options=pacsv.ParseOptions(
            invalid_row_handler=lambda row: "skip"),  # their "## section ##" lines
            convert_options=pacsv.ConvertOptions(column_types={
                "dtype": pa.string(), "input": pa.string(), "output": pa.string(),
                "ulperrortol": pa.int64()}))
        tables.append(table.select(["dtype", "input", "output", "ulperrortol"]))
    table = pa.concat_tables(tables).combine_chunks()
    dtype, bits = table.column("dtype").to_pylist(), table.column("input").to_pylist()
    value = [float(np.array([int(b, 16)], np.uint32).view(np.float32)[0])
             if d == "np.float32" else None for d, b in zip(dtype, bits)]
    table = table.append_column("row", pa.array(np.arange(table.num_rows)))
    pq.write_table(table.append_column("value", pa.array(value, pa.float32())), path)


def _build(config: pathlib.Path, source: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    cli.run_build(["--config", str(config), "--input", str(source), "--output", str(out),
                   "--version", "v1"])
    return out / "v1"


def _our_statistics(version: pathlib.Path, config: pathlib.Path, out: pathlib.Path,
                    tamper=None) -> tuple[pathlib.Path, dict[str, list[str]]]:
    """Our statistics of a version's splits, written to ``out``, and each split's shards;
    ``tamper(split, features by name)`` may change them first. Every stored key of the
    config gets statistics, its ``bytes`` features (binary: images, blobs) ``bytes_stats``."""
    manifest = json.loads((version / "manifest.json").read_text())
    specs = load_config(str(config)).features
    kinds = kinds_for_specs(specs, images=[s.name for s in specs if s.dtype == "bytes"])
    datasets, splits = [], {}
    for split in manifest["splits"]:
        paths = shard_paths(version, manifest, split)
        acc = DatasetAccumulator(kinds)
        for path in paths:
            acc.add_serialized(read_records(path))
        result = acc.result(split)
        if tamper:
            tamper(split, {f["path"]["step"][0]: f for f in result["features"]})
        datasets.append(result)
        splits[split] = [str(p) for p in paths]
    out.write_bytes(encode_statistics_list(datasets))
    return out, splits


def _committed_statistics(version: pathlib.Path) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The statistics file the build committed for each split, and each split's shards."""
    manifest = json.loads((version / "manifest.json").read_text())
    assert set(manifest["statistics"]) == set(manifest["splits"])
    return ({split: str(version / entry["path"])
             for split, entry in manifest["statistics"].items()},
            {split: [str(p) for p in shard_paths(version, manifest, split)]
             for split in manifest["splits"]})


def _tamper(split: str, features: dict) -> None:
    """Three wrong numbers in the train split of configs/csv.yaml's version: the oracle
    must name each, and TFDV's validation must see ``id`` as missing somewhere."""
    if split != "train":
        return
    common = features["id"]["num_stats"]["common_stats"]
    common["num_non_missing"] -= 1
    common["num_missing"] += 1
    features["is_member"]["num_stats"]["mean"] *= 1 + 1e-5
    features["name"]["string_stats"]["top_values"][0]["frequency"] += 1


@pytest.fixture(scope="module")
def compared(tmp_path_factory, tfdv_python, sample_builds) -> dict:
    """Every case built (the sample configs' builds are shared: read only), its statistics
    computed, and TFDV's comparison of them."""
    root = tmp_path_factory.mktemp("tfdv")
    configs = {name: ROOT / "configs" / f"{name}.yaml" for name in LOCAL}
    versions = {name: sample_builds[name] for name in LOCAL}
    foreign = root / "foreign"
    foreign.mkdir()
    diamonds = pathlib.Path(pa.__file__).parent / "tests" / "data" / "parquet" / "v0.7.1.parquet"
    assert diamonds.exists(), "pyarrow ships its parquet test data in this pinned version"
    _umath_parquet(foreign / "umath.parquet")
    for name, text, source in (("diamonds", DIAMONDS, diamonds),
                               ("umath", UMATH, foreign / "umath.parquet")):
        configs[name] = foreign / f"{name}.yaml"
        configs[name].write_text(text)
        versions[name] = _build(configs[name], source, root / name)
    job = []
    for name, version in versions.items():
        stats, splits = _committed_statistics(version)
        job.append({"name": name, "stats": stats, "splits": splits,
                    "schema": str(version / "schema.pbtxt")})
    stats, splits = _our_statistics(versions["csv"], configs["csv"],
                                    root / "tampered-FeatureStats.pb", _tamper)
    job.append({"name": "tampered", "stats": str(stats), "splits": splits,
                "schema": str(versions["csv"] / "schema.pbtxt")})
    (root / "job.json").write_text(json.dumps(job))
    done = subprocess.run(
        [tfdv_python, str(COMPARE), str(root / "job.json"), "--out", str(root / "out.json")],
        capture_output=True, text=True, timeout=1200,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((root / "out.json").read_text())


def test_every_case_was_compared(compared):
    assert set(compared["cases"]) == {*LOCAL, "diamonds", "umath", "tampered"}
    assert compared["tfdv_version"] == "1.16.1"
    for name, case in compared["cases"].items():
        assert case["features"] > 0, name


@pytest.mark.parametrize("name", [*LOCAL, "diamonds", "umath"])
def test_tfdv_agrees_with_our_statistics(name, compared):
    assert compared["cases"][name]["mismatches"] == []


@pytest.mark.parametrize("name", [*LOCAL, "diamonds", "umath"])
def test_tfdv_finds_no_anomaly_against_our_schema(name, compared):
    anomalies = compared["cases"][name]["anomalies"]
    assert anomalies and all(found == [] for found in anomalies.values()), anomalies


def test_the_oracle_names_each_wrong_number_and_tfdv_sees_the_anomaly(compared):
    tampered = compared["cases"]["tampered"]
    found = {(m["split"], m["feature"], m["field"]) for m in tampered["mismatches"]}
    assert found == {("train", "id", "common.num_non_missing"),
                     ("train", "id", "common.num_missing"),
                     ("train", "is_member", "num_stats.mean"),
                     ("train", "name", "top_values[0]")}, tampered["mismatches"]
    assert tampered["anomalies"]["eval"] == []
    assert any(a.startswith("id:") for a in tampered["anomalies"]["train"]), tampered
