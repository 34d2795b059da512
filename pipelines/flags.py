"""The flags ``build`` accepts: its own, and every pipeline option Beam has registered.

``build`` hands the flags it does not know to Beam, and Beam keeps what it does not know
either: a typo such as ``--ouput out/x`` was carried along as an unknown pipeline option and
the build wrote to the config's output instead. So every flag is checked before anything
runs: a flag neither ours nor a registered Beam pipeline option is a usage error (exit 2)
naming the closest known flag. Abbreviations are refused too (``--out`` is not ``--output``):
with two vocabularies on one line, a prefix may mean something else tomorrow.

"Registered" means every ``PipelineOptions`` subclass, at any depth, once the modules that
define runners' options are imported (and the module of a runner named by its dotted path).
Importing Beam and those modules costs two seconds and more, too much for a slip: so the
flags Beam registers are kept in a table (pipelines/beam_option_table.py, made by
``python -m beam_tfrecords.pipelines.flags --write-table`` for one Beam version). When the
installed Beam is that version (read from its package metadata, without importing it), a flag
missing from the table is refused at once; a flag in it still goes to Beam's parser, which
checks its value. Another Beam version, or a runner named by its dotted path, is checked by
importing Beam as described above.
A portable runner's job service may accept options no Python class describes (Flink's Java
options); flags after a lone ``--`` go to Beam unchecked. The Flex Template entry, which
receives template parameters, does not check (pipelines/flex_template.py).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["OPTION_MODULES", "CommandParser", "check_flag_names", "check_flag_values",
           "check_pipeline_flags", "option_table", "pipeline_option_parser", "runner_flag",
           "write_option_table"]

# Modules that define PipelineOptions subclasses beyond apache_beam.options.pipeline_options
# (their runners import them only when chosen); one that cannot import defines nothing here.
OPTION_MODULES = ("apache_beam.options.pipeline_options", "apache_beam.runners.render",
                  "apache_beam.runners.dask.dask_runner", "apache_beam.yaml.options",
                  "beam_tfrecords.sinks.progress_files")


class CommandParser(argparse.ArgumentParser):
    """Every command's parser: no abbreviations, and an argument it does not know is a usage
    error naming the closest flag (``init --ouput`` -> "did you mean --output?").

    Args:
        *args: argparse.ArgumentParser's arguments.
        **kwargs: argparse.ArgumentParser's keyword arguments (``allow_abbrev`` is False
            unless given).
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, args=None, namespace=None):  # noqa: ANN001 -- argparse's signature
        """argparse's ``parse_args``, with an unknown argument a usage error naming the
        closest flag.

        Args:
            args: the arguments (default ``sys.argv[1:]``).
            namespace: the namespace to fill (default a new one).

        Returns:
            The parsed namespace.
        """
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
    """Every PipelineOptions subclass registered so far, at any depth, in registration
    order."""
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
    """A parser of every pipeline option Beam has registered (see the module docstring).

    Args:
        runner: the runner named on the command line; a dotted path's module is imported, as
            it may define options.
        every_module: import every module of :data:`OPTION_MODULES` first; False: only the
            options registered so far, and the runner's.

    Returns:
        An argparse parser of Beam's kind (refusing bad values by raising).
    """
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

    return _parser_of(_option_classes(), Parser)


def _parser_of(classes: Iterator[type] | Sequence[type], parser_class: type | None = None
               ) -> argparse.ArgumentParser:
    """Beam's argument parser holding the options ``classes`` define."""
    from apache_beam.options.pipeline_options import _BeamArgumentParser

    parser = (parser_class or _BeamArgumentParser)(allow_abbrev=False, add_help=False,
                                                   conflict_handler="resolve")
    for cls in classes:
        if "_add_argparse_args" in vars(cls):
            with contextlib.suppress(Exception):  # a broken third-party class adds nothing
                cls._add_argparse_args(parser)
    return parser


def runner_flag(flags: Sequence[str]) -> str | None:
    """The runner ``--runner`` names among ``flags`` (the last one given wins, as in
    argparse), or None when there is none.

    Args:
        flags: pipeline options.

    Returns:
        The runner's name or dotted path.
    """
    runner = None
    for index, flag in enumerate(flags):
        if flag.startswith("--runner="):
            runner = flag.split("=", 1)[1]
        elif flag == "--runner" and index + 1 < len(flags):
            runner = flags[index + 1]
    return runner


_TABLE_MODULE = "beam_tfrecords.pipelines.beam_option_table"
# The table holds the options of the classes these packages define; a class defined
# elsewhere (a test's, a plugin's) is not Beam's.
_TABLE_PACKAGES = ("apache_beam.", "beam_tfrecords.")


