"""The scale model in bench/README.md is the script's output, and its arithmetic holds."""

from __future__ import annotations

import importlib.util
import math
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _scale_model():
    spec = importlib.util.spec_from_file_location("bench_scale_model",
                                                  ROOT / "bench" / "scale_model.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_the_readme_quotes_the_model_as_the_script_prints_it():
    model = _scale_model()
    text = (ROOT / "bench" / "README.md").read_text()
    for speed in (1.0, 0.6):
        assert model.table(1e12, 50, 4, speed) in text, (
            f"bench/README.md's scale model (core speed {speed}) is not the script's output: "
            "rerun `bench/scale_model.py --markdown` and paste it")


def test_the_model_scales_as_its_assumptions_say():
    model = _scale_model()
    csv = model.UNITS[0]
    one = model.model(csv, 1e12, 50, 4)
    assert one["ranges"] == math.ceil(1e12 / (64 * 2**20))
    assert one["shards"] == math.ceil(one["output_bytes"] / 150e6)
    assert one["parts"] >= one["shards"]
    # Twice the workers halve the work but not the commit, the tail range or the start.
    two = model.model(csv, 1e12, 100, 4)
    work = one["ours_seconds"] - one["commit_seconds"] - one["range_seconds"]
    work2 = two["ours_seconds"] - two["commit_seconds"] - two["range_seconds"]
    start = model.SINK.worker_start_cpu_s
    assert math.isclose(work2 - start, (work - start) / 2, rel_tol=1e-9)
    assert two["commit_seconds"] == one["commit_seconds"]
    # A slower vCPU slows both pipelines alike: the ratio hardly moves.
    slow = model.model(csv, 1e12, 50, 4, core_speed=0.5)
    assert slow["beam_seconds"] == 2 * one["beam_seconds"]
    assert abs(slow["speedup"] - one["speedup"]) / one["speedup"] < 0.1
