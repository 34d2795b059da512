"""Real photographs, not generated ones: the two JPEGs scikit-learn ships
(``sklearn/datasets/images``: camera pictures with JFIF headers and real entropy-coded data),
taken once from its wheel on PyPI and checked by SHA-256, and the variants Pillow re-encodes
from them (progressive, grayscale, CMYK, with an EXIF block, with restart markers' worth of
data after the header). Our header facts equal Pillow's and TensorFlow's decodes, a build
stores every file's bytes unchanged, and copies cut short become dead letters naming them."""

from __future__ import annotations

import hashlib
import io
import json
import pathlib
import subprocess
import sys
import tempfile
import zipfile

import pytest
from beam_tfrecords_tests_helpers import read_examples
from PIL import Image

from beam_tfrecords.pipelines import cli
from beam_tfrecords.transforms.readers.image_header import (
    ImageHeaderError,
    check_complete,
    read_header,
)

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

ROOT = pathlib.Path(__file__).resolve().parents[3]
CACHE = ROOT / ".cache" / "real-photographs"  # gitignored; filled once per checkout
WHEEL = "scikit-learn==1.9.1"
PHOTOS = {"china.jpg": "8378025ad2519d649d02e32bd98990db4ab572357d9f09841c2fbfbb4fefad29",
          "flower.jpg": "a77f6ec41e353afdf8bdff2ea981b2955535d8d83294f8cfa49cf4e423dd5638"}


def _fetch() -> None:
    """Download the wheel (no dependencies, ~9 MB) and keep only the two photographs."""
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                               "--only-binary=:all:", "--dest", scratch, WHEEL],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            pytest.fail(f"cannot download {WHEEL} for its photographs: {done.stderr[-2000:]}")
        (wheel,) = pathlib.Path(scratch).glob("*.whl")
        CACHE.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            for name in PHOTOS:
                (CACHE / name).write_bytes(archive.read(f"sklearn/datasets/images/{name}"))


@pytest.fixture(scope="session")
def photographs() -> dict[str, bytes]:
    """The photographs as files, each checked against its SHA-256 (a missing download fails
    the tests rather than skipping them: a green run must mean they ran)."""
    if not all((CACHE / name).exists() for name in PHOTOS):
        _fetch()
    found = {name: (CACHE / name).read_bytes() for name in PHOTOS}
    for name, data in found.items():
        assert hashlib.sha256(data).hexdigest() == PHOTOS[name], f"{name} is not the expected file"
    return found


def _variants(photographs: dict[str, bytes]) -> dict[str, bytes]:
    """Each photograph as shipped and re-encoded by Pillow in the JPEG forms cameras and
    tools write."""
    out = {}
    for name, data in photographs.items():
        stem = name.removesuffix(".jpg")
        out[f"{stem}.jpg"] = data
        image = Image.open(io.BytesIO(data))
        exif = Image.Exif()
        exif[0x010F] = "beam-tfrecords test camera"  # Make
        exif[0x0110] = "sklearn sample"  # Model
        forms = {"progressive": (image, {"progressive": True, "quality": 85}),
                 "gray": (image.convert("L"), {"quality": 90}),
                 "cmyk": (image.convert("CMYK"), {"quality": 90}),
                 "exif": (image, {"exif": exif.tobytes(), "quality": 95}),
                 "subsampled": (image, {"subsampling": 2, "quality": 50, "optimize": True})}
        for form, (picture, options) in forms.items():
            buffer = io.BytesIO()
            picture.save(buffer, "JPEG", **options)
            out[f"{stem}-{form}.jpg"] = buffer.getvalue()
    return out


def _pillows_facts(data: bytes) -> tuple[int, int, int]:
    with Image.open(io.BytesIO(data)) as image:
        image.load()  # a full decode: the file is a valid JPEG
        return image.size[1], image.size[0], len(image.getbands())


def test_header_facts_equal_pillows_full_decode(photographs):
    for name, data in _variants(photographs).items():
        info = read_header(data)
        check_complete(data, info)
        assert info.format == "JPEG", name
        assert (info.height, info.width, info.channels) == _pillows_facts(data), name


