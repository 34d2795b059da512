"""Our transforms in Beam YAML pipelines, run by Beam's YAML entry point
(``apache_beam.yaml.main.run``, what ``python -m apache_beam.yaml.main
--yaml_pipeline_file=...`` calls) in a subprocess (offline it falls back from Prism to the
local runner). YAML's ``Create`` and ``ReadFromCsv`` produce schema'd ``beam.Row`` s.

- ``type: PyTransform`` with ``constructor: beam_tfrecords.WriteTFRecordDataset``;
- a ``type: python`` provider with no packages (nothing installed, no network) naming
  ``WriteTFRecordDataset`` and ``ToExamples``, with YAML's ``error_handling`` output (these
  two are two writes of one pipeline, each to its own output);
- the example pipeline configs/beam_yaml/demo.yaml writes the same records as the command
  line's build of configs/demo.yaml;
- too many bad rows fail the YAML run, with nothing committed.

Every run spends most of its CPU importing Beam's YAML providers (their machine-learning
transforms import Vertex AI's client, ~6 CPU-s), so one process runs the three pipelines one
after another, the failing one last; the command itself, ``python -m apache_beam.yaml.main``,
runs the docs' YAML pipelines in tests/project/test_readme_snippets.py.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import re
import subprocess
import sys
from collections import Counter

import pytest

from beam_tfrecords.pipelines.verify import verify_path
from beam_tfrecords.sinks.format import tfrecord_format as tff

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "configs" / "beam_yaml" / "demo.yaml"
TIMEOUT = 600  # all three runs, one after another

ROWS = [{"id": i, "age": 20 + i, "name": f"p{i}"} for i in range(12)]
BAD = {"id": 99, "age": "unknown", "name": "bad"}
PROVIDER = """
providers:
  - type: python
    config: {}
    transforms:
      WriteTFRecordDataset: beam_tfrecords.pipelines.yaml_transforms.WriteTFRecordDataset
      ToExamples: beam_tfrecords.ToExamples
"""


def create(rows) -> str:
    return ("    - type: Create\n      config:\n        elements:\n" + "".join(
        f"          - {json.dumps(r)}\n" for r in rows))


def pipelines(tmp: pathlib.Path) -> dict[str, str]:
    """name -> YAML text of the pipelines the tests run (outputs under ``tmp``): ``both``
    writes the same rows through ``PyTransform`` (to ``pytransform/``) and through the
    provider's names (to ``provider/``), two writes of one run, each checked on its own."""
    out = {name: json.dumps(str(tmp / name / "ds")) for name in (
        "pytransform", "provider", "threshold")}
    return {
        "both": f"""pipeline:
  transforms:
{create(ROWS + [BAD])}
    - type: PyTransform
      input: Create
      config:
        constructor: beam_tfrecords.WriteTFRecordDataset
        kwargs:
          output: {out["pytransform"]}
          name: people
          version: v1
          features:
            age: {{type: int64}}
            name: {{type: string}}
          splits: {{key: id, train: 50, eval: 50}}
          max_bad_fraction: 0.1
    # ToExamples' three outputs go to the write by name; the write's error output is
    # consumed, as YAML demands.
    - type: ToExamples
      input: Create
      config:
        features:
          age: {{type: int64}}
          name: {{type: string}}
        splits: {{key: id, train: 50, eval: 50}}
    - type: WriteTFRecordDataset
      name: Write
      input: {{examples: ToExamples.examples, rejected: ToExamples.rejected,
              counts: ToExamples.counts}}
      config:
        output: {out["provider"]}
        name: people
        version: v1
        max_bad_fraction: 0.1
        error_handling: {{output: bad_rows}}
    - type: WriteToJson
      input: Write.bad_rows
      config: {{path: {json.dumps(str(tmp / "provider" / "bad"))}}}
{PROVIDER}""",
        "threshold": f"""pipeline:
  transforms:
{create(ROWS + [BAD])}
    - type: WriteTFRecordDataset
      input: Create
      config:
        output: {out["threshold"]}
        name: people
        version: v1
        features:
          age: {{type: int64}}
          name: {{type: string}}
{PROVIDER}""",
    }


# Runs each pipeline as ``python -m apache_beam.yaml.main ARGS`` would, in its folder; a run
# that raises is a failed run (the command exits 1 with the traceback). Between markers on
# stderr: each run's log and traceback, then its exit status.
_RUNNER = """
import json, logging, os, sys, traceback
from apache_beam.yaml import main

logging.getLogger().setLevel(logging.INFO)
for name, folder, argv in json.loads(sys.argv[1]):
    os.chdir(folder)
    print(f"=== start {name}", file=sys.stderr, flush=True)
    try:
        main.run(argv)
        code = 0
    except BaseException:
        traceback.print_exc()
        code = 1
    print(f"=== end {name} {code}", file=sys.stderr, flush=True)
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run every YAML pipeline in one process; ``runs(name)`` is one run's
    (exit status, stderr, output folder)."""
    tmp = tmp_path_factory.mktemp("yaml")
    plan, outputs = [], {}
    for name, text in pipelines(tmp).items():
        path = tmp / f"{name}.yaml"
        path.write_text(text)
        plan.append((name, str(tmp), [f"--yaml_pipeline_file={path}"]))
    for name in ("pytransform", "provider", "threshold"):
        (tmp / name).mkdir()
        outputs[name] = tmp / name / "ds"
    outputs["example"] = tmp / "example" / "demo"
    plan.insert(1, ("example", str(ROOT), [f"--yaml_pipeline_file={EXAMPLE}",
                                           "--jinja_variables=" + json.dumps(
                                               {"output": str(outputs["example"])})]))
    assert plan[-1][0] == "threshold"  # the failing run last: what it leaves touches no other
    done = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(plan)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"), timeout=TIMEOUT)
    found = {}
    for match in re.finditer(r"^=== start (\w+)\n(.*?)^=== end \1 (\d)$", done.stderr,
                             re.MULTILINE | re.DOTALL):
        run, stderr, code = match.groups()
        for name in ("pytransform", "provider") if run == "both" else (run,):
            found[name] = (int(code), stderr, outputs[name])

    def get(name: str):
        assert name in found, f"the run {name} never ended ({done.returncode}): " + (
            done.stderr[-3000:])
        return found[name]

    return get


