"""What counting duplicates and leaks costs: per record in one process, and whole builds, in
one run.

    .venv/bin/python bench/duplicates_cost.py [--micro-records 1000000] [--rows 1000000]
        [--base-tree DIR] [--repeats 2] [--data-dir bench/.data]

1. Per record (one process, the tutorial's Examples, 4,096 a batch): what a writer does per
   batch without the count (``frame_batch``, which computes the CRC-32Cs itself) against
   with it (the CRC-32Cs computed first and handed to framing, zlib's CRC-32 of every record,
   the fingerprints, the sampled records kept, the bundle's tally), then the bucket cut, the
   per-bucket merge and the result, as the writer and combiner do (sinks/duplicates.py).
   Best of three passes each, interleaved.
2. Whole ``beam-tfrecords build`` processes on the tutorial CSV (bench/datasets.py),
   ``--repeats`` rounds, interleaved: this tree with statistics (what a build does by
   default: statistics, duplicates, the drift gate, report.html), this tree with
   ``output.statistics: false``, and -- with ``--base-tree`` -- a tree without the count (a
   folder holding the package as ``beam_tfrecords/``, e.g. ``git archive`` of the commit
   before it) with statistics. Wall time and the CPU seconds of the process tree
   (``RUSAGE_CHILDREN``), as the machine is shared: ratios in one run.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import shutil
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import datasets  # noqa: E402  (bench/ is not a package)
from cli_build import build_process, write_config  # noqa: E402
from statistics_cost import FEATURES, SPLITS  # noqa: E402  (the tutorial's, as there)

BATCH = 4096


def _batches(records: int) -> list:
    import random

    from beam_tfrecords.runtime.serialized_batch import SerializedBatch
    from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder
    from beam_tfrecords.transforms.codec.specs import as_feature_specs

    encoder = ExampleEncoder(as_feature_specs(FEATURES))
    rng = random.Random(0)
    words = ["cat", "dog", "bird", "fish", "horse"]
    out = []
    for start in range(0, records, BATCH):
        out.append(SerializedBatch.from_records([encoder.encode(
            {"feature0": rng.randrange(10**6), "feature1": rng.randrange(100),
             "feature2": rng.choice(words), "feature3": rng.random()})
            for _ in range(min(BATCH, records - start))]))
    return out


def micro(records: int) -> dict[str, float]:
    """Seconds per record: framing alone, framing with the fingerprints, and the merge."""
    from beam_tfrecords.sinks.duplicates import DuplicatesCombineFn
    from beam_tfrecords.sinks.format import duplicates as dup
    from beam_tfrecords.sinks.format import tfrecord_format as tff

    batches = _batches(records)

    def plain() -> float:
        start = time.process_time()
        for b in batches:
            tff.frame_batch(b.payload, b.offsets)
        return time.process_time() - start

    def counted() -> tuple[float, float]:
        tally = dup.FingerprintCounts()
        start = time.process_time()
        for b in batches:
            slices = tff.record_slices(b.payload, b.offsets)
            crcs = tff.record_crcs(b.payload, b.offsets, slices)
            fps, samples = dup.batch_fingerprints(b.payload, b.offsets, crcs, slices=slices)
            tally.add("train", fps)
            tally.add_samples(samples)
            tff.frame_batch(b.payload, b.offsets, crcs)
        writing = time.process_time() - start
        start = time.process_time()
        combine = DuplicatesCombineFn()
        results = []
        for _, part in sorted(tally.by_bucket().items()):
            acc = combine.add_input(combine.create_accumulator(), part)
            results.append(combine.extract_output(combine.merge_accumulators([acc])))
        dup.summarize(results, ["train"])
        return writing, time.process_time() - start

    base, write, merge = [], [], []
    for _ in range(3):
        base.append(plain())
        w, m = counted()
        write.append(w)
        merge.append(m)
    n = sum(len(b) for b in batches)
    return {"frame": min(base) / n, "frame_and_fingerprint": min(write) / n,
            "merge": min(merge) / n}


def _timed_build(config: pathlib.Path, pythonpath: str) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = pythonpath
    try:
        run = build_process(config)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    run["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--micro-records", type=int, default=1_000_000)
    parser.add_argument("--rows", type=int, default=1_000_000,
                        help="rows of the whole builds (0: none)")
    parser.add_argument("--base-tree", type=pathlib.Path, default=None,
                        help="a folder holding a beam_tfrecords package without the count")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--data-dir", type=pathlib.Path, default=HERE / ".data")
    args = parser.parse_args(argv)
    if args.micro_records:
        got = micro(args.micro_records)
        extra = got["frame_and_fingerprint"] - got["frame"]
        print(f"per record, {args.micro_records:,} tutorial Examples: framing "
              f"{got['frame'] * 1e6:.2f} us, framing + fingerprint "
              f"{got['frame_and_fingerprint'] * 1e6:.2f} us (+{extra * 1e6:.2f} us), "
              f"bucket cut + merge + result {got['merge'] * 1e6:.2f} us", flush=True)
    if not args.rows:
        return 0
    here = os.environ.get("PYTHONPATH", "")
    folder = datasets.ensure(datasets.Case("tutorial-csv", args.rows), args.data_dir)
    source = {"format": "csv", "path": str(folder / "part-*.csv")}
    work = pathlib.Path(tempfile.mkdtemp(prefix="dupes-cost-"))
    variants = [("this tree, statistics off", here, False),
                ("this tree, statistics on", here, True)]
    if args.base_tree is not None:
        variants.append(("without the count, statistics on", str(args.base_tree), True))
    times: dict[str, list[dict]] = {label: [] for label, _, _ in variants}
    try:
        for round_ in range(args.repeats):
            for label, path, statistics in variants:
                name = f"tutorial-{len(times[label])}-{statistics}-{path == here}"
                out = work / name
                config = write_config(work, name, source, FEATURES, out, SPLITS, statistics)
                run = _timed_build(config, path)
                if run["exit"] != 0:
                    print(f"{label}: exit {run['exit']}: {run['said']}")
                    return 1
                times[label].append(run)
                print(f"round {round_ + 1} {label:>34}: {run['seconds']:6.1f} s wall, "
                      f"{run['cpu']:6.1f} CPU-s, peak {run['peak_mb']:5.0f} MB", flush=True)
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def total(label: str, key: str) -> float:
        return sum(r[key] for r in times[label])

    on, off = "this tree, statistics on", "this tree, statistics off"
    for key, unit in (("seconds", "wall"), ("cpu", "CPU")):
        print(f"{args.rows:,} rows, {unit}: statistics on / off = "
              f"{total(on, key) / total(off, key):.3f}", flush=True)
        if args.base_tree is not None:
            base = "without the count, statistics on"
            print(f"{args.rows:,} rows, {unit}: with / without the count = "
                  f"{total(on, key) / total(base, key):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
