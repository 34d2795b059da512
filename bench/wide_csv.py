"""Issue #15, items 5 and 9: a CSV build's time follows the columns its features name, not
the file's width.

Writes, for each row count, a CSV of ``--columns`` columns of which a config names three
(``id`` first, ``x`` in the middle, ``s`` last -- the last one means a row can never be cut
short), and the same rows with only those three columns; then times ``beam-tfrecords build``
(a fresh ``python -m beam_tfrecords.pipelines.cli`` process, DirectRunner) on each, and
prints one JSON line per file (every run's seconds) and the ratio of the fastest runs::

    .venv/bin/python bench/wide_csv.py --rows 2000,20000 --columns 20000 --repeat 3

Data go to ``--data-dir`` (default ``bench/.data/wide-csv``, gitignored), written once (a
``.done`` file marks them). Unnamed cells are one digit each (2 bytes with the comma): 20,000
rows of 20,000 columns are 800 MB. The target (item 9): wide at most 3x narrow, whole process.
The build is whatever ``beam_tfrecords`` imports (PYTHONPATH can point at another checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG = """name: wide
source:
  format: csv
  path: {path}
features:
  id: {{type: int64}}
  x: {{type: float}}
  s: {{type: string}}
splits:
  key: id
  train: 80
  eval: 20
output:
  path: {out}
"""


def names(columns: int) -> list[str]:
    """The header: ``id`` first, ``x`` in the middle, ``s`` last, ``c<i>`` elsewhere."""
    header = [f"c{i}" for i in range(columns)]
    header[0], header[columns // 2], header[-1] = "id", "x", "s"
    return header


def write_wide(path: pathlib.Path, rows: int, columns: int, seed: int = 15) -> None:
    rng = np.random.default_rng(seed)
    with open(path, "wb") as out:
        out.write(",".join(names(columns)).encode() + b"\n")
        step = max(1, (1 << 24) // (2 * columns))  # ~16 MB of text per write
        for first in range(0, rows, step):
            n = min(step, rows - first)
            cells = np.full((n, 2 * columns), ord(","), np.uint8)
            cells[:, 0::2] = rng.integers(ord("0"), ord("9") + 1, (n, columns), np.uint8)
            cells[:, -1] = ord("\n")
            lines = cells.tobytes().split(b"\n")[:-1]
            for k, line in enumerate(lines):  # the three named cells: id, x, s
                row = first + k
                parts = line.split(b",")
                parts[0] = str(row).encode()
                parts[columns // 2] = f"{row * 0.25}".encode()
                parts[-1] = f"w{row % 97}".encode()
                out.write(b",".join(parts) + b"\n")


def write_narrow(wide: pathlib.Path, path: pathlib.Path, columns: int) -> None:
    keep = (0, columns // 2, columns - 1)
    with open(wide, "rb") as src, open(path, "wb") as out:
        for line in src:
            parts = line.rstrip(b"\n").split(b",")
            out.write(b",".join(parts[i] for i in keep) + b"\n")


def ensure(data: pathlib.Path, rows: int, columns: int) -> tuple[pathlib.Path, pathlib.Path]:
    data.mkdir(parents=True, exist_ok=True)
    wide = data / f"wide-{columns}x{rows}.csv"
    narrow = data / f"narrow-{columns}x{rows}.csv"
    done = data / f"{wide.name}.done"
    if not done.exists():
        write_wide(wide, rows, columns)
        write_narrow(wide, narrow, columns)
        done.write_text("ok")
    return wide, narrow


def build(csv: pathlib.Path, work: pathlib.Path) -> float:
    """Seconds of one whole ``beam-tfrecords build`` process on ``csv``."""
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    config = work / "config.yaml"
    config.write_text(CONFIG.format(path=csv, out=out))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "beam_tfrecords.pipelines.cli", "build",
                           "--config", str(config), "--progress-interval", "0"],
                          cwd=ROOT.parent, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"build failed on {csv}:\n{proc.stderr[-3000:]}")
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="2000,20000", help="row counts, comma-separated")
    parser.add_argument("--columns", type=int, default=20000, help="the wide file's columns")
    parser.add_argument("--repeat", type=int, default=3, help="runs per file; the fastest counts")
    parser.add_argument("--data-dir", default=str(ROOT / "bench" / ".data" / "wide-csv"))
    args = parser.parse_args(argv)
    data = pathlib.Path(args.data_dir)
    for rows in (int(r) for r in args.rows.split(",")):
        wide, narrow = ensure(data, rows, args.columns)
        best = {}
        for name, path in (("narrow", narrow), ("wide", wide)):
            times = [build(path, data / f"work-{os.getpid()}") for _ in range(args.repeat)]
            best[name] = min(times)
            print(json.dumps({"file": name, "rows": rows, "columns": args.columns
                              if name == "wide" else 3, "bytes": path.stat().st_size,
                              "seconds": [round(t, 2) for t in times]}), flush=True)
        print(json.dumps({"rows": rows, "wide_over_narrow": round(best["wide"] / best["narrow"],
                                                                  2)}), flush=True)


if __name__ == "__main__":
    main()
