"""The public sources (btf.ReadCsv, ReadJsonl, ReadParquet, ReadAvro, ReadImages): each, applied
to the pipeline and piped into btf.WriteTFRecordDataset, commits a data set whose counts and
values are those of its sample file (configs/data, expected values as
tests/e2e/test_sample_configs.py
derives them from the source itself); bad arguments are refused naming the argument; a pattern
that matches nothing is one clear error."""

from __future__ import annotations

import json
import pathlib
import runpy

import apache_beam as beam
import pytest
import yaml
from apache_beam.testing.util import assert_that, equal_to

import beam_tfrecords as btf
from beam_tfrecords.errors import UserError
from beam_tfrecords.pipelines import verify

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

ROOT = pathlib.Path(__file__).resolve().parents[3]
# What each sample file holds, derived from the file by its format's own library, and our
# decoder's view of a shard: tests/e2e/test_sample_configs.py's, for the command line's builds of
# the samples.
_FORMATS = runpy.run_path(str(ROOT / "tests" / "e2e" / "test_sample_configs.py"))
CASES, ours = _FORMATS["CASES"], _FORMATS["ours"]


def _config(name: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())


def _source(name: str, features: dict):
    """The public source for configs/<name>.yaml, its options as keyword arguments."""
    source = _config(name)["source"]
    path = str(ROOT / source["path"])
    if source["format"] == "csv":
        return btf.ReadCsv(path, features, **source.get("csv", {}))
    if source["format"] == "jsonl":
        return btf.ReadJsonl(path, features, **source.get("jsonl", {}))
    if source["format"] == "parquet":  # the split key's column is read besides the features'
        return btf.ReadParquet(path, features, extra_fields=["id"])
    if source["format"] == "avro":
        return btf.ReadAvro(path, features)
    return btf.ReadImages(path, **source.get("images", {}))


def _splits(name: str) -> dict | None:
    if name == "images":  # the folders name each image's split
        return {"field": "split", "names": ["eval", "train"]}
    return _config(name).get("splits")


def _write(tmp_path: pathlib.Path, name: str, features: dict | None = None,
           splits: dict | None = None):
    return btf.WriteTFRecordDataset(output=str(tmp_path / "out"), name=name, features=features,
                                    splits=splits, version="v1")


@pytest.mark.parametrize("name", ["csv", "jsonl", "parquet", "avro", "images",
                                  "images_manifest"])
def test_each_source_builds_a_committed_data_set_of_its_file(tmp_path, name):
    features = _config(name)["features"]
    write = _write(tmp_path, name, features, _splits(name))
    with beam.Pipeline() as p:
        written = p | _source(name, features) | write
    expected_of, key_of, _ = CASES[name]
    expected = expected_of()
    version_dir = pathlib.Path(written.version_dir)
    manifest = json.loads((version_dir / "manifest.json").read_text())
    assert manifest["counts"] == {"read": len(expected), "written": len(expected),
                                  "rejected": 0, "unread": {"files": 0, "bytes": 0, "rows": 0}}
    seen = {key_of(example): example
            for path in sorted(version_dir.glob("*/*.tfrecord")) for example in ours(path)}
    assert seen == expected
    checks = verify.verify_path(str(version_dir))
    assert checks and all(c.ok for c in checks), [c.problems for c in checks]


def test_read_then_to_examples_then_write_keeps_the_accounting(tmp_path):
    """Rejects of the reader (a cell that is no integer) and of the encoder (a missing
    required value) both reach the manifest: read = written + rejected."""
    path = tmp_path / "in.csv"
    path.write_text("id,n,s\n1,10,a\n2,x,b\n3,30,\n4,40,d\n")
    features = {"id": {"type": "int64"}, "n": {"type": "int64"}, "s": {"type": "string"}}
    write = btf.WriteTFRecordDataset(output=str(tmp_path / "out"), name="mixed",
                                     max_bad_fraction=0.5, version="v1")
    with beam.Pipeline() as p:
        written = p | btf.ReadCsv(str(path), features) | btf.ToExamples(features) | write
    manifest = json.loads((pathlib.Path(written.version_dir) / "manifest.json").read_text())
    assert manifest["counts"]["read"] == 4
    assert manifest["counts"]["written"] == 2
    assert manifest["counts"]["rejected"] == 2
    letters = [json.loads(line) for f in pathlib.Path(written.version_dir).glob("dead_letter/*")
               for line in f.read_text().splitlines()]
    assert sorted(letter["row"] for letter in letters) == [2, 3]