def test_a_photograph_cut_short_is_refused_wherever_it_is_cut(photographs):
    data = photographs["china.jpg"]
    for cut in (2, 300, read_header(data).header_end - 1, read_header(data).header_end + 10,
                len(data) // 2, len(data) - 1):
        with pytest.raises(ImageHeaderError, match="truncated JPEG"):
            part = data[:cut]
            check_complete(part, read_header(part))


def test_a_build_of_real_photographs_stores_them_unchanged_and_tensorflow_decodes_them(
        photographs, tmp_path, tf_oracle):
    files = _variants(photographs)
    root = tmp_path / "photos"
    for name, data in files.items():
        label = name.split("-")[0].removesuffix(".jpg")
        (root / "train" / label).mkdir(parents=True, exist_ok=True)
        (root / "train" / label / name).write_bytes(data)
    cut = root / "train" / "china" / "china-cut.jpg"
    cut.write_bytes(photographs["china.jpg"][:60_000])  # a download that stopped
    config = tmp_path / "photos.yaml"
    config.write_text(f"""name: photos
source:
  format: images
  path: {root}
  images: {{layout: folders}}
features:
  image_raw: {{type: bytes, source: image}}
  path: {{type: string}}
  label_text: {{type: string}}
  height: {{type: int64}}
  width: {{type: int64}}
  channels: {{type: int64}}
errors:
  max_bad_fraction: 0.1
output:
  path: {tmp_path / "out"}
  compression: none
""")
    manifest = cli.run_build(["--config", str(config), "--version", "v1"])
    assert manifest["counts"]["read"] == len(files) + 1
    assert manifest["counts"]["written"] == len(files)
    assert manifest["counts"]["rejected"] == 1
    version = tmp_path / "out" / "v1"
    (dead,) = [json.loads(line) for path in (version / "dead_letter").iterdir()
               for line in path.read_text().splitlines()]
    assert dead["source"] == str(cut) and "truncated JPEG" in dead["reason"]

    shards = sorted((version / "train").glob("*.tfrecord"))
    stored = {}
    for shard in shards:
        for example in read_examples(shard):
            name = pathlib.Path(example["path"][1][0].decode()).name
            stored[name] = example
    assert sorted(stored) == sorted(files)
    for name, example in stored.items():
        assert example["image_raw"][1] == [files[name]], name  # the file's bytes, unchanged
        assert (example["height"][1][0], example["width"][1][0],
                example["channels"][1][0]) == _pillows_facts(files[name]), name

    # TensorFlow decodes every stored image to the shape our header facts give -- except that
    # tf.io.decode_jpeg turns a 4-component (CMYK) JPEG into 3 channels, as README says.
    script = """
import json, sys
import tensorflow as tf
spec = {"image_raw": tf.io.FixedLenFeature([], tf.string),
        "path": tf.io.FixedLenFeature([], tf.string),
        **{k: tf.io.FixedLenFeature([], tf.int64) for k in ("height", "width", "channels")}}
seen = {}
for record in tf.data.TFRecordDataset(sys.argv[2:]):
    ex = tf.io.parse_single_example(record, spec)
    image = tf.io.decode_jpeg(ex["image_raw"], channels=0)
    seen[ex["path"].numpy().decode()] = [list(image.shape),
        [int(ex[k]) for k in ("height", "width", "channels")]]
json.dump(seen, open(sys.argv[1], "w"))
"""
    out = tmp_path / "tf.json"
    (tmp_path / "decode.py").write_text(script)
    done = tf_oracle.script(tmp_path / "decode.py", [out, *shards], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(out.read_text())
    assert len(seen) == len(files)
    for path, (shape, facts) in seen.items():
        if facts[2] == 4:
            assert path.endswith("-cmyk.jpg") and shape == [*facts[:2], 3], (path, shape)
        else:
            assert shape == facts, path
    assert sum(path.endswith("-cmyk.jpg") for path in seen) == 2
