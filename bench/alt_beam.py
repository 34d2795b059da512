"""Stock Apache Beam: read -> Map(build one Example per row) -> WriteToTFRecord, DirectRunner.

    .venv/bin/python bench/alt_beam.py --data DIR --out DIR [--input read|dicts]
        [--workers N] [--profile FILE]

What the Beam documentation leads a user to write: ``ReadFromText`` (header skipped, a split
on commas) or ``ReadFromParquet`` (one dict per row), a ``Map`` building a protobuf Example
with the project's ``example_pb2`` (serialized deterministically), and Beam's own
``WriteToTFRecord``. Images: ``Create`` of (path, label) pairs -> ``Map`` reading the file,
its size from Pillow's header parse, and building the Example.

``--input dicts`` (alternative ``beam-dicts``, the stock side of issue #14's dicts target):
every input row as a plain dict (``rows.iter_rows``: pyarrow ``to_pylist`` for Parquet) in
one list built before the clock, then ``beam.Create(dicts) | Map(build) | WriteToTFRecord``,
``Create`` timed -- the same list and the same ``Create`` as ``alt_api.py --input dicts``.
"""

from __future__ import annotations

import io
import pathlib
import time

import apache_beam as beam
from apache_beam.io.parquetio import ReadFromParquet
from apache_beam.io.textio import ReadFromText
from apache_beam.io.tfrecordio import WriteToTFRecord
from apache_beam.options.pipeline_options import PipelineOptions
from measure import alt_args, emit, output_bytes, skip
from pb_example import example_builder
from rows import csv_parser, image_entries, iter_rows, load_meta


def _image_example(build):
    from PIL import Image

    def make(entry: tuple[str, int]) -> bytes:
        path, label = entry
        with open(path, "rb") as handle:
            data = handle.read()
        width, height = Image.open(io.BytesIO(data)).size
        return build({"image": data, "label": label, "width": width, "height": height})

    return make


def main() -> None:
    args = alt_args(__doc__, profile=True, inputs=("read", "dicts"))
    meta = load_meta(args.data)
    if args.input == "dicts" and meta["format"] == "images":
        skip("--input dicts is for tabular data sets")
    dicts = list(iter_rows(meta)) if args.input == "dicts" else None  # before the clock
    build = example_builder(meta["features"])
    folder = pathlib.Path(meta["folder"])
    pattern = str(folder / meta["glob"])
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    options = ["--runner=DirectRunner"]
    if args.workers > 1:
        options += ["--direct_running_mode=multi_processing",
                    f"--direct_num_workers={args.workers}"]

    def run() -> None:
        with beam.Pipeline(options=PipelineOptions(options)) as p:
            if dicts is not None:
                examples = p | beam.Create(dicts) | beam.Map(build)
            elif meta["format"] == "csv":
                with open(folder / meta["files"][0]) as handle:
                    parse = csv_parser(meta, handle.readline())
                examples = (p | ReadFromText(pattern, skip_header_lines=1)
                            | beam.Map(lambda line: build(parse(line))))
            elif meta["format"] == "parquet":
                examples = p | ReadFromParquet(pattern) | beam.Map(build)
            else:
                examples = (p | beam.Create(image_entries(meta))
                            | beam.Map(_image_example(build)))
            _ = examples | WriteToTFRecord(str(out / "part"), file_name_suffix=".tfrecord")

    start = time.perf_counter()
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.runcall(run)
        profiler.dump_stats(args.profile)
    else:
        run()
    seconds = time.perf_counter() - start
    emit(meta["rows"], seconds, output_bytes(out))  # the harness counts what was written


if __name__ == "__main__":
    main()
