"""The ``beam-tfrecords`` command: ``build`` and ``schema`` (``verify`` and ``inspect`` follow).

Exit status 0 on success; otherwise non-zero with a one-line reason on stderr, because the
reader is usually a scheduler's log.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

__all__ = ["main"]


def _schema(argv: Sequence[str]) -> int:
    from beam_tfrecords.pipelines.config import load_config
    from beam_tfrecords.sinks import manifest as mf
    from beam_tfrecords.sinks import storage
    from beam_tfrecords.transforms.feature_spec import tf_parse_spec

    parser = argparse.ArgumentParser(prog="beam-tfrecords schema",
                                     description="Print the tf.io parse spec as JSON.")
    parser.add_argument("path", nargs="?", help="a version directory or its manifest.json")
    parser.add_argument("--config", help="a data set config instead of a built version")
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
    print(json.dumps(spec, indent=2))
    return 0


def _build(argv: Sequence[str]) -> int:
    from beam_tfrecords.pipelines.build import run

    manifest = run(argv)
    if manifest is None:
        print("the runner did not run the job here (e.g. a template was staged); nothing was "
              "committed", file=sys.stderr)
        return 0
    counts = manifest["counts"]
    print(f"built {manifest['name']} version {manifest['version']}: read {counts['read']}, "
          f"written {counts['written']}, rejected {counts['rejected']}")
    for split, info in manifest["splits"].items():
        print(f"  {split}: {info['records']} records in {len(info['shards'])} shard(s), "
              f"{info['bytes']} bytes")
    return 0


COMMANDS = {"build": _build, "schema": _schema}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: beam-tfrecords {build,schema} ...  (each command has --help)",
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
        print(f"beam-tfrecords {argv[0]}: {type(err).__name__}: {reason}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
