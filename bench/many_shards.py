"""Many shards: does the finalize and commit keep up with 1,000 to 100,000 shards?

    .venv/bin/python bench/many_shards.py [--sizes 1000,10000,100000] [--gcs]
        [--gcs-sizes 1000,10000] [--records-per-shard 4] [--payload 64]
        [--data-dir bench/.data] [--json-out FILE]

For each size N, a CSV of ``N * records-per-shard`` rows (an 8-digit ``id`` and a ``payload``
of ``--payload`` bytes, every record the same size) is built by the command line's own
``run_build`` in a fresh child process, with ``output.shard_size.target`` set to exactly
``records-per-shard`` framed records: the writer rolls a file at every target, so the build
makes N shards. Locally, and with ``--gcs`` to a Cloud Storage emulator
(``gcp-storage-emulator``, started here as the tests start it: one request at a time, so
its absolute times are not Cloud Storage's; the input stays on local disk).

Inside the child the build's phases are timed apart -- everything before the finalize (the
launcher, read -> encode -> write of the staged parts), the finalize (plan, one final shard per
part, group) and the commit step (counts, manifest, LATEST, staging removed, retention) --
each in wall and CPU seconds of the process, and the storage calls each phase makes are
counted: the listing calls of ``runtime/storage.py`` and ``runtime/gcs.py`` (``list_files``,
``match``, ``delete_tree``, ``list_below``, ``identities``), local directory listings
(``os.scandir``/``os.listdir``, which ``os.walk`` and ``glob`` use), and on ``gs://`` every
HTTP request by kind (object listings, object reads, copies, deletes, batches, uploads).
Then ``verify`` checks the version (timed, its listings counted) and the manifest's size is
read. The parent times the whole child process (wall and CPU, ``getrusage`` of children) and
polls its peak memory; the child reports its own high-water mark (``VmHWM``) and its resident
set before and after the finalize.

Checked: the manifest lists N shards and read = written = rows; verify passes; the shard
files on disk are the manifest's. Judged: the finalize + commit CPU seconds per shard at the
largest size within 1.5x of those at the smallest, and the listing calls of the finalize,
the commit and verify the same at every size. Ratios are of runs in the same invocation.
The builds run in one process (the command line's default on a local runner): there are no
worker processes, so the launcher's peak is the build's.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import shutil
import sys
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

LINEAR_LIMIT = 1.5  # per-shard CPU at the largest size over that at the smallest
_LISTING_CALLS = ("storage.list_files", "storage.match", "storage.delete_tree",
                  "gcs.list_below", "gcs.identities")
_COUNTED_CALLS = (*_LISTING_CALLS, "storage.exists", "storage.rename", "storage.delete")

# -- in the child -------------------------------------------------------------------------------

COUNTS: dict[str, int] = {}
PHASES: dict[str, dict[str, Any]] = {}
_ORIGINAL: dict[str, Any] = {}


def _count(name: str) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + 1


def _wrap_counted(owner: Any, attr: str, name: str) -> None:
    original = getattr(owner, attr)

    def counted(*args: Any, **kwargs: Any) -> Any:
        _count(name)
        return original(*args, **kwargs)

    setattr(owner, attr, counted)


def _http_kind(method: str, url: str) -> str:
    """What a Cloud Storage JSON API request does, from its method and URL."""
    path = url.split("://", 1)[-1].split("/", 1)[-1].split("?", 1)[0]
    if path.startswith("batch/"):
        return "gcs.http.batch"
    if path.startswith("upload/"):
        return "gcs.http.upload"
    if path.startswith("download/"):
        return "gcs.http.download"
    if "/copyTo/" in path or "/rewriteTo/" in path:
        return "gcs.http.copy"
    if path.endswith("/compose"):
        return "gcs.http.compose"
    if path.rstrip("/").endswith("/o") and method == "GET":
        return "gcs.http.list"
    if method == "DELETE":
        return "gcs.http.delete"
    if "/o/" in path and method == "GET":
        return "gcs.http.get"
    return f"gcs.http.{method.lower()}"


def _status() -> dict[str, int]:
    """This process's resident set now and its high-water mark, in bytes."""
    found = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(("VmRSS:", "VmHWM:")):
                found[line.split(":")[0]] = int(line.split()[1]) * 1024
    return found


def _snapshot() -> dict[str, Any]:
    return {"wall": time.perf_counter(), "cpu": time.process_time(), "counts": dict(COUNTS),
            **_status()}


