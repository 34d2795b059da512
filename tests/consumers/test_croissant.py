"""Every version's ``croissant.json``: what it says (from the manifest and the config's
``about:``), and that MLCommons' own ``mlcroissant validate`` accepts a built version's with
no error and no warning (in .venv-croissant, locks/croissant-oracle-py3.11.txt)."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.config import ConfigError, parse_config
from beam_tfrecords.pipelines.verify import verify_path
from beam_tfrecords.sinks.format.croissant import CONFORMS_TO, croissant_document

MANIFEST = {
    "name": "people", "version": "20261126T000000Z", "created": "2026-11-26T00:00:00Z",
    "compression": "gzip", "splits": {"train": {}, "eval": {}},
    "feature_spec": {"features": {
        "id": {"type": "FixedLenFeature", "shape": [], "dtype": "int64"},
        "score": {"type": "FixedLenFeature", "shape": [3], "dtype": "float32"},
        "tags": {"type": "VarLenFeature", "dtype": "string"}}},
}


def test_the_document_describes_the_shards_and_a_field_per_feature():
    doc = croissant_document(MANIFEST, {"license": "CC-BY-4.0", "version": "2.0.0"})
    assert doc["conformsTo"] == CONFORMS_TO and doc["version"] == "2.0.0"
    assert doc["license"] == "CC-BY-4.0" and "url" not in doc
    assert doc["datePublished"] == "2026-11-26" and "20261126T000000Z" in doc["description"]
    (shards,) = doc["distribution"]
    assert shards["includes"] == ["eval/*.tfrecord.gz", "train/*.tfrecord.gz"]
    fields = {f["name"]: f for f in doc["recordSet"][0]["field"]}
    assert {n: (f["dataType"], f.get("repeated", False)) for n, f in fields.items()} == {
        "id": ("sc:Integer", False), "score": ("sc:Float", True), "tags": ("sc:Text", True)}
    assert croissant_document(MANIFEST, {}) == croissant_document(MANIFEST, {})


def test_about_version_must_be_semantic():
    raw = {"name": "x", "source": {"format": "csv", "path": "a.csv"},
           "features": {"a": {"type": "int64"}}, "output": {"path": "out"},
           "about": {"version": "v1"}}
    with pytest.raises(ConfigError, match="about.version"):
        parse_config(raw)


CONFIG = """name: people
source: {{format: csv, path: {data}}}
features:
  id: {{type: int64}}
  score: {{type: float}}
  tags: {{type: string, shape: [-1], source: tag}}
splits: {{key: id, train: 80, eval: 20}}
output: {{path: {out}}}
about:
  description: People and their scores, for a test.
  license: https://creativecommons.org/licenses/by/4.0/
  citation: "@misc{{people, title={{People}}}}"
  url: https://example.org/people
  version: 1.2.0
"""


@pytest.mark.slow
def test_mlcroissant_validates_a_built_version(tmp_path, croissant_python):
    data = tmp_path / "people.jsonl"
    data.write_text("".join(json.dumps({"id": i, "score": i / 7, "tag": ["a", "b"][: i % 3]})
                            + "\n" for i in range(50)))
    config = tmp_path / "people.yaml"
    config.write_text(CONFIG.format(data=data, out=tmp_path / "out").replace(
        "format: csv", "format: jsonl"))
    assert cli.main(["build", "--config", str(config), "--version", "v1"]) == 0
    version = tmp_path / "out" / "v1"
    path = version / "croissant.json"
    assert "croissant.json" in json.loads((version / "manifest.json").read_text())[
        "metadata_files"]
    doc = json.loads(path.read_text())
    assert (doc["version"], doc["url"]) == ("1.2.0", "https://example.org/people")
    done = subprocess.run(
        [str(pathlib.Path(croissant_python).parent / "mlcroissant"), "validate", "--jsonld",
         str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr.lower() and "error" not in done.stderr.lower(), (
        done.stderr)
    issues = subprocess.run(
        [croissant_python, "-c", "import sys, mlcroissant as mlc; "
         "print(mlc.Dataset(sys.argv[1]).metadata.issues.report())", str(path)],
        capture_output=True, text=True, timeout=300)
    assert issues.returncode == 0 and issues.stdout.strip() == "", issues.stdout
    path.unlink()  # verify notices it gone
    problems = [p for c in verify_path(str(version)) for p in c.problems]
    assert any("missing: a metadata file" in p for p in problems), problems
