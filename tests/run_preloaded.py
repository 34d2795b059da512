"""Run Python programs as ``python FILE ARGS``, ``python -m MODULE ARGS`` or a console script
would, each in a process of its own, forked from one interpreter that imported Apache Beam and
this package once.

Importing Beam costs one to two CPU-seconds (Beam YAML's providers several more) before a
program does anything; the tests run dozens of small programs (the docs' snippets and
commands, README's readers), so each is forked from a parent that paid that once. Each child
is a fresh process with its own folder, environment, ``sys.argv``, ``sys.path[0]``, standard
streams and exit status, running the program's code unchanged as ``__main__`` (a console
script: its entry point, as the installed wrapper calls it); it ends as an interpreter does
(threads joined, ``atexit`` run, the program's objects collected, streams flushed), but
without tearing down the preloaded modules. The parent's objects are frozen out of the
garbage collector before forking (``gc.freeze``), else every child's collections would walk,
and copy, the whole preloaded heap. Run with the project's interpreter:

- ``python tests/run_preloaded.py JOBS.json``: JOBS.json is a list of ``{"cwd": DIR, "argv":
  ["FILE", ...] | ["-m", "MODULE", ...], "stdout": PATH, "stderr": PATH}``; the jobs run one
  after another and this prints a JSON list of their exit statuses (negative: killed by that
  signal).
- ``python tests/run_preloaded.py --serve SOCKET [--yaml]``: listens on the Unix socket
  SOCKET until its standard input closes, running each call concurrently (it prints
  ``ready`` once it listens); ``--yaml`` preloads Beam YAML's providers too, for calls of
  ``-m apache_beam.yaml.main``;
- ``python -I tests/run_preloaded.py --call SOCKET ARGV...``: one call, with this process's
  folder, environment and standard streams (passed as file descriptors); ARGV as in JOBS.json,
  or ``--script NAME ARGS`` for a console script. It exits with the program's status, so a
  shell script on PATH named like a console script can stand for it.
"""

from __future__ import annotations

import array
import gc
import io
import json
import os
import runpy
import selectors
import socket
import sys
import traceback


def preload(yaml: bool = False) -> None:
    """Import what the programs will import anyway; a failure here is the child's to report."""
    try:
        import apache_beam  # noqa: F401

        import beam_tfrecords as btf
        from beam_tfrecords.pipelines import cli  # noqa: F401

        for name in btf.__all__:  # its lazy names: the transforms and their imports
            getattr(btf, name)
        _without_prism()
        if yaml:
            from apache_beam.yaml import main, yaml_provider  # noqa: F401

            yaml_provider.standard_providers()  # imports every provider's transforms
    except Exception:  # noqa: BLE001 -- the program itself will fail the same way, and say so
        pass


def _without_prism() -> None:
    """Beam's DirectRunner tries Prism first, which fetches a binary this machine cannot
    reach, then falls back to the FnApiRunner: the programs get that fallback at once, as the
    tests in-process do (tests/conftest.py ``direct_runner_without_prism``)."""
    from apache_beam.runners.portability import prism_runner

    def refuse(self, pipeline, options):
        raise RuntimeError("the tests run Beam's DirectRunner without Prism")

    prism_runner.PrismRunner.run_pipeline = refuse


def _exit_status(done: SystemExit) -> int:
    """The status an interpreter exits with for an uncaught ``SystemExit`` (a code that is
    not a number is printed, and the status is 1)."""
    if done.code is None or isinstance(done.code, int):
        return done.code or 0
    print(done.code, file=sys.stderr)
    return 1


def _run(argv: list[str]) -> int:
    """Run a program in this (forked) process, as the interpreter would run it; its status."""
    try:
        if argv[0] == "--script":
            from importlib.metadata import entry_points

            (entry,) = entry_points(group="console_scripts", name=argv[1])
            sys.argv = argv[1:]
            sys.exit(entry.load()())
        elif argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as done:
        return _exit_status(done)
    except BaseException:  # noqa: BLE001 -- as the interpreter reports an uncaught error
        traceback.print_exc()
        return 1
    return 0