def test_the_write_takes_the_features_from_the_source(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n')
    write = _write(tmp_path, "small")
    with beam.Pipeline() as p:
        written = p | btf.ReadJsonl(str(path), {"a": {"type": "int64"}}) | write
    version_dir = pathlib.Path(written.version_dir)
    assert list(json.loads((version_dir / "feature_spec.json").read_text())["features"]) == ["a"]
    values = sorted(ex["a"][1][0] for f in version_dir.glob("train/*") for ex in ours(f))
    assert values == [1, 2]


def test_a_source_result_without_features_anywhere_is_refused(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"a": 1}\n')
    with pytest.raises(UserError, match="need features"):
        beam.Pipeline() | btf.ReadJsonl(str(path)) | _write(tmp_path, "none")


@pytest.mark.parametrize("make, message", [
    (lambda: btf.ReadCsv("x.csv", {"a": {"type": "int64"}}, delimiter=";;"),
     r"^ReadCsv: argument 'delimiter': must be one character"),
    (lambda: btf.ReadCsv("x.csv", {"a": {"type": "int64"}}, delimiter='"'),
     r"^ReadCsv: argument 'quotechar': must differ from the delimiter"),
    (lambda: btf.ReadCsv("x.csv", {"a": {"type": "int64"}}, header=False),
     r"^ReadCsv: argument 'columns': is required when header is false"),
    (lambda: btf.ReadCsv("x.csv", {"a": {"type": "int64"}}, null_values=[None]),
     r"^ReadCsv: argument 'null_values'"),
    (lambda: btf.ReadCsv("x.csv", {"a": {"type": "int64"}}, max_record_bytes="lots"),
     r"^ReadCsv: argument 'max_record_bytes'"),
    (lambda: btf.ReadCsv("x.csv", {"a": {"type": "int65"}}),
     r"^ReadCsv: argument 'features\.a\.type': feature 'a': type 'int65'"),
    (lambda: btf.ReadJsonl("x.jsonl", max_depth=0),
     r"^ReadJsonl: argument 'max_depth': must be an integer from 1 to 512"),
    (lambda: btf.ReadJsonl("x.jsonl", max_record_bytes=1.5),
     r"^ReadJsonl: argument 'max_record_bytes'"),
    (lambda: btf.ReadParquet("x.parquet", extra_fields="id"),
     r"^ReadParquet: extra_fields must be a list"),
    (lambda: btf.ReadCsv("x.csv", {"a": {"type": "int64"}}, extra_fields="id"),
     r"^ReadCsv: extra_fields must be a list"),
    (lambda: btf.ReadAvro("x.avro", max_record_bytes=-1),
     r"^ReadAvro: argument 'max_record_bytes'"),
    (lambda: btf.ReadAvro(""), r"^ReadAvro: file_pattern must be a non-empty pattern"),
    (lambda: btf.ReadImages("root", layout="tree"),
     r"^ReadImages: argument 'layout': must be one of folders, manifest"),
    (lambda: btf.ReadImages("root", read_threads=0),
     r"^ReadImages: argument 'read_threads'"),
    (lambda: btf.ReadImages("root", extensions=["jpg"]),
     r"^ReadImages: argument 'extensions'"),
])
def test_bad_arguments_are_refused_naming_them(make, message):
    with pytest.raises(UserError, match=message):
        make()


def test_csv_extra_fields_keep_the_named_columns_only(tmp_path):
    """With extra_fields (the split key's column here), records hold the columns the features
    read and those; without, every column, as before extra_fields existed."""
    path = tmp_path / "in.csv"
    path.write_text("id,a,b,c\n1,10,x,y\n2,20,z,w\n")
    features = {"a": {"type": "int64"}}

    def columns(chunk):
        return [sorted(record) for record in chunk.records()]

    with beam.Pipeline() as p:
        named = p | "Named" >> btf.ReadCsv(str(path), features, extra_fields=["id"])
        every = p | "Every" >> btf.ReadCsv(str(path), features)
        assert_that(named.records | "NamedColumns" >> beam.FlatMap(columns),
                    equal_to([["a", "id"]] * 2), label="CheckNamed")
        assert_that(every.records | "EveryColumn" >> beam.FlatMap(columns),
                    equal_to([["a", "b", "c", "id"]] * 2), label="CheckEvery")


def test_a_wide_csv_builds_in_about_the_time_of_its_named_columns(tmp_path):
    """Issue #15: 20,000 columns of which the features read 3 (first, middle, last), against
    the same 1,000 rows with only those 3 columns: ReadCsv(extra_fields=[the split key]) |
    WriteTFRecordDataset within 5x the time (~1.5x here). Reading every column takes ~90x:
    Arrow compute calls per column and block, and a dict of 20,000 keys per record."""
    import time

    ncols, rows = 20_000, 1_000
    half = b",".join([b"7"] * (ncols // 2 - 1))
    rest = b",".join([b"3"] * (ncols - ncols // 2 - 2))
    header = b",".join([b"id", *(b"c%d" % k for k in range(1, ncols // 2)), b"x",
                        *(b"c%d" % k for k in range(ncols // 2 + 1, ncols - 1)), b"s"])
    wide, narrow = tmp_path / "wide.csv", tmp_path / "narrow.csv"
    wide.write_bytes(header + b"\n" + b"".join(
        b"%d,%s,%d.5,%s,w%d\n" % (n, half, n, rest, n % 7) for n in range(rows)))
    narrow.write_bytes(b"id,x,s\n" + b"".join(b"%d,%d.5,w%d\n" % (n, n, n % 7)
                                               for n in range(rows)))
    features = {"id": {"type": "int64"}, "x": {"type": "float"}, "s": {"type": "string"}}
    seconds = {}
    for name, path in (("narrow", narrow), ("wide", wide)):
        write = _write(tmp_path / name, name, features, {"key": "id", "a": 50, "b": 50})
        start = time.perf_counter()
        with beam.Pipeline() as p:
            written = p | btf.ReadCsv(str(path), features, extra_fields=["id"]) | write
        seconds[name] = time.perf_counter() - start
        manifest = json.loads((pathlib.Path(written.version_dir) / "manifest.json").read_text())
        assert manifest["counts"]["written"] == rows
    assert seconds["wide"] < 5 * seconds["narrow"], seconds


def test_csv_needs_features():
    with pytest.raises(TypeError, match="features"):
        btf.ReadCsv("x.csv")  # cells are text until the features type them


@pytest.mark.parametrize("make", [
    lambda pattern: btf.ReadCsv(pattern, {"a": {"type": "int64"}}),
    lambda pattern: btf.ReadJsonl(pattern),
    lambda pattern: btf.ReadParquet(pattern),
    lambda pattern: btf.ReadAvro(pattern),
    lambda pattern: btf.ReadImages(pattern),
])
def test_a_pattern_matching_nothing_is_one_clear_error(tmp_path, make):
    pattern = str(tmp_path / "nothing-here" / "*.data")
    with pytest.raises(UserError) as caught:
        beam.Pipeline() | make(pattern)
    message = str(caught.value)
    assert "\n" not in message and pattern in message, message


def test_a_list_of_paths_is_read_as_it_is(tmp_path):
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"part-{i}.jsonl")
        paths[-1].write_text(f'{{"a": {i}}}\n')
    write = _write(tmp_path, "listed", {"a": {"type": "int64"}})
    with beam.Pipeline() as p:
        written = p | btf.ReadJsonl([str(path) for path in paths]) | write
    manifest = json.loads((pathlib.Path(written.version_dir) / "manifest.json").read_text())
    assert manifest["counts"]["read"] == manifest["counts"]["written"] == 2


def test_the_sources_are_public():
    for name in ("ReadCsv", "ReadJsonl", "ReadParquet", "ReadAvro", "ReadImages"):
        assert name in btf.__all__
        doc = getattr(btf, name).__doc__
        assert "Args:" in doc and ("file_pattern" in doc or "root_or_manifest" in doc), name


def test_a_glob_without_a_folder_matches_in_the_current_one(tmp_path, monkeypatch):
    """Beam's local filesystem matches nothing for ``*.jsonl``; storage.match reads it as
    ``./*.jsonl``, as a shell would."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here.jsonl").write_text('{"a": 7}\n')
    write = _write(tmp_path, "here", {"a": {"type": "int64"}})
    with beam.Pipeline() as p:
        written = p | btf.ReadJsonl("*.jsonl") | write
    manifest = json.loads((pathlib.Path(written.version_dir) / "manifest.json").read_text())
    assert manifest["counts"]["written"] == 1


def _shown(transform) -> dict:
    """The display data a runner shows for ``transform``, through Beam's own collector."""
    from apache_beam.transforms.display import DisplayData

    return {item.key: item.value for item in DisplayData.create_from(transform).items}


def test_each_source_shows_what_it_reads_on_the_job_page():
    """Dataflow's job page shows a step's display data, as Beam's own sources publish theirs:
    the pattern (a signed URL's secret redacted), the features, the options and the range
    size."""
    secret = "https://example.com/data/*.csv?X-Goog-Signature=abc123"
    csv = _shown(btf.ReadCsv(secret, {"a": {"type": "int64"}}, delimiter=";",
                             split_bytes="1MiB"))
    assert csv["file_pattern"] != secret and "abc123" not in csv["file_pattern"]
    assert csv["features"] == "a" and csv["delimiter"] == ";" and csv["header"] is True
    assert csv["split_bytes"] == 1 << 20 and csv["extra_fields"] == "every column"
    jsonl = _shown(btf.ReadJsonl(["a.jsonl", "b.jsonl", "c.jsonl"], {"x": {"type": "float"}}))
    assert jsonl["files"] == "a.jsonl and 2 more" and jsonl["max_depth"] > 0
    from beam_tfrecords.sinks.format.file_identity import FileIdentity

    listed = _shown(btf.ReadCsv([FileIdentity("in/a.csv", 10)], {"a": {"type": "int64"}}))
    assert listed["files"] == "in/a.csv"  # the command line passes its listing
    parquet = _shown(btf.ReadParquet("p/*.parquet", None, extra_fields=["id", "ts"]))
    assert parquet["extra_fields"] == "id, ts" and "features" not in parquet
    images = _shown(btf.ReadImages("gs://bucket/images", extensions=[".png"],
                                   read_threads=4))
    assert images["file_pattern"] == "gs://bucket/images"
    assert images["extensions"] == ".png" and images["read_threads"] == 4
    assert images["check_complete"] is True and images["layout"] == "folders"
