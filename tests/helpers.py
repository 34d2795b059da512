"""Helpers the tests share: reading back what a build wrote.

Loaded by ``tests/conftest.py`` as the module ``beam_tfrecords_tests_helpers`` (tests/ is not a
package on sys.path), so a test imports ``from beam_tfrecords_tests_helpers import ...``;
nothing here is installed.
"""

from __future__ import annotations

import contextlib
import functools
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import crc32c

from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.sinks.format.manifest import crc32c_b64
from beam_tfrecords.transforms.codec import wire

__all__ = ["HOSTILE", "Preforked", "add_build", "checked_records", "demo_csv_parts",
           "duplicate_counts", "free_port",
           "job_service_and_pool", "misguessed_csv", "read_examples", "read_records",
           "report_sample", "shard_paths", "split_statistics", "wait_for_port"]

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


def duplicate_counts(by_split: Mapping[str, Any]) -> dict[str, Any]:
    """What the manifest's ``duplicates`` must say of these records, split by split, from
    ``collections.Counter`` s over the records themselves: per split records, distinct,
    duplicates and leaked (its records also in another split, every copy), and the distinct
    records in more than one split."""
    import collections

    counters = {s: collections.Counter(records) for s, records in by_split.items()}
    holders = collections.Counter(r for c in counters.values() for r in c)
    return {
        "splits": {s: {"records": sum(c.values()), "distinct": len(c),
                       "duplicates": sum(c.values()) - len(c),
                       "leaked": sum(n for r, n in c.items() if holders[r] > 1)}
                   for s, c in sorted(counters.items())},
        "in_several_splits": sum(n > 1 for n in holders.values()),
    }


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


