"""The checks a build makes before it needs Beam: its flags' values, the config, the output
location's kind and the inputs (nothing matches, a folder, a FIFO or device, a binary format
read as text). Each refusal is one line, before anything is written -- and, since nothing here
imports Beam (whose import alone costs over a second), a refused build ends in a fraction of a
second. pipelines/build.py goes on from what :func:`prepare` found."""

from __future__ import annotations

import argparse
import dataclasses
import os
import stat
from collections.abc import Sequence

from beam_tfrecords.pipelines import output_guard
from beam_tfrecords.pipelines.build_inputs import BuildError, Inputs, plan_inputs
from beam_tfrecords.pipelines.config import Config, check_seed, load_config
from beam_tfrecords.pipelines.flags import runner_flag
from beam_tfrecords.runtime.fork_server import direct_runner
from beam_tfrecords.sinks.format.file_identity import FileIdentity
from beam_tfrecords.sinks.format.layout import InvalidName, check_name

__all__ = ["LOCAL_PARALLEL_BYTES", "Launch", "launch_workers", "local_workers", "prepare",
           "work_units"]


@dataclasses.dataclass(frozen=True)
class Launch:
    """What the launch checks found: the config with the command line's overrides, the
    inputs, the output root, and the runner check's warning (``runner_checked`` false: no
    ``--runner`` was given, so the default runner, which needs no check, is Beam's)."""

    config: Config
    found: Inputs
    root: str
    runner_checked: bool = False
    untested: str | None = None


def _local_kind(path: str) -> str | None:
    """What is at a local ``path``, for output_guard.check_output_kind (a symbolic link
    counts as what it points to)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return output_guard.SPECIAL if os.path.islink(path) else None  # a broken link
    except OSError:  # e.g. ENOTDIR: a file on the way; its parent tells
        return None
    if stat.S_ISDIR(mode):
        return output_guard.FOLDER
    return output_guard.FILE if stat.S_ISREG(mode) else output_guard.SPECIAL


def prepare(args: argparse.Namespace, beam_args: Sequence[str]) -> Launch:
    """Check a build's flags, config, output and inputs, in that order, without Beam -- but
    for a runner named by ``--runner``, checked first as before (that check asks Beam).

    Args:
        args: the build command's parsed flags (pipelines/cli.py's ``build_parser``).
        beam_args: the pipeline options for Beam.

    Returns:
        The :class:`Launch` to build from; BuildError (or the config's error) in one line
        otherwise.
    """
    if args.progress_interval < 0:
        raise BuildError(f"--progress-interval {args.progress_interval}: use 0 (off) or more")
    runner_checked, untested = runner_flag(beam_args) is not None, None
    if runner_checked:  # refused before anything is written
        from apache_beam.options.pipeline_options import PipelineOptions

        from beam_tfrecords.pipelines.runners import check_runner

        untested = check_runner(PipelineOptions(list(beam_args)))
    config = load_config(args.config)
    if args.input:
        config = dataclasses.replace(config, source=dataclasses.replace(config.source,
                                                                        path=args.input))
    if args.output:
        config = dataclasses.replace(config, output=dataclasses.replace(config.output,
                                                                        path=args.output))
    if args.shuffle_seed is not None or args.no_shuffle:
        seed = None if args.no_shuffle else check_seed("--shuffle-seed", args.shuffle_seed)
        config = dataclasses.replace(config, output=dataclasses.replace(
            config.output, shuffle_seed=seed))
    if args.version is not None:
        try:
            check_name("version", args.version)
        except InvalidName as err:
            raise BuildError(f"--version: {err}") from None
    if args.keep_versions < 1:
        raise BuildError(f"--keep-versions {args.keep_versions}: keep at least 1")
    if args.wait_for_lease < 0:
        raise BuildError(f"--wait-for-lease {args.wait_for_lease}: use 0 (refuse at once) or "
                         "more")
    root = config.output.path.rstrip("/")
    try:
        output_guard.check_output_kind(root, _local_kind)
    except output_guard.OutputGuardError as err:
        raise BuildError(str(err)) from None
    config, found = plan_inputs(config)
    return Launch(config, found, root, runner_checked, untested)


# Input, per source format, from which a command-line build on the DirectRunner reads with
# worker processes when the user chose no worker count: every core, at most one per range.
# The workers are forked from a server that imports Beam beside the launcher
# (pipelines/forked_workers.py), so each costs no import; what is left is fixed -- the
# server, the workers' stages and the accumulators crossing the runner process -- and the
# second core gives back about half the read-encode-write time. The thresholds sit at about
# twice the break-even measured on one file on an idle 2-core machine (bench/one_file.py;
# bench/README.md "One big file" has the numbers), where the gain is clear; Avro was not
# measured and stays in one process. Each worker holds about 330 MB at its peak.
LOCAL_PARALLEL_BYTES: dict[str, int] = {"csv": 200 << 20, "jsonl": 500 << 20,
                                         "parquet": 75 << 20}
_WORKER_FLAGS = ("--direct_num_workers", "--direct_running_mode")


def local_workers(beam_args: list[str], input_bytes: int, ranges: int,
                  cores: int | None = None, fmt: str = "csv",
                  thresholds: dict[str, int] | None = None) -> list[str]:
    """The DirectRunner flags a command-line build adds when its user gave none: every core
    (at most one per range of input) as worker processes for at least
    ``thresholds[fmt]`` of input, else nothing (in-process).

    Args:
      beam_args: the Beam options given; a runner other than the DirectRunner, or either
        flag of the worker count given, leaves them as they are.
      input_bytes: the input's size.
      ranges: the units of work the input is read in (transforms/readers/ranges.py).
      cores: the cores this process may use (default: its CPU affinity's).
      fmt: the source format (``source.format``).
      thresholds: the input size per format from which workers pay (default
        :data:`LOCAL_PARALLEL_BYTES`); a format without one stays in one process.

    Returns:
      The flags to add (none, or ``--direct_running_mode=multi_processing`` and
      ``--direct_num_workers=N``)."""
    if not direct_runner(beam_args):
        return []
    if any(arg.split("=", 1)[0] in _WORKER_FLAGS for arg in beam_args):
        return []
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
    workers = min(cores, ranges)
    threshold = (LOCAL_PARALLEL_BYTES if thresholds is None else thresholds).get(fmt)
    if threshold is None or input_bytes < threshold or workers < 2:
        return []
    return ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]


def work_units(files: Sequence[str | FileIdentity], split_bytes: int) -> int:
    """How many units of work the inputs are read in, as the readers plan them at most: a
    range of ``split_bytes`` per part of a file (transforms/readers/ranges.py), one per
    image or file of unknown size.

    Args:
        files: the inputs, with their sizes where known.
        split_bytes: the configured largest range (``source.split_bytes``).

    Returns:
        The number of units.
    """
    return sum(-(-f.size // split_bytes) if isinstance(f, FileIdentity) and f.size else 1
               for f in files)


def launch_workers(launch: Launch, beam_args: Sequence[str]) -> list[str]:
    """:func:`local_workers` for what :func:`prepare` found: the worker flags a build adds.
    Decided here, before Beam is imported, so that the command line can start the server
    the workers are forked from while it imports Beam (runtime/fork_server.py).

    Args:
        launch: what :func:`prepare` found.
        beam_args: the Beam flags of the command line.

    Returns:
        The flags to add (none, or the worker mode and count).
    """
    config, found = launch.config, launch.found
    return local_workers(list(beam_args), int(found.fingerprint.get("bytes", 0) or 0),
                         work_units(found.files, config.source.split_bytes),
                         fmt=config.source.format)
