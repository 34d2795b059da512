"""The ``beam-tfrecords`` command: ``init``, ``build``, ``verify``, ``inspect``, ``schema``,
``report``, ``promote`` and ``stats``.

An error the user can act on (a :class:`~beam_tfrecords.errors.UserError`) is one line on
stderr, because the reader is usually a scheduler's log; anything else is a bug and prints its
traceback. ``--debug``, anywhere on the command line, prints the traceback of every error.
Every line printed, by any path, has its secrets redacted and its unprintable characters
escaped (pipelines/safe_streams.py).

Exit status (README.md publishes this table):

=====  ==========================================================================
0      success (also: ``build --skip-if-unchanged`` found nothing to do)
1      the command failed; one line on stderr says why (``verify``: a problem found)
2      a usage mistake: an unknown command or flag, a missing argument
3      ``build``: the drift gate held the version back (committed, ``LATEST`` unmoved)
130    stopped by SIGINT (Ctrl-C)
141    the reader of the output went away (``| head``): stopped quietly, 128 + SIGPIPE
143    ``build`` stopped by SIGTERM (pipelines/signals.py)
=====  ==========================================================================
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import logging
import re
import sys
import traceback
from collections.abc import Iterator, Sequence

from beam_tfrecords.pipelines.flags import CommandParser, check_flag_names, check_flag_values
from beam_tfrecords.runtime import crash_note, fork_server

__all__ = ["build_parser", "entry", "init_parser", "main", "run_build"]


def _schema(argv: Sequence[str]) -> int:
    from beam_tfrecords.runtime import storage
    from beam_tfrecords.transforms.codec.feature_spec import tf_parse_spec

    parser = CommandParser(prog="beam-tfrecords schema",
                                     description="Print the tf.io parse spec as JSON "
                                                 "(or as Python with --python).")
    parser.add_argument("path", nargs="?", help="a version directory or its manifest.json, "
                                                "or an output root (its LATEST version)")
    parser.add_argument("--config", help="a data set config instead of a built version")
    parser.add_argument("--python", action="store_true",
                        help="print ready-to-paste Python building the tf.io objects")
    args = parser.parse_args(argv)
    if bool(args.path) == bool(args.config):
        parser.error("give either PATH or --config")
    if args.config:  # the config module brings Beam (the readers); a version's does not
        from beam_tfrecords.pipelines.config import load_config

        spec = tf_parse_spec(load_config(args.config).features)
    else:
        from beam_tfrecords.pipelines.verify import manifest_path_at

        path = manifest_path_at(args.path)
        if path is None:
            raise storage.NoMatch(f"{args.path} is neither a version directory (no "
                                  "manifest.json) nor an output root (no LATEST)")
        spec = json.loads(storage.read_text(path))["feature_spec"]
    if args.python:
        from beam_tfrecords.transforms.codec.feature_spec import tf_parse_spec_python

        print(tf_parse_spec_python(spec), end="")
    else:
        print(json.dumps(spec, indent=2))
    return 0


def build_parser(progress_interval: float = 0.0) -> CommandParser:
    """The ``build`` command's own flags (Beam's pipeline options come on top).

    Args:
        progress_interval: the default of ``--progress-interval`` (the command line's 10 s;
            0, no progress lines, for library callers).

    Returns:
        The parser; ``parse_known_args`` leaves Beam's options for the runner.
    """
    parser = CommandParser(
        prog="beam-tfrecords build",
        description="Build a TFRecord data set from a config. Any Beam pipeline option is "
                    "accepted too (e.g. --runner DataflowRunner --project P --region R); "
                    "another flag is a usage error. Flags after a lone -- go to the runner "
                    "unchecked (a job service's own options).",
    )
    parser.add_argument("--config", required=True, help="data set config (YAML), local or gs://")
    parser.add_argument("--input", help="override source.path (a glob, local or gs://)")
    parser.add_argument("--output", help="override output.path (local or gs://)")
    parser.add_argument("--version", help="version directory name (default: UTC timestamp)")
    parser.add_argument("--keep-versions", type=int, default=5, metavar="N",
                        help="committed versions to keep after a build (default 5); the one "
                             "LATEST names is never deleted")
    parser.add_argument("--allow-non-empty-output", action="store_true",
                        help="write into an output location that holds files which are not "
                             "beam-tfrecords versions (refused by default); those files are "
                             "left alone")
    parser.add_argument("--wait-for-lease", type=float, default=0.0, metavar="SECONDS",
                        help="when another build holds the output's lease, wait up to this "
                             "many seconds for it instead of refusing at once (default 0)")
    shuffle = parser.add_mutually_exclusive_group()
    shuffle.add_argument("--shuffle-seed", type=int, metavar="N",
                         help="write every shard's records in this seed's pseudo-random order, "
                              "the same bytes on every runner (overrides output.shuffle)")
    shuffle.add_argument("--no-shuffle", action="store_true",
                         help="write records in the order they arrive (overrides "
                              "output.shuffle)")
    parser.add_argument("--baseline-statistics", metavar="DIR",
                        help="the statistics of the version LATEST names when it was built "
                             "without them (the folder beam-tfrecords stats --out wrote), for "
                             "the drift gate and the report")
    parser.add_argument("--skip-if-unchanged", action="store_true",
                        help="exit 0 without writing anything when the inputs fingerprint and "
                             "the config hash equal those of the version LATEST names")
    parser.add_argument("--progress-interval", type=float, default=progress_interval,
                        metavar="SECONDS", help="seconds between progress lines on stderr "
                        f"(default {progress_interval:g}; 0: none)")
    return parser


def run_build(argv: Sequence[str], *, progress_interval: float = 0.0,
              check_flags: bool = True) -> dict | None:
    """The ``build`` command's work without its printing: parse the flags, then build.

    Args:
        argv: the command's arguments (``--config ...`` and Beam's pipeline options).
        progress_interval: the default of ``--progress-interval`` (0: no progress lines).
        check_flags: refuse a flag that is neither ours nor a registered Beam pipeline
            option (pipelines/flags.py); false for the Flex Template entry, whose launcher
            passes template parameters of its own.

    Returns:
        The committed manifest, or None when the runner only submitted or staged the job.
        Raises ``build.Skipped`` when ``--skip-if-unchanged`` finds nothing to do.
    """
    parser = build_parser(progress_interval)
    argv = list(argv)
    end = argv.index("--") if "--" in argv else len(argv)
    args, beam_args = parser.parse_known_args(argv[:end])
    unchecked = argv[end + 1:]  # after a lone --: the runner's
    if check_flags:
        check_flag_names(parser, beam_args)  # without Beam
    # Before Beam is imported here (its value check does): the imports then run side by side.
    _start_fork_server_if_asked(beam_args + unchecked)
    try:
        if check_flags:
            with _late_imports_frozen():  # Beam's parser imports Beam: as import_command would
                check_flag_values(parser, beam_args)
        beam_args += unchecked
        from beam_tfrecords.pipelines.build_launch import launch_workers, prepare

        launch = prepare(args, beam_args)  # config, output and inputs, refused early
        if launch_workers(launch, beam_args):  # the build will add worker processes
            fork_server.start()  # as above: before Beam is imported with the build module
        build = _import_late(COMMAND_MODULES["build"])
        return build.run(args, beam_args, launch)
    except BaseException:
        fork_server.stop()  # refused, or failed before its run ended: no worker is left
        raise


def _start_fork_server_if_asked(beam_args: Sequence[str]) -> None:
    """Before Beam is imported here: when the flags ask for local worker processes, start the
    server they are forked from, so that its imports run beside ours
    (pipelines/forked_workers.py)."""
    if fork_server.worker_processes_asked(beam_args):
        fork_server.start()


def _build(argv: Sequence[str], check_flags: bool = True) -> int:
    import time

    from beam_tfrecords.pipelines.progress import DEFAULT_INTERVAL
    from beam_tfrecords.pipelines.summary import format_summary

    started = time.monotonic()
    try:
        manifest = run_build(argv, progress_interval=DEFAULT_INTERVAL, check_flags=check_flags)
    except Exception as err:  # build.Skipped; its module (and Beam) is imported only by then
        build = sys.modules.get(COMMAND_MODULES["build"])
        if build is None or not isinstance(err, build.Skipped):
            raise
        print(err)
        return 0
    if manifest is None:
        print("the runner did not run the job here (e.g. a template was staged); nothing was "
              "committed", file=sys.stderr)
        return 0
    counts = manifest["counts"]
    print(f"built {manifest['name']} version {manifest['version']}: read {counts['read']}, "
          f"written {counts['written']}, rejected {counts['rejected']}")
    print(format_summary(manifest, time.monotonic() - started))
    gate = manifest.get("gate") or {}
    if gate.get("passed") is False:
        from beam_tfrecords.transforms.drift_gate import held_back_line

        root = ((manifest.get("config") or {}).get("output") or {}).get("path", "<output>")
        print("beam-tfrecords build: " + held_back_line(
            manifest, f"{str(root).rstrip('/')}/{manifest['version']}"), file=sys.stderr)
        return EXIT_DRIFT
    if gate.get("note"):
        print(f"drift gate: {gate['note']}")
    return 0


def _promote(argv: Sequence[str]) -> int:
    from beam_tfrecords.pipelines.promote import promote

    parser = CommandParser(
        prog="beam-tfrecords promote",
        description="Move LATEST to a committed version the drift gate held back, after "
                    "review (its anomalies.json says what drifted).")
    parser.add_argument("version", help="the version folder, <output.path>/<version> "
                                        "(local or gs://)")
    args = parser.parse_args(argv)
    before, now = promote(args.version)
    print(f"LATEST now names {now} (was {before})")
    return 0


def _verify(argv: Sequence[str]) -> int:
    from beam_tfrecords.pipelines.verify import format_table, verify_path

    parser = CommandParser(
        prog="beam-tfrecords verify",
        description="Check every record's CRCs and framing, record counts, sizes and crc32c "
                    "against the manifest, listed files that are missing and files the "
                    "manifest does not list. Exit 1 on any problem; an unlisted file outside "
                    "the split folders is a warning.")
    parser.add_argument("path", help="a version directory, its manifest.json, or a glob of "
                                     "shard files (local or gs://)")
    args = parser.parse_args(argv)
    checks = verify_path(args.path)
    print(format_table(checks))
    bad = [c for c in checks if not c.ok]
    if bad:
        print(f"beam-tfrecords verify: {len(bad)} problem file(s); first: {bad[0].path}: "
              f"{bad[0].problems[0]}", file=sys.stderr)
        return 1
    return 0


def _inspect(argv: Sequence[str]) -> int:
    import itertools

    from beam_tfrecords.pipelines.inspect_examples import (
        DEFAULT_MAX_RECORD_BYTES,
        Undecoded,
        iter_examples,
        show_value,
        summarize,
    )

    parser = CommandParser(
        prog="beam-tfrecords inspect",
        description="Print the first examples as JSON and a per-feature summary.")
    parser.add_argument("path", help="a version directory, its manifest.json, an output root "
                                     "(its LATEST version), or a glob")
    parser.add_argument("--limit", type=int, default=5, help="examples to print (default 5)")
    parser.add_argument("--scan", type=int, default=100_000,
                        help="examples the summary reads (default 100000)")
    parser.add_argument("--max-record-bytes", type=int, default=DEFAULT_MAX_RECORD_BYTES,
                        help="a record larger than this many bytes is shown by its file, "
                             f"offset and size, not decoded (default {DEFAULT_MAX_RECORD_BYTES})")
    parser.add_argument("--json", action="store_true",
                        help="one JSON document instead of readable text")
    args = parser.parse_args(argv)
    if args.max_record_bytes < 0:
        parser.error("--max-record-bytes must be 0 or more")
    examples = iter_examples(args.path, args.max_record_bytes)
    first = list(itertools.islice(examples, args.limit))  # one pass: shown, then summarized
    shown = [
        example.show() if isinstance(example, Undecoded) else
        {name: {"kind": kind, "value": show_value(kind, values)}
         for name, (kind, values) in sorted(example.items())}
        for example in first
    ]
    summary = summarize(itertools.chain(first, examples), args.scan)
    if args.json:
        print(json.dumps({"examples": shown, "summary": summary}, indent=2))
        return 0
    for index, example in enumerate(shown):
        print(f"example {index}: {json.dumps(example, ensure_ascii=False)}")
    undecoded = (f", {summary['not_decoded']} not decoded" if "not_decoded" in summary
                 else "")
    print(f"summary of {summary['examples_scanned']} example(s){undecoded}:")
    for name, stats in summary["features"].items():
        print(f"  {name}: {json.dumps(stats, ensure_ascii=False)}")
    return 0


def _report(argv: Sequence[str]) -> int:
    from beam_tfrecords.pipelines.report import write_report

    parser = CommandParser(
        prog="beam-tfrecords report",
        description="Write a version's report as one self-contained HTML page (no script, "
                    "nothing loaded from elsewhere): records, shard sizes against the band, "
                    "rejects and unread input by reason, and per-feature statistics, split "
                    "by split, compared with another version when --against names one.")
    parser.add_argument("path", help="a version directory, its manifest.json, or an output "
                                     "root (its LATEST version); local or gs://")
    parser.add_argument("--against", help="another version to compare with (e.g. the one "
                                           "built before)")
    parser.add_argument("--against-statistics", metavar="DIR",
                        help="the --against version's statistics, when it was built without "
                             "them: the folder beam-tfrecords stats --out wrote")
    parser.add_argument("--out", default="report.html",
                        help="where to write the page, local or gs:// (default ./report.html; "
                             "never inside a version)")
    args = parser.parse_args(argv)
    version_dir, size = write_report(args.path, args.out, args.against,
                                     args.against_statistics)
    print(f"wrote {args.out} ({size:,} bytes): the report of {version_dir}"
          + (f" against {args.against}" if args.against else ""))
    return 0


def _stats(argv: Sequence[str]) -> int:
    from beam_tfrecords.pipelines.version_stats import write_version_statistics

    parser = CommandParser(
        prog="beam-tfrecords stats",
        description="Compute the statistics of a version built without them, reading its "
                    "shards, and write them in TFX's layout (statistics/Split-<split>/"
                    "FeatureStats.pb) below --out -- never into the version. build "
                    "--baseline-statistics and report --against-statistics take the folder.")
    parser.add_argument("path", help="a version directory, its manifest.json, or an output "
                                     "root (its LATEST version); local or gs://")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="the folder to write the statistics/ tree in, local or gs://")
    args = parser.parse_args(argv)
    version_dir, written = write_version_statistics(args.path, args.out)
    print(f"wrote the statistics of {version_dir} ({len(written)} split(s)) below {args.out}")
    return 0


def init_parser() -> CommandParser:
    """The ``init`` command's flags.

    Returns:
        The parser.
    """
    parser = CommandParser(
        prog="beam-tfrecords init",
        description="Print a complete, commented config inferred from the input data.")
    parser.add_argument("--input", required=True,
                        help="a file, a glob (the first file is read) or an image folder")
    parser.add_argument("--format", choices=("csv", "jsonl", "parquet", "avro", "images"),
                        help="default: from the file name (a folder: images)")
    parser.add_argument("--output", help="the data set's output path (default output/<name>)")
    parser.add_argument("--name", help="the data set's name (default: from the input)")
    parser.add_argument("--delimiter", help="CSV cell separator (default: whichever of , tab "
                                            "; | splits the first lines into the most "
                                            "columns, evenly)")
    return parser


def _init(argv: list[str]) -> int:
    from beam_tfrecords.pipelines.init_config import init_config
    from beam_tfrecords.pipelines.init_inference import InitError

    args = init_parser().parse_args(argv)
    try:
        text = init_config(args.input, args.format, args.output, args.name, args.delimiter)
    except (OSError, ValueError) as err:
        raise InitError(f"{args.input}: {err}") from None
    print(text, end="")
    return 0


COMMANDS = {"init": _init, "build": _build, "verify": _verify, "inspect": _inspect,
            "schema": _schema, "report": _report, "promote": _promote, "stats": _stats}
# The module each command imports on first use (Beam, pyarrow and the rest come with it).
COMMAND_MODULES = {"init": "beam_tfrecords.pipelines.init_config",
                   "build": "beam_tfrecords.pipelines.build",
                   "verify": "beam_tfrecords.pipelines.verify",
                   "inspect": "beam_tfrecords.pipelines.inspect_examples",
                   "schema": "beam_tfrecords.pipelines.verify",
                   "report": "beam_tfrecords.pipelines.report",
                   "promote": "beam_tfrecords.pipelines.promote",
                   "stats": "beam_tfrecords.pipelines.version_stats"}
USAGE = """\
usage: beam-tfrecords [--debug] {init,build,verify,inspect,schema,report,promote,stats} ...
       (each has --help)
       beam-tfrecords --version

  init     print a config inferred from the input data (types, shapes, missing values)
  build    build a data set version from a config
  verify   check a built version's records, sizes and checksums against its manifest
  inspect  print the first examples and a per-feature summary
  schema   print the tf.io parse spec of a version or a config
  report   write a version's report.html (statistics, shards, rejects), --against another
  promote  move LATEST to a version the drift gate held back, after review
  stats    compute the statistics of a version built without them (--out DIR)