def demo_csv_parts(folder: pathlib.Path, parts: int = 40, first: int | None = None) -> str:
    """The demo's 10,000 rows (only its ``first`` rows, if given) cut into ``parts`` CSV files
    (each with the header), so that reads spread over workers; returns their glob."""
    demo = pathlib.Path(__file__).resolve().parent.parent / "configs" / "data" / "demo.csv"
    lines = demo.read_text().splitlines()
    header, rows = lines[0], lines[1:][:first]
    size = -(-len(rows) // parts)
    for k in range(parts):
        (folder / f"part-{k:02d}.csv").write_text(
            "\n".join([header, *rows[k * size:(k + 1) * size]]) + "\n")
    return str(folder / "*.csv")


def add_build(p: Any, label: str, config: Any, inputs: str) -> None:
    """Adds a whole build of ``config`` (a parsed Config) over ``inputs`` (a glob) to the
    pipeline ``p`` under the step ``label``, its version ``v`` claimed as a launch claims it
    (no lease): one pipeline can hold several builds and start its worker processes once."""
    from beam_tfrecords.pipelines import build, build_inputs
    from beam_tfrecords.sinks.commit import claim_version
    from beam_tfrecords.sinks.format.layout import Layout

    files, fingerprint = build_inputs.input_fingerprint(inputs)
    layout = Layout(config.output.path, "v")
    claim_version(layout, "r" * 32, "test")
    spec = build.commit_spec(config, layout, "r" * 32, fingerprint, use_lease=False)
    _ = p | label >> _build_transform()(config, spec, files)


@functools.cache
def _build_transform() -> type:
    """build.build_pipeline as a composite transform (defined once Beam is imported, which
    this module does not do itself)."""
    import apache_beam as beam

    from beam_tfrecords.pipelines import build

    class Build(beam.PTransform):
        def __init__(self, config, spec, files):
            super().__init__()
            self.config, self.spec, self.files = config, spec, files

        def expand(self, pbegin):
            return build.build_pipeline(pbegin, self.config, self.spec, self.files)["manifest"]

    return Build


# Values that would run or load something if a page showed them unescaped.
HOSTILE = ("<script>alert(1)</script>", "</svg><img src=x onerror=alert(1)>")


def split_statistics(records: list[dict], specs: list, split: str,
                     images: tuple[str, ...] = ()) -> dict[str, Any]:
    """The statistics of ``records`` encoded with ``specs``, as a version's
    ``FeatureStats.pb`` holds them and the report reads them back: computed by the build's
    accumulators, encoded by our wire code and decoded again."""
    from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder
    from beam_tfrecords.transforms.stats.dataset_stats import DatasetAccumulator, kinds_for_specs
    from beam_tfrecords.transforms.stats.statistics_wire import (
        decode_statistics_list,
        encode_statistics_list,
    )

    encoder = ExampleEncoder(specs)
    acc = DatasetAccumulator(kinds_for_specs(specs, images=images))
    acc.add_serialized(encoder.encode(r) for r in records)
    return decode_statistics_list(encode_statistics_list([acc.result(split)]))[0]


@functools.cache
def report_sample(rows: int = 600, hostile: bool = True) -> tuple[Any, Any, list]:
    """(current, previous, anomalies) for render_report: two versions of a small data set
    of two splits -- numbers, a list, categories (one of them :data:`HOSTILE`), a feature
    that appeared and one that went -- with rejects, unread input and shard sizes around
    the band, the current version drifted (fewer rows, a column half null, a shifted mean).
    Cached: do not change what it returns (``report_sample.__wrapped__`` computes afresh)."""
    import random

    from beam_tfrecords.sinks.format.report_html import Anomaly, Reason, VersionFacts
    from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec

    countries = ["de", "fr", "us", "jp", "br"] + list(HOSTILE if hostile else ())

    def version(seed: int, n: int, shift: float, null_share: float, new: bool):
        rng = random.Random(seed)
        specs = [FeatureSpec("age", "int64"), FeatureSpec("income", "float", missing="omit"),
                 FeatureSpec("country", "string"), FeatureSpec("scores", "float", shape=(-1,))]
        specs.append(FeatureSpec("signup_channel" if new else "legacy_flag", "string"))
        if hostile:
            specs.append(FeatureSpec(HOSTILE[1], "int64"))
        records = []
        for i in range(n):
            weights = [5, 4, 6, 2, 1] + [1] * (len(countries) - 5)
            values = countries + ["nz"] * new  # a value the previous version never had
            record = {"age": int(rng.gauss(38 + shift, 9)),
                      "income": None if rng.random() < null_share else rng.lognormvariate(10, .5),
                      "country": rng.choices(values, weights + [2] * new)[0],
                      "scores": [rng.random() for _ in range(rng.randint(0, 4))],
                      "signup_channel" if new else "legacy_flag":
                          rng.choice(["web", "app", "store"] if new else ["y", "n"]),
                      HOSTILE[1]: i % 3}
            records.append(record)
        cut = n * 4 // 5
        return {"train": split_statistics(records[:cut], specs, "train"),
                "eval": split_statistics(records[cut:], specs, "eval")}

    band = (1_000_000, 1_500_000, 2_000_000)
    source = "gs://bucket/in/" + ("<img src=x onerror=alert(1)>.csv" if hostile else "part-3.csv")
    rejected = [Reason("income: not a number", 7, (
        {"source": source, "row": 18, "feature": "income", "value": "'n/a'",
         "record": f"['17', 'n/a', {countries[-1]!r}]"},)),
        Reason("age: missing (the feature is required)", 2, (
            {"source": source, "row": 40, "feature": "age", "value": "None", "record": ""},))]
    unread = [Reason("an unterminated quote runs to the end of the file", 1, (
        {"source": source, "row": 580, "offset": 41_200, "bytes": 1_830, "kind": "unread"},))]
    current = VersionFacts(
        name="people", version="20260601T030000Z", created="2026-06-01T03:04:05.000000Z",
        counts={"read": 509, "written": 500, "rejected": 9,
                "unread": {"files": 1, "bytes": 1_830, "rows": 0}},
        records={"train": 400, "eval": 100},
        shards={"train": (1_480_000, 1_520_000, 1_610_000, 1_390_000, 420_000),
                "eval": (1_450_000, 2_300_000)},
        band=band, statistics=version(2, 500, 6.0, 0.5, True), rejected=rejected,
        unread=unread)
    previous = VersionFacts(
        name="people", version="20260501T030000Z", created="2026-05-01T03:04:05.000000Z",
        counts={"read": rows, "written": rows, "rejected": 0},
        records={"train": rows * 4 // 5, "eval": rows // 5},
        shards={"train": (1_500_000,) * 5, "eval": (1_200_000,)}, band=band,
        statistics=version(1, rows, 0.0, 0.0, False))
    anomalies = [
        Anomaly("income", "missing_fraction", "income is missing in 50.4% of train examples "
                "(was 0%), more than the threshold 0.05", "error"),
        Anomaly("age", "js_divergence", "age's distribution moved: Jensen-Shannon divergence "
                "0.21 > 0.1", "warning"),
        Anomaly("", "record_count", "train holds 400 records, 16.7% fewer than 480", "error"),
    ]
    if hostile:
        anomalies.append(Anomaly("country", "new_values", f"new value {HOSTILE[0]!r}",
                                 "warning"))
    return current, previous, anomalies


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
                             "-m", "apache_beam.runners.portability.local_job_service_main"),
                         separate_pool: bool = True):
    """A Beam job service (``python <job_command> --port=P``) and an SDK worker pool (worker
    processes), each its own process group logging into ``folder``, killed afterwards:
    yields their ports ``(job, pool)``. With ``separate_pool`` False no pool process is
    started: the job command serves the pool itself, on the port its environment's
    ``BEAM_TFRECORDS_TEST_POOL_PORT`` names (one process and its Beam import fewer)."""
    import os
    import signal
    import subprocess
    import sys

    job, pool = free_port(), free_port()
    commands = [([*job_command, f"--port={job}"], "job_service.log")]
    if separate_pool:
        commands.append((["-m", "apache_beam.runners.worker.worker_pool_main",
                          f"--service_port={pool}"], "worker_pool.log"))
    procs = [subprocess.Popen(
        [sys.executable, *command], env=dict(env, BEAM_TFRECORDS_TEST_POOL_PORT=str(pool)),
        start_new_session=True, stdout=open(folder / log, "wb"), stderr=subprocess.STDOUT)
        for command, log in commands]
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