def committed(out: pathlib.Path) -> tuple[pathlib.Path, dict]:
    version_dir = out / (out / "LATEST").read_text().strip()
    checks = verify_path(str(version_dir))
    assert checks and all(c.ok for c in checks), [c.problems for c in checks]
    return version_dir, json.loads((version_dir / "manifest.json").read_text())


def records(version_dir: pathlib.Path, manifest: dict) -> Counter:
    found = Counter()
    for info in manifest["splits"].values():
        for shard in info["shards"]:
            with open(version_dir / shard["path"], "rb") as handle:
                found.update(tff.iter_records(handle))
    return found


def read_people(read_with_tf, version_dir: pathlib.Path, manifest: dict) -> list:
    files = [version_dir / s["path"] for info in manifest["splits"].values()
             for s in info["shards"]]
    parsed = read_with_tf(files, spec=version_dir / "feature_spec.json")
    return sorted((r["age"], base64.b64decode(r["name"]).decode()) for r in parsed["records"])


@pytest.mark.parametrize("name", ["pytransform", "provider"])
def test_rows_from_yaml_become_a_committed_version(runs, read_with_tf, name):
    code, stderr, out = runs(name)
    assert code == 0, stderr[-3000:]
    version_dir, manifest = committed(out)
    assert manifest["counts"]["read"] == len(ROWS) + 1
    assert manifest["counts"]["written"] == len(ROWS)
    assert manifest["counts"]["rejected"] == 1
    assert set(manifest["splits"]) == {"train", "eval"}
    assert set(manifest["feature_spec"]["features"]) == {"age", "name"}
    (letter,) = [json.loads(line) for p in (version_dir / "dead_letter").glob("*.jsonl")
                 for line in p.read_text().splitlines()]
    assert letter["feature"] == "age" and "unknown" in letter["value"]
    assert read_people(read_with_tf, version_dir, manifest) == sorted(
        (r["age"], r["name"]) for r in ROWS)


def test_yaml_error_handling_output_holds_the_rejected_rows(runs):
    code, stderr, out = runs("provider")
    assert code == 0, stderr[-3000:]
    (rows_file,) = out.parent.glob("bad-*")
    (row,) = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert row["feature"] == "age" and row["source"] == "pcollection"
    assert "unknown" in row["element"] and "int64" in row["msg"]
    assert set(row) == {"element", "msg", "stack", "source", "row", "feature", "value"}


def test_too_many_bad_rows_fail_the_yaml_run(runs):
    code, stderr, out = runs("threshold")
    assert code != 0
    assert "max_bad_fraction=0.0" in stderr
    assert not (out / "LATEST").exists()
    assert list((out / ".failed").glob("v1-*/dead_letter/*.jsonl"))


def test_example_pipeline_writes_what_the_command_line_writes(runs, sample_builds):
    """configs/beam_yaml/demo.yaml reads the demo CSV through Beam YAML's ReadFromCsv; its
    records are the command line's build of configs/demo.yaml (the session's, shared), byte
    for byte (the splits differ: YAML's CSV reader types ``id`` as an integer, ours keeps CSV
    text, and the two hash differently)."""
    code, stderr, out = runs("example")
    assert code == 0, stderr[-3000:]
    version_dir, manifest = committed(out)
    assert manifest["counts"]["read"] == manifest["counts"]["written"] == 10_000
    assert set(manifest["splits"]) == {"train", "eval"}
    built_dir = sample_builds["demo"]
    built = json.loads((built_dir / "manifest.json").read_text())
    assert manifest["feature_spec"] == built["feature_spec"]
    assert records(version_dir, manifest) == records(built_dir, built)


@pytest.mark.parametrize("value", ["bad", {"output": 3}, {"output": "x", "main_tag": "y"},
                                   {"output": "manifest"}])
def test_error_handling_must_name_one_output(tmp_path, value):
    from beam_tfrecords.pipelines.api import DatasetError
    from beam_tfrecords.pipelines.yaml_transforms import WriteTFRecordDataset

    with pytest.raises(DatasetError, match="error_handling"):
        WriteTFRecordDataset(output=str(tmp_path), name="ds", features={"a": {"type": "int64"}},
                             error_handling=value)
