"""The benchmark: every alternative on the same generated data, one run, ratios and targets.

    .venv/bin/python bench/run.py [--scale tiny|small|full] [--only tutorial-csv,wide,...]
        [--smallest]
        [--alts ours,ours-2w,beam,tf,protobuf,tfxbsl,framing,api-arrow,api-dicts,beam-dicts]
        [--data-dir bench/.data]
        [--tf-python .venv-tf/bin/python] [--tfxbsl-python bench/.venv-tfxbsl/bin/python]
        [--json-out FILE] [--profile-dir DIR] [--keep-output]
    .venv/bin/python bench/run.py setup-tfxbsl     # makes bench/.venv-tfxbsl (once)

For each case (a data set at one size, generated once and cached under --data-dir) every
alternative runs in its own child process (bench/alt_*.py) and reports rows, seconds of work,
bytes written and peak RSS; this script also polls the child's process tree for its summed
RSS. Then it checks the output (record count = input rows; a sample decoded and matched to
its input rows), prints a table per case with rows/s, MB/s, memory, the ratios against stock
Beam and tfx-bsl and PASS/MISS against the targets of issue #6 (our build) and issue #14 (the
public Python API: api-arrow against our build, api-dicts against stock Beam on the same
dicts), and writes everything as JSON (bench/results/<timestamp>.json unless --json-out).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import datasets  # noqa: E402
import measure  # noqa: E402
from rows import load_meta  # noqa: E402

TFXBSL_VENV = HERE / ".venv-tfxbsl"
# tfx-bsl 1.21.0 is the newest release and ships a CPython 3.11 wheel; it brings TensorFlow
# 2.21 and apache-beam 2.77 along, hence its own venv. crc32c frames its records.
TFXBSL_REQUIREMENTS = ("tfx-bsl==1.21.0", "crc32c==2.9.post0")


@dataclasses.dataclass(frozen=True)
class Alt:
    name: str
    script: str
    python: str  # "bench" (this interpreter), "tf" or "tfxbsl"
    args: tuple[str, ...] = ()
    title: str = ""
    datasets: tuple[str, ...] = ()  # the data sets it runs on (no row elsewhere); () = all
    max_rows: int | None = None  # larger cases are a skipped row (the input must fit memory)
    profile: bool = False  # takes --profile FILE: --profile-dir profiles it too


# The dicts alternatives hold every input row as a Python dict (~0.5 KB each with the
# list Create keeps of their encodings), so they run up to the 1M-row tutorial case.
DICTS_MAX_ROWS = 1_000_000

ALTS = (
    Alt("ours", "alt_ours.py", "bench", (), "our build, DirectRunner in-process",
        profile=True),
    Alt("ours-2w", "alt_ours.py", "bench", ("--workers", "2"),
        "our build, DirectRunner multi_processing, 2 workers"),
    Alt("beam", "alt_beam.py", "bench", (), "stock Beam: read -> Map(Example) -> "
                                            "WriteToTFRecord"),
    Alt("tf", "alt_tf.py", "tf", (), "TensorFlow tutorial loop"),
    Alt("protobuf", "alt_protobuf.py", "bench", (), "plain protobuf + crc32c loop"),
    Alt("tfxbsl", "alt_tfxbsl.py", "tfxbsl", (), "tfx-bsl Arrow encoder + Python framing"),
    Alt("framing", "alt_framing.py", "bench", (), "framing only (pre-serialized records)"),
    # Issue #14, the public API in a user's pipeline, and stock Beam on the same dicts.
    Alt("api-arrow", "alt_api.py", "bench", ("--input", "arrow"),
        "ReadFromParquetBatched -> btf.WriteTFRecordDataset", ("tutorial-parquet",),
        profile=True),
    Alt("api-dicts", "alt_api.py", "bench", ("--input", "dicts"),
        "Create(dicts) -> btf.WriteTFRecordDataset", ("tutorial-parquet",), DICTS_MAX_ROWS,
        profile=True),
    Alt("beam-dicts", "alt_beam.py", "bench", ("--input", "dicts"),
        "stock Beam: Create(dicts) -> Map(Example) -> WriteToTFRecord", ("tutorial-parquet",),
        DICTS_MAX_ROWS, profile=True),
)
ALT_NAMES = tuple(a.name for a in ALTS)
OURS = ("ours", "ours-2w")
CHECK_SAMPLES = ("ours", "ours-2w", "beam", "tf", "protobuf", "tfxbsl", "framing",
                 "api-arrow", "api-dicts", "beam-dicts")

# Issue #6's targets: (data sets, reference alternative, minimum ratio of ours to it).
RATE_TARGETS = (
    (("tutorial-csv", "tutorial-parquet"), "beam", 10.0),
    (("tutorial-csv", "tutorial-parquet"), "tfxbsl", 1.0),
    (("wide",), "beam", 5.0),
    (("images",), "beam", 2.0),
    (("images",), "framing", 0.8),
)
# Issue #14's targets: (alternative, data sets, reference, kind, bound). "time": its seconds
# at most bound x the reference's on the same case; "rate": its rows/s at least bound x.
API_TARGETS = (
    ("api-arrow", ("tutorial-parquet",), "ours", "time", 1.2),
    ("api-dicts", ("tutorial-parquet",), "beam-dicts", "rate", 3.0),
)
RATIO_REFS = ("beam", "tfxbsl", "framing", "ours", "beam-dicts")
RSS_GROWTH, RSS_LIMIT = 1.2, 1 << 30  # larger tutorial size vs smaller; absolute, bytes
REPEAT_BELOW_ROWS = 5_000_000  # cases this small run --repeat times, the fastest run counts
LONG_RUN_SECONDS = 60.0  # ... unless a run takes this long: then its one run counts


# -- running ----------------------------------------------------------------------------------

def _python_for(alt: Alt, args: argparse.Namespace) -> tuple[str | None, str]:
    """The interpreter for an alternative, or None and the reason it is skipped."""
    if alt.python == "bench":
        return sys.executable, ""
    path = args.tf_python if alt.python == "tf" else args.tfxbsl_python
    if not pathlib.Path(path).exists():
        hint = ("create it with `python3 scripts/dev.py test` or pass --tf-python"
                if alt.python == "tf" else "run `python bench/run.py setup-tfxbsl` or pass "
                                           "--tfxbsl-python")
        return None, f"no interpreter at {path} ({hint})"
    return path, ""


def run_case(case: datasets.Case, folder: pathlib.Path, alt: Alt, args: argparse.Namespace,
             out_root: pathlib.Path) -> dict[str, Any]:
    """Run one alternative on one case in a child process, check its output, return a row."""
    import checks  # needs this package: imported here so --help and setup-tfxbsl run anywhere

    row: dict[str, Any] = {"case": case.label, "dataset": case.dataset, "input_rows": case.rows,
                           "alt": alt.name, "title": alt.title}
    python, reason = _python_for(alt, args)
    if alt.max_rows is not None and case.rows > alt.max_rows:
        python, reason = None, (f"its input is held in memory as dicts: cases up to "
                                f"{alt.max_rows:,} rows")
    if python is None:
        return {**row, "status": "skipped", "reason": reason}
    out = out_root / case.dirname / alt.name
    shutil.rmtree(out, ignore_errors=True)
    cmd = [python, str(HERE / alt.script), "--data", str(folder), "--out", str(out), *alt.args]
    env = dict(os.environ)  # each script finds its bench/ siblings through its own folder
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # The fastest of a few runs: on a shared virtual machine single runs vary by +-30% (page
    # faults on memory the host reclaimed, other tenants); the minimum is the stable estimate
    # of what the code costs. Runs of millions of rows are long enough to run once, and so is
    # any run of a minute or more (beam.Create of a million dicts takes minutes).
    repeats = args.repeat if case.rows < REPEAT_BELOW_ROWS else 1
    runs = []
    for _ in range(repeats):
        shutil.rmtree(out, ignore_errors=True)
        child = measure.run_child(cmd, timeout=args.timeout, env=env)
        runs.append(child)
        if child.result is None or child.returncode != 0 or "skipped" in child.result:
            break  # reported as it is
        if child.result["seconds"] >= LONG_RUN_SECONDS:
            child = min(runs, key=lambda r: r.result["seconds"])
            break  # long enough that the noise is small
    else:
        child = min(runs, key=lambda r: r.result["seconds"])  # its output is the same
    if len(runs) > 1:
        row["all_seconds"] = [r.result.get("seconds") for r in runs if r.result]
    ok = child.result is not None and child.returncode == 0 and "skipped" not in child.result
    if args.profile_dir and alt.profile and ok:  # a second, untimed run under cProfile
        stem = case.dirname if alt.name == "ours" else f"{case.dirname}-{alt.name}"
        row["profile"] = profile_alt(cmd, out, pathlib.Path(args.profile_dir) / stem,
                                     args.timeout, env)
    row["wall_seconds"] = round(child.wall, 3)
    row["peak_rss_tree"] = child.tree_peak
    try:
        if child.result is None or child.returncode != 0:
            return {**row, "status": "failed", "reason": child.error}
        if "skipped" in child.result:
            return {**row, "status": "skipped", "reason": child.result["skipped"]}
        row.update(child.result)
        row["status"] = "ok"
        files = measure.output_files(out)
        row["files_out"] = len(files)
        row["records_out"] = checks.count_records(files)
        if row["records_out"] != case.rows:
            raise checks.CheckError(f"{row['records_out']} records written for {case.rows} "
                                    "input rows")
        if alt.name in CHECK_SAMPLES:
            row["sample_checked"] = checks.check_sample(load_meta(folder), files)
        seconds = max(row["seconds"], 1e-9)
        row["rows_per_s"] = case.rows / seconds
        row["mb_per_s"] = row["bytes_out"] / 1e6 / seconds
        row["peak_rss_max"] = max(row["peak_rss"], row["peak_rss_tree"])
    except checks.CheckError as err:
        row.update(status="failed", reason=f"output check: {err}")
    finally:
        if not args.keep_output:
            shutil.rmtree(out, ignore_errors=True)
    return row


def profile_alt(cmd: list[str], out: pathlib.Path, stem: pathlib.Path, timeout: float,
                env: dict[str, str]) -> str:
    """Run an in-process alternative again under cProfile (never the timed run: profiling
    slows it) and write ``<stem>.prof`` plus ``<stem>.txt``, the top 25 by cumulative time."""
    import pstats

    stem.parent.mkdir(parents=True, exist_ok=True)
    prof, scratch = stem.with_suffix(".prof"), out.with_name(out.name + "-profile")
    shutil.rmtree(scratch, ignore_errors=True)
    cmd = [*cmd[:cmd.index("--out") + 1], str(scratch), *cmd[cmd.index("--out") + 2:],
           "--profile", str(prof)]
    child = measure.run_child(cmd, timeout=timeout, env=env)
    shutil.rmtree(scratch, ignore_errors=True)
    if child.returncode != 0 or not prof.exists():
        return f"profile failed: {child.error}"
    with open(stem.with_suffix(".txt"), "w") as text:
        pstats.Stats(str(prof), stream=text).sort_stats("cumulative").print_stats(25)
    return str(prof)


# -- ratios and targets -----------------------------------------------------------------------

def add_ratios(rows: list[dict[str, Any]]) -> None:
    """ratio_<ref> for every alternative of RATIO_REFS (ratio_beam, ratio_tfxbsl,
    ratio_framing, ratio_ours, ratio_beam_dicts): rows/s over that alternative's, same case."""
    rates = {(r["case"], r["alt"]): r["rows_per_s"] for r in rows if r["status"] == "ok"}
    for row in rows:
        if row["status"] != "ok":
            continue
        for ref in RATIO_REFS:
            base = rates.get((row["case"], ref))
            row[_ratio_key(ref)] = row["rows_per_s"] / base if base else None