# The server below imports Beam and the build once, then forks a fresh command per request:
# each command is still a process of its own (its own PID, session and exit status, killed
# and signalled like any other), without paying the Beam import (about 1.5 CPU-s) again. It
# has no thread when it forks (importing Beam starts none), so the child is as a freshly
# started interpreter that imported those modules. Its objects are frozen out of the collector
# before it forks, and a child ends as run_preloaded's do (``_leave``: threads joined, atexit
# handlers run, files flushed, the program's objects collected; an uncaught Ctrl-C dies of
# SIGINT, as the interpreter does) without tearing down the preloaded modules, which would
# copy the whole heap (0.1-0.5 s a command).
_PREFORK_SERVER = r"""
import json, os, signal, sys
import apache_beam  # noqa: F401
import apache_beam.runners.direct.direct_runner  # noqa: F401
import apache_beam.runners.portability.fn_api_runner  # noqa: F401
from beam_tfrecords.pipelines import build, cli  # noqa: F401
import gc, traceback
sys.path.insert(0, os.environ["BEAM_TFRECORDS_TESTS_DIR"])
from run_preloaded import _exit_status, _leave

gc.freeze()
sys.stdout.write("ready\n")
sys.stdout.flush()
for _line in sys.stdin:
    _request = json.loads(_line)
    if _request["op"] == "start":
        _pid = os.fork()
        if _pid == 0:
            os.setsid()
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _null = os.open(os.devnull, os.O_RDWR)
            _out = os.open(_request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            _err = os.open(_request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(_null, 0)
            os.dup2(_out, 1)
            os.dup2(_err, 2)
            for _fd in (_null, _out, _err):
                os.close(_fd)
            os.chdir(_request["cwd"])
            os.environ.clear()
            os.environ.update(_request["env"])
            sys.argv = ["-c", *_request["argv"]]
            _died_of = None
            try:
                exec(compile(_request["code"], "<command>", "exec"), {"__name__": "__main__"})
                _status = 0
            except SystemExit as _done:
                _status = _exit_status(_done)
            except KeyboardInterrupt:
                traceback.print_exc()
                _status, _died_of = 1, signal.SIGINT
            except BaseException:
                traceback.print_exc()
                _status = 1
            _leave(_status, _died_of)
        _reply = _pid
    else:  # "poll": a started command's exit status (-N for signal N), None while it runs
        _pid, _status = os.waitpid(_request["pid"], os.WNOHANG)
        _reply = None if _pid == 0 else os.waitstatus_to_exitcode(_status)
    sys.stdout.write(json.dumps(_reply) + "\n")
    sys.stdout.flush()
"""


