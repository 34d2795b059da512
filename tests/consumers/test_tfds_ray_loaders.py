"""Every sample config's committed version, loaded as it is by TensorFlow Datasets and by Ray
with our ``schema.pbtxt``, gives the values TensorFlow parses with ``feature_spec.json``.

The readers run in the TensorFlow environment (tests/tf_oracle/read_with_consumers.py), in the
session's TensorFlow oracle process, for all the readers and versions. What each check proves:

- TFDS: ``builder_from_directory(<version>)`` + ``as_dataset(split=...)`` yields, split by
  split, the records ``tf.io.parse_example`` yields with our exported spec (ragged features put
  together from their parts as the README shows); image folders' images are TFDS images whose
  undecoded bytes are the stored file and whose decoded shape is the header's;
- schema.pbtxt: tensorflow_metadata parses it; it lists exactly the keys the records hold, with
  their types, a shape only where every record has that many values, and presence 1 only
  where every record has the key; with it Ray's ``read_tfrecords(tf_schema=...)`` (README's
  snippet) reads every record, lists as lists, with the values TensorFlow decodes;
- gzip and zlib versions carry no TFDS metadata, and the manifest says why;
- README's consumer snippets, run unchanged with ``output/demo`` linked to each version's
  root: tf.data and TFDS yield TensorFlow's parse, Ray the stored values, Beam every record
  (PyTorch, DALI and TFX: tests/consumers/run_heavy.py).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import re
import subprocess
import sys
from collections import Counter

import pytest

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.config import load_config

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONSUMERS = ROOT / "tests" / "tf_oracle" / "read_with_consumers.py"
PRELOADED = ROOT / "tests" / "run_preloaded.py"
# The sample configs whose input ships with the repository (dataflow.yaml and flink.yaml name
# cluster paths).
LOCAL = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml")
               if (ROOT / load_config(str(p)).source.path).exists())


def _consumer(tf_python: str, tmp: pathlib.Path, reader: str, paths) -> dict:
    out = tmp / f"{reader}.json"
    done = subprocess.run(
        [tf_python, str(CONSUMERS), reader, "--out", str(out), *map(str, paths)],
        capture_output=True, text=True, timeout=1200,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", RAY_DEDUP_LOGS="0"),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


# The demo config's size is not the point here (its 10,000 rows cost each reader seconds):
# it reads the first rows of its data.
DEMO_ROWS = 500


@pytest.fixture(scope="module")
def versions(sample_builds, tmp_path_factory) -> dict[str, pathlib.Path]:
    """Each local sample config built once, uncompressed as configured (shared: read only);
    the demo config from its first ``DEMO_ROWS`` rows."""
    built = {name: sample_builds[name] for name in LOCAL if name != "demo"}
    config = ROOT / "configs" / "demo.yaml"
    tmp = tmp_path_factory.mktemp("demo")
    lines = (ROOT / load_config(str(config)).source.path).read_text().splitlines(True)
    (tmp / "demo.csv").write_text("".join(lines[:DEMO_ROWS + 1]))
    cli.run_build(["--config", str(config), "--input", str(tmp / "demo.csv"), "--output",
                   str(tmp / "demo"), "--version", "v1"])
    built["demo"] = tmp / "demo" / "v1"
    return dict(sorted(built.items()))


@pytest.fixture(scope="module")
def consumer_reads(versions, tf_oracle, tmp_path_factory) -> dict:
    """TFDS's and the schema's reads of every version, and README's tf.data, TFDS and Ray
    snippets run on each: in the session's TensorFlow process (``tf_oracle.script``; its
    import costs seconds, paid once per test process), which ends Ray's cluster after."""
    tmp = tmp_path_factory.mktemp("consumers-read")
    args = []
    for name, code in readme_snippets().items():
        if name in ("tf.data", "tfds", "ray"):
            (tmp / f"{name}.py").write_text(code)
            args += ["--snippet", f"{name}={tmp / f'{name}.py'}"]
    out = tmp / "all.json"
    done = tf_oracle.script(CONSUMERS, ["all", "--out", out, *args, *versions.values()],
                            cwd=tmp)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def tfds_read(consumer_reads) -> dict:
    return consumer_reads["tfds"]


@pytest.fixture(scope="module")
def schema_read(consumer_reads) -> dict:
    return consumer_reads["schema-raw"]


