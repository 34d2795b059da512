"""Our build: ``beam-tfrecords build`` (the CLI's ``main``) on DirectRunner.

    .venv/bin/python bench/alt_ours.py --data DIR --out DIR [--workers N] [--profile FILE]

Writes a config for the data set (the same features every alternative writes, one split, no
compression, the default shard band) next to the output and runs the CLI's ``main`` in this
fresh process after its imports, so the time and memory are the build's own. The process is
run as the ``beam-tfrecords`` console script runs it (``cli.entry``): the command's modules
imported with the collector paused, everything frozen before the exit. ``--workers 2`` adds
``--direct_running_mode=multi_processing --direct_num_workers=2``.
"""

from __future__ import annotations

import gc
import json
import pathlib
import sys
import time

from measure import alt_args, emit, output_bytes
from rows import load_meta

from beam_tfrecords.pipelines import cli

_SOURCE_SECTION = {
    "csv": '  csv: {delimiter: ",", header: true, null_values: [""]}\n',
    "parquet": "",
    "images": "  images: {layout: manifest}\n",
}


def config_yaml(meta: dict, name: str = "bench") -> str:
    """The build config for a data set: its features, one split, the default shard band."""
    folder = pathlib.Path(meta["folder"])
    lines = [f"name: {name}\n", "source:\n", f"  format: {meta['format']}\n",
             f"  path: {json.dumps(str(folder / meta['glob']))}\n",
             _SOURCE_SECTION[meta["format"]], "features:\n"]
    for feature in meta["features"]:
        spec = {"type": feature["type"]}
        if feature["shape"]:
            spec["shape"] = feature["shape"]
        if "source" in feature:
            spec["source"] = feature["source"]
        lines.append(f"  {feature['name']}: {json.dumps(spec)}\n")
    lines += ["output:\n", "  path: unused\n", "  compression: none\n"]
    return "".join(lines)


def main() -> None:
    args = alt_args(__doc__, profile=True)
    meta = load_meta(args.data)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = out / "config.yaml"
    config.write_text(config_yaml(meta))
    argv = ["build", "--config", str(config), "--output", str(out / "dataset"),
            "--version", "bench", "--runner=DirectRunner"]
    if args.workers > 1:
        argv += ["--direct_running_mode=multi_processing",
                 f"--direct_num_workers={args.workers}"]
    # What the build command imports on first use (Beam, pyarrow.compute, the readers, the
    # sink), before the clock like every alternative's libraries, as the console script does.
    cli.import_command(argv)
    start = time.perf_counter()
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        status = profiler.runcall(cli.main, argv)
        profiler.dump_stats(args.profile)
    else:
        status = cli.main(argv)
    seconds = time.perf_counter() - start
    if status != 0:
        sys.exit(status)  # the CLI printed its one-line reason on stderr
    emit(meta["rows"], seconds, output_bytes(out))  # the harness counts what was written
    gc.freeze()  # as cli.entry does before the process exits


if __name__ == "__main__":
    main()
