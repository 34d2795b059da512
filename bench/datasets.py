"""The benchmark's data sets, generated deterministically and cached under a data directory.

Every data set is a folder ``<data-dir>/<name>-<rows>/`` holding its input files and a
``meta.json`` written last (the cache's commit marker): the format, the files, the row count,
the output features ``[{name, type, shape}]`` every alternative writes, and ``key``, a feature
whose value finds an input row again (the harness uses it to check decoded samples).

- ``tutorial-csv`` / ``tutorial-parquet``: TensorFlow's "TFRecord and tf.train.Example"
  tutorial data -- feature0 int 0/1, feature1 int 0..4, feature2 one of five animal words
  chosen by feature1, feature3 a standard normal float -- at two sizes per scale (the same
  values in both formats: one seed per size and file).
- ``wide``: Parquet, 10 int64 (``i0`` is the row id), 10 float64, 5 string and 5 list-of-8
  float32 columns.
- ``images``: JPEG textures of ~100 KB made with Pillow, ``images/<label>/<n>.jpg`` plus a
  ``labels.csv`` (``path,label``, paths relative to it).
- ``real-table`` (issue #18; bench/real_table.py, not part of run.py's cases): Parquet shaped
  like real tables -- a unique ``id``, a timestamp with time zone, a date, a decimal price, a
  nullable string of 3,000 distinct values, a count, a variable-length int list and a struct.

Seeds are fixed, so two machines generate the same values (JPEG bytes depend on the libjpeg
build; their labels and sizes do not).
"""

from __future__ import annotations

import dataclasses
import io
import json
import pathlib
import shutil
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["DATASET_NAMES", "SCALES", "Case", "cases", "ensure"]

GENERATOR_VERSION = 1  # bump when a generator's output changes, to invalidate caches
FILES = 4  # tabular inputs are split into this many files, so 2 workers have work to share
WORDS = ("cat", "dog", "chicken", "horse", "goat")  # the tutorial's strings, by feature1
LABELS = ("cat", "chicken", "cow", "dog", "duck", "goat", "horse", "pig", "rabbit", "sheep")
IMAGE_SIZE = (448, 336)  # width, height
IMAGE_QUALITY = 90  # with the texture below: ~100 KB per JPEG

DATASET_NAMES = ("tutorial-csv", "tutorial-parquet", "wide", "images")
# rows per data set at each scale; the tutorial sets come in two sizes (the RSS target
# compares our peak memory at the larger size with the smaller).
SCALES: dict[str, dict[str, tuple[int, ...]]] = {
    "tiny": {"tutorial": (1_000, 2_000), "wide": (1_000,), "images": (10,)},
    "small": {"tutorial": (20_000, 100_000), "wide": (20_000,), "images": (200,)},
    "full": {"tutorial": (1_000_000, 10_000_000), "wide": (200_000,), "images": (2_000,)},
}

TUTORIAL_FEATURES = [
    {"name": "feature0", "type": "int64", "shape": []},
    {"name": "feature1", "type": "int64", "shape": []},
    {"name": "feature2", "type": "string", "shape": []},
    {"name": "feature3", "type": "float", "shape": []},
]
WIDE_FEATURES = (
    [{"name": f"i{k}", "type": "int64", "shape": []} for k in range(10)]
    + [{"name": f"f{k}", "type": "float", "shape": []} for k in range(10)]
    + [{"name": f"s{k}", "type": "string", "shape": []} for k in range(5)]
    + [{"name": f"l{k}", "type": "float", "shape": [8]} for k in range(5)]
)
IMAGE_FEATURES = [  # the tutorial's image example: raw bytes, label, height, width
    {"name": "image_raw", "type": "bytes", "shape": [], "source": "image"},
    {"name": "label", "type": "int64", "shape": []},
    {"name": "height", "type": "int64", "shape": []},
    {"name": "width", "type": "int64", "shape": []},
]


@dataclasses.dataclass(frozen=True)
class Case:
    """One data set at one size: what the harness times every alternative on."""

    dataset: str  # one of DATASET_NAMES
    rows: int

    @property
    def label(self) -> str:
        return f"{self.dataset}@{_short(self.rows)}"

    @property
    def dirname(self) -> str:
        return f"{self.dataset}-{self.rows}"


