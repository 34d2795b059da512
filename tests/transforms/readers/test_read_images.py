"""Image sources: planning both layouts, options, and ReadImages on DirectRunner, end to end
through BuildExamples."""

from __future__ import annotations

import csv
import io

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that
from PIL import Image

from beam_tfrecords.transforms.build_examples import BuildExamples
from beam_tfrecords.transforms.codec.example_codec import ExampleDecoder
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.readers.framework import COUNTS, REJECTED, RecordChunk
from beam_tfrecords.transforms.readers.read_images import (
    DEFAULT_EXTENSIONS,
    ImagesOptions,
    ReadImages,
    list_images,
    parse_images_options,
    plan_images,
    read_threads_for,
)

FOLDERS = ImagesOptions()
MANIFEST = ImagesOptions(layout="manifest")


def image_bytes(fmt: str, mode: str, size: tuple[int, int]) -> bytes:
    out = io.BytesIO()
    Image.new(mode, size, color=None).save(out, fmt)
    return out.getvalue()


def write(path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


@pytest.fixture
def split_tree(tmp_path):
    """<root>/<split>/<label>/<file>: 4 good images and 3 bad files."""
    root = tmp_path / "images"
    jpeg = image_bytes("JPEG", "RGB", (8, 6))
    good = {
        "train/cat/a.jpg": (jpeg, (6, 8, 3, "JPEG")),
        "train/dog/b.PNG": (image_bytes("PNG", "RGBA", (5, 4)), (4, 5, 4, "PNG")),
        "eval/cat/c.gif": (image_bytes("GIF", "L", (3, 2)), (2, 3, 3, "GIF")),
        "eval/bird/d.webp": (image_bytes("WEBP", "L", (9, 7)), (7, 9, 3, "WEBP")),
    }
    bad = {
        "train/cat/truncated.jpg": jpeg[:len(jpeg) // 2],
        "train/dog/notes.png": b"this is text, not a picture\n",
        "eval/bird/empty.jpeg": b"",
    }
    for rel, (data, _) in good.items():
        write(root / rel, data)
    for rel, data in bad.items():
        write(root / rel, data)
    write(root / "train" / "cat" / "README.txt", b"ignored: not an image extension")
    return root, good, bad


# -- planning ---------------------------------------------------------------------------------

def test_plan_folders_split_layout_and_vocabulary():
    root = "/data/img"
    paths = [f"{root}/train/dog/2.jpg", f"{root}/eval/cat/1.JPEG", f"{root}/train/cat/3.png",
             f"{root}/train/ant/x.txt"]
    plan = plan_images(FOLDERS, root + "/", paths=paths)
    assert plan.vocabulary == ("cat", "dog")
    assert plan.skipped == (f"{root}/train/ant/x.txt",)
    assert plan.splits == ("eval", "train")
    got = [(e.path.rsplit("/", 1)[1], e.label, e.label_text, e.split, e.row)
           for e in plan.entries]
    assert got == [("1.JPEG", 0, "cat", "eval", 1), ("3.png", 0, "cat", "train", 2),
                   ("2.jpg", 1, "dog", "train", 3)]


def test_plan_folders_label_layout():
    plan = plan_images(FOLDERS, "gs://b/r", paths=["gs://b/r/b/1.jpg", "gs://b/r/a/2.jpg"])
    assert plan.vocabulary == ("a", "b")
    assert [(e.label, e.split) for e in plan.entries] == [(0, None), (1, None)]


@pytest.mark.parametrize("paths, reason", [
    (["/r/a/1.jpg", "/r/train/a/2.jpg"], r"mix layouts: 'a/1.jpg' \(2 levels\); "
                                         r"'train/a/2.jpg' \(3 levels\)"),
    (["/r/1.jpg"], r"'1.jpg' is 1 levels deep"),
    (["/r/x/y/z/1.jpg"], "4 levels deep"),
    (["/r/a/notes.txt"], "no files ending in .jpg"),
])
def test_plan_folders_errors(paths, reason):
    with pytest.raises(ValueError, match=reason):
        plan_images(FOLDERS, "/r", paths=paths)


def test_plan_manifest_paths_labels_and_extra_columns():
    rows = [
        {"path": "imgs/1.jpg", "label": "zebra", "photographer": "ann"},
        {"path": "/abs/2.png", "label": "ant", "photographer": ""},
        {"path": "gs://other/3.png", "label": "zebra", "photographer": "bo"},
    ]
    plan = plan_images(MANIFEST, "gs://bucket/sets/manifest.csv", rows=rows)
    assert plan.vocabulary == ("ant", "zebra")
    assert [e.path for e in plan.entries] == ["gs://bucket/sets/imgs/1.jpg", "/abs/2.png",
                                             "gs://other/3.png"]
    assert [e.label for e in plan.entries] == [1, 0, 1]
    assert plan.entries[0].extra == (("photographer", "ann"),)
    assert [e.row for e in plan.entries] == [1, 2, 3]


@pytest.mark.parametrize("rows, reason", [
    ([{"file": "a.jpg", "label": "x"}], "no 'path' column"),
    ([{"path": "a.jpg", "label": ""}], "data row 1: empty label"),
    ([{"path": "a.jpg", "label": "x", "height": "3"}], "height would overwrite"),
    ([], "no data rows"),
])
def test_plan_manifest_errors(rows, reason):
    with pytest.raises(ValueError, match=reason):
        plan_images(MANIFEST, "/m/manifest.csv", rows=rows)


# -- options ----------------------------------------------------------------------------------

def test_parse_images_options():
    assert parse_images_options(None, "source.images") == ImagesOptions()
    assert ImagesOptions().extensions == DEFAULT_EXTENSIONS
    opts = parse_images_options({"layout": "manifest", "manifest": "m.csv",
                                 "extensions": [".JPG", ".tif"]}, "source.images")
    assert opts == ImagesOptions("manifest", "m.csv", (".jpg", ".tif"))


@pytest.mark.parametrize("raw, reason", [
    ({"layout": "tree"}, r"'source.images.layout': must be one of folders, manifest "
                         r"\(got \"tree\"\)"),
    ({"extensions": ["jpg"]}, r"'source.images.extensions'.*\(got \[\"jpg\"\]\)"),
    ({"extensions": []}, r"'source.images.extensions'"),
    ({"manifest": "m.csv"}, r"'source.images.manifest': applies to layout manifest only"),
    ({"layuot": "folders"}, r"'source.images.layuot': unknown key"),
    ({"check_complete": "yes"}, r"'source.images.check_complete': must be true or false"),
    ({"read_threads": 0}, r"'source.images.read_threads': must be auto or a whole number "
                          r"from 1 to 64 \(got 0\)"),
    ({"read_threads": 65}, r"'source.images.read_threads'.*\(got 65\)"),
    ({"read_threads": True}, r"'source.images.read_threads'.*\(got true\)"),
    ({"read_threads": "many"}, r"'source.images.read_threads'.*\(got \"many\"\)"),
    (["folders"], r"'source.images': must be a mapping"),
])
def test_parse_images_options_errors(raw, reason):
    with pytest.raises(ValueError, match=reason):
        parse_images_options(raw, "source.images")


def test_read_threads_option_and_auto():
    assert parse_images_options({"read_threads": "auto"}).read_threads == 0
    assert parse_images_options({"read_threads": 16}).read_threads == 16
    assert ImagesOptions().read_threads == 0  # auto
    # auto: local files come from the page cache, where threads only add GIL hand-offs;
    # Cloud Storage reads wait tens of milliseconds each.
    assert read_threads_for(0, ["/data/a.jpg", "/data/b.jpg"]) == 1
    assert read_threads_for(0, ["/data/a.jpg", "gs://bucket/b.jpg"]) == 8
    assert read_threads_for(3, ["gs://bucket/b.jpg"]) == 3


# -- reading on Beam --------------------------------------------------------------------------

def _records(chunks):
    return chunks | beam.FlatMap(lambda chunk: [
        (chunk.row_number(i), record) for i, record in enumerate(chunk.rows)])


@pytest.mark.parametrize("read_threads", [None, 3], ids=["auto", "threads"])
@pytest.mark.slow
def test_read_images_split_layout(split_tree, read_threads):
    root, good, bad = split_tree
    plan = list_images(str(root), FOLDERS)
    assert plan.vocabulary == ("bird", "cat", "dog")
    assert len(plan.entries) == 7 and plan.skipped == (str(root / "train/cat/README.txt"),)
    vocabulary = plan.vocabulary

    def check_records(pairs):
        # Read ahead on threads or not, a record keeps its position in the plan.
        assert all(record["path"] == plan.entries[row - 1].path for row, record in pairs)
        by_path = {record["path"]: record for _, record in pairs}
        assert len(pairs) == len(good) == len(by_path)
        for rel, (data, (height, width, channels, fmt)) in good.items():
            record = by_path[str(root / rel)]
            split, label = rel.split("/")[:2]
            assert record["image"] == data  # the file's bytes, unchanged
            assert (record["height"], record["width"], record["channels"],
                    record["format"]) == (height, width, channels, fmt)
            assert record["split"] == split and record["label_text"] == label
            assert record["label"] == vocabulary.index(label)

    def check_rejects(rows):
        reasons = {row["source"]: row["reason"] for row in rows}
        assert set(reasons) == {str(root / rel) for rel in bad}
        assert "truncated JPEG" in reasons[str(root / "train/cat/truncated.jpg")]
        assert "unrecognised signature" in reasons[str(root / "train/dog/notes.png")]
        assert "the file is empty" in reasons[str(root / "eval/bird/empty.jpeg")]
        assert all(row["feature"] == "image" for row in rows)
        assert all(row["reason"].startswith(row["source"]) for row in rows)

    def check_chunks(chunks):
        assert all(isinstance(c, RecordChunk) and c.path == str(root) for c in chunks)
        assert len(chunks) <= 2

    with TestPipeline() as p:
        read = p | ReadImages(plan, read_threads=read_threads)
        assert_that(_records(read.records), check_records, label="Records")
        assert_that(read[REJECTED], check_rejects, label="Rejects")
        assert_that(read.records, check_chunks, label="Chunks")
        assert_that(read[COUNTS] | beam.CombinePerKey(sum),
                    lambda got: sorted(got) == [("read", 7), ("rejected_at_read", 3)]
                    or pytest.fail(f"counts {got}"), label="Counts")


@pytest.mark.parametrize("read_threads", ["auto", 2])
@pytest.mark.slow
def test_read_images_manifest_end_to_end_through_build_examples(tmp_path, read_threads):
    folder = tmp_path / "set"
    files = {
        "pics/one.jpg": image_bytes("JPEG", "L", (10, 4)),
        "pics/two.png": image_bytes("PNG", "P", (3, 12)),
        "three.bmp": image_bytes("BMP", "RGBA", (6, 6)),
    }
    for rel, data in files.items():
        write(folder / rel, data)
    elsewhere = write(tmp_path / "abs" / "four.webp", image_bytes("WEBP", "RGBA", (2, 3)))
    manifest = folder / "manifest.csv"
    with open(manifest, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label", "source_url"])
        writer.writerow(["pics/one.jpg", "gray", "http://a"])
        writer.writerow(["pics/two.png", "color", ""])
        writer.writerow(["three.bmp", "color", "http://c"])
        writer.writerow([elsewhere, "alpha", "http://d"])
        writer.writerow(["missing.jpg", "gray", "http://e"])
    options = parse_images_options({"layout": "manifest", "read_threads": read_threads},
                                   "source.images")
    features = [
        FeatureSpec("image_raw", "bytes", source=("image",)),
        FeatureSpec("label", "int64"),
        FeatureSpec("label_text", "string"),
        FeatureSpec("height", "int64"),
        FeatureSpec("width", "int64"),
        FeatureSpec("channels", "int64"),
        FeatureSpec("format", "string"),
        FeatureSpec("source_url", "string"),
    ]
    decoder = ExampleDecoder(features)
    vocabulary = ("alpha", "color", "gray")
    expected = {
        files["pics/one.jpg"]: (2, b"gray", 4, 10, 1, b"JPEG", b"http://a"),
        files["pics/two.png"]: (1, b"color", 12, 3, 3, b"PNG", b""),
        files["three.bmp"]: (1, b"color", 6, 6, 4, b"BMP", b"http://c"),
        (tmp_path / "abs" / "four.webp").read_bytes(): (0, b"alpha", 3, 2, 4, b"WEBP",
                                                        b"http://d"),
    }

    def check_examples(batches):
        decoded = [decoder.decode(data) for split, batch in batches for data in batch]
        assert {split for split, _ in batches} == {"train"}
        got = {}
        for ex in decoded:
            text = ex["label_text"]
            got[ex["image_raw"]] = (ex["label"], text if isinstance(text, bytes)
                                    else text.encode(), ex["height"], ex["width"],
                                    ex["channels"],
                                    *(v if isinstance(v, bytes) else v.encode()
                                      for v in (ex["format"], ex["source_url"])))
        assert got == expected

    def check_rejects(rows):
        assert len(rows) == 1
        assert rows[0]["source"] == str(folder / "missing.jpg") and rows[0]["row"] == 5
        assert "cannot read the file" in rows[0]["reason"]

    with TestPipeline() as p:
        read = p | ReadImages(options, path=str(manifest))
        built = read.records | BuildExamples(features)
        assert_that(built.examples, check_examples, label="Examples")
        assert_that(read[REJECTED], check_rejects, label="Rejects")
        assert_that(
            (read[COUNTS], built[COUNTS]) | beam.Flatten() | beam.CombinePerKey(sum),
            lambda got: sorted(got) == [("built", 4), ("read", 5), ("rejected_at_build", 0),
                                        ("rejected_at_read", 1)]
            or pytest.fail(f"counts {got}"), label="Counts")
    assert list_images(str(manifest), options).vocabulary == vocabulary
