"""A scale model: what a 1 TB build on Dataflow should take, from unit costs measured here.

    .venv/bin/python bench/scale_model.py [--input-bytes 1e12] [--workers 50] [--cores 4]
        [--core-speed 1.0] [--markdown]

Nothing is run: every number is a product of the measured unit costs in ``UNITS`` and
``SINK`` (each cites the section of bench/README.md it comes from) and the assumptions in
``ASSUMPTIONS``. The model answers, for one big CSV file and one big Parquet file of the
tutorial's rows on ``workers`` machines of ``cores`` vCPUs: how many ranges the read is cut
into, how many shards and staged parts the sink writes, how many Cloud Storage requests the
finalize sends, the peak memory of each worker, and the expected wall time of our build and
of the stock Beam pipeline (bench/alt_beam.py) on the same workers.

What it leaves out is listed in bench/README.md beside its output: a model is only as good as
its weakest assumption, and the one that matters most here is ``--core-speed`` (a Dataflow
vCPU is one hyperthread; a core of this machine may be worth more or less).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

MIB = 2**20


@dataclasses.dataclass(frozen=True)
class Unit:
    """What one core does with one format, measured on this machine (work only, one process)."""

    name: str
    input_bytes_per_row: float  # the file's bytes per row
    ours_rows_per_s: float  # read -> encode -> write, one core
    beam_rows_per_s: float  # stock Beam's pipeline on the same rows, one core
    source: str


# bench/README.md "Results: full scale" (2026-11-23, idle machine, one process each, the
# 10M-row cases): ours and stock Beam measured in the same run. The inputs: 290 MB of CSV and
# 109 MB of Parquet (row groups of 100,000 rows) for 10,000,000 rows.
UNITS = (
    Unit("CSV", 290e6 / 10e6, 818_025, 52_119,
         "tutorial-csv@10M: ours 818,025 rows/s, beam 52,119 rows/s"),
    Unit("Parquet", 109e6 / 10e6, 941_257, 65_356,
         "tutorial-parquet@10M: ours 941,257 rows/s, beam 65,356 rows/s"),
)


@dataclasses.dataclass(frozen=True)
class Sink:
    """The sink's and the commit's unit costs."""

    record_bytes: float = 82.1e6 / 818_025  # framed output per tutorial row (82.1 MB/s)
    shard_target: float = 150e6  # the default band's target (sinks/format/shard_plan.py)
    split_bytes: float = 64 * MIB  # source.split_bytes' default (readers/ranges.py)
    statistics_factor: float = 1.10  # statistics on: issue #29's budget, measured 1.02-1.19
    worker_peak_mb: float = 330  # one worker process's peak RSS ("One big file")
    launcher_mb_per_shard: float = 4e-3  # the committing process, ~4 KB a shard ("Many shards")
    commit_cpu_s_per_shard: float = 1.1e-3  # finalize + commit on gs://, our CPU ("Many shards")
    manifest_bytes_per_shard: float = 157  # ("Many shards")
    worker_start_cpu_s: float = 2.2  # a worker process's Beam import and stage set-up
    requests_per_part: float = 2  # Beam's resumable upload of a staged part (measured small)
    requests_per_shard: float = 2  # a one-part shard: one copy and one delete
    requests_per_composed_shard: float = 2  # compose, then delete the parts in one batch


SINK = Sink()

ASSUMPTIONS = (
    "A Dataflow vCPU runs our code at --core-speed times a core of this machine (default 1.0: "
    "a hyperthread of a recent Xeon; the measured machine is a Firecracker VM on a Xeon).",
    "Dataflow's Python workers run one SDK process per vCPU, each taking ranges; dynamic work "
    "rebalancing splits a straggling range, so the tail is at most one range's time.",
    "Reading from and writing to Cloud Storage keeps up with the CPU: per machine the build "
    "reads cores x rate x input bytes per row and writes cores x rate x ~100 bytes a row "
    "(computed below), under a 4-vCPU machine's network share of about 1 GB/s.",
    "Rows are the tutorial's (13 columns, ~100 bytes as an Example); wider rows cost more per "
    "row and less per byte (bench/README.md, wide CSV).",
    "Shards: the output over the band's target; staged parts: one per full target a range "
    "writes plus one remainder per range, composed into shards by the finalize.",
    "Stock Beam's pipeline (ReadFromText/ReadFromParquet, a DoFn building tf.train.Example, "
    "WriteToTFRecord) splits its input as finely as ours, so only the per-row rate differs.",
    "Not counted on either side: Dataflow's VM start-up and job graph submission (minutes, the "
    "same for both), and the shuffled-shard path (output.shuffle), which writes every byte "
    "twice.",
)


def model(unit: Unit, input_bytes: float, workers: int, cores: int, core_speed: float = 1.0,
          sink: Sink = SINK) -> dict[str, float]:
    """The model's numbers for one file of ``input_bytes`` of ``unit``'s rows.

    Args:
        unit: the format's measured rates.
        input_bytes: the file's size.
        workers: Dataflow machines.
        cores: vCPUs per machine (one SDK process each).
        core_speed: a vCPU's speed relative to a core of the measuring machine.
        sink: the sink's unit costs.

    Returns:
        Name -> value (counts, bytes, seconds).
    """
    processes = workers * cores
    rows = input_bytes / unit.input_bytes_per_row
    output = rows * sink.record_bytes
    ranges = math.ceil(input_bytes / sink.split_bytes)
    range_output = output / ranges
    parts = ranges * (math.floor(range_output / sink.shard_target) + 1)
    shards = math.ceil(output / sink.shard_target)
    composed = max(0, min(shards, parts - shards))
    requests = (parts * sink.requests_per_part + (shards - composed) * sink.requests_per_shard
                + composed * sink.requests_per_composed_shard)
    ours_rate = unit.ours_rows_per_s * core_speed / sink.statistics_factor
    beam_rate = unit.beam_rows_per_s * core_speed
    range_s = rows / ranges / ours_rate
    ours_s = rows / (processes * ours_rate) + range_s + sink.worker_start_cpu_s / core_speed
    commit_s = shards * sink.commit_cpu_s_per_shard
    beam_s = rows / (processes * beam_rate)
    return {
        "rows": rows, "output_bytes": output, "ranges": ranges,
        "ranges_per_process": ranges / processes, "range_seconds": range_s,
        "parts": parts, "shards": shards, "finalize_requests": requests,
        "worker_peak_mb": sink.worker_peak_mb, "machine_peak_mb": sink.worker_peak_mb * cores,
        "launcher_shard_mb": shards * sink.launcher_mb_per_shard,
        "manifest_mb": shards * sink.manifest_bytes_per_shard / 1e6,
        "read_mb_s_per_machine": cores * ours_rate * unit.input_bytes_per_row / 1e6,
        "write_mb_s_per_machine": cores * ours_rate * sink.record_bytes / 1e6,
        "ours_seconds": ours_s + commit_s, "commit_seconds": commit_s,
        "beam_seconds": beam_s, "speedup": beam_s / (ours_s + commit_s),
    }


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def table(input_bytes: float, workers: int, cores: int, core_speed: float) -> str:
    """The model as a markdown table, one column per format.

    Args:
        input_bytes: the file's size.
        workers: Dataflow machines.
        cores: vCPUs per machine.
        core_speed: a vCPU's speed relative to a core here.

    Returns:
        The table's lines, joined.
    """
    results = [(unit, model(unit, input_bytes, workers, cores, core_speed)) for unit in UNITS]
    rows = [
        ("rows (tutorial)", lambda m: f"{m['rows'] / 1e9:.1f} billion"),
        ("output (TFRecord)", lambda m: f"{m['output_bytes'] / 1e12:.2f} TB"),
        ("ranges of 64 MiB", lambda m: f"{m['ranges']:,} ({m['ranges_per_process']:.0f} per "
                                       "process)"),
        ("one range's time", lambda m: f"{m['range_seconds']:.1f} s"),
        ("staged parts / shards", lambda m: f"{m['parts']:,} / {m['shards']:,}"),
        ("finalize requests (uploads included)", lambda m: f"{m['finalize_requests']:,.0f}"),
        ("peak memory", lambda m: f"{m['worker_peak_mb']:.0f} MB a process, "
                                  f"{m['machine_peak_mb']:,.0f} MB a machine"),
        ("committing process, for the shards", lambda m: f"{m['launcher_shard_mb']:.0f} MB; "
                                                         f"manifest {m['manifest_mb']:.1f} MB"),
        ("Cloud Storage per machine", lambda m: f"read {m['read_mb_s_per_machine']:.0f} MB/s, "
                                                f"write {m['write_mb_s_per_machine']:.0f} MB/s"),
        ("our build (commit included)", lambda m: f"{_duration(m['ours_seconds'])} "
                                                  f"(commit {m['commit_seconds']:.0f} s)"),
        ("stock Beam's pipeline", lambda m: _duration(m["beam_seconds"])),
        ("ratio", lambda m: f"{m['speedup']:.1f}x"),
    ]
    header = (f"| {input_bytes / 1e12:g} TB on {workers} x {cores} vCPUs "
              f"(core speed {core_speed:g}) | " + " | ".join(u.name for u, _ in results) + " |")
    lines = [header, "|---" * (len(results) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(cell(m) for _, m in results) + " |"
              for label, cell in rows]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input-bytes", type=float, default=1e12)
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--cores", type=int, default=4)
    parser.add_argument("--core-speed", type=float, default=1.0)
    parser.add_argument("--markdown", action="store_true",
                        help="print only the table (bench/README.md quotes it)")
    args = parser.parse_args(argv)
    print(table(args.input_bytes, args.workers, args.cores, args.core_speed))
    if not args.markdown:
        print("\nUnit costs:")
        for unit in UNITS:
            print(f"  {unit.name}: {unit.source}")
        print(f"  sink: {SINK}")
        print("Assumptions:")
        for text in ASSUMPTIONS:
            print(f"  - {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