def _short(n: int) -> str:
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size and n % (size // 10) == 0:
            text = f"{n / size:.1f}".rstrip("0").rstrip(".")
            return text + unit
    return str(n)


def cases(scale: str, only: Sequence[str] = DATASET_NAMES) -> list[Case]:
    """The cases of a scale, in a stable order, restricted to the data sets in ``only``."""
    sizes = SCALES[scale]
    out = []
    for name in DATASET_NAMES:
        if name in only:
            family = "tutorial" if name.startswith("tutorial") else name
            out.extend(Case(name, rows) for rows in sizes[family])
    return out


def ensure(case: Case, data_dir: pathlib.Path) -> pathlib.Path:
    """The case's folder under ``data_dir``, generated unless a complete copy is cached."""
    folder = data_dir / case.dirname
    meta_path = folder / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("generator") == GENERATOR_VERSION:
            return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    meta = _GENERATORS[case.dataset](case.rows, folder)
    meta.update(dataset=case.dataset, rows=case.rows, generator=GENERATOR_VERSION)
    tmp = folder / "meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(meta_path)  # the commit marker: a folder without it is regenerated
    return folder


def _file_rows(rows: int) -> list[int]:
    """Rows per input file: FILES files (fewer for tiny sets), sizes differing by at most 1."""
    n = max(1, min(FILES, rows // 100))
    return [rows // n + (1 if k < rows % n else 0) for k in range(n)]


def _tutorial_table(rows: int, seed: int) -> Any:
    import pyarrow as pa

    rng = np.random.default_rng([20261123, rows, seed])
    feature0 = rng.integers(0, 2, rows, dtype=np.int64)
    feature1 = rng.integers(0, 5, rows, dtype=np.int64)
    feature3 = rng.standard_normal(rows)
    words = pa.array(WORDS).take(pa.array(feature1))
    return pa.table({"feature0": feature0, "feature1": feature1, "feature2": words,
                     "feature3": feature3})


def _gen_tutorial(fmt: str):
    def generate(rows: int, folder: pathlib.Path) -> dict[str, Any]:
        import pyarrow.csv as pcsv
        import pyarrow.parquet as pq

        files = []
        for k, n in enumerate(_file_rows(rows)):
            table = _tutorial_table(n, k)
            name = f"part-{k:03d}.{fmt}"
            if fmt == "csv":  # no quoting: plain numbers and words, as the tutorial's data
                with open(folder / name, "wb") as out:
                    out.write((",".join(table.column_names) + "\n").encode())
                    pcsv.write_csv(table, out, pcsv.WriteOptions(include_header=False,
                                                                 quoting_style="none"))
            else:
                pq.write_table(table, folder / name)
            files.append(name)
        return {"format": fmt, "files": files, "glob": f"part-*.{fmt}",
                "features": TUTORIAL_FEATURES, "key": "feature3"}

    return generate


def _gen_wide(rows: int, folder: pathlib.Path) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    vocab_rng = np.random.default_rng([20261123, 7])
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocabulary = pa.array(["".join(vocab_rng.choice(letters, int(vocab_rng.integers(4, 17))))
                           for _ in range(1000)])
    files, first = [], 0
    for k, n in enumerate(_file_rows(rows)):
        rng = np.random.default_rng([20261123, rows, 100 + k])
        columns: dict[str, Any] = {"i0": np.arange(first, first + n, dtype=np.int64)}
        for c in range(1, 10):
            columns[f"i{c}"] = rng.integers(-10**9, 10**9, n, dtype=np.int64)
        for c in range(10):
            columns[f"f{c}"] = rng.standard_normal(n)
        for c in range(5):
            columns[f"s{c}"] = vocabulary.take(pa.array(rng.integers(0, 1000, n)))
        offsets = pa.array(np.arange(0, 8 * n + 1, 8, dtype=np.int32))
        for c in range(5):
            values = pa.array(rng.standard_normal(8 * n).astype(np.float32))
            columns[f"l{c}"] = pa.ListArray.from_arrays(offsets, values)
        name = f"part-{k:03d}.parquet"
        pq.write_table(pa.table(columns), folder / name)
        files.append(name)
        first += n
    return {"format": "parquet", "files": files, "glob": "part-*.parquet",
            "features": WIDE_FEATURES, "key": "i0"}


def _texture(rng: np.random.Generator) -> np.ndarray:
    """A random-ish RGB texture: smooth colour blobs plus grain, so JPEG keeps it ~100 KB."""
    width, height = IMAGE_SIZE
    coarse = rng.integers(0, 256, (height // 16 + 1, width // 16 + 1, 3)).astype(np.float32)
    smooth = np.repeat(np.repeat(coarse, 16, axis=0), 16, axis=1)[:height, :width]
    grain = rng.normal(0, 40, (height, width, 3))
    return np.clip(smooth + grain, 0, 255).astype(np.uint8)


def _gen_images(rows: int, folder: pathlib.Path) -> dict[str, Any]:
    from PIL import Image

    lines, used = ["path,label"], set()
    for n in range(rows):
        rng = np.random.default_rng([20261123, 9, n])
        label = LABELS[int(rng.integers(0, len(LABELS)))]
        relative = f"images/{label}/{n:05d}.jpg"
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        Image.fromarray(_texture(rng)).save(buffer, "JPEG", quality=IMAGE_QUALITY)
        (folder / relative).write_bytes(buffer.getvalue())
        lines.append(f"{relative},{label}")
        used.add(label)
    (folder / "labels.csv").write_text("\n".join(lines) + "\n")
    return {"format": "images", "files": ["labels.csv"], "glob": "labels.csv",
            "features": IMAGE_FEATURES, "key": "image_raw",
            "vocabulary": sorted(used)}  # a label's int is its index here, as in our build


CARRIERS = 3_000  # distinct values of the real table's nullable string column


def _decimal_cents(cents: np.ndarray, precision: int = 12) -> Any:
    """A decimal128(precision, 2) array of ``cents / 100``, built from its 16-byte little-
    endian two's-complement values (from Python Decimals it would take minutes at 5M)."""
    import pyarrow as pa

    words = np.empty((cents.size, 2), np.int64)
    words[:, 0] = cents
    words[:, 1] = np.where(cents < 0, -1, 0)
    return pa.Array.from_buffers(pa.decimal128(precision, 2), cents.size,
                                 [None, pa.py_buffer(words.tobytes())])


def _real_table(rows: int, first_id: int, seed: int) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng([20261124, rows, seed])
    base_us = 1_577_836_800 * 10**6  # 2020-01-01T00:00:00Z
    when = base_us + rng.integers(0, 3 * 365 * 86_400 * 10**6, rows, dtype=np.int64)
    day = (18_262 + rng.integers(0, 3 * 365, rows)).astype(np.int32)  # days since 1970
    carrier = pa.array(np.char.add("C", rng.integers(0, CARRIERS, rows).astype(str)))
    carrier = pc.if_else(pa.array(rng.random(rows) < 0.05), pa.scalar(None, pa.string()),
                         carrier)
    lengths = rng.integers(0, 5, rows)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    hops = pa.ListArray.from_arrays(pa.array(offsets),
                                    pa.array(rng.integers(0, 10_000, int(offsets[-1]))))
    loc = pa.StructArray.from_arrays([pa.array(rng.uniform(-90, 90, rows)),
                                      pa.array(rng.uniform(-180, 180, rows))], ["lat", "lon"])
    return pa.table({
        "id": np.arange(first_id, first_id + rows, dtype=np.int64),
        "ts": pa.array(when, pa.timestamp("us", tz="Europe/Paris")),
        "day": pa.array(day, pa.date32()),
        "price": _decimal_cents(rng.integers(100, 1_000_000, rows)),
        "carrier": carrier,
        "count": rng.integers(0, 1_000, rows),
        "hops": hops,
        "loc": loc,
    })


def _gen_real_table(rows: int, folder: pathlib.Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    files, first = [], 0
    for k, n in enumerate(_file_rows(rows)):
        name = f"part-{k:03d}.parquet"
        pq.write_table(_real_table(n, first, k), folder / name)
        files.append(name)
        first += n
    return {"format": "parquet", "files": files, "glob": "part-*.parquet", "key": "id"}


_GENERATORS = {
    "real-table": _gen_real_table,
    "tutorial-csv": _gen_tutorial("csv"),
    "tutorial-parquet": _gen_tutorial("parquet"),
    "wide": _gen_wide,
    "images": _gen_images,
}
