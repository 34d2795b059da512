"""Whole builds of one file read as many ranges: the shards are the bytes of the same file
read whole, for every format (in-process, unshuffled: ranges in range order), and on the Fn
API path Dataflow and Flink use -- a PortableRunner job on an external pool of SDK worker
processes -- the ranges of one file are read in two processes and commit what the in-process
build commits.

The runner matrix (in-process, 2 worker processes, the embedded PortableRunner) over one
file in many ranges is in tests/e2e/test_shuffle_runners.py.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from beam_tfrecords_tests_helpers import job_service_and_pool, misguessed_csv

from beam_tfrecords.pipelines import cli

pytestmark = pytest.mark.e2e  # whole builds

ROWS = 3000
FEATURES = {"id": {"type": "int64"}, "name": {"type": "string"}, "x": {"type": "float"}}


def _rows():
    return [{"id": i, "name": f"multi\nline {i}, \"q\"" if i % 7 == 0 else f"n{i}",
             "x": i / 4} for i in range(ROWS)]


def _write(fmt: str, folder) -> str:
    rows = _rows()
    path = folder / f"data.{fmt}"
    if fmt == "csv":
        def cell(text):
            return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n') else text
        lines = ["id,name,x"] + [f"{r['id']},{cell(r['name'])},{r['x']}" for r in rows]
        lines[500] = "500,broken,not-a-number"  # a dead letter, in a range not at the start
        path.write_text("\n".join(lines) + "\n")
    elif fmt == "jsonl":
        lines = [json.dumps(r) for r in rows]
        lines[800] = "{not json"
        path.write_text("\n".join(lines) + "\n")
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=100)
    else:
        schema = {"type": "record", "name": "r", "fields": [
            {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
            {"name": "x", "type": "double"}]}
        with open(path, "wb") as out:
            fastavro.writer(out, schema, rows, sync_interval=1000)
    return str(path)


def _build(path: str, fmt: str, out, split_bytes, seed=None, args=()):
    config = {"name": "ranges", "source": {"format": fmt, "path": path,
                                           "split_bytes": split_bytes},
              "features": FEATURES, "splits": {"key": "id", "train": 80, "eval": 20},
              "output": {"path": str(out), "shard_size": {"target": "20KB", "min": 10_000,
                                                          "max": 40_000}},
              "errors": {"max_bad_fraction": 0.01}}
    if seed is not None:
        config["output"]["shuffle"] = {"seed": seed}
    config_path = out.parent / f"{out.name}.yaml"
    config_path.write_text(json.dumps(config))
    manifest = cli.run_build(["--config", str(config_path), "--version", "v", *args])
    shards = {p.relative_to(out / "v").as_posix(): p.read_bytes()
              for p in sorted((out / "v").glob("*/*.tfrecord"))}
    return manifest, shards


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet", "avro"])
def test_one_file_in_many_ranges_builds_the_bytes_of_the_whole_file(fmt, tmp_path):
    path = _write(fmt, tmp_path)
    size = os.path.getsize(path)
    whole, whole_shards = _build(path, fmt, tmp_path / "whole", size)
    split = 2000 if fmt != "parquet" else 1500  # Parquet: a few row groups per range
    ranged, ranged_shards = _build(path, fmt, tmp_path / "ranged", split)
    assert size > 10 * split
    assert ranged_shards == whole_shards and len(whole_shards) >= 4
    assert ranged["splits"] == whole["splits"]
    assert ranged["counts"] == whole["counts"]
    assert whole["counts"]["read"] == ROWS


@pytest.mark.slow
def test_two_worker_processes_from_the_command_line_write_the_in_process_bytes(tmp_path):
    """The command line evens the ranges out over worker processes (three become four for
    two workers, runners.balanced_split_bytes): a seeded build's shards and counts are the
    in-process build's, byte for byte."""
    path = _write("csv", tmp_path)
    split = os.path.getsize(path) // 3 + 1  # three ranges as configured
    one, one_shards = _build(path, "csv", tmp_path / "one", split, seed=5)
    two, two_shards = _build(path, "csv", tmp_path / "two", split, seed=5, args=(
        "--direct_running_mode=multi_processing", "--direct_num_workers=2"))
    assert two_shards == one_shards and len(one_shards) >= 4
    assert two["counts"] == one["counts"] and two["shards_digest"] == one["shards_digest"]
    assert two["config"]["source"] == one["config"]["source"]  # the range size as given


# -- the Fn API path: a job service and a pool of SDK worker processes --------------------------

# Run in this process, in-process (the reference) or submitted to the job service (the pooled
# build: the reads run in the pool's worker processes).
_PIDS = textwrap.dedent("""
    import os, sys
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    import beam_tfrecords as btf

    features = {"id": {"type": "int64"}, "name": {"type": "string"}, "x": {"type": "float"}}

    def note(chunk):  # fused with the read: the process that read the chunk's range
        with open(os.path.join(pids, f"{os.getpid()}-{chunk.range_offset or 0}"), "w"):
            pass
        return chunk

    with beam.Pipeline(options=PipelineOptions(args)) as p:
        read = p | btf.ReadCsv(path, features, split_bytes=int(split))
        noted = {"records": read.records | beam.Map(note), "rejected": read.rejected,
                 "counts": read.counts}
        _ = noted | btf.WriteTFRecordDataset(
            output=out, name="pool", features=features, shuffle_seed=7, version="v",
            max_bad_fraction=0.01, splits={"key": "id", "train": 80, "eval": 20},
            shard_size={"target": "20KB", "min": 10_000, "max": 40_000})
""")


