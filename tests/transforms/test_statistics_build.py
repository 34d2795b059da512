"""The statistics a build commits, against exact references from the Examples it committed.

Every sample config whose input ships with the repository is built once (module-scoped).
Each split's ``statistics/Split-<split>/FeatureStats.pb`` -- taken from the columns the
encoder wrote -- must be (a) the very bytes the slow, general way in gives on the committed
shards (every Example decoded and added one by one), and (b) agree with a reference computed
here with numpy, exact integers and ``math.fsum`` from the decoded Examples: counts, missing
and min/max exactly, mean and standard deviation within 1e-9 relative, zeros, string lengths,
unique counts and top values exactly where the file says its sketches were exact. Also:
``verify`` catches a damaged or missing statistics file, ``output.statistics: false`` writes
none, and a seeded build's statistics (and report.html) are the same bytes on another runner.
"""

from __future__ import annotations

import collections
import json
import math
import pathlib
import shutil
from fractions import Fraction

import pytest
from beam_tfrecords_tests_helpers import duplicate_counts, read_records, shard_paths

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.config import load_config
from beam_tfrecords.pipelines.verify import verify_path
from beam_tfrecords.sinks import ownership
from beam_tfrecords.transforms.codec import wire
from beam_tfrecords.transforms.compute_statistics import statistics_kinds
from beam_tfrecords.transforms.stats.dataset_stats import DatasetAccumulator
from beam_tfrecords.transforms.stats.statistics_wire import (
    decode_statistics_list,
    encode_statistics_list,
)

pytestmark = pytest.mark.e2e  # whole builds

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOCAL = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml")
               if (ROOT / load_config(str(p)).source.path).exists())
REL = 1e-9
FLOAT32_REL = 2.0**-23


def _build(config: pathlib.Path, out: pathlib.Path, *extra: str) -> pathlib.Path:
    cli.run_build(["--config", str(config), "--input",
               str(ROOT / load_config(str(config)).source.path), "--output", str(out),
               "--version", "v1", *extra])
    return out / "v1"


@pytest.fixture(scope="module")
def versions(sample_builds) -> dict[str, pathlib.Path]:
    """Shared with other files (tests/conftest.py): read only, copy to change."""
    return {name: sample_builds[name] for name in LOCAL}


def _manifest(version: pathlib.Path) -> dict:
    return json.loads((version / "manifest.json").read_text())


def _committed(version: pathlib.Path, split: str) -> bytes:
    return (version / _manifest(version)["statistics"][split]["path"]).read_bytes()


@pytest.mark.parametrize("name", LOCAL)
def test_every_split_has_its_statistics_in_tfx_layout(name, versions):
    version = versions[name]
    manifest = _manifest(version)
    assert set(manifest["statistics"]) == set(manifest["splits"])
    for split, entry in manifest["statistics"].items():
        assert entry["path"] == f"statistics/Split-{split}/FeatureStats.pb"
        (dataset,) = decode_statistics_list(_committed(version, split))
        assert dataset["name"] == split
        assert dataset.get("num_examples", 0) == manifest["splits"][split]["records"]


@pytest.mark.parametrize("name", LOCAL)
def test_committed_statistics_are_those_of_the_committed_examples(name, versions):
    """The columns the encoder wrote give the same bytes as decoding every Example."""
    version, manifest = versions[name], _manifest(versions[name])
    specs = load_config(str(ROOT / "configs" / f"{name}.yaml")).features
    kinds = statistics_kinds(specs)
    images = [s.name for s in specs if s.source == ("image",) and s.dtype == "bytes"]
    for split in manifest["splits"]:
        acc = DatasetAccumulator(kinds)
        for path in shard_paths(version, manifest, split):
            records = read_records(path)
            acc.add_serialized(records)
            for key in images:  # the sample configs store each image's header facts too
                examples = [wire.decode_example(r) for r in records]
                acc.add_image_facts(key, [e["format"][1][0].decode() for e in examples],
                                    [e["height"][1][0] for e in examples],
                                    [e["width"][1][0] for e in examples])
        assert _committed(version, split) == encode_statistics_list([acc.result(split)]), split