def _phase(name: str, before: dict[str, Any], after: dict[str, Any]) -> None:
    calls = {k: after["counts"].get(k, 0) - before["counts"].get(k, 0)
             for k in set(after["counts"]) | set(before["counts"])}
    PHASES[name] = {"wall": after["wall"] - before["wall"], "cpu": after["cpu"] - before["cpu"],
                    "rss_before": before["VmRSS"], "rss_after": after["VmRSS"],
                    "hwm_after": after["VmHWM"],
                    "calls": {k: v for k, v in sorted(calls.items()) if v}}


def _timed(name: str, *args: Any, **kwargs: Any) -> Any:
    before = _snapshot()
    try:
        return _ORIGINAL[name](*args, **kwargs)
    finally:
        _phase(name, before, _snapshot())


def timed_finalize(*args: Any, **kwargs: Any) -> Any:
    """The in-process sink's plan -> finalize -> group step, timed. The pipeline may pickle
    this function by value: the module it reports to is imported by name."""
    import many_shards

    return many_shards._timed("finalize", *args, **kwargs)


def timed_commit(*args: Any, **kwargs: Any) -> Any:
    """The commit step (counts, manifest, LATEST, staging, retention), timed."""
    import many_shards

    return many_shards._timed("commit", *args, **kwargs)


def install_counters() -> None:
    """Count storage calls, directory listings and HTTP requests; time the sink's phases.

    Called before the pipeline is built: the in-process sink's step refers to the plan ->
    finalize -> group function when it is constructed, and this module is imported by name,
    so the pipeline pickles its wrappers by reference."""
    import requests

    from beam_tfrecords.runtime import gcs, storage
    from beam_tfrecords.sinks import dataset, shard_writers

    for name in _COUNTED_CALLS:
        module, attr = name.split(".")
        _wrap_counted(storage if module == "storage" else gcs, attr, name)
    _wrap_counted(os, "scandir", "local.scandir")
    _wrap_counted(os, "listdir", "local.listdir")
    send = requests.Session.request

    def request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        _count(_http_kind(method, str(url)))
        return send(self, method, url, *args, **kwargs)

    requests.Session.request = request
    _ORIGINAL["finalize"] = shard_writers._plan_finalize_group
    shard_writers._plan_finalize_group = timed_finalize
    _ORIGINAL["commit"] = dataset.commit_version
    dataset.commit_version = timed_commit


def child_main(argv: list[str]) -> None:
    """Build, verify, report one JSON line (the last line of stdout)."""
    plan = json.loads(argv[0])
    install_counters()
    from beam_tfrecords.pipelines.cli import run_build
    from beam_tfrecords.pipelines.verify import verify_path
    from beam_tfrecords.runtime import storage

    start = _snapshot()
    manifest = run_build(["--config", plan["config"], "--version", "v"])
    built = _snapshot()
    _phase("build", start, built)
    version = storage.join(plan["output"], "v")
    checks = verify_path(version)
    _phase("verify", built, _snapshot())
    problems = [f"{c.path}: {'; '.join(c.problems)}" for c in checks if c.problems]
    manifest_bytes = len(storage.open_read(storage.join(version, "manifest.json")).read())
    shards = [s for info in manifest["splits"].values() for s in info["shards"]]
    on_disk = sorted(p for p in storage.list_files(version)
                     if p.endswith(".tfrecord") and "/.staging/" not in p)
    listed = sorted(storage.join(version, s["path"]) for s in shards)
    from measure import emit

    emit(manifest["counts"]["written"], PHASES["build"]["wall"], 0, phases=PHASES,
         shards=len(shards), read=manifest["counts"]["read"], manifest_bytes=manifest_bytes,
         verify_problems=problems[:5], verify_files=len(checks),
         files_match=on_disk == listed)


# -- in the parent -------------------------------------------------------------------------------

def framed_record_bytes(payload: int) -> int:
    """Stored bytes of one record of this bench (all are the same size): the Example and
    TFRecord's 16 bytes of framing."""
    from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder
    from beam_tfrecords.transforms.codec.specs import parse_features

    encoder = ExampleEncoder(parse_features(_FEATURES))
    return len(encoder.encode({"id": b"00000000", "payload": b"x" * payload})) + 16


_FEATURES = {"id": {"type": "bytes"}, "payload": {"type": "bytes"}}