def option_table() -> dict[str, Any]:
    """Every flag of every pipeline option class Beam and this package register once
    OPTION_MODULES are imported, with the number of values it takes (argparse's ``nargs``:
    None for one, 0 for a switch), as the installed Beam defines them.

    Returns:
        ``{"beam_version": ..., "flags": {flag: nargs}}``, flags sorted.
    """
    import apache_beam

    for module in OPTION_MODULES:
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    classes = [cls for cls in _option_classes() if cls.__module__.startswith(_TABLE_PACKAGES)]
    parser = _parser_of(classes)
    flags = {option: action.nargs for action in parser._actions
             for option in action.option_strings}
    return {"beam_version": apache_beam.__version__, "flags": dict(sorted(flags.items()))}


def write_option_table(path: str | None = None) -> str:
    """Write :func:`option_table` as the module pipelines/beam_option_table.py (run after
    upgrading Beam: tests/e2e/test_cli_slips.py fails until the table matches).

    Args:
        path: where; None: the module beside this one.

    Returns:
        The path written.
    """
    table = option_table()
    path = path or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "beam_option_table.py")
    lines = ['"""The flags of every pipeline option Beam registers (pipelines/flags.py), for '
             "the Beam version",
             "below. Generated by ``python -m beam_tfrecords.pipelines.flags --write-table``: "
             'do not edit."""',
             "",
             f"BEAM_VERSION = {json.dumps(table['beam_version'])}",
             "# flag -> argparse nargs (None: one value, 0: a switch)",
             "FLAGS = {"]
    lines += [f"    {json.dumps(flag)}: {json.dumps(nargs) if nargs is not None else None},"
              for flag, nargs in table["flags"].items()]
    lines.append("}")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


def _installed_beam_version() -> str | None:
    """The installed apache-beam's version, from its package metadata (no import of Beam)."""
    from importlib import metadata

    try:
        return metadata.version("apache-beam")
    except metadata.PackageNotFoundError:
        return None


def _table_parser() -> argparse.ArgumentParser | None:
    """A Beam-free parser taking exactly the flags of the table, each with its number of
    values (values unchecked); None when the table is not of the installed Beam's version."""
    try:
        table = importlib.import_module(_TABLE_MODULE)
    except ImportError:
        return None
    if table.BEAM_VERSION != _installed_beam_version():
        return None

    class Parser(argparse.ArgumentParser):
        def error(self, message: str):
            raise _Refused(message)

    parser = Parser(allow_abbrev=False, add_help=False)
    for flag, nargs in table.FLAGS.items():
        if nargs == 0:
            parser.add_argument(flag, action="store_const", const=True, dest=flag)
        else:
            parser.add_argument(flag, nargs=nargs, dest=flag)
    return parser


def check_pipeline_flags(ours: argparse.ArgumentParser, flags: Sequence[str]) -> None:
    """Exit 2 through ``ours.error`` when ``flags`` (what ``ours`` left over) holds anything
    that is not a registered Beam pipeline option, or a value Beam's parser refuses:
    :func:`check_flag_names`, then :func:`check_flag_values`.

    Args:
        ours: the command's parser (its ``error`` exits 2).
        flags: the arguments it left over.
    """
    check_flag_names(ours, flags)
    check_flag_values(ours, flags)


def check_flag_names(ours: argparse.ArgumentParser, flags: Sequence[str]) -> None:
    """Exit 2 through ``ours.error`` when a flag in ``flags`` is missing from the table of
    the installed Beam's options, without importing Beam (see the module docstring). Where
    there is no table for the installed Beam, or the runner is named by its dotted path,
    :func:`check_flag_values` checks the names too.

    Args:
        ours: the command's parser (its ``error`` exits 2).
        flags: the arguments it left over.
    """
    if not flags:
        return
    runner = runner_flag(flags)
    table = None if runner and "." in runner else _table_parser()
    if table is not None:
        try:
            _, unknown = table.parse_known_args(list(flags))
        except _Refused:  # a missing value: Beam's parser says it in its own words later
            unknown = []
        if unknown:
            ours.error(_unknown(unknown[0], [ours, table], _NEITHER))


def check_flag_values(ours: argparse.ArgumentParser, flags: Sequence[str]) -> None:
    """Exit 2 through ``ours.error`` when Beam's own parser of its registered options refuses
    ``flags``: a value it does not take, or a flag it does not know. Imports Beam.

    Args:
        ours: the command's parser (its ``error`` exits 2).
        flags: the arguments it left over.
    """
    if not flags:
        return
    for every_module in (False, True):
        beam = pipeline_option_parser(runner_flag(flags), every_module)
        try:
            _, unknown = beam.parse_known_args(list(flags))
        except _Refused as refused:
            if every_module:
                ours.error(f"{refused} (a Beam pipeline option)")
            continue  # perhaps an option the other modules define takes that value
        if not unknown:
            return
    ours.error(_unknown(unknown[0], [ours, beam], _NEITHER))


_NEITHER = (": neither ours nor a Beam pipeline option (flags after a lone -- go to the runner "
            "unchecked)")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-table"]:
        sys.exit("usage: python -m beam_tfrecords.pipelines.flags --write-table")
    print(write_option_table())
