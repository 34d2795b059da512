"""Issue #18's real-table benchmark: a table shaped like real ones, our build's own costs.

    .venv/bin/python bench/real_table.py [--rows 5000000] [--data-dir bench/.data]
        [--keep-output]

The data (bench/datasets.py ``real-table``, generated once, deterministic): 4 Parquet files of
a unique ``id``, a timestamp with time zone (``ts``), a date (``day``), a decimal ``price``, a
nullable string of 3,000 distinct values (``carrier``), a ``count``, a variable-length int
list (``hops``) and a struct (``loc.lat``, ``loc.lon``), with splits keyed on ``id``
(80/10/10). Every number is a whole ``beam-tfrecords build`` process (DirectRunner in-process,
timed after ``os.sync()``, with its process tree's peak memory), in one run:

* the whole table; the same without the timestamp; without the date; without the keyed splits.

Targets judged here (issue #18, item 6): a timestamp or a date column costs at most 20% over
the same table without it; keyed splits at most 15% over none; peak memory under 600 MB. Not
yet here: the ratios against stock Beam and tfx-bsl on the same table.

Prints one line per build and PASS/MISS per target; bench/README.md records a run.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import datasets  # noqa: E402  (bench/ is not a package)
from cli_build import build_process, write_config  # noqa: E402

FEATURES = {
    "id": {"type": "int64"},
    "ts": {"type": "int64", "unit": "us"},
    "day": {"type": "int64", "unit": "days"},
    "price": {"type": "float"},
    "carrier": {"type": "string", "missing": "omit"},
    "count": {"type": "int64"},
    "hops": {"type": "int64", "shape": [-1]},
    "lat": {"type": "float", "source": "loc.lat"},
    "lon": {"type": "float", "source": "loc.lon"},
}
SPLITS = {"key": "id", "train": 80, "eval": 10, "test": 10}
MEMORY_TARGET_MB = 600
# (name, build, baseline, target ratio)
TARGETS = (("timestamp column: with / without", "whole table", "without ts", 1.20),
           ("date column: with / without", "whole table", "without day", 1.20),
           ("keyed splits: with / without", "whole table", "without splits", 1.15))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--data-dir", default=str(HERE / ".data"))
    parser.add_argument("--keep-output", action="store_true")
    args = parser.parse_args(argv)
    data = datasets.ensure(datasets.Case("real-table", args.rows), pathlib.Path(args.data_dir))
    source = {"format": "parquet", "path": str(data / "part-*.parquet")}
    without = {name: {k: v for k, v in FEATURES.items() if k != name} for name in ("ts", "day")}
    plan = [("whole table", FEATURES, SPLITS), ("without ts", without["ts"], SPLITS),
            ("without day", without["day"], SPLITS), ("without splits", FEATURES, None)]
    work = pathlib.Path(tempfile.mkdtemp(prefix="real-table-"))
    runs: dict[str, dict] = {}
    print(f"{'build':<20} {'seconds':>8} {'peak MB':>8} {'exit':>5}  last line")
    try:
        for index, (label, features, splits) in enumerate(plan):
            config = write_config(work, f"t{index}", source, features, work / f"out{index}",
                                  splits)
            runs[label] = run = build_process(config)
            print(f"{label:<20} {run['seconds']:8.2f} {run['peak_mb']:8.0f} {run['exit']:>5}  "
                  f"{run['said']}", flush=True)
            shutil.rmtree(work / f"out{index}", ignore_errors=True)
    finally:
        if not args.keep_output:
            shutil.rmtree(work, ignore_errors=True)
    missed = 0
    print()
    for name, top, bottom, target in TARGETS:
        ratio = runs[top]["seconds"] / runs[bottom]["seconds"]
        ok = ratio <= target and runs[top]["exit"] == runs[bottom]["exit"] == 0
        missed += not ok
        print(f"{name:<36} {ratio:6.3f}  target <= {target:<5} {'PASS' if ok else 'MISS'}")
    peak = max(run["peak_mb"] for run in runs.values())
    ok = peak < MEMORY_TARGET_MB
    missed += not ok
    print(f"{'peak memory, any build':<36} {peak:6.0f} MB target < {MEMORY_TARGET_MB} MB "
          f"{'PASS' if ok else 'MISS'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