def _ratio_key(ref: str) -> str:
    return "ratio_" + ref.replace("-", "_")


def evaluate_targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every target of issue #6 for every 'ours' row and of issue #14 for the API rows: PASS,
    MISS (by how much) or n/a."""
    results = []
    for row in rows:
        if row["alt"] not in OURS:
            continue
        for sets, ref, minimum in RATE_TARGETS:
            if row["dataset"] not in sets:
                continue
            name = f">= {minimum:g}x {ref}"
            ratio = row.get(f"ratio_{ref}") if row["status"] == "ok" else None
            if ratio is None:
                verdict, detail = "n/a", (f"ours {row['status']}" if row["status"] != "ok"
                                          else f"{ref} did not run")
            else:
                verdict = "PASS" if ratio >= minimum else "MISS"
                detail = f"{ratio:.2f}x" + ("" if verdict == "PASS"
                                            else f", short by {minimum / ratio:.2f}x")
            results.append({"case": row["case"], "alt": row["alt"], "target": name,
                            "verdict": verdict, "detail": detail, "value": ratio,
                            "threshold": minimum, "issue": 6})
    for dataset in ("tutorial-csv", "tutorial-parquet"):
        for alt in OURS:
            sized = sorted((r for r in rows if r["dataset"] == dataset and r["alt"] == alt),
                           key=lambda r: r["input_rows"])
            if len(sized) < 2:
                continue
            small, large = sized[0], sized[-1]
            target = (f"peak RSS at {large['case']} <= {RSS_GROWTH}x {small['case']} "
                      f"and < 1 GB")
            if small["status"] != "ok" or large["status"] != "ok":
                results.append({"case": large["case"], "alt": alt, "target": target,
                                "verdict": "n/a", "detail": "a run failed", "value": None,
                                "threshold": RSS_GROWTH, "issue": 6})
                continue
            growth = large["peak_rss_max"] / small["peak_rss_max"]
            ok = growth <= RSS_GROWTH and large["peak_rss_max"] < RSS_LIMIT
            detail = (f"{_mb(small['peak_rss_max'])} -> {_mb(large['peak_rss_max'])} MB, "
                      f"{growth:.2f}x")
            results.append({"case": large["case"], "alt": alt, "target": target,
                            "verdict": "PASS" if ok else "MISS", "detail": detail,
                            "value": growth, "threshold": RSS_GROWTH, "issue": 6})
    results += _api_targets(rows)
    return results


def _api_targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue #14's targets for the api-* rows, against their reference in the same run."""
    by = {(r["case"], r["alt"]): r for r in rows}
    results = []
    for row in rows:
        for alt, sets, ref, kind, bound in API_TARGETS:
            if row["alt"] != alt or row["dataset"] not in sets or row["status"] == "skipped":
                continue
            base = by.get((row["case"], ref))
            name = (f"seconds <= {bound:g}x {ref}" if kind == "time"
                    else f">= {bound:g}x {ref}") + " (issue #14)"
            value = None
            if row["status"] != "ok":
                verdict, detail = "n/a", f"{alt} {row['status']}"
            elif base is None or base["status"] != "ok":
                verdict, detail = "n/a", f"{ref} did not run"
            elif kind == "time":
                value = row["seconds"] / max(base["seconds"], 1e-9)
                verdict = "PASS" if value <= bound else "MISS"
                detail = (f"{row['seconds']:.2f} s vs {base['seconds']:.2f} s, {value:.2f}x"
                          + ("" if verdict == "PASS" else f", over by {value / bound:.2f}x"))
            else:
                value = row["rows_per_s"] / base["rows_per_s"]
                verdict = "PASS" if value >= bound else "MISS"
                detail = (f"{row['seconds']:.2f} s vs {base['seconds']:.2f} s, {value:.2f}x"
                          + ("" if verdict == "PASS" else f", short by {bound / value:.2f}x"))
            results.append({"case": row["case"], "alt": alt, "target": name,
                            "verdict": verdict, "detail": detail, "value": value,
                            "threshold": bound, "issue": 14})
    return results