def _pool_build(path, out, pids, args):
    """The build above, with the pipeline options ``args``."""
    pids.mkdir()
    values = {"path": path, "out": str(out), "pids": str(pids), "split": "4000", "args": args}
    exec(_PIDS, {"__name__": "pool_build", **values})
    manifest = json.loads((out / "v" / "manifest.json").read_text())
    shards = {p.relative_to(out / "v").as_posix(): p.read_bytes()
              for p in sorted((out / "v").glob("*/*.tfrecord"))}
    processes = {}
    for name in os.listdir(pids):
        pid, offset = name.split("-")
        processes.setdefault(pid, set()).add(int(offset))
    return manifest, shards, processes


# A job service that runs each job on as many SDK workers as its --direct_num_workers asks,
# as a Flink or Dataflow job runs on many: Beam's local job service leaves its FnApiRunner at
# one (run_pipeline reads the option, run_via_runner_api -- the job service's entry -- not).
# It serves the SDK worker pool too (Beam's worker_pool_main servicer, starting each worker as
# a process of its own), so no pool process pays a Beam import of its own.
_JOB_SERVICE = textwrap.dedent("""
    import os, signal, sys
    from apache_beam.options.pipeline_options import DirectOptions
    from apache_beam.runners.portability import local_job_service_main
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.worker import worker_pool_main

    real = fn_runner.FnApiRunner.run_via_runner_api

    def run_via_runner_api(self, proto, options):
        self._num_workers = int(options.view_as(DirectOptions).direct_num_workers or 1)
        return real(self, proto, options)

    fn_runner.FnApiRunner.run_via_runner_api = run_via_runner_api
    signal.signal(signal.SIGTERM, lambda *args: sys.exit(0))
    pool = worker_pool_main.BeamFnExternalWorkerPoolServicer.start(  # kept: it serves while held
        use_process=True, port=int(os.environ["BEAM_TFRECORDS_TEST_POOL_PORT"]))
    local_job_service_main.run(sys.argv[1:])
""")


@pytest.fixture
def job_service(tmp_path):
    """The job service above, serving an SDK worker pool (worker processes)."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep
               + os.environ.get("PATH", ""))
    with job_service_and_pool(tmp_path, env, ["-c", _JOB_SERVICE],
                              separate_pool=False) as (job, pool):
        yield job, pool


@pytest.mark.slow
def test_a_worker_pool_of_two_processes_reads_ranges_of_one_file_in_both(tmp_path,
                                                                        job_service):
    """The ranges cross a Reshuffle to the pool's two SDK worker processes: each process
    notes (its pid, in a file per chunk) the ranges it read, so both are seen reading ranges
    of the one file -- shown by what they wrote, not by timing; the committed shards are
    the in-process build's, byte for byte."""
    job, pool = job_service
    path = _write("csv", tmp_path)
    local, local_shards, local_pids = _pool_build(path, tmp_path / "local", tmp_path / "p0",
                                                  [])
    assert len(local_pids) == 1  # in-process: one process read every range
    pooled, shards, processes = _pool_build(
        path, tmp_path / "pooled", tmp_path / "p1",
        ["--runner=PortableRunner", f"--job_endpoint=localhost:{job}",
         "--environment_type=EXTERNAL", f"--environment_config=localhost:{pool}",
         "--direct_num_workers=2"])
    assert len(processes) == 2, processes  # two worker processes read chunks
    assert str(os.getpid()) not in processes  # not this process, which launched the job
    assert all(offsets for offsets in processes.values())
    assert len(set().union(*processes.values())) > 2  # of many ranges of the one file
    assert shards == local_shards and len(shards) >= 4
    assert pooled["counts"] == local["counts"]
    assert pooled["shards_digest"] == local["shards_digest"]


def test_a_build_whose_ranges_cannot_be_joined_up_fails_naming_file_and_byte(tmp_path,
                                                                             monkeypatch,
                                                                             capsys):
    """A quoted cell that reads like rows, longer than the (shortened) lookahead: a range
    start's guess is wrong, and the build fails at its commit in one line naming the file
    and the byte -- no version is committed."""
    from beam_tfrecords.pipelines.cli import main

    path = tmp_path / "a.csv"
    misguessed_csv(path, monkeypatch)
    out = tmp_path / "out"
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({
        "name": "bad", "source": {"format": "csv", "path": str(path), "split_bytes": 30_000},
        "features": FEATURES, "output": {"path": str(out)}}))
    assert main(["build", "--config", str(config), "--version", "v"]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith(f"beam-tfrecords build: RangeError: {path}: byte ")
    assert "range 1 assumed a row start there" in lines[-1]
    assert not (out / "v" / "manifest.json").exists()
