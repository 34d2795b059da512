"""The public Python API (issue #14): ``btf.WriteTFRecordDataset`` in a user's own pipeline.

    .venv/bin/python bench/alt_api.py --data DIR --out DIR --input arrow|dicts [--workers N]
        [--profile FILE]

- ``--input arrow`` (alternative ``api-arrow``): ``p | beam.io.ReadFromParquetBatched(pattern)
  | btf.WriteTFRecordDataset(output, name, features=...)`` -- Arrow batches straight into the
  columnar encoder. Parquet data sets only.
- ``--input dicts`` (alternative ``api-dicts``): ``p | beam.Create(dicts) |
  btf.WriteTFRecordDataset(...)``, the dicts being every input row as a plain Python dict
  (``rows.iter_rows``: pyarrow ``to_pylist`` for Parquet), built *before* the clock starts;
  ``beam.Create`` (its encoding, reshuffle and decoding of the dicts) is timed, as it is for
  the stock Beam equivalent, ``alt_beam.py --input dicts``.

Both write one version, ``bench``, of a data set ``bench`` under ``<out>/dataset/`` (shards
in ``<out>/dataset/bench/train/``, plus the manifest), uncompressed, with the same features
as every alternative, on DirectRunner in this process. The time covers pipeline construction
(which takes the output's lease and claims the version), the run and the commit.
"""

from __future__ import annotations

import pathlib
import time

import apache_beam as beam
from apache_beam.io.parquetio import ReadFromParquetBatched
from apache_beam.options.pipeline_options import PipelineOptions
from measure import alt_args, emit, output_bytes, skip
from rows import iter_rows, load_meta

import beam_tfrecords as btf

# What the transforms import on first use, imported before the clock like every
# alternative's libraries (alt_ours.py imports the CLI's build module the same way).
from beam_tfrecords.transforms import (
    to_examples,  # noqa: F401
    write_dataset,  # noqa: F401
)

VERSION = "bench"  # a fixed version folder: <out>/dataset/bench/train/*.tfrecord


def api_features(meta: dict) -> dict[str, dict]:
    """The ``features=`` mapping for the data set, as a config's ``features:`` holds it."""
    features = {}
    for feature in meta["features"]:
        spec: dict = {"type": feature["type"]}
        if feature["shape"]:
            spec["shape"] = feature["shape"]
        if "source" in feature:
            spec["source"] = feature["source"]
        features[feature["name"]] = spec
    return features


def main() -> None:
    args = alt_args(__doc__, profile=True, inputs=("arrow", "dicts"))
    meta = load_meta(args.data)
    if meta["format"] not in ("parquet", "csv") or (args.input == "arrow"
                                                    and meta["format"] != "parquet"):
        skip(f"--input {args.input} does not read {meta['format']} data sets")
    folder = pathlib.Path(meta["folder"])
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    features = api_features(meta)
    dicts = list(iter_rows(meta)) if args.input == "dicts" else None  # before the clock
    options = ["--runner=DirectRunner"]
    if args.workers > 1:
        options += ["--direct_running_mode=multi_processing",
                    f"--direct_num_workers={args.workers}"]

    def run() -> None:
        with beam.Pipeline(options=PipelineOptions(options)) as p:
            if dicts is None:
                rows = p | ReadFromParquetBatched(str(folder / meta["glob"]))
            else:
                rows = p | beam.Create(dicts)
            _ = rows | btf.WriteTFRecordDataset(str(out / "dataset"), "bench",
                                                features=features, version=VERSION)

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
