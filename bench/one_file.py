"""One big file, two local workers: does the second core help?

    .venv/bin/python bench/one_file.py [--rows 10000000] [--formats csv,jsonl,parquet]
        [--split-bytes 64MiB] [--rounds 1] [--data-dir bench/.data] [--json-out FILE]

For each format, one file of the tutorial's rows (bench/datasets.py's values; Parquet written
with row groups of 100,000 rows, so that it splits) is built twice by the command line, each
a whole process (start-up, launch checks, pipeline, commit): with ``--direct_num_workers 1``
and with ``--direct_running_mode multi_processing --direct_num_workers 2``. The file is read
in ranges of ``source.split_bytes`` (transforms/readers/ranges.py) that the two worker
processes share. Both outputs are checked (records written = rows, a sample decoded and
matched to its input rows) and the ratio of the two wall times printed, against the target of
1.5x at 10M rows on a 2-core machine. With ``--rounds N`` each is built N times, the two
interleaved and their order alternated, and the ratio is of the median times.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from checks import check_sample  # noqa: E402
from cli_build import build_process, write_config  # noqa: E402
from datasets import TUTORIAL_FEATURES, _tutorial_table  # noqa: E402

TARGET = 1.5
RUNS = {"1 worker": ["--direct_num_workers", "1"],
        "2 workers": ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]}
_PIECE = 1_000_000  # rows generated at a time


def make_file(fmt: str, rows: int, folder: pathlib.Path) -> pathlib.Path:
    """``<folder>/one-<rows>.<fmt>``, made once (a ``.done`` marker beside it)."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    path = folder / f"one-{rows}.{fmt}"
    done = path.with_suffix(path.suffix + ".done")
    if done.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    writer = None
    with open(path, "wb") as out:
        for k, start in enumerate(range(0, rows, _PIECE)):
            table = _tutorial_table(min(_PIECE, rows - start), k)
            if fmt == "csv":
                if not k:
                    out.write((",".join(table.column_names) + "\n").encode())
                pcsv.write_csv(table, out, pcsv.WriteOptions(include_header=False,
                                                             quoting_style="none"))
            elif fmt == "jsonl":
                for batch in table.to_batches(100_000):
                    out.write("".join(json.dumps(r) + "\n"
                                      for r in batch.to_pylist()).encode())
            else:
                if writer is None:
                    writer = pq.ParquetWriter(out, table.schema)
                writer.write_table(table, row_group_size=100_000)
        if writer is not None:
            writer.close()
    done.write_text("")
    return path


def run_case(fmt: str, rows: int, data_dir: pathlib.Path, split_bytes: str | None,
             rounds: int = 1) -> dict:
    path = make_file(fmt, rows, data_dir / "one_file")
    meta = {"format": fmt, "files": [path.name], "glob": path.name,
            "features": TUTORIAL_FEATURES, "key": "feature3"}
    features = {f["name"]: {"type": f["type"]} for f in TUTORIAL_FEATURES}
    result = {"format": fmt, "rows": rows, "bytes": path.stat().st_size, "rounds": []}
    names = list(RUNS)
    for round_ in range(rounds):  # the two interleaved, their order alternated
        timed = {}
        for name in (names if round_ % 2 == 0 else names[::-1]):
            timed[name] = _build(fmt, name, path, meta, features, data_dir, split_bytes, rows)
        result["rounds"].append(timed)
    for name in names:  # the run of median time stands for its kind
        runs = sorted((r[name] for r in result["rounds"]), key=lambda run: run["seconds"])
        result[name] = runs[(len(runs) - 1) // 2]
        result[name]["median"] = statistics.median(run["seconds"] for run in runs)
    result["ratio"] = result["1 worker"]["median"] / result["2 workers"]["median"]
    return result


def _build(fmt: str, name: str, path: pathlib.Path, meta: dict, features: dict,
           data_dir: pathlib.Path, split_bytes: str | None, rows: int) -> dict:
    """One whole build of ``path`` with ``RUNS[name]``'s flags, its output checked."""
    out = data_dir / "one_file_out" / f"{fmt}-{name.replace(' ', '')}"
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    source = {"format": fmt, "path": str(path)}
    if split_bytes:
        source["split_bytes"] = split_bytes
    config = write_config(out.parent, f"{fmt}-{name.replace(' ', '')}", source, features, out)
    run = build_process(config, "--version", "v", *RUNS[name])
    if run["exit"]:
        raise SystemExit(f"{fmt} with {name} failed: {run['said']}")
    manifest = json.loads((out / "v" / "manifest.json").read_text())
    written = manifest["counts"]["written"]
    if written != rows or manifest["counts"]["read"] != rows:
        raise SystemExit(f"{fmt} with {name}: wrote {written} of {rows} rows")
    shards = sorted((out / "v").glob("*/*.tfrecord"))
    run["checked"] = check_sample({**meta, "folder": str(path.parent)}, shards)
    shutil.rmtree(out, ignore_errors=True)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--formats", default="csv,jsonl,parquet")
    parser.add_argument("--data-dir", type=pathlib.Path, default=HERE / ".data")
    parser.add_argument("--split-bytes", help="source.split_bytes (default: the config's, "
                        "64 MiB); a run at fewer rows than 10M needs smaller ranges to have "
                        "as many as the 10M-row file has, e.g. 8MiB at 2M rows")
    parser.add_argument("--rounds", type=int, default=1,
                        help="builds of each kind, interleaved; the ratio is of the medians "
                             "(one build's time moves by 5-10%% from run to run here)")
    parser.add_argument("--json-out", type=pathlib.Path)
    args = parser.parse_args()
    results = []
    for fmt in args.formats.split(","):
        result = run_case(fmt, args.rows, args.data_dir, args.split_bytes, args.rounds)
        results.append(result)
        if args.rounds > 1:
            print(f"{fmt:8} rounds (1 worker / 2 workers): " + ", ".join(
                f"{r['1 worker']['seconds']:.1f} / {r['2 workers']['seconds']:.1f} s"
                for r in result["rounds"]), flush=True)
        one, two = result["1 worker"], result["2 workers"]
        verdict = "PASS" if result["ratio"] >= TARGET else "MISS"
        print(f"{fmt:8} {args.rows:>11,} rows {result['bytes'] / 1e6:8.0f} MB   "
              f"1 worker {one['median']:7.1f} s ({one['peak_mb']:6.0f} MB)   "
              f"2 workers {two['median']:7.1f} s ({two['peak_mb']:6.0f} MB)   "
              f"ratio {result['ratio']:.2f}x   {verdict} (target {TARGET}x at 10M rows)",
              flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps({"when": time.time(), "results": results},
                                            indent=1))


if __name__ == "__main__":
    main()
