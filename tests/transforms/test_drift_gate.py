"""The drift gate on whole builds: a scheduled rebuild's story, end to end, through the CLI.

Build; rebuild on the same data (the gate passes, LATEST moves); rebuild on a fresh sample
of the same distribution (passes); rebuild on drifted data -- a column all null, a
category's share shifted, a third of the rows gone -- (exit 3, LATEST stays, anomalies.json
and the one line name each, verify accepts the held-back version, retention keeps it);
promote moves LATEST. Also: the first build and a baseline without statistics pass with a
note, and a gate without statistics is a config error.
"""

from __future__ import annotations

import csv
import json
import pathlib
import random
import re
import shutil

import apache_beam as beam
import pytest

import beam_tfrecords as btf
from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.config import ConfigError, parse_config
from beam_tfrecords.pipelines.verify import verify_path
from beam_tfrecords.sinks.commit import apply_retention
from beam_tfrecords.sinks.format.layout import InvalidName, check_name
from beam_tfrecords.transforms.write_dataset import DatasetError

pytestmark = pytest.mark.e2e  # whole builds

CONFIG = """name: gate
source: {{format: csv, path: {data}, csv: {{null_values: [""]}}}}
features:
  age: {{type: int64}}
  score: {{type: float, missing: omit}}
  city: {{type: string}}
splits: {{key: id, train: 80, eval: 20}}
output: {{path: {out}{extra}}}
validate: {{}}
"""


def write_rows(path: pathlib.Path, n: int, seed: int, *, weights=(0.4, 0.3, 0.2, 0.1),
               null_score: bool = False) -> pathlib.Path:
    rng = random.Random(seed)
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["id", "age", "score", "city"])
        for i in range(n):
            out.writerow([f"{seed}-{i}", rng.randint(18, 80),
                          "" if null_score else f"{rng.gauss(0, 1):.6f}",
                          rng.choices(["paris", "lima", "oslo", "kyiv"], weights)[0]])
    return path


def build(tmp: pathlib.Path, data: pathlib.Path, version: str, extra: str = "") -> int:
    config = tmp / f"{version}.yaml"
    config.write_text(CONFIG.format(data=data, out=tmp / "out", extra=extra))
    return cli.main(["build", "--config", str(config), "--version", version])


def latest(tmp: pathlib.Path) -> str:
    return (tmp / "out" / "LATEST").read_text().strip()


def gate(tmp: pathlib.Path, version: str) -> dict:
    return json.loads((tmp / "out" / version / "manifest.json").read_text())["gate"]