# -- printing ---------------------------------------------------------------------------------

def _mb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e6:.0f}"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_tables(rows: list[dict[str, Any]], targets: list[dict[str, Any]]) -> str:
    """One table per case, then the targets."""
    header = (f"{'alternative':<10} {'status':<7} {'rows/s':>10} {'MB/s':>8} {'secs':>7} "
              f"{'RSS MB':>7} {'tree MB':>7} {'x beam':>7} {'x tfxbsl':>8}  targets / note")
    lines: list[str] = []
    by_case: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_case.setdefault(row["case"], []).append(row)
    for case, case_rows in by_case.items():
        lines += ["", f"== {case} ({case_rows[0]['input_rows']:,} rows)", header]
        for row in case_rows:
            verdicts = [f"{t['target']}: {t['verdict']} ({t['detail']})" for t in targets
                        if t["case"] == case and t["alt"] == row["alt"]
                        and not t["target"].startswith("peak RSS")]
            if row["status"] != "ok":
                note = f"{row['status']}: {row.get('reason', '')}"
                lines.append(f"{row['alt']:<10} {row['status']:<7} {note}")
                continue
            note = "; ".join(verdicts) or f"checked {row.get('sample_checked', 0)} records"
            lines.append(
                f"{row['alt']:<10} {'ok':<7} {row['rows_per_s']:>10,.0f} "
                f"{row['mb_per_s']:>8.1f} {row['seconds']:>7.2f} {_mb(row['peak_rss']):>7} "
                f"{_mb(row['peak_rss_tree']):>7} {_num(row.get('ratio_beam'), '.2f'):>7} "
                f"{_num(row.get('ratio_tfxbsl'), '.2f'):>8}  {note}")
    for issue in (6, 14):
        chosen = [t for t in targets if t.get("issue", 6) == issue]
        if chosen:
            lines += ["", f"== targets (issue #{issue})"]
        for t in chosen:
            lines.append(f"{t['verdict']:<4}  {t['alt']:<10} {t['case']:<22} {t['target']}: "
                         f"{t['detail']}")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    from importlib import metadata  # Beam's version without importing Beam (1-2 CPU-s)

    return {"cpu_model": model, "cpus": os.cpu_count(), "python": platform.python_version(),
            "apache_beam": metadata.version("apache-beam"), "platform": platform.platform(),
            "load_average": os.getloadavg()}  # other work on a shared machine skews rates