An error you can act on is one line on stderr; anything else is a bug of ours and prints its
traceback. --debug (anywhere on the line) prints the traceback of every error."""
DEBUG_FLAG = "--debug"
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as the shell reports a writer its reader left
EXIT_DRIFT = 3  # build: the drift gate held the committed version back from LATEST
# Beam appends this to the message of an error raised inside a pipeline step.
_STEP_SUFFIX = re.compile(r"(?: \[while running '[^']*'\])+$")


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and the exceptions it wraps: its ``__cause__``, and its ``__context__`` where
    ``err`` repeats that exception's message (as Beam's wrapper does). A bug raised while
    handling a user error repeats nothing of it, and stays a bug."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        inner = err.__cause__
        if inner is None and err.__context__ is not None:
            context_message = _first_line(str(err.__context__))
            if context_message and context_message in str(err):
                inner = err.__context__
        err = inner


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""


def _user_error_names() -> set[str]:
    """Class names of every UserError subclass, after importing each module of the package
    (a wrapped error names its class; the module defining it may not be imported here yet)."""
    import importlib
    import pkgutil

    from beam_tfrecords import pipelines, runtime, sinks, transforms
    from beam_tfrecords.errors import UserError

    for package in (pipelines, runtime, sinks, transforms):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + ".",
                                            onerror=lambda name: None):
            try:
                importlib.import_module(module.name)
            except Exception:  # a module that cannot import here defines nothing we meet
                continue
    names: set[str] = set()
    pending = [UserError]
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub.__name__ not in names:
                names.add(sub.__name__)
                pending.append(sub)
    return names


def user_error_line(err: BaseException) -> tuple[str, str] | None:
    """(class name, message) when ``err`` is an error the user can act on, else None.

    Found by type along the exception chain, or -- for an error a runner shipped back from a
    worker as text (multi_processing, PortableRunner: a RuntimeError holding the worker's
    traceback) -- by a line naming a UserError subclass, e.g. ``...commit.CommitError: why``.

    Args:
        err: the exception a command ended with.

    Returns:
        ``(class name, message)``, or None for an error that is a bug or unforeseen.
    """
    from beam_tfrecords.errors import UserError

    for link in _chain(err):
        if isinstance(link, UserError):
            lines = str(link).strip().splitlines()
            reason = lines[-1].strip() if lines else ""
            return type(link).__name__, _STEP_SUFFIX.sub("", reason)
    text = "\n".join(str(link) for link in _chain(err))
    if not text:
        return None
    names = "|".join(sorted(map(re.escape, _user_error_names()), key=len, reverse=True))
    if not names:
        return None
    named = re.compile(rf"(?<![\w.])(?:[A-Za-z_]\w*\.)*({names}): (.*\S)")
    found = [m for m in map(named.search, text.splitlines()) if m]
    if not found:
        return None
    last = found[-1]  # the outermost line that still names the user's error
    return last.group(1), _STEP_SUFFIX.sub("", last.group(2).strip())


def _split_debug(argv: list[str]) -> tuple[list[str], bool]:
    """argv without ``--debug`` (anywhere before a ``--``), and whether it was there."""
    end = argv.index("--") if "--" in argv else len(argv)
    kept = [arg for arg in argv[:end] if arg != DEBUG_FLAG] + argv[end:]
    return kept, len(kept) != len(argv)


class _DropUserErrorReports(logging.Filter):
    """Beam logs an error raised inside a step, with its traceback, before re-raising it; for
    a user error the command prints the one line that matters, so that report is dropped
    (``--debug`` keeps it). So is a worker process's report of one, which the local job
    service relays as text (``multi_processing``). Anything else Beam logs passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        from beam_tfrecords.errors import UserError

        error = record.exc_info[1] if record.exc_info else None
        if error is None:  # a report relayed as text names the error's class
            return record.levelno < logging.ERROR or user_error_line(
                RuntimeError(record.getMessage())) is None
        return not any(isinstance(link, UserError) for link in _chain(error))


