"""The flags ``build`` accepts: its own, and every pipeline option Beam has registered.

``build`` hands the flags it does not know to Beam, and Beam keeps what it does not know
either: a typo such as ``--ouput out/x`` was carried along as an unknown pipeline option and
the build wrote to the config's output instead. So every flag is checked before anything
runs: a flag neither ours nor a registered Beam pipeline option is a usage error (exit 2)
naming the closest known flag. Abbreviations are refused too (``--out`` is not ``--output``):
with two vocabularies on one line, a prefix may mean something else tomorrow.

"Registered" means every ``PipelineOptions`` subclass, at any depth, once the modules that
define runners' options are imported (and the module of a runner named by its dotted path).
Those imports cost about a second (``apache_beam.yaml`` loads its whole provider), so they
happen only when a flag is not among the options already registered.
A portable runner's job service may accept options no Python class describes (Flink's Java
options); flags after a lone ``--`` go to Beam unchecked. The Flex Template entry, which
receives template parameters, does not check (pipelines/flex_template.py).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
from collections.abc import Iterator, Sequence

__all__ = ["OPTION_MODULES", "CommandParser", "check_pipeline_flags", "pipeline_option_parser"]

# Modules that define PipelineOptions subclasses beyond apache_beam.options.pipeline_options
# (their runners import them only when chosen); one that cannot import defines nothing here.
OPTION_MODULES = ("apache_beam.options.pipeline_options", "apache_beam.runners.render",
                  "apache_beam.runners.dask.dask_runner", "apache_beam.yaml.options",
                  "beam_tfrecords.sinks.progress_files")


class CommandParser(argparse.ArgumentParser):
    """Every command's parser: no abbreviations, and an argument it does not know is a usage
    error naming the closest flag (``init --ouput`` -> "did you mean --output?")."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, args=None, namespace=None):  # noqa: ANN001 -- argparse's signature
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(_unknown(extras[0], [self]))
        return parsed


def _unknown(first: str, parsers: Sequence[argparse.ArgumentParser], more: str = "") -> str:
    """The usage error for the first argument no parser took."""
    name = first.split("=", 1)[0]
    if not name.startswith("--"):
        return f"unrecognized argument {first!r}"
    known = [option for parser in parsers for action in parser._actions
             for option in action.option_strings if option.startswith("--")]
    close = difflib.get_close_matches(name, known, n=1)
    return f"unknown flag {name}" + (f" (did you mean {close[0]}?)" if close else "") + more


class _Refused(Exception):
    """A Beam option whose value Beam's parser refuses (``--direct_num_workers=two``)."""


def _option_classes() -> Iterator[type]:
    from apache_beam.options.pipeline_options import PipelineOptions

    seen: set[type] = set()
    pending = [PipelineOptions]
    while pending:
        for cls in pending.pop().__subclasses__():
            if cls not in seen:
                seen.add(cls)
                pending.append(cls)
                yield cls


def pipeline_option_parser(runner: str | None = None, every_module: bool = True
                           ) -> argparse.ArgumentParser:
    """A parser of every pipeline option Beam has registered (see the module docstring);
    ``every_module=False``: of those registered so far, and the runner's."""
    from apache_beam.options.pipeline_options import _BeamArgumentParser

    modules = list(OPTION_MODULES) if every_module else []
    if runner and "." in runner:  # a runner given by its dotted path may define options
        modules.append(runner.rsplit(".", 1)[0])
    for module in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(module)

    class Parser(_BeamArgumentParser):
        def error(self, message: str):
            raise _Refused(message)

    parser = Parser(allow_abbrev=False, add_help=False, conflict_handler="resolve")
    for cls in _option_classes():
        if "_add_argparse_args" in vars(cls):
            with contextlib.suppress(Exception):  # a broken third-party class adds nothing
                cls._add_argparse_args(parser)
    return parser


def _runner(flags: Sequence[str]) -> str | None:
    for index, flag in enumerate(flags):
        if flag.startswith("--runner="):
            return flag.split("=", 1)[1]
        if flag == "--runner" and index + 1 < len(flags):
            return flags[index + 1]
    return None


def check_pipeline_flags(ours: argparse.ArgumentParser, flags: Sequence[str]) -> None:
    """Exit 2 through ``ours.error`` when ``flags`` (what ``ours`` left over) holds anything
    that is not a registered Beam pipeline option, or a value Beam's parser refuses."""
    if not flags:
        return
    for every_module in (False, True):
        beam = pipeline_option_parser(_runner(flags), every_module)
        try:
            _, unknown = beam.parse_known_args(list(flags))
        except _Refused as refused:
            if every_module:
                ours.error(f"{refused} (a Beam pipeline option)")
            continue  # perhaps an option the other modules define takes that value
        if not unknown:
            return
    ours.error(_unknown(unknown[0], [ours, beam], ": neither ours nor a Beam pipeline option "
                        "(flags after a lone -- go to the runner unchecked)"))
