"""Helpers the tests share: reading back what a build wrote.

Loaded by ``tests/conftest.py`` as the module ``beam_tfrecords_tests_helpers`` (tests/ is not a
package on sys.path), so a test imports ``from beam_tfrecords_tests_helpers import ...``;
nothing here is installed.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import crc32c

from beam_tfrecords.sinks import storage
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.sinks.format.manifest import crc32c_b64
from beam_tfrecords.transforms.codec import wire

__all__ = ["checked_records", "demo_csv_parts", "free_port", "job_service_and_pool",
           "misguessed_csv", "read_examples", "read_records", "shard_paths", "wait_for_port"]

Path = pathlib.Path | str


def shard_paths(version_dir: Path, manifest: Mapping[str, Any],
                split: str | None = None) -> list:
    """The shard files a manifest lists, split after split in its order (or one split's):
    ``pathlib.Path`` below a local ``version_dir`` given as one, else ``str`` (``gs://`` too)."""
    names = list(manifest["splits"]) if split is None else [split]
    return [_join(version_dir, shard["path"])
            for name in names for shard in manifest["splits"][name]["shards"]]


def read_records(path: Path, compression: str = "auto") -> list[bytes]:
    """Every record of one TFRecord file, local or ``gs://``, CRCs checked as it is read."""
    with storage.open_read(str(path)) as handle:
        return list(tff.iter_records(handle, compression, path=str(path)))


def read_examples(path: Path, compression: str = "auto") -> list[dict]:
    """The records of one file decoded without a spec: ``{name: (kind, values)}`` each."""
    return [wire.decode_example(record) for record in read_records(path, compression)]


def checked_records(path: Path, shard: Mapping[str, Any]) -> list[bytes]:
    """The records of a local shard, after checking its size, crc32c and record count against
    its manifest entry ``shard``."""
    data = pathlib.Path(path).read_bytes()
    assert len(data) == shard["bytes"], path
    assert crc32c_b64(crc32c.crc32c(data)) == shard["crc32c"], path
    records = read_records(path)
    assert len(records) == shard["records"], path
    return records


def _join(base: Path, relative: str) -> Path:
    return base / relative if isinstance(base, pathlib.Path) else storage.join(base, relative)


def demo_csv_parts(folder: pathlib.Path, parts: int = 40) -> str:
    """The demo's 10,000 rows cut into ``parts`` CSV files (each with the header), so that
    reads spread over workers; returns their glob."""
    demo = pathlib.Path(__file__).resolve().parent.parent / "configs" / "data" / "demo.csv"
    lines = demo.read_text().splitlines()
    header, rows = lines[0], lines[1:]
    size = -(-len(rows) // parts)
    for k in range(parts):
        (folder / f"part-{k:02d}.csv").write_text(
            "\n".join([header, *rows[k * size:(k + 1) * size]]) + "\n")
    return str(folder / "*.csv")


def free_port() -> int:
    """A TCP port nothing listens on now (for a job service or a worker pool to take)."""
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, seconds: float = 60.0) -> None:
    """Return once something listens on ``port``; AssertionError after ``seconds``."""
    import socket
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("localhost", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on port {port} after {seconds:g} s")


def misguessed_csv(path: pathlib.Path, monkeypatch: Any) -> None:
    """Write a CSV whose quoted cell of about 90 kB reads like rows of its three columns, and
    shorten the lookahead of the CSV reader's range starts to 1 kB: a range starting inside
    that cell then guesses it is at a row start, wrongly (transforms/readers/csv_ranges.py)."""
    import beam_tfrecords.transforms.readers.read_csv as rc

    cell = "1,b,2.0\n" * 12_000
    path.write_text(f'id,name,x\n1,"{cell}",2.0\n' + "".join(f"{i},n,1.0\n" for i in range(9)))
    real = rc.csv_range_start
    monkeypatch.setattr(rc, "csv_range_start",
                        lambda *a, **k: real(*a, **{**k, "lookahead": 1 << 10}))


@contextlib.contextmanager
def job_service_and_pool(folder: pathlib.Path, env: Mapping[str, str],
                         job_command: Sequence[str] = (
                             "-m", "apache_beam.runners.portability.local_job_service_main")):
    """A Beam job service (``python <job_command> --port=P``) and an SDK worker pool (worker
    processes), each its own process group logging into ``folder``, killed afterwards:
    yields their ports ``(job, pool)``."""
    import os
    import signal
    import subprocess
    import sys

    job, pool = free_port(), free_port()
    procs = [subprocess.Popen(
        [sys.executable, *command], env=dict(env), start_new_session=True,
        stdout=open(folder / log, "wb"), stderr=subprocess.STDOUT)
        for command, log in (
            ([*job_command, f"--port={job}"], "job_service.log"),
            (["-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={pool}"],
             "worker_pool.log"))]
    try:
        wait_for_port(job)
        wait_for_port(pool)
        yield job, pool
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
