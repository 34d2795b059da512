"""Every sample config under configs/ builds end to end, and every value comes back.

For each source format the expected Example of every record is derived here, independently of
our readers and encoder (Python's csv and json modules, pyarrow, fastavro, the image sizes the
sample generator chose), and compared feature by feature, value by value -- floats by their
float32 bits -- with what our decoder and what TensorFlow read from the shards. TensorFlow also
parses every shard with the exported feature_spec.json, and each record must sit in the split
its key hashes to (or, for image folders, the folder it came from).
"""

from __future__ import annotations

import base64
import csv
import datetime
import io
import json
import pathlib
import struct
import sys

import pytest
from beam_tfrecords_tests_helpers import read_examples, shard_paths

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.config import load_config
from beam_tfrecords.transforms.codec.splits import key_bytes

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "configs" / "data"
sys.path.insert(0, str(ROOT / "scripts"))
import make_sample_data  # noqa: E402  (the generator knows the image sizes it wrote)

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def ints(*values) -> tuple:
    return ("int64_list", tuple(int(v) for v in values))


def floats(*values) -> tuple:
    return ("float_list", tuple(bits(float(v)) for v in values))


def texts(*values) -> tuple:
    return ("bytes_list", tuple(v if isinstance(v, bytes) else v.encode() for v in values))


# -- what each source says (never through our readers) ----------------------------------------

def expected_csv():
    out = {}
    with open(DATA / "people.csv", encoding="utf-8-sig", newline="") as handle:
        for row in csv.DictReader(handle):
            example = {
                "id": ints(row["id"]),
                "name": texts(row["name"]),
                "is_member": ints({"true": 1, "false": 0}.get(row["is_member"],
                                                              row["is_member"])),
                "height": floats(row["height"]),
                "readings": floats(*json.loads(row["readings"])),
            }
            if row["bio"] not in ("", "NA"):
                example["bio"] = texts(row["bio"])
            out[int(row["id"])] = example
    return out


def expected_jsonl():
    out = {}
    for line in (DATA / "events.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        example = {
            "id": ints(record["id"]),
            "user_name": texts(record["user"]["name"]),
            "user_age": ints(record["user"].get("age", -1)),
            "tags": texts(*record["tags"]),
            "scores": floats(*record["scores"]),
            "matrix": ints(*(v for row in record["matrix"] for v in row)),
            "tokens/flat_values": ints(*(v for row in record["tokens"] for v in row)),
            "tokens/row_lengths_1": ints(*(len(row) for row in record["tokens"])),
            "active": ints(record["active"]),
        }
        if record["note"] is not None:
            example["note"] = texts(record["note"])
        out[record["id"]] = example
    return out


