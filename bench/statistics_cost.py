"""What statistics cost a build: the tutorial and the real table with and without them, and
the statistics' memory on a 1,000-feature config, in one run.

    .venv/bin/python bench/statistics_cost.py [--rows 5000000] [--format csv|parquet]
        [--tables tutorial,real-table] [--rounds 3] [--memory-features 1000]
        [--data-dir bench/.data]

Every build is a whole ``beam-tfrecords build`` process (python start-up, launch checks,
pipeline, commit) on generated data (bench/datasets.py: the tutorial's 4 features; the real
table of bench/real_table.py), timed with its process tree's peak memory; the two configs of a
table differ only by ``output.statistics: false`` -- "with" is what a build does by default:
statistics, the drift gate (the first build: nothing to compare) and ``report.html``. Each
table is built ``--rounds`` times each way, the two interleaved and their order alternated
from round to round (on a shared 2-core machine a single build's time moves by 10-20% from
run to run, more than the statistics cost). Prints one line per build, each round's ratio,
and each table's ratio of the medians with PASS/MISS against the target (at most 10% more
time).

The memory line: one split's statistics accumulator (transforms/stats) fed ``--memory-rows``
rows of a config of ``--memory-features`` features (a quarter int64, a quarter float, half
strings of many distinct values, so every sketch fills to its capacity), in this process:
its peak traced allocation (``tracemalloc``) and the size of its pickle (what a worker ships
to the merge). A worker holds one such accumulator per split it writes. Besides the
sketches, each number and string key buffers up to 65,536 rows of Arrow values before it
folds them in (``dataset_stats.BUFFER_ROWS``): on a wide config that buffer is the peak.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import statistics as stats
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import datasets  # noqa: E402  (bench/ is not a package)
from cli_build import build_process, write_config  # noqa: E402

FEATURES = {"feature0": {"type": "int64"}, "feature1": {"type": "int64"},
            "feature2": {"type": "string"}, "feature3": {"type": "float"}}
SPLITS = {"key": "feature3", "train": 80, "eval": 20}
TARGET = 1.10


def _tables(args: argparse.Namespace) -> list[tuple[str, dict, dict, dict]]:
    """(label, source, features, splits) of each table asked for."""
    import real_table

    found = []
    for table in args.tables.split(","):
        if table == "tutorial":
            folder = datasets.ensure(datasets.Case(f"tutorial-{args.format}", args.rows),
                                     args.data_dir)
            found.append((f"tutorial-{args.format}",
                          {"format": args.format, "path": str(folder / f"part-*.{args.format}")},
                          FEATURES, SPLITS))
        elif table == "real-table":
            folder = datasets.ensure(datasets.Case("real-table", args.rows), args.data_dir)
            found.append(("real-table", {"format": "parquet", "path": str(folder / "*.parquet")},
                          real_table.FEATURES, real_table.SPLITS))
        else:
            raise SystemExit(f"unknown table {table!r}: tutorial or real-table")
    return found


BUFFER_ROWS = 65_536  # transforms/stats/dataset_stats.BUFFER_ROWS


def accumulator_memory(features: int, rows: int, batch: int = 4096) -> tuple[float, float]:
    """(peak traced MB, pickled MB) of one split's statistics over ``rows`` rows of
    ``features`` features, added in Arrow batches as the encoder adds them."""
    import pickle
    import tracemalloc

    import numpy as np
    import pyarrow as pa

    from beam_tfrecords.transforms.stats.dataset_stats import DatasetAccumulator

    kinds = {f"f{i}": ("int" if i % 4 == 0 else "float" if i % 4 == 1 else "string")
             for i in range(features)}
    rng = np.random.default_rng(7)
    tracemalloc.start()
    acc = DatasetAccumulator(kinds)
    pool = pa.array(np.char.add("v", np.arange(10**5).astype(str)))  # distinct values
    for start in range(0, rows, batch):
        n = min(batch, rows - start)
        columns = {}
        for key, kind in kinds.items():  # arrays of their own: buffered values are not shared
            if kind == "int":
                columns[key] = pa.array(rng.integers(0, 10**9, n))
            elif kind == "float":
                columns[key] = pa.array(rng.normal(size=n))
            else:  # many distinct values: the distinct and top-value sketches fill up
                columns[key] = pool.take(pa.array(rng.integers(0, len(pool), n)))
        acc.add_batch(n, columns)
        del columns
    acc.flush()
    pickled = len(pickle.dumps(acc))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 1e6, pickled / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--format", choices=("csv", "parquet"), default="csv")
    parser.add_argument("--tables", default="tutorial,real-table",
                        help="comma-separated: tutorial, real-table")
    parser.add_argument("--rounds", type=int, default=3,
                        help="builds of each table each way, interleaved (the medians count)")
    parser.add_argument("--memory-features", type=int, default=1000)
    parser.add_argument("--memory-rows", type=int, default=2 * BUFFER_ROWS,
                        help="rows fed (default: twice the rows a key buffers before it "
                             "folds them into its sketches, so the peak is the steady one)")
    parser.add_argument("--data-dir", type=pathlib.Path, default=HERE / ".data")
    args = parser.parse_args(argv)
    work = pathlib.Path(tempfile.mkdtemp(prefix="stats-cost-"))
    missed = 0
    try:
        for table, source, features, splits in _tables(args):
            seconds: dict[bool, list[float]] = {False: [], True: []}
            for round_ in range(args.rounds):
                order = (False, True) if round_ % 2 == 0 else (True, False)
                for statistics in order:
                    label = "with statistics" if statistics else "without statistics"
                    name = f"{table}-{label.replace(' ', '-')}"
                    out = work / name
                    config = write_config(work, name, source, features, out, splits,
                                          statistics)
                    run = build_process(config)
                    if run["exit"] != 0:
                        print(f"{table} {label}: exit {run['exit']}: {run['said']}")
                        return 1
                    seconds[statistics].append(run["seconds"])
                    print(f"{table:>16} {label:>20}: {run['seconds']:6.1f} s, "
                          f"peak {run['peak_mb']:6.0f} MB   (round {round_})", flush=True)
                    shutil.rmtree(out, ignore_errors=True)
                print(f"{table:>16} round {round_}: with / without = "
                      f"{seconds[True][-1] / seconds[False][-1]:.3f}", flush=True)
            ratio = stats.median(seconds[True]) / stats.median(seconds[False])
            verdict = "PASS" if ratio <= TARGET else "MISS"
            missed += verdict == "MISS"
            print(f"{table} {args.rows:,} rows: with / without statistics = {ratio:.3f} "
                  f"(medians of {args.rounds}: {stats.median(seconds[True]):.1f} s / "
                  f"{stats.median(seconds[False]):.1f} s; target <= {TARGET:.2f}) {verdict}",
                  flush=True)
        if args.memory_features:
            peak, pickled = accumulator_memory(args.memory_features, args.memory_rows)
            print(f"statistics of one split, {args.memory_features:,} features, "
                  f"{args.memory_rows:,} rows: peak {peak:.0f} MB traced, "
                  f"{pickled:.1f} MB pickled")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