@pytest.mark.parametrize("name", [n for n in LOCAL if n.startswith("images")])
def test_image_features_carry_their_format_and_sizes(name, versions):
    version = versions[name]
    (dataset,) = decode_statistics_list(_committed(version, "train"))
    image = next(f for f in dataset["features"] if f["path"]["step"] == ["image_raw"])
    assert image["type"] == "BYTES"
    custom = {c["name"]: c for c in image["custom_stats"]}
    assert {"image_format_histogram", "image_max_width", "image_min_height"} <= set(custom)
    labels = {b["label"] for b in custom["image_format_histogram"]["rank_histogram"]["buckets"]}
    assert labels <= {"JPEG", "PNG", "GIF", "BMP", "WEBP"} and labels


def _reference(records: list[bytes]) -> dict[str, dict]:
    """Per stored key, what the statistics must say, from the decoded Examples alone."""
    rows: dict[str, list] = collections.defaultdict(list)
    for record in records:
        for key, (_, values) in wire.decode_example(record).items():
            rows[key].append(values)
    return rows


def _close(ours: float, want: float, what: str, rel: float = REL) -> None:
    assert math.isclose(ours, want, rel_tol=rel, abs_tol=0.0 if want else 1e-300), (
        what, ours, want)


def _check_numbers(stats: dict, values: list, kind: str, where: str) -> None:
    num = stats["num_stats"]
    finite = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
    assert num.get("num_zeros", 0) == sum(v == 0 for v in values), where
    if not finite:
        return
    # proto3 leaves a field holding 0 out
    assert num.get("min", 0.0) == float(min(finite)), where
    assert num.get("max", 0.0) == float(max(finite)), where
    if any(math.isinf(v) for v in finite):
        return
    if kind == "INT":  # exact integers, then one rounding
        n = len(finite)
        mean = Fraction(sum(finite), n)
        var = Fraction(sum(v * v for v in finite), n) - mean * mean
        want_mean, want_std = float(mean), math.sqrt(float(var))
    else:
        want_mean = math.fsum(finite) / len(finite)
        want_std = math.sqrt(math.fsum((v - want_mean) ** 2 for v in finite) / len(finite))
    _close(num.get("mean", 0.0), want_mean, f"{where} mean")
    _close(num.get("std_dev", 0.0), want_std, f"{where} std_dev")


def _check_strings(stats: dict, values: list, custom: dict, where: str) -> None:
    kind = "string_stats" if "string_stats" in stats else "bytes_stats"
    part = stats[kind]
    if values:
        avg = part["avg_length"] if kind == "string_stats" else part["avg_num_bytes"]
        # a float field of statistics.proto: float32's rounding
        _close(avg, math.fsum(len(v) for v in values) / len(values), f"{where} length",
               FLOAT32_REL)
    if custom.get("btf:unique_exact") == 1.0:
        assert part.get("unique", 0) == len(set(values)), where
    if kind == "string_stats" and custom.get("btf:top_values_exact") == 1.0:
        counts = collections.Counter(values)
        for top in part.get("top_values", []):
            value = top["value"].encode("utf-8")
            if value in counts:  # labels of non-UTF-8 and long values are previews
                assert top["frequency"] == counts[value], (where, top)


@pytest.mark.parametrize("name", LOCAL)
def test_statistics_equal_an_exact_reference(name, versions):
    version, manifest = versions[name], _manifest(versions[name])
    for split, info in manifest["splits"].items():
        records = [r for path in shard_paths(version, manifest, split)
                   for r in read_records(path)]
        reference = _reference(records)
        (dataset,) = decode_statistics_list(_committed(version, split))
        for stats in dataset["features"]:
            key = stats["path"]["step"][0]
            where = f"{name}/{split}/{key}"
            rows = reference.get(key, [])
            part = next(stats[k] for k in ("num_stats", "string_stats", "bytes_stats")
                        if k in stats)
            common = part["common_stats"]
            assert common.get("num_non_missing", 0) == len(rows), where
            assert common.get("num_missing", 0) == info["records"] - len(rows), where
            flat = [v for row in rows for v in row]
            assert common.get("tot_num_values", 0) == len(flat), where
            if rows:
                sizes = [len(row) for row in rows]
                assert common.get("min_num_values", 0) == min(sizes), where
                assert common.get("max_num_values", 0) == max(sizes), where
            custom = {c["name"]: c.get("num") for c in stats.get("custom_stats", [])}
            if "num_stats" in stats:
                _check_numbers(stats, flat, stats.get("type", "INT"), where)
            else:
                _check_strings(stats, flat, custom, where)


