"""The ``beam-tfrecords`` command: ``build``, ``verify``, ``inspect`` and ``schema``.

Exit status 0 on success; otherwise non-zero with a one-line reason on stderr, because the
reader is usually a scheduler's log.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _schema(argv: Sequence[str]) -> int:
    from beam_tfrecords.pipelines.config import load_config
    from beam_tfrecords.sinks import manifest as mf
    from beam_tfrecords.sinks import storage
    from beam_tfrecords.transforms.feature_spec import tf_parse_spec

    parser = argparse.ArgumentParser(prog="beam-tfrecords schema",
                                     description="Print the tf.io parse spec as JSON "
                                                 "(or as Python with --python).")
    parser.add_argument("path", nargs="?", help="a version directory or its manifest.json")
    parser.add_argument("--config", help="a data set config instead of a built version")
    parser.add_argument("--python", action="store_true",
                        help="print ready-to-paste Python building the tf.io objects")
    args = parser.parse_args(argv)
    if bool(args.path) == bool(args.config):
        parser.error("give either PATH or --config")
    if args.config:
        spec = tf_parse_spec(load_config(args.config).features)
    else:
        path = args.path.rstrip("/")
        if not path.endswith(".json"):
            path = storage.join(path, mf.MANIFEST)
        spec = json.loads(storage.read_text(path))["feature_spec"]
    if args.python:
        from beam_tfrecords.transforms.feature_spec import tf_parse_spec_python

        print(tf_parse_spec_python(spec), end="")
    else:
        print(json.dumps(spec, indent=2))
    return 0


def _build(argv: Sequence[str]) -> int:
    import time

    from beam_tfrecords.pipelines.build import Skipped, run
    from beam_tfrecords.pipelines.progress import DEFAULT_INTERVAL
    from beam_tfrecords.pipelines.summary import format_summary

    started = time.monotonic()
    try:
        manifest = run(argv, progress_interval=DEFAULT_INTERVAL)
    except Skipped as skipped:
        print(skipped)
        return 0
    if manifest is None:
        print("the runner did not run the job here (e.g. a template was staged); nothing was "
              "committed", file=sys.stderr)
        return 0
    counts = manifest["counts"]
    print(f"built {manifest['name']} version {manifest['version']}: read {counts['read']}, "
          f"written {counts['written']}, rejected {counts['rejected']}")
    print(format_summary(manifest, time.monotonic() - started))
    return 0


def _verify(argv: Sequence[str]) -> int:
    from beam_tfrecords.pipelines.verify import format_table, verify_path

    parser = argparse.ArgumentParser(
        prog="beam-tfrecords verify",
        description="Check every record's CRCs and framing, record counts, sizes and crc32c "
                    "against the manifest, and missing or extra shards. Exit 1 on any problem.")
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

    from beam_tfrecords.pipelines.inspect_examples import iter_examples, show_value, summarize

    parser = argparse.ArgumentParser(
        prog="beam-tfrecords inspect",
        description="Print the first examples as JSON and a per-feature summary.")
    parser.add_argument("path", help="a version directory, its manifest.json, or a glob")
    parser.add_argument("--limit", type=int, default=5, help="examples to print (default 5)")
    parser.add_argument("--scan", type=int, default=100_000,
                        help="examples the summary reads (default 100000)")
    parser.add_argument("--json", action="store_true",
                        help="one JSON document instead of readable text")
    args = parser.parse_args(argv)
    shown = [
        {name: {"kind": kind, "value": show_value(kind, values)}
         for name, (kind, values) in sorted(example.items())}
        for example in itertools.islice(iter_examples(args.path), args.limit)
    ]
    summary = summarize(iter_examples(args.path), args.scan)
    if args.json:
        print(json.dumps({"examples": shown, "summary": summary}, indent=2))
        return 0
    for index, example in enumerate(shown):
        print(f"example {index}: {json.dumps(example, ensure_ascii=False)}")
    print(f"summary of {summary['examples_scanned']} example(s):")
    for name, stats in summary["features"].items():
        print(f"  {name}: {json.dumps(stats, ensure_ascii=False)}")
    return 0


COMMANDS = {"build": _build, "verify": _verify, "inspect": _inspect, "schema": _schema}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: beam-tfrecords {build,verify,inspect,schema} ...  (each has --help)",
              file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except KeyboardInterrupt:
        print("beam-tfrecords: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # one line for schedulers; details with --debug later
        message = str(err).strip().splitlines()
        reason = message[-1] if message else type(err).__name__
        reason = re.sub(r" \[while running '[^']*'\]$", "", reason)  # Beam's step suffix
        print(f"beam-tfrecords {argv[0]}: {type(err).__name__}: {reason}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