def expected_parquet():
    import pyarrow.parquet as pq

    out = {}
    for row in pq.read_table(DATA / "products.parquet").to_pylist():
        out[row["id"]] = {
            "id": ints(row["id"]),
            "title": texts(row["title"]),
            "price": floats(0.0 if row["price"] is None else row["price"]),
            "tags": texts(*row["tags"]),
            "width": floats(row["dims"]["w"]),
            "height": floats(row["dims"]["h"]),
            "embedding": floats(*row["embedding"]),
            "created": ints((row["created"] - EPOCH) // datetime.timedelta(milliseconds=1)),
            "thumbnail": texts(row["thumbnail"]),
        }
    return out


def expected_avro():
    import fastavro

    out = {}
    with open(DATA / "users.avro", "rb") as handle:
        for row in fastavro.reader(handle):
            example = {
                "id": ints(row["id"]),
                "name": texts(row["name"]),
                "scores": floats(*row["scores"]),
                "city": texts(row["address"]["city"]),
                "zip": ints(row["address"]["zip"]),
                "signup": ints((row["signup"] - EPOCH) // datetime.timedelta(seconds=1)),
            }
            if row["email"] is not None:
                example["email"] = texts(row["email"])
            out[row["id"]] = example
    return out


def _expected_images(extra):
    vocabulary = sorted({label for _, label, *_ in make_sample_data.IMAGES})
    out = {}
    for index, (split, label, name, width, height, channels) in enumerate(
            make_sample_data.IMAGES):
        data = (DATA / "images" / split / label / name).read_bytes()
        example = {
            "image_raw": texts(data),
            "label": ints(vocabulary.index(label)),
            "label_text": texts(label),
            "height": ints(height),
            "width": ints(width),
            "channels": ints(channels),
            "format": texts("BMP" if name.endswith(".bmp") else "PNG"),
            **extra(index, split, label),
        }
        out[data] = (split, example)
    return out


def expected_images():
    return {key: example for key, (_, example) in _expected_images(lambda *_: {}).items()}


def expected_images_manifest():
    examples = _expected_images(lambda index, split, label: {
        "image_id": texts(str(index)), "caption": texts(f"a {label}, seen in {split}")})
    return {key: example for key, (_, example) in examples.items()}


# config -> (expected examples by record key, the record key of a decoded example,
#            the split a record must be in)
CASES = {
    "csv": (expected_csv, lambda ex: ex["id"][1][0], None),
    "jsonl": (expected_jsonl, lambda ex: ex["id"][1][0], None),
    "parquet": (expected_parquet, lambda ex: ex["id"][1][0], None),
    "avro": (expected_avro, lambda ex: ex["id"][1][0], None),
    "images": (expected_images, lambda ex: ex["image_raw"][1][0],
               lambda key: _expected_images(lambda *_: {})[key][0]),
    "images_manifest": (expected_images_manifest, lambda ex: ex["image_raw"][1][0], None),
}


# -- what we and TensorFlow read back ---------------------------------------------------------

def ours(path: pathlib.Path) -> list[dict]:
    return [
        {key: (kind, tuple(bits(v) if kind == "float_list" else v for v in values))
         for key, (kind, values) in example.items()}
        for example in read_examples(path)
    ]


def tensorflows(dump: dict) -> list[dict]:
    """TensorFlow's raw dump (``tf.train.Example.FromString``) in the form ``ours`` returns."""
    records = []
    for record in dump["records"]:
        example = {}
        for key, feature in record["features"].items():
            kind = feature["kind"]
            if kind == "float_list":
                values = tuple(int(b, 16) for b in feature["bits"])
            elif kind == "bytes_list":
                values = tuple(base64.b64decode(v) for v in feature["value"])
            else:
                values = tuple(feature["value"])
            example[key] = (kind, values)
        records.append(example)
    return records


@pytest.fixture(scope="module", params=sorted(CASES))
def built(request, sample_builds):
    """A sample config's build (shared with other files: read only) and its manifest."""
    name = request.param
    config = load_config(str(ROOT / "configs" / f"{name}.yaml"))
    version = sample_builds[name]
    return name, config, version, json.loads((version / "manifest.json").read_text())


def test_every_value_read_back_by_us_and_by_tensorflow(built, read_with_tf):
    name, config, version_dir, manifest = built
    expected_of, key_of, folder_split = CASES[name]
    expected = expected_of()
    assert manifest["counts"] == {"read": len(expected), "written": len(expected),
                                  "rejected": 0, "unread": {"files": 0, "bytes": 0, "rows": 0}}
    split_of = {path: split for split in manifest["splits"]
                for path in shard_paths(version_dir, manifest, split)}
    files = list(split_of)
    mine = [(split_of[path], example) for path in files for example in ours(path)]
    theirs = tensorflows(read_with_tf(files))
    assert [example for _, example in mine] == theirs  # TensorFlow sees what our decoder sees
    parsed = read_with_tf(files, spec=version_dir / "feature_spec.json")
    assert parsed["count"] == len(mine)  # and parses all of it with the spec we export
    seen = {}
    for split, example in mine:
        key = key_of(example)
        assert key not in seen, f"record {key!r} written twice"
        seen[key] = example
        if folder_split is not None:
            assert split == folder_split(key)
        else:
            assert split == config.splits.choose(key_bytes(_split_key(name, example))), key
    assert set(seen) == set(expected)
    for key, example in expected.items():
        assert seen[key] == example, f"{name} record {key!r}"


def _split_key(name: str, example: dict):
    if name == "images_manifest":
        return example["image_id"][1][0].decode()
    return example["id"][1][0]


def test_image_vocabulary_is_in_the_manifest(built):
    name, _, _, manifest = built
    if not name.startswith("images"):
        assert "label_vocabulary" not in manifest
        return
    assert manifest["label_vocabulary"] == ["cat", "dog", "fox"]


def test_sample_data_matches_its_generator():
    assert make_sample_data.main(["--check"]) == 0


def test_every_sample_config_is_tested():
    configs = {p.stem for p in (ROOT / "configs").glob("*.yaml")}
    formats = {load_config(str(ROOT / "configs" / f"{c}.yaml")).source.format for c in configs}
    assert formats >= {"csv", "jsonl", "parquet", "avro", "images"}
    assert set(CASES) <= configs


def test_csv_sample_has_the_hard_parts():
    raw = (DATA / "people.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and b"\r\n" in raw
    text = raw.decode("utf-8-sig")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert any("\n" in cell for row in rows for cell in row)  # quoted newline
    assert any("," in cell for row in rows[1:] for cell in row[:2])  # quoted delimiter
    assert {"nan", "inf", "-inf"} <= {row[4] for row in rows[1:]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_source_field_missing_from_the_data_fails_before_the_pipeline(name, tmp_path):
    import yaml

    from beam_tfrecords.pipelines.config import ConfigError

    raw = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
    raw["source"]["path"] = str(ROOT / raw["source"]["path"])
    raw["features"]["nope"] = {"type": "int64", "source": "no_such.field"}
    raw["output"]["path"] = str(tmp_path / "out")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"features\.nope\.source.*no field 'no_such'"):
        cli.run_build(["--config", str(config)])
    assert not (tmp_path / "out").exists()
