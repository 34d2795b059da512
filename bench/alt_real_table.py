"""The alternatives on bench/real_table.py's table: stock Beam and tfx-bsl, conversions included.

    .venv/bin/python bench/alt_real_table.py beam --data DIR --out DIR
    .venv-consumers/tfx/bin/python bench/alt_real_table.py tfxbsl --data DIR --out DIR

Neither encoder takes the table as it is: each needs its types converted, and that work is
inside its timer, as a user would have to write it.

* ``beam``: ``ReadFromParquet`` (one dict per row) -> ``Map`` converting the zoned timestamp
  to epoch microseconds, the date to days, the decimal to a float, the struct to its two
  fields and leaving a null string out, then building a protobuf Example (the project's
  ``example_pb2``, serialized deterministically) -> ``Partition`` by a BLAKE2b of the id into
  80/10/10 -> ``WriteToTFRecord`` per split. DirectRunner in-process.
* ``tfxbsl``: Parquet record batches, each column cast with Arrow compute (timestamp and date
  to int64, decimal and doubles to float32, strings to binary, scalars wrapped as one-element
  lists, a null string as a null list, which the encoder leaves out) ->
  ``RecordBatchToExamples`` -> records framed with struct and crc32c into a file per split,
  the split from the same BLAKE2b of the id per row.

Prints measure.emit's JSON line: rows, seconds (the work, imports excluded), bytes_out.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import pathlib
import struct
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from measure import emit, output_bytes  # noqa: E402

SPLITS = (("eval", 1_000), ("test", 2_000), ("train", 10_000))  # bucket bounds of 10,000
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
EPOCH_DAY = datetime.date(1970, 1, 1)


def split_of(key: int) -> int:
    """The split index of an id: the same BLAKE2b of ``0x02`` + its digits our build uses."""
    digest = hashlib.blake2b(b"\x02" + str(key).encode(), digest_size=8,
                             person=b"btfr-split").digest()
    bucket = int.from_bytes(digest, "big") % 10_000
    return next(i for i, (_, bound) in enumerate(SPLITS) if bucket < bound)


def run_beam(data: pathlib.Path, out: pathlib.Path) -> int:
    import apache_beam as beam
    from apache_beam.io.parquetio import ReadFromParquet
    from apache_beam.io.tfrecordio import WriteToTFRecord

    from beam_tfrecords.transforms.proto import example_pb2

    def build(row: dict) -> bytes:
        example = example_pb2.Example()
        feature = example.features.feature
        feature["id"].int64_list.value.append(row["id"])
        feature["ts"].int64_list.value.append((row["ts"] - EPOCH)
                                              // datetime.timedelta(microseconds=1))
        feature["day"].int64_list.value.append((row["day"] - EPOCH_DAY).days)
        feature["price"].float_list.value.append(float(row["price"]))
        if row["carrier"] is not None:
            feature["carrier"].bytes_list.value.append(row["carrier"].encode())
        feature["count"].int64_list.value.append(row["count"])
        feature["hops"].int64_list.value.extend(row["hops"])
        feature["lat"].float_list.value.append(row["loc"]["lat"])
        feature["lon"].float_list.value.append(row["loc"]["lon"])
        return example.SerializeToString(deterministic=True)

    with beam.Pipeline(options=beam.options.pipeline_options.PipelineOptions(
            ["--runner=DirectRunner"])) as p:
        parts = (p | ReadFromParquet(str(data / "part-*.parquet"))
                 | beam.Map(lambda row: (split_of(row["id"]), build(row)))
                 | beam.Partition(lambda item, n: item[0], len(SPLITS)))
        for index, (name, _) in enumerate(SPLITS):
            _ = (parts[index] | f"Drop{name}" >> beam.Map(lambda item: item[1])
                 | f"Write{name}" >> WriteToTFRecord(str(out / name / "part"),
                                                     file_name_suffix=".tfrecord"))
    return -1  # counted from the files by the caller


def _masked(data: bytes, crc32c) -> int:
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def run_tfxbsl(data: pathlib.Path, out: pathlib.Path) -> int:
    import crc32c
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from tfx_bsl.coders import example_coder

    encoder = example_coder.RecordBatchToExamplesEncoder()
    encoder.encode(pa.record_batch({"warm_up": pa.array([[1]])}))
    pack_q, pack_i = struct.Struct("<Q").pack, struct.Struct("<I").pack

    def scalar_list(column: pa.Array, kind: pa.DataType) -> pa.Array:
        n = len(column)
        offsets = pa.array(np.arange(n + 1, dtype=np.int32))
        mask = column.is_null() if column.null_count else None
        return pa.ListArray.from_arrays(offsets, column.cast(kind), mask=mask)

    files = {name: open(out / f"{name}.tfrecord", "wb", buffering=1 << 20)
             for name, _ in SPLITS}
    rows = 0
    for path in sorted(data.glob("part-*.parquet")):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536):
            loc = batch.column("loc")
            lists = pa.RecordBatch.from_arrays([
                scalar_list(batch.column("id"), pa.int64()),
                scalar_list(pc.cast(batch.column("ts"), pa.int64()), pa.int64()),
                scalar_list(pc.cast(pc.cast(batch.column("day"), pa.int32()), pa.int64()),
                            pa.int64()),
                scalar_list(pc.cast(batch.column("price"), pa.float64()), pa.float32()),
                scalar_list(batch.column("carrier"), pa.binary()),
                scalar_list(batch.column("count"), pa.int64()),
                batch.column("hops"),
                scalar_list(pc.struct_field(loc, "lat"), pa.float32()),
                scalar_list(pc.struct_field(loc, "lon"), pa.float32()),
            ], ["id", "ts", "day", "price", "carrier", "count", "hops", "lat", "lon"])
            which = [split_of(k) for k in batch.column("id").to_pylist()]
            for record, split in zip(encoder.encode(lists), which):
                length = pack_q(len(record))
                files[SPLITS[split][0]].write(length + pack_i(_masked(length, crc32c)) + record
                                              + pack_i(_masked(record, crc32c)))
            rows += batch.num_rows
    for handle in files.values():
        handle.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("alternative", choices=("beam", "tfxbsl"))
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    data, out = pathlib.Path(args.data), pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run = run_beam if args.alternative == "beam" else run_tfxbsl
    if args.alternative == "beam":  # imports before the clock, as for every alternative
        import apache_beam  # noqa: F401
        import apache_beam.io.parquetio  # noqa: F401
    start = time.perf_counter()
    rows = run(data, out)
    seconds = time.perf_counter() - start
    if rows < 0:  # Beam's sink does not say: count the records written, after the clock
        from beam_tfrecords.sinks.format import tfrecord_format as tff

        rows = 0
        for path in out.rglob("*.tfrecord*"):
            with open(path, "rb") as handle:
                rows += sum(1 for _ in tff.iter_records(handle))
    emit(rows, seconds, output_bytes(out))


if __name__ == "__main__":
    main()
