"""Names that come from the data are names, never paths: an image split folder, a manifest
cell or a record's split field that cannot be a split name is refused at launch (a folder) or
becomes a dead letter saying why (a value) -- and nothing is ever written outside the output.
Labels are values: any folder name is a label. End to end through ``beam-tfrecords build``.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import subprocess
import sys

import pytest
from PIL import Image

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.read import read_examples
from beam_tfrecords.pipelines.verify import verify_path
from beam_tfrecords.sinks import tfrecord_sink
from beam_tfrecords.sinks.format.layout import RESERVED, UnsafePath
from beam_tfrecords.sinks.format.serialized_batch import SerializedBatch
from beam_tfrecords.sinks.format.shard_plan import ShardSize

SENTINEL = b"not ours: must stay as it is\n"


def png(width: int = 4, height: int = 3) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height)).save(out, "PNG")
    return out.getvalue()


def files(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture
def place(tmp_path):
    """A folder holding the inputs, the output and, beside them, a sentinel file and folder
    that no build may touch."""
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "pets-00000-of-00001.tfrecord").write_bytes(SENTINEL)
    (tmp_path / "sentinel").write_bytes(SENTINEL)
    return tmp_path


def untouched(place: pathlib.Path, *inputs: str) -> None:
    """Nothing beside the output changed: the sentinels, and no file anywhere but the
    inputs and the output."""
    assert (place / "sentinel").read_bytes() == SENTINEL
    assert files(place / "x") == {"pets-00000-of-00001.tfrecord": SENTINEL}
    tops = {p.name for p in place.iterdir()}
    assert tops <= {"sentinel", "x", "out", "config.yaml", *inputs}, tops


def images_config(place: pathlib.Path, path: pathlib.Path, layout: str, **more: str) -> str:
    extra = "".join(f"{key}: {value}\n" for key, value in more.items())
    text = (f"name: pets\nsource: {{format: images, path: {json.dumps(str(path))}, "
            f"images: {{layout: {layout}}}}}\n"
            "features:\n  image_raw: {type: bytes, source: image}\n  label: {type: int64}\n"
            "  label_text: {type: string}\n"
            f"output: {{path: {json.dumps(str(place / 'out'))}}}\n{extra}")
    config = place / "config.yaml"
    config.write_text(text)
    return str(config)


def build(config: str, *more: str) -> int:
    return cli.main(["build", "--config", config, "--version", "v1", *more])


# -- image folders: a split folder that cannot be a split name is refused at launch --

@pytest.mark.parametrize("split", [".staging", "...", "LATEST", "index", "dead_letter",
                                   "manifest.json", ".lease", "a\nb", "train\n", "été"])
def test_an_image_split_folder_that_is_no_split_name_is_refused_at_launch(place, split,
                                                                           capsys):
    images = place / "images"
    for rel in ("train/cat/a.png", "train/dog/b.png", f"{split}/cat/c.png"):
        (images / rel).parent.mkdir(parents=True, exist_ok=True)
        (images / rel).write_bytes(png())
    assert build(images_config(place, images, "folders")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"split folder {split!r}" in err
    assert not (place / "out").exists()
    untouched(place, "images")


def test_labels_are_values_any_folder_name_is_a_label(place):
    images = place / "images"
    for rel in ("train/chats_été/a.png", "train/2 cats/b.png", "eval/chats_été/c.png",
                "eval/..x/d.png"):
        (images / rel).parent.mkdir(parents=True, exist_ok=True)
        (images / rel).write_bytes(png())
    assert build(images_config(place, images, "folders")) == 0
    version = str(place / "out" / "v1")
    assert all(check.ok for check in verify_path(version))
    labels = {(split, rec["label_text"].item().decode())
              for split in ("train", "eval") for rec in read_examples(version, split)}
    assert labels == {("train", "chats_été"), ("train", "2 cats"), ("eval", "chats_été"),
                      ("eval", "..x")}
    assert {n for n in os.listdir(version) if n.lower() not in RESERVED} == {"eval", "train"}
    untouched(place, "images")


# -- values: a manifest cell or a record field naming no usable split is a dead letter --

HOSTILE_CELLS = ["../../x", "../x", "..", "/abs", "a/b", ".staging", "LATEST", "index",
                 "train\n", ""]


def dead_letters(version_or_failed: pathlib.Path) -> list[dict]:
    rows = []
    for path in sorted(version_or_failed.glob("dead_letter/*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines()]
    return rows


def test_manifest_cells_naming_no_usable_split_are_dead_letters(place):
    data = place / "in"
    data.mkdir()
    rows = ["path,label,split", "ok.png,cat,train", "ok2.png,dog,eval"]
    for i, cell in enumerate(HOSTILE_CELLS):
        (data / f"{i}.png").write_bytes(png())
        rows.append(f'{i}.png,cat,"{cell}"')
    (data / "ok.png").write_bytes(png())
    (data / "ok2.png").write_bytes(png())
    (data / "list.csv").write_text("\n".join(rows) + "\n")
    config = images_config(place, data / "list.csv", "manifest",
                           errors="{max_bad_fraction: 0.9}")
    assert build(config) == 0
    version = place / "out" / "v1"
    assert all(check.ok for check in verify_path(str(version)))
    assert sorted(p.name for p in version.iterdir() if p.is_dir()) == [
        "dead_letter", "eval", "statistics", "train"]
    dead = dead_letters(version)
    assert len(dead) == len(HOSTILE_CELLS)
    assert all("split name" in row["reason"] for row in dead), dead
    manifest = json.loads((version / "manifest.json").read_text())
    assert sorted(manifest["splits"]) == ["eval", "train"]
    assert manifest["counts"]["written"] == 2
    untouched(place, "in")


def test_a_manifest_whose_every_split_cell_is_hostile_is_refused_at_launch(place, capsys):
    data = place / "in"
    data.mkdir()
    (data / "a.png").write_bytes(png())
    (data / "list.csv").write_text("path,label,split\na.png,cat,../../x\n")
    assert build(images_config(place, data / "list.csv", "manifest")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no image names a usable split" in err and "../../x" in err
    assert not (place / "out").exists()
    untouched(place, "in")


def test_a_csv_split_field_holding_a_path_is_a_dead_letter(place):
    data = place / "in"
    data.mkdir()
    lines = ["id,part"] + [f"{i},{'train' if i % 2 else 'eval'}" for i in range(10)]
    lines += [f'{10 + i},"{cell}"' for i, cell in enumerate(HOSTILE_CELLS)]
    (data / "rows.csv").write_text("\n".join(lines) + "\n")
    config = place / "config.yaml"
    config.write_text(
        f"name: pets\nsource: {{format: csv, path: {json.dumps(str(data / 'rows.csv'))}}}\n"
        "features:\n  id: {type: int64}\n"
        "splits: {field: part, names: [train, eval]}\n"
        f"output: {{path: {json.dumps(str(place / 'out'))}}}\n"
        "errors: {max_bad_fraction: 0.9}\n")
    assert build(str(config)) == 0
    version = place / "out" / "v1"
    assert all(check.ok for check in verify_path(str(version)))
    dead = dead_letters(version)
    assert len(dead) == len(HOSTILE_CELLS)
    assert all("split name" in row["reason"] for row in dead), dead
    untouched(place, "in")


def test_a_failed_build_keeps_such_dead_letters_inside_the_output(place):
    """Under the default threshold the build fails: its dead letters go to .failed/, still
    inside the output."""
    data = place / "in"
    data.mkdir()
    (data / "rows.csv").write_text('id,part\n1,train\n2,"../../x"\n')
    config = place / "config.yaml"
    config.write_text(
        f"name: pets\nsource: {{format: csv, path: {json.dumps(str(data / 'rows.csv'))}}}\n"
        "features:\n  id: {type: int64}\n"
        "splits: {field: part, names: [train]}\n"
        f"output: {{path: {json.dumps(str(place / 'out'))}}}\n")
    assert build(str(config)) == 1
    (failed,) = (place / "out" / ".failed").iterdir()
    assert [row["value"] for row in dead_letters(failed)] == [repr("../../x")]
    untouched(place, "in")


# -- the sink: a split that reached it anyway is refused before anything is written --

@pytest.mark.parametrize("split", ["../x", "..", ".staging", "LATEST", "a/b", "/abs"])
def test_the_sink_refuses_a_hostile_split_before_writing(tmp_path, split):
    staging = tmp_path / "out" / "v1" / ".staging"
    fn = tfrecord_sink._WriteParts(str(staging), "none", ShardSize())
    fn.start_bundle()
    with pytest.raises(UnsafePath, match="refusing to write"):
        fn.process((split, SerializedBatch.from_records([b"record"])))
    assert files(tmp_path) == {}


def test_image_split_folders_differing_only_by_case_are_refused_at_launch(place, capsys):
    images = place / "images"
    for rel in ("train/cat/a.png", "Train/cat/b.png"):
        (images / rel).parent.mkdir(parents=True, exist_ok=True)
        (images / rel).write_bytes(png())
    assert build(images_config(place, images, "folders")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "differ only by case" in err
    assert not (place / "out").exists()


@pytest.mark.slow
def test_through_the_console_script_a_path_in_a_manifest_cell_writes_nothing_outside(place):
    """The reported attack as a user runs it: a manifest cell ``../../x`` once wrote a shard
    beside the output, over a file that was not ours."""
    data = place / "in"
    data.mkdir()
    for name in ("a.png", "b.png"):
        (data / name).write_bytes(png())
    (data / "list.csv").write_text("path,label,split\na.png,cat,train\nb.png,dog,../../x\n")
    config = images_config(place, data / "list.csv", "manifest")
    script = pathlib.Path(sys.executable).with_name("beam-tfrecords")
    done = subprocess.run([str(script), "build", "--config", config, "--version", "v1"],
                          capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "split name '../../x'" in done.stderr
    assert not (place / "out" / "v1").exists()
    untouched(place, "in")