def test_verify_catches_a_damaged_or_missing_statistics_file(versions, tmp_path):
    copy = tmp_path / "v1"
    shutil.copytree(versions["csv"], copy)
    assert all(c.ok for c in verify_path(str(copy)))
    (entry_split, entry), *_ = sorted(_manifest(copy)["statistics"].items())
    damaged = copy / entry["path"]
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 0x01
    damaged.write_bytes(bytes(data))
    problems = [p for c in verify_path(str(copy)) for p in c.problems]
    assert any("crc32c" in p for p in problems), problems
    damaged.unlink()
    problems = [p for c in verify_path(str(copy)) for p in c.problems]
    assert any("missing: a statistics file" in p for p in problems), problems


def test_statistics_can_be_turned_off(tmp_path):
    config = tmp_path / "off.yaml"
    text = (ROOT / "configs" / "csv.yaml").read_text()
    config.write_text(text.replace("output:\n", "output:\n  statistics: false\n", 1))
    version = _build(config, tmp_path / "out")
    assert "statistics" not in _manifest(version)
    assert "duplicates" not in _manifest(version)  # counted with the statistics only
    assert not (version / "statistics").exists()
    assert _manifest(version)["config"]["output"]["statistics"] is False
    assert all(c.ok for c in verify_path(str(version)))


@pytest.mark.parametrize("name", LOCAL)
def test_duplicates_and_leaks_are_those_of_a_counter_over_the_committed_records(
        name, versions):
    """The manifest's ``duplicates`` of every sample build (data nobody here planted
    anything in) against Counters over the records read back from its shards."""
    version = versions[name]
    manifest = _manifest(version)
    want = duplicate_counts({split: [record for path in shard_paths(version, manifest, split)
                                     for record in read_records(path)]
                             for split in manifest["splits"]})
    assert {k: manifest["duplicates"][k] for k in want} == want


@pytest.mark.slow
def test_seeded_statistics_are_the_same_bytes_on_another_runner(versions, tmp_path):
    """Statistics depend on the multiset of values only: a seeded build on two worker
    processes writes the bytes the in-process, unshuffled build wrote."""
    version = _build(ROOT / "configs" / "csv.yaml", tmp_path / "mp", "--shuffle-seed", "5",
                     "--direct_running_mode=multi_processing", "--direct_num_workers=2")
    for split in _manifest(version)["splits"]:
        assert _committed(version, split) == _committed(versions["csv"], split), split
    # Its report.html too is the same page as an in-process seeded build's, but for the
    # time each manifest records (the page holds no other time).
    again = _build(ROOT / "configs" / "csv.yaml", tmp_path / "ip", "--shuffle-seed", "5")
    pages = [(v / "report.html").read_text().replace(_manifest(v)["created"], "CREATED")
             for v in (version, again)]
    assert pages[0] == pages[1]


def test_a_killed_builds_statistics_and_anomalies_are_its_own_to_clean():
    """What a build killed before its manifest left is removed by the next one: its
    statistics and anomalies.json are names a build writes; nothing else near them is."""
    leftover = ownership.Entry("v9", files=(
        "statistics/Split-train/FeatureStats.pb",
        "statistics/Split-eval/FeatureStats.pb.tmp-" + "0" * 32, "anomalies.json",
        "statistics/notes.txt", "statistics/Split-train/other.pb"))
    assert ownership.written_by_build(leftover) == [
        "statistics/Split-train/FeatureStats.pb",
        "statistics/Split-eval/FeatureStats.pb.tmp-" + "0" * 32, "anomalies.json"]
