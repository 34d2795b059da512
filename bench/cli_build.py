"""A whole ``beam-tfrecords build`` as users run it: a config written to a file, one process.

The issue benchmarks (know_the_data.py, shuffle.py) compare whole-process builds of our own
command -- start-up, launch checks, pipeline, commit -- timed with their process tree's peak
memory (measure.run_child).
"""

from __future__ import annotations

import os
import pathlib
import sys

from measure import run_child

__all__ = ["build_process", "write_config"]


def write_config(folder: pathlib.Path, name: str, source: dict, features: dict,
                 output: pathlib.Path, splits: dict | None = None,
                 statistics: bool = True) -> pathlib.Path:
    """``<folder>/<name>.yaml``: a config for ``source`` writing ``features`` to ``output``
    (``statistics=False``: with ``output.statistics: false``)."""
    import yaml

    raw = {"name": name, "source": source, "features": features,
           "output": {"path": str(output), **({} if statistics else {"statistics": False})}}
    if splits:
        raw["splits"] = splits
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def build_process(config: pathlib.Path, *extra: str, timeout: float = 7200) -> dict:
    """Run the build; ``{seconds, peak_mb, exit, said}`` (said: its last line on stderr).

    The disk's dirty pages are flushed first (``os.sync``): a build that writes gigabytes
    leaves them to the kernel's writeback, and the next build timed would pay for it --
    measured here, a third 2 GB build in a row took 16.5 s against 13.9 s after a sync."""
    os.sync()
    cmd = [sys.executable, "-m", "beam_tfrecords.pipelines.cli", "build", "--config",
           str(config), "--progress-interval", "0", *extra]
    done = run_child(cmd, timeout=timeout)
    last = [ln for ln in done.stderr.splitlines() if ln.strip()][-1:] or [""]
    return {"seconds": done.wall, "peak_mb": done.tree_peak / 1e6, "exit": done.returncode,
            "said": last[0][:160]}