# Where Beam's runners report a failed step (the in-process runner; the local job service
# relays what worker processes report).
_BEAM_STEP_LOGGERS = ("apache_beam.runners.common", "apache_beam.runners.worker.bundle_processor",
                      "apache_beam.runners.worker.sdk_worker",
                      "apache_beam.runners.portability.local_job_service")


def _quiet_beams_report_of_user_errors() -> None:
    for name in _BEAM_STEP_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropUserErrorReports) for f in logger.filters):
            logger.addFilter(_DropUserErrorReports())


def _signals_handled(command: str) -> contextlib.AbstractContextManager:
    """For ``build``: SIGINT and SIGTERM stop the build and its workers, print one line and
    exit 130 or 143 (pipelines/signals.py). The other commands only read; Ctrl-C there is the
    KeyboardInterrupt below."""
    if command != "build":
        return contextlib.nullcontext()
    from beam_tfrecords.pipelines.signals import handle_signals

    return handle_signals()


def main(argv: Sequence[str] | None = None, *, check_flags: bool = True) -> int:
    """Run one command, as the ``beam-tfrecords`` console script does.

    Everything it prints, through any path, is redacted and escaped (pipelines/safe_streams.py).

    Args:
        argv: the command and its arguments (``["build", "--config", ...]``); None:
            ``sys.argv[1:]``.
        check_flags: refuse a ``build`` flag that is neither ours nor a registered Beam
            pipeline option; false lets such flags through to Beam (the Flex Template entry's
            template parameters).

    Returns:
        The exit status (the table in the module docstring).
    """
    from beam_tfrecords.pipelines.safe_streams import discard_broken_pipes, safe_streams

    try:
        with safe_streams():
            return _main(list(sys.argv[1:] if argv is None else argv), check_flags)
    except BrokenPipeError:  # the reader has gone (``| head``): stop quietly
        discard_broken_pipes()
        return EXIT_BROKEN_PIPE


