"""Peak memory of the sink while writing a large data set (default 2 GB) on DirectRunner.

    .venv/bin/python bench/sink_memory.py [--gigabytes 2] [--out /tmp/sink-memory]
        [--compression none|gzip] [Beam options]

Records are 1 KiB of pseudo-random bytes made on the fly in batches of 1,000, so nothing but
the sink's own buffers can hold data: the printed peak RSS is what writing costs. The shards use
the default band (target 150 MB), so every writer holds an open 150 MB file it never buffers.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import time

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.sinks.format.shard_plan import ShardSize
from beam_tfrecords.sinks.format.tfrecord_format import FRAME_OVERHEAD
from beam_tfrecords.sinks.tfrecord_sink import WriteTFRecordShards

RECORD = 1024
BATCH = 1000


def make_batch(seed: int) -> tuple[str, SerializedBatch]:
    rng = np.random.default_rng(seed)
    payload = rng.integers(0, 256, RECORD * BATCH, dtype=np.uint8).tobytes()
    return "train", SerializedBatch(payload, np.arange(0, RECORD * BATCH + 1, RECORD))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=2.0)
    parser.add_argument("--out", default="/tmp/sink-memory")
    parser.add_argument("--compression", default="none")
    args, beam_args = parser.parse_known_args()
    batches = int(args.gigabytes * 1e9 / (RECORD * BATCH))
    shutil.rmtree(args.out, ignore_errors=True)
    start = time.perf_counter()
    with beam.Pipeline(options=PipelineOptions(beam_args)) as p:
        shards = (
            p
            | beam.Create(range(batches))
            | beam.Reshuffle()
            | beam.Map(make_batch)  # (split, SerializedBatch)
            | WriteTFRecordShards(f"{args.out}/v", f"{args.out}/staging", "bench", ("train",),
                                  args.compression, ShardSize())
        )
        shards | beam.Map(lambda s: print(
            f"shards: {len(s['train'])}, sizes MB: "
            f"{sorted(round(i.bytes / 1e6, 1) for i in s['train'])}"))
    seconds = time.perf_counter() - start
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    written = batches * BATCH * (RECORD + FRAME_OVERHEAD) / 1e6
    print(f"wrote {written:.0f} MB ({batches * BATCH} records) in {seconds:.1f} s "
          f"({written / seconds:.0f} MB/s); peak RSS: this process {own:.0f} MB, "
          f"largest worker process {children:.0f} MB")


if __name__ == "__main__":
    main()
