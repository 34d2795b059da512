"""Issue #15's benchmark: how fast a build says the config does not fit the data.

    .venv/bin/python bench/know_the_data.py [--rows 5000000] [--wide-rows 2000]
        [--wide-columns 20000] [--data-dir bench/.data] [--keep-output]

Every number is a whole ``beam-tfrecords build`` process (python start-up, launch checks,
pipeline, commit or refusal), timed with its process tree's peak memory, in one run:

* tutorial Parquet and CSV (bench/datasets.py, ``--rows`` rows): a correct build, and a build
  whose config declares the text column ``feature2`` as int64 -- found at launch by the sample
  check (pipelines/launch_check.py). Target: the mistake costs at most 20% of the correct
  build.
* tutorial JSON Lines (the same rows): a correct build, and a build whose ``feature1`` is an
  integer in the first 2,000 lines and a word in every later one -- past the launch sample, so
  only the running build's early abort (the first window of rejects) can stop it. Target: at
  most 30% of the correct build.
* a CSV of ``--wide-columns`` columns of which the features name 3, against the same rows
  holding only those 3 columns. Target: at most 3x.

Prints one line per build and PASS/MISS per target; bench/README.md records a run.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import sys
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import datasets  # noqa: E402  (bench/ is not a package)
from cli_build import build_process, write_config  # noqa: E402

FEATURES = {"feature0": {"type": "int64"}, "feature1": {"type": "int64"},
            "feature2": {"type": "string"}, "feature3": {"type": "float"}}
MISTAKE = {**FEATURES, "feature2": {"type": "int64"}}  # text declared as a number
SPLITS = {"key": "feature3", "train": 80, "eval": 20}
GOOD_JSON_LINES = 2_000  # more than the launch sample (1,000 records)
TARGETS = (("parquet: launch mistake / correct", 0.20), ("csv: launch mistake / correct", 0.20),
           ("jsonl: value mistake / correct", 0.30), ("csv: 20k columns / 3 columns", 3.0))


def _jsonl(folder: pathlib.Path, tutorial: pathlib.Path, mistake: bool) -> pathlib.Path:
    """The tutorial rows as JSON Lines; with ``mistake``, feature1 a word past the sample."""
    import pyarrow.parquet as pq

    name = "mistake" if mistake else "correct"
    out = folder / f"tutorial-{name}.jsonl"
    if out.exists():
        return out
    tmp = out.with_suffix(".tmp")
    written = 0
    with open(tmp, "w") as f:
        for part in sorted(tutorial.glob("part-*.parquet")):
            for batch in pq.ParquetFile(part).iter_batches(65536):
                cols = batch.to_pydict()
                for f0, f1, f2, f3 in zip(cols["feature0"], cols["feature1"],
                                          cols["feature2"], cols["feature3"]):
                    bad = mistake and written >= GOOD_JSON_LINES
                    f.write(json.dumps({"feature0": f0, "feature1": f2 if bad else f1,
                                        "feature2": f2, "feature3": f3}) + "\n")
                    written += 1
    tmp.replace(out)
    return out


def _wide_csv(folder: pathlib.Path, rows: int, columns: int) -> tuple[pathlib.Path,
                                                                       pathlib.Path]:
    """The same rows twice: with ``columns`` columns (the named three among them) and with
    only the named three."""
    wide, narrow = folder / f"wide-{rows}x{columns}.csv", folder / f"narrow-{rows}.csv"
    if wide.exists() and narrow.exists():
        return wide, narrow
    rng = np.random.default_rng([15, rows, columns])
    named = {5: "a", columns // 2: "b", columns - 3: "c"}
    header = [named.get(k, f"x{k}") for k in range(columns)]
    with open(wide, "w") as w, open(narrow, "w") as n:
        w.write(",".join(header) + "\n")
        n.write("a,b,c\n")
        for _ in range(rows):
            cells = rng.integers(0, 1000, columns).astype(str).tolist()
            w.write(",".join(cells) + "\n")
            n.write(",".join(cells[k] for k in named) + "\n")
    return wide, narrow


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--wide-rows", type=int, default=2_000)
    parser.add_argument("--wide-columns", type=int, default=20_000)
    parser.add_argument("--data-dir", default=str(HERE / ".data"))
    parser.add_argument("--keep-output", action="store_true")
    args = parser.parse_args(argv)
    data = pathlib.Path(args.data_dir)
    data.mkdir(parents=True, exist_ok=True)
    parquet = datasets.ensure(datasets.Case("tutorial-parquet", args.rows), data)
    csv = datasets.ensure(datasets.Case("tutorial-csv", args.rows), data)
    extra = data / f"know-the-data-{args.rows}"
    extra.mkdir(exist_ok=True)
    good_jsonl, bad_jsonl = _jsonl(extra, parquet, False), _jsonl(extra, parquet, True)
    wide, narrow = _wide_csv(extra, args.wide_rows, args.wide_columns)

    work = pathlib.Path(tempfile.mkdtemp(prefix="know-the-data-"))
    runs: dict[str, dict] = {}
    plan = [
        ("parquet correct", {"format": "parquet", "path": str(parquet / "part-*.parquet")},
         FEATURES, SPLITS),
        ("parquet launch mistake", {"format": "parquet",
                                    "path": str(parquet / "part-*.parquet")}, MISTAKE, SPLITS),
        ("csv correct", {"format": "csv", "path": str(csv / "part-*.csv")}, FEATURES, SPLITS),
        ("csv launch mistake", {"format": "csv", "path": str(csv / "part-*.csv")}, MISTAKE,
         SPLITS),
        ("jsonl correct", {"format": "jsonl", "path": str(good_jsonl)}, FEATURES, SPLITS),
        ("jsonl value mistake", {"format": "jsonl", "path": str(bad_jsonl)}, FEATURES, SPLITS),
        ("csv 3 columns", {"format": "csv", "path": str(narrow)},
         {k: {"type": "int64"} for k in "abc"}, None),
        (f"csv {args.wide_columns} columns", {"format": "csv", "path": str(wide)},
         {k: {"type": "int64"} for k in "abc"}, None),
    ]
    print(f"{'build':<28} {'seconds':>8} {'peak MB':>8} {'exit':>5}  last line")
    try:
        for index, (label, source, features, splits) in enumerate(plan):
            config = write_config(work, f"b{index}", source, features, work / f"out{index}",
                                  splits)
            runs[label] = run = build_process(config, timeout=3600)
            print(f"{label:<28} {run['seconds']:8.2f} {run['peak_mb']:8.0f} {run['exit']:>5}  "
                  f"{run['said']}", flush=True)
    finally:
        if not args.keep_output:
            shutil.rmtree(work, ignore_errors=True)
    ratios = {
        "parquet: launch mistake / correct": ("parquet launch mistake", "parquet correct"),
        "csv: launch mistake / correct": ("csv launch mistake", "csv correct"),
        "jsonl: value mistake / correct": ("jsonl value mistake", "jsonl correct"),
        "csv: 20k columns / 3 columns": (f"csv {args.wide_columns} columns", "csv 3 columns"),
    }
    missed = 0
    print()
    for name, target in TARGETS:
        top, bottom = ratios[name]
        ratio = runs[top]["seconds"] / runs[bottom]["seconds"]
        failed_as_meant = (runs[top]["exit"] != 0) == ("mistake" in top)
        ok = ratio <= target and failed_as_meant and runs[bottom]["exit"] == 0
        missed += not ok
        why = "" if failed_as_meant else " (the mistake build did not fail, or the other did)"
        print(f"{name:<36} {ratio:6.3f}  target <= {target:<5} {'PASS' if ok else 'MISS'}{why}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
