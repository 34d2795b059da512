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
from beam_tfrecords.sinks.format.layout import InvalidName, check_name

__all__ = ["Launch", "prepare"]


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
