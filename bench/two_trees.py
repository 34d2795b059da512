"""The same builds with two trees of this package: before and after a change, interleaved.

    .venv/bin/python bench/two_trees.py --before-tree DIR [--cases tutorial-csv-1000000,...]
        [--rounds 3] [--data-dir bench/.data] [--after-config "  statistics: false"]

``DIR`` holds the older package as ``DIR/beam_tfrecords`` (for example ``git worktree add
/tmp/old <commit>``, then a folder with a ``beam_tfrecords`` link to it); both trees run with
this ``.venv``. Each case (a data set made by bench/datasets.py, bench/.data/<case>) is built
by a whole ``beam-tfrecords build`` process in one process (``--direct_num_workers=1``) with
each tree, the two interleaved and their order alternated from round to round, so a change of
the machine's load falls on both. ``--after-config`` appends lines to the ``output:`` section
of the newer tree's config (what the older one does not know, such as ``statistics: false``).
Prints each build's wall and CPU seconds, then per case the medians, their ratios and whether
every build wrote the same shards (one digest over every shard file's bytes).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from alt_ours import config_yaml  # noqa: E402  (bench/ is not a package)
from rows import load_meta  # noqa: E402

_ENTRY = "from beam_tfrecords.pipelines.cli import entry; entry()"


def _shards_digest(version: pathlib.Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(version.rglob("*.tfrecord*")):
        if "index" not in path.relative_to(version).parts:
            digest.update(path.name.encode() + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def build(tree: str | None, meta: dict, out: pathlib.Path, extra: str) -> tuple[float, float, str]:
    """One whole build process; (wall s, CPU s of the process, shards digest)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "config.yaml").write_text(config_yaml(meta) + extra)
    env = dict(os.environ)
    env["PYTHONPATH"] = tree or ""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _ENTRY, "build", "--config",
                           str(out / "config.yaml"), "--output", str(out / "ds"), "--version",
                           "v", "--direct_num_workers=1"], env=env, capture_output=True,
                          text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"build failed ({done.returncode}): {done.stderr[-2000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu, _shards_digest(out / "ds" / "v")


def compile_tree(tree: pathlib.Path) -> None:
    """Write the tree's bytecode, as an install does: without it, where
    ``PYTHONDONTWRITEBYTECODE`` is set, every build would compile the package's modules again,
    and the tree with more modules would pay more for what no installed copy pays."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-x", r"[/\\]\.", str(tree)],
                   env=env, check=True, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-tree", required=True)
    parser.add_argument("--cases", default="tutorial-csv-1000000,tutorial-parquet-1000000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-dir", type=pathlib.Path, default=HERE / ".data")
    parser.add_argument("--after-config", default="  statistics: false\n")
    args = parser.parse_args(argv)
    extra = args.after_config if args.after_config.endswith("\n") else args.after_config + "\n"
    trees = {"before": args.before_tree, "after": None}
    compile_tree(pathlib.Path(args.before_tree) / "beam_tfrecords")
    compile_tree(HERE.parent)
    results: dict[tuple[str, str], list] = {}
    for round_ in range(args.rounds):
        order = ("before", "after") if round_ % 2 == 0 else ("after", "before")
        for case in args.cases.split(","):
            meta = load_meta(args.data_dir / case)
            for which in order:
                out = args.data_dir / "two_trees_out" / f"{case}-{which}"
                wall, cpu, digest = build(trees[which], meta, out,
                                          extra if which == "after" else "")
                results.setdefault((case, which), []).append((wall, cpu, digest))
                print(f"round {round_}  {case:28s} {which:6s} {wall:6.2f} s  {cpu:6.2f} CPU-s  "
                      f"shards {digest}  load {os.getloadavg()[0]:.2f}", flush=True)
    print()
    for case in args.cases.split(","):
        b, a = results[case, "before"], results[case, "after"]
        mb = [statistics.median(x[i] for x in b) for i in (0, 1)]
        ma = [statistics.median(x[i] for x in a) for i in (0, 1)]
        same = len({x[2] for x in a + b}) == 1
        print(f"{case}: before {mb[0]:.2f} s / {mb[1]:.2f} CPU-s, after {ma[0]:.2f} s / "
              f"{ma[1]:.2f} CPU-s; after/before {ma[0] / mb[0]:.3f} wall, {ma[1] / mb[1]:.3f} CPU; "
              f"same shards: {same}")
    shutil.rmtree(args.data_dir / "two_trees_out", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