def _multiset(records) -> Counter:
    return Counter(json.dumps(r, sort_keys=True) for r in records)


def test_the_sample_configs_are_all_here():
    assert {"csv", "jsonl", "parquet", "avro", "images", "images_manifest", "demo"} <= set(LOCAL)


@pytest.mark.parametrize("name", LOCAL)
def test_tfds_loads_the_version_with_the_values_of_our_spec(name, versions, tfds_read):
    manifest = json.loads((versions[name] / "manifest.json").read_text())
    assert manifest["tfds"] == {"loadable": True}
    assert manifest["metadata_files"] == ["schema.pbtxt", "features.json", "dataset_info.json",
                                          "croissant.json"]
    result = tfds_read[str(versions[name])]
    assert result["loadable"]
    assert set(result["splits"]) == set(manifest["splits"])
    total = 0
    for split, read in result["splits"].items():
        assert len(read["tfds"]) == manifest["splits"][split]["records"]
        assert _multiset(read["tfds"]) == _multiset(read["tf"]), split
        total += len(read["tfds"])
    assert total == manifest["counts"]["written"] > 0


@pytest.mark.parametrize("name", [n for n in LOCAL if n.startswith("images")])
def test_tfds_images_are_the_stored_files_and_decode_to_the_header_shape(name, versions,
                                                                          tfds_read):
    result = tfds_read[str(versions[name])]
    image = "image_raw"  # both image configs name it so
    assert result["images"] == [image]
    for split, read in result["splits"].items():
        assert read["image_shapes"], split
        headers = sorted([r["height"], r["width"], r["channels"]] for r in read["tfds"])
        assert sorted(s[image] for s in read["image_shapes"]) == headers


def test_schema_matches_the_records(versions, schema_read):
    for name, version in versions.items():
        result = schema_read[str(version)]
        schema = {f["name"]: f for f in result["schema"]["feature"]}
        records = [r for read in result["splits"].values() for r in read["raw"]]
        assert records, name
        keys = {k for r in records for k in r}
        assert set(schema) == keys, name  # every stored key, nothing else
        kinds = {"INT": "int64_list", "FLOAT": "float_list", "BYTES": "bytes_list"}
        for key, feature in schema.items():
            seen = [r[key] for r in records if key in r]
            assert {s["kind"] for s in seen if s["kind"]} <= {kinds[feature["type"]]}, key
            if feature.get("presence", {}).get("minFraction") == 1.0:
                assert len(seen) == len(records), (name, key)
            if "shape" in feature:
                size = math.prod(int(d["size"]) for d in feature["shape"].get("dim", []))
                assert {len(s["value"]) for s in seen} == {size}, (name, key)


def test_schema_has_ragged_and_dense_representations(versions, schema_read):
    schema = schema_read[str(versions["jsonl"])]["schema"]
    group = schema["tensorRepresentationGroup"][""]["tensorRepresentation"]
    assert group["tokens"] == {"raggedTensor": {
        "featurePath": {"step": ["tokens/flat_values"]},
        "partition": [{"rowLength": "tokens/row_lengths_1"}],
        "rowPartitionDtype": "INT64"}}
    assert group["matrix"] == {"denseTensor": {"columnName": "matrix",
                                               "shape": {"dim": [{"size": "2"}, {"size": "2"}]}}}
    assert group["tags"] == {"varlenSparseTensor": {"columnName": "tags"}}


def test_tensorflow_metadata_parses_any_name_and_sequence_features(tf_python, tmp_path):
    from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
    from beam_tfrecords.transforms.codec.tfmd_schema import schema_pbtxt

    name = 'a "q" \\ é'
    path = tmp_path / "schema.pbtxt"
    path.write_text(schema_pbtxt([FeatureSpec(name, "int64"),
                                  FeatureSpec("steps", "float", (2,), sequence=True),
                                  FeatureSpec("words", "string", (-1,), sequence=True)]))
    schema = _consumer(tf_python, tmp_path, "schema", [path])[str(path)]
    context, sequence = schema["feature"]
    assert context["name"] == name and context["type"] == "INT"
    assert sequence["name"] == "##SEQUENCE##" and sequence["type"] == "STRUCT"
    steps, words = sequence["structDomain"]["feature"]
    assert (steps["name"], steps["type"], words["name"]) == ("steps", "FLOAT", "words")


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_compressed_versions_say_tfds_cannot_read_them(compression, tmp_path):
    config = ROOT / "configs" / "demo.yaml"
    out = tmp_path / "out"
    manifest = _build_compressed(config, out, compression)
    assert manifest["tfds"]["loadable"] is False
    assert "uncompressed" in manifest["tfds"]["why"]
    assert manifest["metadata_files"] == ["schema.pbtxt", "croissant.json"]
    assert sorted(p.name for p in (out / "v1").iterdir() if p.is_file()) == [
        ".beam-tfrecords-build", "anomalies.json", "croissant.json", "feature_spec.json",
        "manifest.json", "report.html", "schema.pbtxt"]


