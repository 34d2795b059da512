"""Run Python programs as ``python FILE ARGS`` or ``python -m MODULE ARGS`` would, each in a
process of its own, forked from one interpreter that imported Apache Beam and this package
once.

Importing Beam costs one to two CPU-seconds (Beam YAML's providers several more) before a
program does anything; the tests run dozens of small programs (the docs' snippets, README's
readers), so each is forked from a parent that paid that once. Each child is a fresh process
with its own folder, ``sys.argv``, ``sys.path[0]``, standard streams and exit status, running
the program's code unchanged as ``__main__``; it ends as an interpreter does (threads joined,
``atexit`` run, streams flushed). The parent's objects are frozen out of the garbage collector
before forking (``gc.freeze``), else every child's collections would walk, and copy, the
whole preloaded heap. Run with the project's interpreter::

    python tests/run_preloaded.py JOBS.json

JOBS.json is a list of ``{"cwd": DIR, "argv": ["FILE", ...] | ["-m", "MODULE", ...],
"stdout": PATH, "stderr": PATH}``; the jobs run one after another and this prints a JSON list
of their exit statuses (negative: killed by that signal).
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import sys
import traceback


def preload(jobs: list[dict]) -> None:
    """Import what the programs will import anyway; a failure here is the child's to report."""
    try:
        import apache_beam  # noqa: F401

        import beam_tfrecords as btf

        for name in btf.__all__:  # its lazy names: the transforms and their imports
            getattr(btf, name)
        if any(job["argv"][:2] == ["-m", "apache_beam.yaml.main"] for job in jobs):
            from apache_beam.yaml import main, yaml_provider  # noqa: F401

            yaml_provider.standard_providers()  # imports every provider's transforms
    except Exception:  # noqa: BLE001 -- the program itself will fail the same way, and say so
        pass


def child(job: dict) -> int:
    """Run one job in this (forked) process, as the interpreter would run it; its status."""
    os.chdir(job["cwd"])
    for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    argv = job["argv"]
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 -- as the interpreter reports an uncaught error
        traceback.print_exc()
        return 1
    return 0


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as f:
        jobs = json.load(f)
    gc.disable()
    preload(jobs)
    gc.freeze()
    statuses = []
    for job in jobs:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            gc.enable()
            sys.exit(child(job))  # an interpreter's own exit, in the child only
        _, status = os.waitpid(pid, 0)
        statuses.append(os.waitstatus_to_exitcode(status))
    print(json.dumps(statuses))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
