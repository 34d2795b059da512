"""Where a build's time goes on the DirectRunner, per stage and per process.

    .venv/bin/python bench/worker_trace.py --config C.yaml [build flags ...]
        e.g. --direct_running_mode multi_processing --direct_num_workers 2

Runs ``beam-tfrecords build`` once with two kinds of instruments and prints them:

* in the launcher, the FnApiRunner's fused stages and, per bundle, its wall time and the bytes
  of input the runner process hands it (what crosses a fusion break);
* in every process -- the launcher and each SDK worker process, through a ``sitecustomize``
  put first on PYTHONPATH -- its CPU seconds when Beam is imported, at each bundle's start and
  end, and at exit: a worker's fixed cost (start-up, unpickling each stage's steps) against its
  share of the read -> encode -> write stage, in CPU seconds, which a busy machine inflates far
  less than wall times.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tempfile
import textwrap

_SITE = textwrap.dedent('''
    import os, sys, time
    _T0 = time.time()
    _LOG = open(os.path.join(os.environ["BTF_TRACE_DIR"], f"{os.getpid()}.log"), "a")

    def _log(msg):
        _LOG.write(f"{time.time():.3f} {time.process_time():.3f} {msg}\\n")
        _LOG.flush()

    _log("start")
    from apache_beam.runners.worker import sdk_worker
    _log("beam imported")
    _process_bundle = sdk_worker.SdkWorker.process_bundle

    def _traced(self, request, instruction_id):
        _log(f"bundle start {request.process_bundle_descriptor_id}")
        try:
            return _process_bundle(self, request, instruction_id)
        finally:
            _log(f"bundle end {request.process_bundle_descriptor_id}")

    sdk_worker.SdkWorker.process_bundle = _traced
    import atexit
    atexit.register(lambda: _log("exit"))
''')


def _launcher(argv: list[str]) -> int:
    """The build, with the FnApiRunner's stages and bundles reported on stderr."""
    import time

    from apache_beam.runners.portability.fn_api_runner import execution, fn_runner

    bundles = []
    execute, run_stages = fn_runner.FnApiRunner._execute_bundle, fn_runner.FnApiRunner.run_stages

    def size(buffer) -> int:
        if isinstance(buffer, execution.ListBuffer):
            return sum(len(b) for b in buffer._inputs)
        table = getattr(buffer, "_table", None)  # a grouping buffer: keys and their values
        return sum(len(k) + sum(len(getattr(v, "value", v) or b"") for v in values)
                   for k, values in table.items()) if table is not None else -1

    def traced_execute(self, context, manager, bundle_input):
        sizes = {name: size(buffer) for name, buffer in bundle_input.data.items()}
        start = time.time()
        try:
            return execute(self, context, manager, bundle_input)
        finally:
            bundles.append((manager.stage.name, time.time() - start, sizes))

    def traced_run_stages(self, context, stages):
        print(f"{len(stages)} fused stages", file=sys.stderr)
        try:
            return run_stages(self, context, stages)
        finally:
            for name, seconds, sizes in bundles:
                inputs = ", ".join(f"{k.split('/')[0]}...: {v} B" for k, v in sizes.items())
                print(f"  bundle {seconds:7.3f} s  in: {inputs}  stage {name[:70]}",
                      file=sys.stderr)

    fn_runner.FnApiRunner._execute_bundle = traced_execute
    fn_runner.FnApiRunner.run_stages = traced_run_stages
    from beam_tfrecords.pipelines import cli

    return cli.main(argv)


def _report(folder: str) -> None:
    for path in sorted(glob.glob(os.path.join(folder, "*.log"))):
        events = [line.split(" ", 2) for line in open(path).read().splitlines()]
        first, last = float(events[0][0]), events[-1]
        imported = next((float(cpu) for _, cpu, what in events if what == "beam imported"), 0)
        starts = {what.split()[-1]: (float(t), float(cpu)) for t, cpu, what in events
                  if what.startswith("bundle start")}
        spans = [(float(t) - starts[what.split()[-1]][0], float(cpu) - starts[what.split()[-1]][1])
                 for t, cpu, what in events if what.startswith("bundle end")]
        longest = max(spans, default=(0.0, 0.0))
        print(f"process {os.path.basename(path)[:-4]}: {float(last[0]) - first:6.2f} s alive, "
              f"{float(last[1]):6.2f} s CPU ({imported:.2f} s importing Beam), {len(spans)} "
              f"bundles, the longest {longest[0]:.2f} s wall / {longest[1]:.2f} s CPU")


def main() -> int:
    if sys.argv[1:2] == ["--inner"]:
        return _launcher(sys.argv[2:])
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "sitecustomize.py"), "w") as out:
            out.write(_SITE)
        env = dict(os.environ, BTF_TRACE_DIR=folder,
                   PYTHONPATH=os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH"))
                                              if p))
        done = subprocess.run([sys.executable, __file__, "--inner", "build", *sys.argv[1:]],
                              env=env, stderr=subprocess.PIPE, text=True)
        for line in done.stderr.splitlines():
            if re.match(r"(\d+ fused stages|  bundle )", line):
                print(line)
        _report(folder)
        return done.returncode


if __name__ == "__main__":
    sys.exit(main())
