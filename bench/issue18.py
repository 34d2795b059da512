"""Issue #18's targets, all judged in one run on this machine.

    .venv/bin/python bench/issue18.py [--real-rows 5000000] [--tutorial-rows 5000000]
        [--wide-rows 200000] [--images 2000,20000] [--repeat 3] [--json-out FILE]

One command measures every case issue #18 sets a target for, each alternative in a process of
its own, outputs checked, and prints PASS/MISS per target:

* the real table (bench/real_table.py: ours whole, without the timestamp, without the date,
  without the keyed splits; stock Beam; tfx-bsl);
* the tutorial's CSV and Parquet at 5M rows against stock Beam;
* the wide rows (30 columns) against tfx-bsl;
* 20,000 JPEGs (~2 GB) against stock Beam and the plain protobuf + crc32c loop, and 2,000
  JPEGs, so that the cost per image -- the slope between the two sizes, fixed costs out, as
  the issue measures it -- is known for ours and the loop.

"Whole process" is the child's wall time from its start to its exit: interpreter, imports
(Beam alone takes ~1.6 s to import here), the work and the exit. The work time (what
bench/run.py reports, imports excluded) is printed beside it. Cases under 5M rows run
``--repeat`` times and the fastest run counts (bench/README.md, "best of 3"); the rest once.
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import sys
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import datasets  # noqa: E402
import real_table  # noqa: E402
import run as harness  # noqa: E402

ROOT = HERE.parent
# (case, alternatives): the non-real-table cases and who runs on them.
PLAN = (("tutorial-csv", ("ours", "beam")), ("tutorial-parquet", ("ours", "beam")),
        ("wide", ("ours", "tfxbsl")), ("images", ("ours", "beam", "protobuf")))
# (data set, reference, minimum of reference whole-process seconds / ours)
WHOLE_TARGETS = (("tutorial-csv", "beam", 10.0), ("tutorial-parquet", "beam", 10.0),
                 ("wide", "tfxbsl", 1.2), ("images", "beam", 1.5), ("images", "protobuf", 1.0))


def _rows_for(dataset: str, args: argparse.Namespace) -> list[int]:
    if dataset.startswith("tutorial"):
        return [args.tutorial_rows]
    if dataset == "wide":
        return [args.wide_rows]
    return sorted(args.images)


def _judge(rows: list[dict[str, Any]], largest_images: int) -> list[tuple[str, str, bool]]:
    by = {(r["dataset"], r["input_rows"], r["alt"]): r for r in rows}
    out = []
    for dataset, ref, minimum in WHOLE_TARGETS:
        size = largest_images if dataset == "images" else max(
            n for (d, n, _) in by if d == dataset)
        ours, base = by.get((dataset, size, "ours")), by.get((dataset, size, ref))
        name = f"{dataset}@{size:,}: whole process, {ref} / ours"
        if not ours or not base or ours["status"] != "ok" or base["status"] != "ok":
            out.append((name, "not measured (a run failed or was skipped)", False))
            continue
        ratio = base["wall_seconds"] / ours["wall_seconds"]
        work = base["seconds"] / ours["seconds"]
        out.append((name, f"{ratio:6.2f}x  target >= {minimum:g}x  (work time {work:.2f}x; "
                          f"{ours['wall_seconds']:.2f} s vs {base['wall_seconds']:.2f} s)",
                    ratio >= minimum))
    sizes = sorted({n for (d, n, _) in by if d == "images"})
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]
        slopes = {}
        for alt in ("ours", "protobuf", "beam"):
            a, b = by.get(("images", small, alt)), by.get(("images", large, alt))
            if a and b and a["status"] == b["status"] == "ok":
                slopes[alt] = (b["seconds"] - a["seconds"]) / (large - small) * 1e6
        if "ours" in slopes and "protobuf" in slopes:
            shown = ", ".join(f"{alt} {us:.0f} us" for alt, us in slopes.items())
            out.append((f"images: cost per image ({small:,} -> {large:,}), ours <= loop",
                        shown, slopes["ours"] <= slopes["protobuf"]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real-rows", type=int, default=5_000_000)
    parser.add_argument("--tutorial-rows", type=int, default=5_000_000)
    parser.add_argument("--wide-rows", type=int, default=200_000)
    parser.add_argument("--images", type=lambda v: [int(n) for n in v.split(",")],
                        default=[2_000, 20_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data-dir", default=str(HERE / ".data"))
    parser.add_argument("--tfxbsl-python", default=str(ROOT / ".venv-consumers/tfx/bin/python"))
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)
    data_dir = pathlib.Path(args.data_dir)
    options = harness.make_parser().parse_args(
        ["--data-dir", str(data_dir), "--tfxbsl-python", args.tfxbsl_python,
         "--repeat", str(args.repeat)])
    alts = {alt.name: alt for alt in harness.ALTS}
    started = datetime.datetime.now(datetime.timezone.utc)

    print("== the real table", flush=True)
    real_runs, real_ok = real_table.measure(args.real_rows, str(data_dir), args.tfxbsl_python)
    verdicts = [(f"real table: {name}", shown, ok) for name, shown, ok in
                real_table.judge(real_runs)]
    if not real_ok:
        verdicts.append(("real table: every output checked", "a check failed", False))

    rows: list[dict[str, Any]] = []
    out_root = data_dir / "out"
    for dataset, names in PLAN:
        for size in _rows_for(dataset, args):
            case = datasets.Case(dataset, size)
            folder = datasets.ensure(case, data_dir)
            print(f"== {case.label}", flush=True)
            for name in names:
                row = harness.run_case(case, folder, alts[name], options, out_root)
                rows.append(row)
                shown = (f"{row['seconds']:8.2f} s work {row['wall_seconds']:8.2f} s whole "
                         f"{row['peak_rss_max'] / 1e6:6.0f} MB" if row["status"] == "ok"
                         else f"{row['status']}: {row.get('reason', '')[:100]}")
                print(f"  {name:<10} {shown}", flush=True)
    verdicts += _judge(rows, max(args.images))

    print("\n== targets (issue #18)")
    missed = 0
    for name, shown, ok in verdicts:
        missed += not ok
        print(f"{name:<62} {shown}  {'PASS' if ok else 'MISS'}")
    out = pathlib.Path(args.json_out) if args.json_out else (
        HERE / "results" / f"{started:%Y%m%dT%H%M%SZ}-issue18.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"started": started.isoformat(), "machine": harness.machine(),
                               "real_table": real_runs, "rows": rows,
                               "targets": [{"target": n, "measured": s, "met": ok}
                                           for n, s, ok in verdicts]}, indent=1, default=str))
    print(f"\nresults: {out}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
