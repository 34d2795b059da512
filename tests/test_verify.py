"""verify catches every corruption we inject; inspect and schema print what users need."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest
from beam_tfrecords_tests_helpers import shard_paths

from beam_tfrecords.pipelines import build, cli

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEMO = ROOT / "configs" / "demo.yaml"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("verify") / "out"
    config = out.parent / "demo.yaml"
    config.write_text(DEMO.read_text().replace(
        "shard_size: {target: 150MB, min: 100MB, max: 200MB}",
        "shard_size: {target: 200KB, min: 100KB, max: 400KB}"))
    build.run(["--config", str(config), "--output", str(out), "--version", "v"])
    return out / "v"


@pytest.fixture
def copy(built, tmp_path) -> pathlib.Path:
    target = tmp_path / "v"
    shutil.copytree(built, target)
    return target


def shards(version: pathlib.Path) -> list[pathlib.Path]:
    manifest = json.loads((version / "manifest.json").read_text())
    return shard_paths(version, manifest)


def run_verify(path, capsys):
    code = cli.main(["verify", str(path)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_clean_version_verifies(built, capsys):
    code, out, err = run_verify(built, capsys)
    assert code == 0, out + err
    assert "0 with problems" in out
    assert len(shards(built)) > 2


def flip(path: pathlib.Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage,needle", [
    ("flip_data", "corrupt TFRecord at byte offset"),
    ("flip_length", "corrupt TFRecord at byte offset 0"),
    ("truncate", "truncated"),
    ("missing", "missing: listed in the manifest"),
    ("extra", "extra: a shard file the manifest does not list"),
    ("manifest_records", "records, the manifest says"),
    ("manifest_crc", "crc32c"),
])
def test_verify_reports_damage(copy, capsys, damage, needle):
    target = shards(copy)[1]
    if damage == "flip_data":
        flip(target, 40)
    elif damage == "flip_length":
        flip(target, 2)
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-7])
    elif damage == "missing":
        target.unlink()
    elif damage == "extra":
        shutil.copy(target, target.with_name("demo-00099-of-00100.tfrecord"))
    else:
        manifest = json.loads((copy / "manifest.json").read_text())
        shard = next(s for info in manifest["splits"].values() for s in info["shards"]
                     if copy / s["path"] == target)
        if damage == "manifest_records":
            shard["records"] += 1
        else:
            shard["crc32c"] = "AAAAAA=="
        (copy / "manifest.json").write_text(json.dumps(manifest))
    code, out, err = run_verify(copy, capsys)
    assert code == 1
    assert needle in out
    assert target.name in err or "demo-00099" in err
    if damage.startswith("flip") or damage == "truncate":
        assert str(target) in err and "offset" in err


def test_verify_a_glob_of_shards(built, capsys):
    code, out, _ = run_verify(f"{built}/train/*.tfrecord", capsys)
    assert code == 0
    assert "0 with problems" in out


def test_inspect_prints_examples_and_summary(built, capsys):
    assert cli.main(["inspect", str(built), "--limit", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["examples"]) == 2
    assert doc["examples"][0]["feature2"]["value"][0] in {"cat", "dog", "chicken", "horse",
                                                          "goat"}
    summary = doc["summary"]
    assert summary["examples_scanned"] == 10000
    assert summary["features"]["feature1"]["distinct"] == [0, 1, 2, 3, 4]
    assert summary["features"]["feature3"]["values_per_example"] == [1, 1]


def test_schema_from_version_and_config_agree(built, capsys):
    assert cli.main(["schema", str(built)]) == 0
    from_version = json.loads(capsys.readouterr().out)
    assert cli.main(["schema", "--config", str(DEMO)]) == 0
    assert json.loads(capsys.readouterr().out) == from_version


def test_errors_are_one_line_with_nonzero_exit(tmp_path, capsys):
    code = cli.main(["verify", str(tmp_path / "nothing-here")])
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1 and err.startswith("beam-tfrecords verify:")