@pytest.fixture(scope="module")
def story(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("gate")
    same = write_rows(tmp / "a.csv", 3000, 1)
    fresh = write_rows(tmp / "b.csv", 3000, 2)
    drifted = write_rows(tmp / "c.csv", 2000, 3, weights=(0.1, 0.1, 0.1, 0.7),
                         null_score=True)
    status = {"v1": build(tmp, same, "v1")}
    status["v2"] = build(tmp, same, "v2")
    status["v3"] = build(tmp, fresh, "v3")
    status["latest_before"] = latest(tmp)
    status["v4"] = build(tmp, drifted, "v4")
    status["latest_after"] = latest(tmp)
    return {"tmp": tmp, "status": status}


def test_first_build_passes_with_a_note(story):
    assert story["status"]["v1"] == 0
    found = gate(story["tmp"], "v1")
    assert found["passed"] is True and found["against"] is None
    assert "nothing to compare" in found["note"]


def test_a_rebuild_on_the_same_data_and_on_a_fresh_sample_pass(story):
    assert story["status"]["v2"] == 0 and story["status"]["v3"] == 0
    assert gate(story["tmp"], "v2") == {"path": "anomalies.json", "passed": True,
                                        "against": "v1", "anomalies": 0, "line": ""}
    assert gate(story["tmp"], "v3")["passed"] is True
    assert story["status"]["latest_before"] == "v3"


def test_drifted_data_is_committed_but_leaves_latest(story, capsys):
    tmp = story["tmp"]
    assert story["status"]["v4"] == cli.EXIT_DRIFT == 3
    assert story["status"]["latest_after"] == "v3"
    found = json.loads((tmp / "out" / "v4" / "anomalies.json").read_text())
    assert found["passed"] is False and found["against"] == "v3"
    kinds = {(a["kind"], a["feature"]) for a in found["anomalies"]}
    assert {("missing", "score"), ("linf", "city"), ("count", "")} <= kinds
    assert "score: missing 0.0% -> 100.0%" in found["line"]
    assert all(c.ok for c in verify_path(str(tmp / "out" / "v4")))


def test_every_version_carries_its_report_compared_with_the_previous(story, tmp_path):
    """report.html is committed (listed, checked by verify) into every version, compared
    with the version LATEST named before the build, the gate's anomalies marked."""
    out = story["tmp"] / "out"
    first = (out / "v1" / "report.html").read_text()
    assert "compared with version" not in first
    page = (out / "v4" / "report.html").read_text()
    assert "compared with version <b>v3</b>" in page
    for feature in ("score", "city"):
        assert re.search(rf'<section class="feature flagged" id="f\d+"><h3>{feature}<', page)
    entry = json.loads((out / "v4" / "manifest.json").read_text())["report"]
    assert entry["path"] == "report.html" and entry["bytes"] == len(page.encode())
    copy = tmp_path / "v4"
    shutil.copytree(out / "v4", copy)
    (copy / "report.html").write_text(page.replace("v3", "v0"))
    problems = [p for c in verify_path(str(copy)) for p in c.problems]
    assert any("crc32c" in p for p in problems), problems
    (copy / "report.html").unlink()
    problems = [p for c in verify_path(str(copy)) for p in c.problems]
    assert any("missing: the report" in p for p in problems), problems
    with pytest.raises(InvalidName, match="reserved"):
        check_name("split", "Report.html")


def test_retention_keeps_the_version_awaiting_promotion(story):
    tmp = story["tmp"]
    apply_retention(str(tmp / "out"), 1, latest(tmp))
    assert (tmp / "out" / "v4" / "manifest.json").exists()
    assert (tmp / "out" / latest(tmp) / "manifest.json").exists()


def test_promote_moves_latest_after_review(story, capsys):
    tmp = story["tmp"]
    assert cli.main(["promote", str(tmp / "out" / "v4")]) == 0
    assert latest(tmp) == "v4"
    assert "LATEST now names v4 (was v3)" in capsys.readouterr().out
    assert cli.main(["promote", str(tmp / "out" / "nope")]) == 1


def _build_without_statistics(tmp: pathlib.Path) -> pathlib.Path:
    """Version v1 of 300 rows, built without statistics; returns its data."""
    data = write_rows(tmp / "a.csv", 300, 1)
    config = tmp / "off.yaml"
    config.write_text(CONFIG.format(data=data, out=tmp / "out", extra="")
                      .replace("validate: {}\n", "").replace(
                          "output: {path: ", "output: {statistics: false, path: "))
    assert cli.main(["build", "--config", str(config), "--version", "v1"]) == 0
    return data


def test_a_baseline_without_statistics_passes_with_a_note(tmp_path):
    data = _build_without_statistics(tmp_path)
    assert build(tmp_path, data, "v2") == 0
    found = gate(tmp_path, "v2")
    assert found["passed"] is True and "has no statistics" in found["note"]
    assert latest(tmp_path) == "v2"


def test_stats_computes_an_old_versions_statistics_for_the_gate(tmp_path, capsys):
    """``beam-tfrecords stats`` reads a version built without statistics into a folder of
    its own (never the version): the very bytes a build of the same data commits; the next
    build's gate and report use them as the baseline's (--baseline-statistics)."""
    data = _build_without_statistics(tmp_path)
    v1 = tmp_path / "out" / "v1"
    assert cli.main(["stats", str(v1), "--out", str(v1 / "x")]) == 1
    assert "inside the committed version" in capsys.readouterr().err
    side = tmp_path / "v1-stats"
    assert cli.main(["stats", str(v1), "--out", str(side)]) == 0
    assert not (v1 / "statistics").exists()
    config = tmp_path / "v2.yaml"
    config.write_text(CONFIG.format(data=data, out=tmp_path / "out", extra=""))
    assert cli.main(["build", "--config", str(config), "--version", "v2",
                     "--baseline-statistics", str(side)]) == 0
    found = gate(tmp_path, "v2")
    assert found == {"path": "anomalies.json", "passed": True, "against": "v1",
                     "anomalies": 0, "line": "",
                     "note": f"version v1's statistics from {side}"}
    v2 = tmp_path / "out" / "v2"
    for split, entry in json.loads((v2 / "manifest.json").read_text())["statistics"].items():
        assert (side / entry["path"]).read_bytes() == (v2 / entry["path"]).read_bytes(), split
    page = (v2 / "report.html").read_text()
    assert "compared with version <b>v1</b>" in page and "other version has no" not in page


def test_the_gate_is_on_by_default_and_validate_false_turns_it_off(tmp_path):
    """No ``validate:`` section: the gate runs with the defaults; ``validate: false``: not."""
    data = write_rows(tmp_path / "a.csv", 300, 1)
    assert build(tmp_path, data, "v1") == 0
    config = tmp_path / "v2.yaml"
    config.write_text(CONFIG.format(data=write_rows(tmp_path / "b.csv", 100, 3), out=tmp_path
                                    / "out", extra="").replace("validate: {}\n", ""))
    assert cli.main(["build", "--config", str(config), "--version", "v2"]) == cli.EXIT_DRIFT
    assert latest(tmp_path) == "v1" and gate(tmp_path, "v2")["passed"] is False
    config.write_text(config.read_text() + "validate: false\n")
    assert cli.main(["build", "--config", str(config), "--version", "v3"]) == 0
    assert latest(tmp_path) == "v3" and "gate" not in json.loads(
        (tmp_path / "out" / "v3" / "manifest.json").read_text())


def _api_build(out: pathlib.Path, version: str, rows: list[dict], **kwargs) -> None:
    with beam.Pipeline() as p:
        _ = p | beam.Create(rows) | btf.WriteTFRecordDataset(
            str(out), "api", features={"x": {"type": "float", "missing": "omit"},
                                       "c": {"type": "string"}},
            version=version, **kwargs)


def test_the_library_transform_gates_and_raises_after_the_commit(tmp_path):
    """WriteTFRecordDataset: the gate is on by default; a held-back version is committed,
    its manifest's gate says so, LATEST stays, and the pipeline fails with
    DriftGateError naming the version; validate=False builds it without a gate."""
    rng = random.Random(1)
    same = [{"x": rng.gauss(0, 1), "c": rng.choice("ab")} for _ in range(400)]
    _api_build(tmp_path, "v1", same)
    gone_null = [{"x": None, "c": row["c"]} for row in same]
    with pytest.raises(btf.DriftGateError, match=r"version v2 committed, LATEST stays at "
                       r"v1: .*x: missing 0\.0% -> 100\.0%.*promote"):
        _api_build(tmp_path, "v2", gone_null)
    assert (tmp_path / "LATEST").read_text().strip() == "v1"
    manifest = json.loads((tmp_path / "v2" / "manifest.json").read_text())
    assert manifest["gate"]["passed"] is False and (tmp_path / "v2" / "report.html").exists()
    assert all(c.ok for c in verify_path(str(tmp_path / "v2")))
    _api_build(tmp_path, "v3", gone_null, validate=False)
    assert (tmp_path / "LATEST").read_text().strip() == "v3"
    with pytest.raises(DatasetError, match="unknown threshold"):
        btf.WriteTFRecordDataset(str(tmp_path), "api", validate={"max_lin": 0.2})


def test_a_gate_needs_statistics():
    raw = {"name": "x", "source": {"format": "csv", "path": "a.csv"},
           "features": {"a": {"type": "int64"}},
           "output": {"path": "out", "statistics": False}, "validate": {}}
    with pytest.raises(ConfigError, match="validate"):
        parse_config(raw)
    raw["validate"] = {"max_linf": 2}
    raw["output"]["statistics"] = True
    with pytest.raises(ConfigError, match="validate.max_linf"):
        parse_config(raw)
    raw["validate"] = {"max_linf": 0.2, "ignore": ["a"]}
    assert parse_config(raw).validate.max_linf == 0.2
