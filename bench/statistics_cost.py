"""What statistics cost a build: the tutorial with and without them, one run each.

    .venv/bin/python bench/statistics_cost.py [--rows 1000000] [--format csv|parquet]
        [--data-dir bench/.data]

Both are whole ``beam-tfrecords build`` processes (python start-up, launch checks, pipeline,
commit) on the same generated tutorial data (bench/datasets.py), timed with their process
tree's peak memory; the config differs only by ``output.statistics: false``. Prints one line
per build, the ratio and PASS/MISS against the target (at most 10% more time).
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

FEATURES = {"feature0": {"type": "int64"}, "feature1": {"type": "int64"},
            "feature2": {"type": "string"}, "feature3": {"type": "float"}}
SPLITS = {"key": "feature3", "train": 80, "eval": 20}
TARGET = 1.10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--format", choices=("csv", "parquet"), default="csv")
    parser.add_argument("--data-dir", type=pathlib.Path, default=HERE / ".data")
    args = parser.parse_args(argv)
    folder = datasets.ensure(datasets.Case(f"tutorial-{args.format}", args.rows),
                             args.data_dir)
    source = {"format": args.format, "path": str(folder / f"part-*.{args.format}")}
    work = pathlib.Path(tempfile.mkdtemp(prefix="stats-cost-"))
    try:
        results = {}
        for label, statistics in (("without statistics", False), ("with statistics", True)):
            out = work / label.replace(" ", "-")
            config = write_config(work, label.replace(" ", "-"), source, FEATURES, out,
                                  SPLITS)
            if not statistics:
                config.write_text(config.read_text().replace(
                    "output:\n", "output:\n  statistics: false\n", 1))
            run = build_process(config)
            if run["exit"] != 0:
                print(f"{label}: exit {run['exit']}: {run['said']}")
                return 1
            results[label] = run
            print(f"{label:>20}: {run['seconds']:6.1f} s, peak {run['peak_mb']:6.0f} MB")
            shutil.rmtree(out, ignore_errors=True)
        ratio = results["with statistics"]["seconds"] / results["without statistics"]["seconds"]
        verdict = "PASS" if ratio <= TARGET else "MISS"
        print(f"tutorial-{args.format} {args.rows:,} rows: with / without statistics = "
              f"{ratio:.3f} (target <= {TARGET:.2f}) {verdict}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