class Preforked:
    """Commands forked from one server process that imported Beam and the build already.

    ``start(code, argv, cwd=...)`` runs Python ``code`` (with ``sys.argv[1:]`` = ``argv``,
    SIGINT and SIGTERM at their default actions, in a session of its own, stdout and stderr
    into files of its own) and returns a :class:`PreforkedCommand`, which answers like
    ``subprocess.Popen``: ``pid``, ``poll``, ``wait``, ``communicate``, ``returncode``,
    ``stdout.read()``, ``stderr.read()``; ``command(argv, cwd=...)`` runs ``beam-tfrecords
    ARGV`` (its ``entry()``). For commands that are not about how a user starts the program
    (the installed console script is tested as such where that is the point); ``close()``
    ends the server and with it counts the commands' CPU time as this process's children's.
    The server starts without ``PYTHONFAULTHANDLER`` (read only at an interpreter's start):
    faulthandler is on in a command only where the command turns it on itself, as
    ``entry()`` does; every other variable comes from each command's own environment.
    """

    def __init__(self, folder: pathlib.Path):
        import os
        import subprocess
        import sys

        env = dict(os.environ)
        env.pop("PYTHONFAULTHANDLER", None)
        env["BEAM_TFRECORDS_TESTS_DIR"] = str(pathlib.Path(__file__).resolve().parent)
        self._folder, self._count = folder, 0
        self._server = subprocess.Popen(
            [sys.executable, "-c", _PREFORK_SERVER], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=open(folder / "prefork-server.log", "wb"),
            text=True, start_new_session=True, env=env)
        ready = self._server.stdout.readline()
        assert ready == "ready\n", (folder / "prefork-server.log").read_text()[-3000:]

    def ask(self, request: Mapping[str, Any]) -> Any:
        import json

        self._server.stdin.write(json.dumps(request) + "\n")
        self._server.stdin.flush()
        return json.loads(self._server.stdout.readline())

    def start(self, code: str, argv: Sequence[str], *, cwd: Path,
              env: Mapping[str, str] | None = None) -> PreforkedCommand:
        """Fork a command running ``code`` with ``argv``; its stderr goes to a file of its own.

        Returns:
            The running command.
        """
        import os

        self._count += 1
        stdout, stderr = (self._folder / f"command-{self._count}.{name}"
                          for name in ("stdout", "stderr"))
        pid = self.ask({"op": "start", "code": code, "argv": [str(a) for a in argv],
                        "cwd": str(cwd), "stdout": str(stdout), "stderr": str(stderr),
                        "env": dict(os.environ if env is None else env)})
        return PreforkedCommand(self, pid, stdout, stderr)

    def command(self, argv: Sequence[str], *, cwd: Path,
                env: Mapping[str, str] | None = None) -> PreforkedCommand:
        """Fork ``beam-tfrecords ARGV``: the console script's ``entry()``.

        Returns:
            The running command.
        """
        return self.start("from beam_tfrecords.pipelines.cli import entry\nentry()\n", argv,
                          cwd=cwd, env=env)

    def close(self) -> None:
        self._server.stdin.close()
        self._server.wait(timeout=60)


class _Text:
    def __init__(self, path: pathlib.Path):
        self._path = path

    def read(self) -> str:
        return self._path.read_text(errors="replace")


class PreforkedCommand:
    """One command of :class:`Preforked`, answering as ``subprocess.Popen`` does."""

    def __init__(self, server: Preforked, pid: int, stdout: pathlib.Path,
                 stderr: pathlib.Path):
        self._server, self.pid, self.returncode = server, pid, None
        self.stdout, self.stderr = _Text(stdout), _Text(stderr)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.ask({"op": "poll", "pid": self.pid})
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import subprocess
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"command {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[None, str]:
        self.wait(timeout)
        return None, self.stderr.read()
