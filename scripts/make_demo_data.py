"""Regenerate configs/data/demo.csv: the TensorFlow tutorial's data set, deterministically.

The "Using TFRecords and tf.Example" guide builds 10,000 observations: feature0 a bool,
feature1 an int in [0, 5), feature2 the string that feature1 indexes in
cat/dog/chicken/horse/goat, feature3 a standard normal float. We add an ``id`` column so
splits can be keyed. A fixed seed makes the file identical on every run:

    python scripts/make_demo_data.py            # rewrite configs/data/demo.csv
    python scripts/make_demo_data.py --check    # exit 1 if the committed file differs
"""

from __future__ import annotations

import argparse
import io
import pathlib
import sys

import numpy as np

ROWS = 10_000
SEED = 20191122
TARGET = pathlib.Path(__file__).resolve().parent.parent / "configs" / "data" / "demo.csv"
STRINGS = ["cat", "dog", "chicken", "horse", "goat"]


def render() -> str:
    rng = np.random.default_rng(SEED)
    feature0 = rng.choice([False, True], ROWS)
    feature1 = rng.integers(0, 5, ROWS)
    feature3 = rng.standard_normal(ROWS)
    out = io.StringIO()
    out.write("id,feature0,feature1,feature2,feature3\n")
    for i in range(ROWS):
        out.write(f"{i},{str(bool(feature0[i])).lower()},{int(feature1[i])},"
                  f"{STRINGS[int(feature1[i])]},{float(feature3[i])!r}\n")
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="regenerate the demo data set")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        return 0 if TARGET.exists() and TARGET.read_text() == text else 1
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