def _build_compressed(config: pathlib.Path, out: pathlib.Path, compression: str) -> dict:
    import yaml

    raw = yaml.safe_load(config.read_text())
    raw["source"]["path"] = str(ROOT / raw["source"]["path"])
    raw["output"] = {**raw["output"], "path": str(out), "compression": compression}
    path = out.parent / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return cli.run_build(["--config", str(path), "--version", "v1"])


# -- README's snippets --------------------------------------------------------------------------

SNIPPET = re.compile(r"<!-- consumer: ([\w.-]+) -->\n```python\n(.*?)^```", re.S | re.M)


def readme_snippets() -> dict[str, str]:
    """``{consumer: code}`` of the ``<!-- consumer: NAME -->`` blocks of docs/reading.md (the
    page README.md sends readers to)."""
    return dict(SNIPPET.findall((ROOT / "docs" / "reading.md").read_text()))


def test_readme_has_a_snippet_for_every_consumer():
    assert set(readme_snippets()) == {"tf.data", "tfds", "ray", "beam", "pytorch", "dali",
                                      "tfx"}


@pytest.fixture(scope="module")
def snippet_runs(consumer_reads) -> dict:
    return consumer_reads["snippet"]


@pytest.mark.parametrize("consumer", ["tf.data", "tfds", "ray"])
def test_readme_snippet_reads_every_sample_config(consumer, versions, snippet_runs):
    for name, version in versions.items():
        run = snippet_runs[str(version.parent)][consumer]
        assert run["records"], (consumer, name)
        expected = run["raw"] if consumer == "ray" else run["tf"]
        got = run["records"]
        if consumer == "tfds" and name.startswith("images"):
            # Decoded to pixels (the stored bytes: test_tfds_images_...): the header's shape.
            for record in got:
                pixels = record.pop("image_raw")
                assert [len(pixels), len(pixels[0]), len(pixels[0][0])] == [
                    record["height"], record["width"], record["channels"]]
            expected = [{k: v for k, v in r.items() if k != "image_raw"} for r in expected]
        if consumer == "ray":  # an absent key and an empty list read alike in Ray
            got = [{k: v for k, v in r.items() if v} for r in got]
            expected = [{k: v for k, v in r.items() if v} for r in expected]
        assert _multiset(got) == _multiset(expected), (consumer, name)


def test_readme_beam_snippet_reads_every_record(versions, tmp_path):
    """Run as ``python snippet.py`` in a folder whose ``output/demo`` is each version's root,
    each run in a process of its own forked from one that imported Beam once
    (tests/run_preloaded.py)."""
    code = readme_snippets()["beam"]
    jobs = []
    for name, version in versions.items():
        folder = tmp_path / name
        (folder / "output").mkdir(parents=True)
        (folder / "output" / "demo").symlink_to(version.parent)
        (folder / "snippet.py").write_text(code)
        jobs.append({"cwd": str(folder), "argv": ["snippet.py"],
                     "stdout": str(tmp_path / f"{name}.stdout"),
                     "stderr": str(tmp_path / f"{name}.stderr")})
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    done = subprocess.run([sys.executable, str(PRELOADED), str(tmp_path / "jobs.json")],
                          capture_output=True, text=True, timeout=300 * len(jobs))
    assert done.returncode == 0, done.stderr[-3000:]
    statuses = json.loads(done.stdout.splitlines()[-1])
    for (name, version), job, status in zip(versions.items(), jobs, statuses):
        assert status == 0, pathlib.Path(job["stderr"]).read_text()[-3000:]
        manifest = json.loads((version / "manifest.json").read_text())
        printed = pathlib.Path(job["stdout"]).read_text()
        assert printed.split() == [str(manifest["splits"]["train"]["records"])], name
