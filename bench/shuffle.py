"""Issue #17's benchmark: what a seeded shuffle costs against the same build unshuffled.

    .venv/bin/python bench/shuffle.py [--rows 10000000] [--images 20000]
        [--only tutorial,images] [--data-dir bench/.data] [--keep-output]

Every number is a whole ``beam-tfrecords build`` process (python start-up, launch checks,
pipeline, commit) on Beam's in-process direct runner, timed with its process tree's peak
memory, in one run:

* the tutorial CSV (bench/datasets.py, ``--rows`` rows, the default shard band), unshuffled and
  with ``--shuffle-seed 1``;
* the image folder (``--images`` JPEGs of ~100 KB in ``<label>/<file>`` folders, read class by
  class), unshuffled and shuffled.

Targets: a shuffled build takes at most 2x the unshuffled one, and its peak memory stays
within the shard maximum (200 MB) plus 300 MB. Each shuffled build is run twice: the two must
have the same ``shards_digest`` (the same files, byte for byte). For the images the labels'
order is checked too: adjacent label changes against what a random order gives.

Prints one line per build and PASS/MISS per target; bench/README.md records a run.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import datasets  # noqa: E402  (bench/ is not a package)
from cli_build import build_process, write_config  # noqa: E402

TUTORIAL = {"feature0": {"type": "int64"}, "feature1": {"type": "int64"},
            "feature2": {"type": "string"}, "feature3": {"type": "float"}}
IMAGES = {"image_raw": {"type": "bytes", "source": "image"}, "label": {"type": "int64"},
          "height": {"type": "int64"}, "width": {"type": "int64"}}
SHARD_MAX_MB = 200  # the default band's maximum
TIME_TARGET = 2.0
MEMORY_TARGET_MB = SHARD_MAX_MB + 300


def _manifest(output: pathlib.Path, version: str) -> dict:
    return json.loads((output / version / "manifest.json").read_text())


def _label_changes(output: pathlib.Path, manifest: dict) -> tuple[int, float]:
    """Adjacent label changes over the train shards in order, and a random order's mean."""
    from beam_tfrecords.sinks.format import tfrecord_format as tff
    from beam_tfrecords.transforms.codec import wire
    from beam_tfrecords.transforms.codec.label_order import adjacent_changes, expected_changes

    labels = []
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            with open(output / manifest["version"] / shard["path"], "rb") as handle:
                labels += [wire.decode_example(r)["label"][1][0]
                           for r in tff.iter_records(handle)]
    return adjacent_changes(labels), expected_changes(labels)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--only", default="tutorial,images",
                        type=lambda v: [c.strip() for c in v.split(",") if c.strip()],
                        help="the cases to run, comma-separated (default: tutorial,images)")
    parser.add_argument("--data-dir", default=str(HERE / ".data"))
    parser.add_argument("--keep-output", action="store_true")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only) - {"tutorial", "images"})
    if unknown or not args.only:
        parser.error(f"--only: unknown case {unknown or args.only}; choose from "
                     "tutorial, images")
    data = pathlib.Path(args.data_dir)
    data.mkdir(parents=True, exist_ok=True)

    work = pathlib.Path(tempfile.mkdtemp(prefix="shuffle-bench-"))
    cases = {}
    if "tutorial" in args.only:
        csv = datasets.ensure(datasets.Case("tutorial-csv", args.rows), data)
        cases["tutorial csv"] = write_config(work, "tutorial", {
            "format": "csv", "path": str(csv / "part-*.csv")}, TUTORIAL, work / "tutorial")
    if "images" in args.only:
        images = datasets.ensure(datasets.Case("images", args.images), data)
        cases["images"] = write_config(work, "images", {
            "format": "images", "path": str(images / "images"),
            "images": {"layout": "folders"}}, IMAGES, work / "images")
    runs: dict[tuple[str, str], dict] = {}
    print(f"{'build':<34} {'seconds':>8} {'peak MB':>8} {'exit':>5}  last line")
    missed = 0
    try:
        for case, config in cases.items():
            output = work / ("tutorial" if case.startswith("tutorial") else "images")
            for label, version, extra in (("unshuffled", "plain", []),
                                          ("shuffled", "shuffled", ["--shuffle-seed", "1"]),
                                          ("shuffled again", "again", ["--shuffle-seed", "1"])):
                runs[case, label] = run = build_process(config, "--version", version, *extra)
                print(f"{case + ' ' + label:<34} {run['seconds']:8.2f} {run['peak_mb']:8.0f} "
                      f"{run['exit']:>5}  {run['said']}", flush=True)
            digests = {v: _manifest(output, v)["shards_digest"]
                       for v in ("plain", "shuffled", "again")}
            same = digests["shuffled"] == digests["again"] != digests["plain"]
            print(f"{case}: two shuffled builds {'have' if same else 'do NOT have'} the same "
                  f"shards_digest ({digests['shuffled'][:19]}...)")
            missed += not same
            if case == "images":
                for version in ("plain", "shuffled"):
                    changes, expected = _label_changes(output, _manifest(output, version))
                    print(f"images {version}: {changes} adjacent label changes, a random order "
                          f"gives {expected:.0f}")
            shutil.rmtree(output, ignore_errors=True)  # keep the disk for the next case
    finally:
        if not args.keep_output:
            shutil.rmtree(work, ignore_errors=True)
    print()
    for case in cases:
        plain, shuffled = runs[case, "unshuffled"], runs[case, "shuffled"]
        ratio = shuffled["seconds"] / plain["seconds"]
        ok = ratio <= TIME_TARGET and plain["exit"] == shuffled["exit"] == 0
        missed += not ok
        print(f"{case + ': shuffled / unshuffled time':<44} {ratio:6.2f}x  target <= "
              f"{TIME_TARGET}x {'PASS' if ok else 'MISS'}")
        peak = max(shuffled["peak_mb"], runs[case, "shuffled again"]["peak_mb"])
        ok = peak <= MEMORY_TARGET_MB
        missed += not ok
        print(f"{case + ': shuffled peak memory':<44} {peak:6.0f} MB target <= "
              f"{MEMORY_TARGET_MB} MB {'PASS' if ok else 'MISS'} (unshuffled "
              f"{plain['peak_mb']:.0f} MB)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