# -- commands ---------------------------------------------------------------------------------

def _csv_names(value: str, allowed: Sequence[str], what: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {what} {unknown or value!r}; choose from "
                                         f"{', '.join(allowed)}")
    return names


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/run.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Scales (rows per case): " + "; ".join(
            f"{name}: " + ", ".join(f"{k} {'/'.join(f'{n:,}' for n in v)}"
                                    for k, v in sizes.items())
            for name, sizes in datasets.SCALES.items())
        + ".  Subcommand: `setup-tfxbsl [--venv DIR]` creates the tfx-bsl environment.")
    parser.add_argument("--scale", choices=tuple(datasets.SCALES), default="small",
                        help="data sizes (default small; full is issue #6's sizes)")
    parser.add_argument("--only", type=lambda v: _csv_names(v, datasets.DATASET_NAMES,
                                                            "data set"),
                        default=list(datasets.DATASET_NAMES),
                        help="comma-separated data sets (default: all): "
                             + ",".join(datasets.DATASET_NAMES))
    parser.add_argument("--smallest", action="store_true",
                        help="only each data set's smallest size of the scale (a smoke run: "
                             "no memory-growth target)")
    parser.add_argument("--alts", type=lambda v: _csv_names(v, ALT_NAMES, "alternative"),
                        default=list(ALT_NAMES),
                        help="comma-separated alternatives (default: all): " + ",".join(ALT_NAMES))
    parser.add_argument("--data-dir", default=str(HERE / ".data"),
                        help="where generated inputs are cached and outputs written "
                             "(default bench/.data)")
    parser.add_argument("--tf-python", default=str(ROOT / ".venv-tf/bin/python"),
                        help="TensorFlow's interpreter (default .venv-tf/bin/python)")
    parser.add_argument("--tfxbsl-python", default=str(TFXBSL_VENV / "bin/python"),
                        help="tfx-bsl's interpreter (default bench/.venv-tfxbsl/bin/python)")
    parser.add_argument("--json-out", help="results file (default bench/results/<time>.json)")
    parser.add_argument("--profile-dir", help="also run our in-process build (and the api-* "
                                              "and beam-dicts alternatives) once more per "
                                              "case under cProfile (untimed); <case>.prof "
                                              "and <case>.txt (top 25 cumulative) here, "
                                              "<case>-<alternative>.* for the others")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds one alternative may take on one case (default 3600)")
    parser.add_argument("--repeat", type=int, default=3, metavar="N",
                        help="runs per alternative on cases under "
                             f"{REPEAT_BELOW_ROWS:,} rows; the fastest counts (default 3; a "
                             f"run of {LONG_RUN_SECONDS:g} s or more is not repeated)")
    parser.add_argument("--keep-output", action="store_true",
                        help="keep the written TFRecords (default: delete after checking)")
    return parser


