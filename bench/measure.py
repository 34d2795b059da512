"""How a case is measured: the JSON line an alternative prints, and the child it runs in.

Every alternative runs in a fresh child process and ends by printing one JSON line
``{rows, seconds, bytes_out, peak_rss, ...}`` (:func:`emit`): ``seconds`` is the work only
(imports and interpreter start-up excluded, the same for every alternative), ``peak_rss`` is
the largest resident set of the process or any child it waited for (``ru_maxrss``), in bytes.
:func:`run_child` also polls ``/proc`` and records the largest *sum* of resident sets over the
child's whole process tree, which is what several worker processes cost together.

Standard library only: the TensorFlow and tfx-bsl alternatives import it from their own venvs.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["ChildResult", "alt_args", "emit", "output_bytes", "output_files", "run_child", "skip"]


def alt_args(doc: str | None, argv: Sequence[str] | None = None,
             profile: bool = False, inputs: Sequence[str] = ()) -> argparse.Namespace:
    """The command line every alternative takes: ``--data DIR --out DIR [--workers N]``;
    ``--profile FILE`` where ``profile``, ``--input {inputs}`` (default the first) where the
    script has more than one way to take its rows."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    parser.add_argument("--data", required=True, help="a data set folder (with meta.json)")
    parser.add_argument("--out", required=True, help="an empty folder for the output")
    parser.add_argument("--workers", type=int, default=1,
                        help="DirectRunner worker processes (1: in-process), where it applies")
    if profile:
        parser.add_argument("--profile", metavar="FILE",
                            help="run the timed part under cProfile and dump its stats here")
    if inputs:
        parser.add_argument("--input", choices=tuple(inputs), default=inputs[0],
                            help="how the rows come in (default %(default)s)")
    return parser.parse_args(argv)


def output_files(out_dir: str | pathlib.Path) -> list[pathlib.Path]:
    """The TFRecord files under ``out_dir`` (any depth), hidden folders such as staging
    excluded, sorted by path."""
    root = pathlib.Path(out_dir)
    return sorted(p for p in root.rglob("*.tfrecord*")
                  if p.is_file() and not any(part.startswith(".")
                                             for part in p.relative_to(root).parts))


def output_bytes(out_dir: str | pathlib.Path) -> int:
    return sum(p.stat().st_size for p in output_files(out_dir))


def _maxrss_bytes(who: int) -> int:
    return resource.getrusage(who).ru_maxrss * 1024  # Linux reports KiB


def _own_peak_bytes() -> int:
    """This process's own peak resident set.

    Not ``ru_maxrss`` of RUSAGE_SELF: on Linux that survives fork and exec, so a child of a
    harness that once held 1.4 GB reports 1.4 GB whatever it did itself. ``VmHWM`` belongs to
    the address space, which exec replaces.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return _maxrss_bytes(resource.RUSAGE_SELF)


def emit(rows: int, seconds: float, bytes_out: int, **extra: Any) -> None:
    """Print the result line (the last line of stdout) for the harness."""
    own, children = _own_peak_bytes(), _maxrss_bytes(resource.RUSAGE_CHILDREN)
    result = {"rows": rows, "seconds": seconds, "bytes_out": bytes_out,
              "peak_rss": max(own, children), "peak_rss_self": own,
              "peak_rss_children": children, **extra}
    sys.stdout.flush()
    print(json.dumps(result), flush=True)


def skip(reason: str) -> None:
    """Report that this alternative cannot run here, and why; exits 0."""
    print(json.dumps({"skipped": reason}), flush=True)
    raise SystemExit(0)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                out.extend(int(c) for c in handle.read().split())
    except OSError:
        pass
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants right now."""
    total, todo, seen = 0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        total += _rss(current)
        todo.extend(_children(current))
    return total


class ChildResult:
    """What :func:`run_child` saw: the parsed result line (or None), status, timings, logs."""

    def __init__(self, result: dict | None, returncode: int, wall: float, tree_peak: int,
                 stdout: str, stderr: str) -> None:
        self.result, self.returncode, self.wall = result, returncode, wall
        self.tree_peak, self.stdout, self.stderr = tree_peak, stdout, stderr

    @property
    def error(self) -> str:
        """The last meaningful stderr line, for a 'failed: ...' row."""
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        if self.returncode == -9:
            return "killed (timeout)"
        return lines[-1] if lines else f"exit status {self.returncode}, no result line"


def run_child(cmd: Sequence[str], *, timeout: float, env: dict[str, str] | None = None,
              poll: float = 0.05) -> ChildResult:
    """Run ``cmd``, polling its process tree's resident memory, and parse its result line."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen(list(cmd), stdout=out, stderr=err, env=env)
        peak = 0
        try:
            while child.poll() is None:
                peak = max(peak, tree_rss(child.pid))
                if time.perf_counter() - start > timeout:
                    break
                time.sleep(poll)
        finally:  # timeout or interrupt: end the child (its workers die with their pipes)
            if child.poll() is None:
                child.kill()
                child.wait()
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    result = None
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                result = json.loads(line)
            except ValueError:
                continue
            break
    return ChildResult(result, child.returncode, wall, peak, stdout, stderr)