def _fork(into_child) -> int:
    """Fork; the child runs ``into_child()`` (which returns a program's status) and exits
    with it as an interpreter exits (:func:`_leave`). The parent gets the child's pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        gc.enable()
        try:
            status = into_child()
        except BaseException:  # noqa: BLE001 -- as the interpreter reports an uncaught error
            traceback.print_exc()
            status = 1
        _leave(status)
    return pid


def _flush_files() -> None:
    """Flush every file the program left open (text layers before the buffers below them),
    as their teardown would; the preloaded heap is frozen, so this walks only the program's
    own objects."""
    files = [f for f in gc.get_objects() if isinstance(f, io.IOBase)]
    for kept in sorted(files, key=lambda f: not isinstance(f, io.TextIOBase)):
        if kept in (sys.stdout, sys.stderr):
            continue
        try:
            if not kept.closed and kept.writable():
                kept.flush()
        except Exception:  # noqa: BLE001,S112 -- as a finalizer ignores it
            continue


def _leave(status: int, died_of: int | None = None) -> None:
    """End a child as the interpreter ends: its non-daemon threads joined, ``atexit`` run, the
    files it left open flushed, its own objects collected (their finalizers run) and the
    standard streams flushed (status 120 if that fails). It then skips what the interpreter
    does last, tearing down every module object by object: in a forked child that touches,
    and so copies, every page of the preloaded heap (about 0.3 CPU-s a call). ``died_of``:
    a signal the program ends by instead of ``status`` (an uncaught KeyboardInterrupt ends
    the interpreter by SIGINT)."""
    import atexit
    import threading

    try:
        threading._shutdown()  # what the interpreter calls first at exit
    except BaseException:  # noqa: BLE001 -- reported as the interpreter reports it
        traceback.print_exc()
    atexit._run_exitfuncs()
    atexit._clear()  # the callbacks held the program's objects alive, as they end now
    _flush_files()  # before their finalizers, which may close a file below its buffer first
    gc.collect()  # the program's garbage; the frozen preloaded objects are not walked
    _flush_files()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 -- the interpreter's exit status for it
            status = 120
    if died_of is not None:
        import signal

        signal.signal(died_of, signal.SIG_DFL)
        os.kill(os.getpid(), died_of)
    os._exit(status & 0xFF)  # as the interpreter reduces sys.exit(N)


def run_jobs(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        jobs = json.load(f)
    gc.disable()
    preload(yaml=any(job["argv"][:2] == ["-m", "apache_beam.yaml.main"] for job in jobs))
    gc.freeze()
    statuses = []
    for job in jobs:
        def into_child(job=job) -> int:
            os.chdir(job["cwd"])
            for fd, out_path in ((1, job["stdout"]), (2, job["stderr"])):
                out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(out, fd)
                os.close(out)
            return _run(job["argv"])

        _, status = os.waitpid(_fork(into_child), 0)
        statuses.append(os.waitstatus_to_exitcode(status))
    print(json.dumps(statuses))
    return 0


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    """A call: its JSON (up to the first newline) and the three descriptors sent with it."""
    data, fds = b"", []
    while not data.endswith(b"\n"):
        chunk, ancillary, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(3 * 4))
        if not chunk:
            raise EOFError("the caller went away")
        data += chunk
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += array.array("i", payload[:len(payload) - len(payload) % 4])
    return json.loads(data), fds


def serve(path: str, yaml: bool = False) -> int:
    gc.disable()
    preload(yaml=yaml)
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    waiting: dict[int, socket.socket] = {}
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ)
    events.register(sys.stdin, selectors.EVENT_READ)
    open_ = True
    while open_ or waiting:
        for key, _ in events.select(timeout=0.05):
            if key.fileobj is sys.stdin:
                if not sys.stdin.buffer.read1(1 << 16):
                    open_ = False
                    events.unregister(sys.stdin)
                continue
            conn, _ = listener.accept()
            try:
                call, fds = _receive(conn)
            except (EOFError, OSError, ValueError):
                conn.close()
                continue

            def into_child(call=call, fds=fds) -> int:
                listener.close()
                for fd, target in zip(fds, (0, 1, 2)):
                    os.dup2(fd, target)
                os.chdir(call["cwd"])
                os.environ.clear()
                os.environ.update(call["env"])
                return _run(call["argv"])

            waiting[_fork(into_child)] = conn
            for fd in fds:
                os.close(fd)
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = waiting.pop(pid)
            try:
                conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
            except OSError:
                pass  # the caller went away
            conn.close()
    return 0


def call(path: str, argv: list[str]) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    message = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)})
    conn.sendmsg([message.encode() + b"\n"],
                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            print(f"run_preloaded: no status for {argv}", file=sys.stderr)
            return 1
        reply += chunk
    status = int(reply)
    return 128 - status if status < 0 else status


def main(argv: list[str]) -> int:
    if argv[0] == "--serve":
        return serve(argv[1], yaml=argv[2:] == ["--yaml"])
    if argv[0] == "--call":
        return call(argv[1], argv[2:])
    return run_jobs(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