def make_input(rows: int, payload: int, folder: pathlib.Path) -> pathlib.Path:
    """``<folder>/many-<rows>-<payload>.csv``, made once (a ``.done`` marker beside it)."""
    path = folder / f"many-{rows}-{payload}.csv"
    done = path.with_suffix(".done")
    if done.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    value = ("abcdefghijklmnopqrstuvwxyz" * (payload // 26 + 1))[:payload]
    with open(path, "w") as out:
        out.write("id,payload\n")
        for start in range(0, rows, 100_000):
            out.write("".join(f"{i:08d},{value}\n"
                              for i in range(start, min(rows, start + 100_000))))
    done.write_text("")
    return path


def run_case(where: str, n: int, args: argparse.Namespace, bucket: str | None) -> dict:
    import yaml
    from measure import run_child

    rows = n * args.records_per_shard
    source = make_input(rows, args.payload, args.data_dir / "many_shards")
    target = args.records_per_shard * framed_record_bytes(args.payload)
    if where == "gcs":
        output = f"gs://{bucket}/many-{n}-{time.time_ns()}"
    else:
        output = str(args.data_dir / "many_shards_out" / f"local-{n}")
        shutil.rmtree(output, ignore_errors=True)
    config = args.data_dir / "many_shards" / f"{where}-{n}.yaml"
    config.write_text(yaml.safe_dump({
        "name": "many", "source": {"format": "csv", "path": str(source)},
        "features": _FEATURES,
        "output": {"path": output, "shard_size": {"target": target}}}, sort_keys=False))
    plan = json.dumps({"config": str(config), "output": output})
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import many_shards; "
            "many_shards.child_main(sys.argv[2:])")
    os.sync()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = run_child([sys.executable, "-c", code, str(HERE), plan], timeout=args.timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if where == "local":
        shutil.rmtree(output, ignore_errors=True)
    result = done.result
    if done.returncode or not result:
        raise SystemExit(f"{where} {n} shards failed: {done.error}")
    problems = []
    if result["shards"] != n:
        problems.append(f"{result['shards']} shards, expected {n}")
    if not result["read"] == result["rows"] == rows:
        problems.append(f"read {result['read']}, written {result['rows']}, rows {rows}")
    if result["verify_problems"]:
        problems.append(f"verify: {result['verify_problems']}")
    if not result["files_match"]:
        problems.append("the shard files on disk are not the manifest's")
    if problems:
        raise SystemExit(f"{where} {n} shards: output check failed: {'; '.join(problems)}")
    return {"where": where, "shards": n, "rows": rows, "wall": done.wall,
            "cpu": (after.ru_utime + after.ru_stime) - (usage.ru_utime + usage.ru_stime),
            "tree_peak": done.tree_peak, "peak_self": result["peak_rss_self"], **{
                k: result[k] for k in ("phases", "manifest_bytes", "verify_files")}}


def listing(phase: dict) -> int:
    """Listing calls of a phase: our storage listings, local directory listings, GCS
    object listings."""
    calls = phase["calls"]
    return (sum(calls.get(k, 0) for k in _LISTING_CALLS) + calls.get("local.scandir", 0)
            + calls.get("local.listdir", 0) + calls.get("gcs.http.list", 0))


def requests(phases: dict) -> int:
    """HTTP requests to Cloud Storage of the finalize and the commit."""
    return sum(v for phase in ("finalize", "commit")
               for k, v in phases[phase]["calls"].items() if k.startswith("gcs.http."))


def print_table(results: list[dict]) -> None:
    print(f"{'where':6} {'shards':>7} {'process':>8} {'cpu':>7} {'write':>7} "
          f"{'finalize':>9} {'commit':>7} {'fin+com cpu':>12} {'verify':>7} {'peak':>7} "
          f"{'rss +fin':>8} {'manifest':>9} {'lists f/c/v':>12} {'req/shard':>9}")
    for r in results:
        p = r["phases"]
        fc_cpu = (p["finalize"]["cpu"] + p["commit"]["cpu"]) / r["shards"] * 1e3
        grown = (p["commit"]["rss_after"] - p["finalize"]["rss_before"]) / 1e6
        write = p["build"]["wall"] - p["finalize"]["wall"] - p["commit"]["wall"]
        print(f"{r['where']:6} {r['shards']:>7,} {r['wall']:>7.1f}s {r['cpu']:>6.1f}s "
              f"{write:>6.1f}s {p['finalize']['wall']:>8.2f}s {p['commit']['wall']:>6.2f}s "
              f"{fc_cpu:>8.3f} ms/s {p['verify']['wall']:>6.1f}s "
              f"{r['peak_self'] / 1e6:>5.0f}MB {grown:>6.0f}MB "
              f"{r['manifest_bytes'] / 1e6:>7.2f}MB "
              f"{listing(p['finalize']):>3}/{listing(p['commit']):>3}/"
              f"{listing(p['verify']):>3} {requests(p) / r['shards']:>9.3f}")


def judge(results: list[dict]) -> list[str]:
    """PASS/MISS lines: per-shard CPU of the finalize and commit linear, listings flat."""
    lines = []
    for where in sorted({r["where"] for r in results}):
        runs = sorted((r for r in results if r["where"] == where), key=lambda r: r["shards"])
        if len(runs) < 2:
            continue
        small, large = runs[0], runs[-1]

        def per_shard(r: dict) -> float:
            return (r["phases"]["finalize"]["cpu"] + r["phases"]["commit"]["cpu"]) / r["shards"]

        ratio = per_shard(large) / per_shard(small)
        verdict = "PASS" if ratio <= LINEAR_LIMIT else "MISS"
        lines.append(f"{where}: finalize+commit CPU per shard at {large['shards']:,} / at "
                     f"{small['shards']:,} = {ratio:.2f} (target <= {LINEAR_LIMIT}) {verdict}")
        for phase in ("finalize", "commit", "verify"):
            counts = [listing(r["phases"][phase]) for r in runs]
            flat = "PASS" if len(set(counts)) == 1 else "MISS"
            lines.append(f"{where}: {phase} listing calls {counts} at "
                         f"{[r['shards'] for r in runs]} shards: {flat} (independent of N)")
    return lines


# gcp-storage-emulator rewrites a JSON file of every object's metadata after each change --
# in memory too, where nothing reads it back -- so its requests cost in proportion to the
# objects in the bucket, and a build of N shards costs it N^2. This runs it without that
# rewrite, so that its times follow the requests it is sent (--emulator-as-is: unchanged).
_LINEAR_EMULATOR = ("import sys, gcp_storage_emulator.storage as s; "
                    "s.Storage._write_config_to_file = lambda self: None; "
                    "from gcp_storage_emulator.__main__ import main; main(sys.argv[1:])")


def start_emulator(as_is: bool) -> Any:
    """The tests' emulator (tests/gcs_emulator.py), started as the tests start it; without
    ``as_is``, without its per-request rewrite of every object's metadata."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    import gcs_emulator

    if not as_is:
        import subprocess

        def linear(port: int, workdir: pathlib.Path) -> Any:
            """tests/gcs_emulator.py's launch, with the emulator patched as said above."""
            log = workdir / f"emulator-{port}.log"
            command = [sys.executable, "-c", _LINEAR_EMULATOR, "start", "--host",
                       gcs_emulator.HOST, "--port", str(port), "--in-memory", "--quiet"]
            env = {k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"}
            with open(log, "wb") as handle:
                process = subprocess.Popen(command, cwd=workdir, stdout=handle,
                                           stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=env)
            return process, log

        gcs_emulator._launch = linear
    return gcs_emulator.start()


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000",
                        help="shard counts on local disk (comma-separated; empty: none)")
    parser.add_argument("--gcs", action="store_true", help="also build to the GCS emulator")
    parser.add_argument("--gcs-sizes", default="1000,10000",
                        help="shard counts on the GCS emulator")
    parser.add_argument("--records-per-shard", type=int, default=4)
    parser.add_argument("--payload", type=int, default=64,
                        help="bytes of each row's payload column (default %(default)s)")
    parser.add_argument("--data-dir", type=pathlib.Path, default=HERE / ".data")
    parser.add_argument("--emulator-as-is", action="store_true",
                        help="run the emulator unchanged (its time per request grows with "
                        "the objects in the bucket)")
    parser.add_argument("--timeout", type=float, default=7200)
    parser.add_argument("--json-out", type=pathlib.Path)
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    cases = [("local", int(n)) for n in args.sizes.split(",") if n.strip()]
    emulator = None
    if args.gcs:
        emulator = start_emulator(args.emulator_as_is)
        cases += [("gcs", int(n)) for n in args.gcs_sizes.split(",") if n.strip()]
    results = []
    try:
        for where, n in cases:
            result = run_case(where, n, args, emulator.bucket if emulator else None)
            results.append(result)
            print(f"{where} {n:,} shards: {result['wall']:.1f} s whole process, load "
                  f"{os.getloadavg()[0]:.2f}", flush=True)
    finally:
        if emulator is not None:
            emulator.stop()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print_table(results)
    for line in judge(results):
        print(line)
    if args.json_out:
        args.json_out.write_text(json.dumps({"when": time.time(), "results": results},
                                            indent=1))


if __name__ == "__main__":
    main()
