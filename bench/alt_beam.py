"""Stock Apache Beam: read -> Map(build one Example per row) -> WriteToTFRecord, DirectRunner.

    .venv/bin/python bench/alt_beam.py --data DIR --out DIR [--workers N]

What the Beam documentation leads a user to write: ``ReadFromText`` (header skipped, a split
on commas) or ``ReadFromParquet`` (one dict per row), a ``Map`` building a protobuf Example
with the project's ``example_pb2`` (serialized deterministically), and Beam's own
``WriteToTFRecord``. Images: ``Create`` of (path, label) pairs -> ``Map`` reading the file,
its size from Pillow's header parse, and building the Example.
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
from measure import alt_args, emit, output_bytes
from pb_example import example_builder
from rows import csv_parser, image_entries, load_meta


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
    args = alt_args(__doc__)
    meta = load_meta(args.data)
    build = example_builder(meta["features"])
    folder = pathlib.Path(meta["folder"])
    pattern = str(folder / meta["glob"])
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    options = ["--runner=DirectRunner"]
    if args.workers > 1:
        options += ["--direct_running_mode=multi_processing",
                    f"--direct_num_workers={args.workers}"]
    start = time.perf_counter()
    with beam.Pipeline(options=PipelineOptions(options)) as p:
        if meta["format"] == "csv":
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
    seconds = time.perf_counter() - start
    emit(meta["rows"], seconds, output_bytes(out))  # the harness counts what was written


if __name__ == "__main__":
    main()