def _main(argv: list[str], check_flags: bool = True) -> int:
    from beam_tfrecords.pipelines.safe_streams import output_gone

    argv, debug = _split_debug(argv)
    if argv == ["--version"]:
        from beam_tfrecords import __version__

        print(f"beam-tfrecords {__version__}")
        return 0
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        asked = bool(argv) and argv[0] in ("-h", "--help")
        print(USAGE, file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    command = argv[0]
    if not debug:
        _quiet_beams_report_of_user_errors()
    try:
        with _signals_handled(command):
            # Only build passes flags on (to Beam); the Flex Template entry skips their check.
            extra = {} if check_flags or command != "build" else {"check_flags": False}
            return COMMANDS[command](argv[1:], **extra)
    except KeyboardInterrupt:
        print("beam-tfrecords: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if isinstance(err, BrokenPipeError) and output_gone():
            raise  # main ends quietly
        user = user_error_line(err)
        if debug or user is None:
            traceback.print_exc(file=sys.stderr)
        if user is not None:
            print(f"beam-tfrecords {command}: {user[0]}: {user[1]}", file=sys.stderr)
        else:
            print(f"beam-tfrecords {command}: unexpected {type(err).__name__} (a bug, or a "
                  "failure we did not foresee: the traceback above shows where)",
                  file=sys.stderr)
        return 1


# Commands whose module (and Beam with it) is imported only once their arguments are checked,
# so that a slip is answered without it: run_build imports it through _import_late.
_LATE_COMMANDS = ("build",)
_freeze_late_imports = False  # set by import_command: this process ends with main


def import_command(argv: Sequence[str]) -> None:
    """Import what the command on ``argv`` needs with Python's cyclic collector paused, then
    freeze the result.

    Importing Beam creates about a million objects that live as long as the process. Each
    collection during the import walks all of them and frees nothing, and every later full
    collection walks them again; frozen, they are left out of both. A
    failing import is left for ``main`` to report, as it would without this step. The module
    of a command in ``_LATE_COMMANDS`` is imported so later, by :func:`_import_late`, once
    its arguments have passed their checks.

    Args:
        argv: the command line after the program's name.
    """
    global _freeze_late_imports
    words, _ = _split_debug(list(argv))
    module = COMMAND_MODULES.get(words[0]) if words else None
    if module is None:
        return
    if words[0] in _LATE_COMMANDS:
        _freeze_late_imports = True
        return
    _import_frozen(module)


def _import_late(module: str) -> object:
    """``module``, imported as :func:`import_command` would have (collector paused, result
    frozen) in a process that ends with ``main``; a plain import for a library caller."""
    if _freeze_late_imports and module not in sys.modules:
        _import_frozen(module)
    return importlib.import_module(module)


@contextlib.contextmanager
def _late_imports_frozen() -> Iterator[None]:
    """What runs inside, with the collector paused and every object frozen after, as
    :func:`import_command` treats its imports -- in a process that ends with ``main``; a
    library caller's collector is left alone. For the steps of a late command that import
    Beam: whichever imports it first (its flag check, or the command's module) makes the
    million objects that every later full collection would walk."""
    if not _freeze_late_imports:
        yield
        return
    with _collector_paused():
        yield


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def _import_frozen(module: str) -> None:
    with _collector_paused(), contextlib.suppress(Exception):  # main reports the error
        importlib.import_module(module)


def entry() -> None:
    """The ``beam-tfrecords`` console script (and ``python -m``): ``main`` in a process that
    ends with it.

    Two things only a process that exits right after ``main`` may do: import the command's
    modules with the collector paused (:func:`import_command`), and freeze every object
    before exiting, so that the interpreter's final collections do not walk the heap Beam
    left (a measurable share of a small build: bench/README.md). Everything ``main`` wrote
    is closed and committed when it returns; the ``atexit`` handlers (logging's flush among
    them) still run.

    Before anything else it claims SIGINT and SIGTERM (pipelines/signals.py): blocked before
    the first import that starts a thread, so that none of those threads can swallow them.
    Only ``build`` handles them; the other commands get Python's default actions back. Then
    a native crash is set to print the stage and the file (runtime/crash_note.py)."""
    from beam_tfrecords.pipelines import signals

    signals.claim_signals()
    crash_note.enable()
    argv = sys.argv[1:]
    words, _ = _split_debug(list(argv))
    import_command(argv)
    try:
        if not words or words[0] != "build":
            signals.unblock_claimed()  # a Ctrl-C that came during the imports lands here
    except KeyboardInterrupt:
        print("beam-tfrecords: interrupted", file=sys.stderr)
        sys.exit(130)
    status = main(argv)
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    entry()