def setup_tfxbsl(argv: Sequence[str]) -> int:
    """Create the tfx-bsl venv with a PyPI install; print pip's error when it fails."""
    parser = argparse.ArgumentParser(prog="bench/run.py setup-tfxbsl")
    parser.add_argument("--venv", default=str(TFXBSL_VENV))
    parser.add_argument("--python", default="python3.11",
                        help="the interpreter to base the venv on (default python3.11)")
    args = parser.parse_args(argv)
    venv = pathlib.Path(args.venv)
    if not (venv / "bin/python").exists():
        subprocess.run([args.python, "-m", "venv", str(venv)], check=True)
    done = subprocess.run([str(venv / "bin/pip"), "install", "-q", *TFXBSL_REQUIREMENTS],
                          capture_output=True, text=True)
    if done.returncode != 0:
        errors = [ln for ln in done.stderr.splitlines() if ln.startswith("ERROR")]
        print("setup-tfxbsl failed: " + (" | ".join(errors) or done.stderr[-2000:]),
              file=sys.stderr)
        return 1
    print(f"tfx-bsl environment ready: {venv / 'bin/python'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["setup-tfxbsl"]:
        return setup_tfxbsl(argv[1:])
    args = make_parser().parse_args(argv)
    try:
        import beam_tfrecords  # noqa: F401
    except ImportError:
        print("bench/run.py needs the project's environment: .venv/bin/python bench/run.py ...",
              file=sys.stderr)
        return 2
    data_dir = pathlib.Path(args.data_dir)
    alts = [a for a in ALTS if a.name in args.alts]
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    cases = datasets.cases(args.scale, args.only)
    if args.smallest:
        cases = [c for c in cases if c.rows == min(d.rows for d in cases
                                                   if d.dataset == c.dataset)]
    for case in cases:
        begin = time.perf_counter()
        folder = datasets.ensure(case, data_dir)
        print(f"[{case.label}] data ready in {time.perf_counter() - begin:.1f}s: {folder}",
              flush=True)
        for alt in alts:
            if alt.datasets and case.dataset not in alt.datasets:
                continue  # not one of its data sets: no row
            row = run_case(case, folder, alt, args, data_dir / "out")
            rows.append(row)
            shown = (f"{row['rows_per_s']:,.0f} rows/s" if row["status"] == "ok"
                     else f"{row['status']}: {row.get('reason', '')}")
            print(f"[{case.label}] {alt.name}: {shown}", flush=True)
    add_ratios(rows)
    targets = evaluate_targets(rows)
    print(format_tables(rows, targets))
    out = pathlib.Path(args.json_out) if args.json_out else (
        HERE / "results" / f"{started.strftime('%Y%m%dT%H%M%SZ')}-{args.scale}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"scale": args.scale, "started": started.isoformat(),
                               "machine": machine(), "load_average_before": load_before,
                               "cases": rows, "targets": targets}, indent=1))
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
