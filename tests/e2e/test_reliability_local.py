"""What a reader of the output may rely on between builds, on local disk: a retention cut short
and the leftovers of our own failed builds are recognised as ours and removed by the next
build, while files that are not ours are never touched."""

from __future__ import annotations

import pathlib
import shutil

import pytest

from beam_tfrecords.pipelines import cli
from beam_tfrecords.sinks import ownership

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo.yaml"


def test_retention_cut_short_is_cleaned_by_the_next_build(tmp_path):
    rows = (ROOT / "configs" / "data" / "demo.csv").read_text().splitlines(keepends=True)
    data = tmp_path / "demo.csv"
    data.write_text("".join(rows[:301]))
    out = tmp_path / "out"
    args = ["--config", str(DEMO), "--input", str(data), "--output", str(out)]
    cli.run_build([*args, "--version", "a"])
    # Retention deletes a version's manifest first; pretend it stopped right after that.
    shutil.copytree(out / "a", out / "half-deleted")
    (out / "half-deleted" / "manifest.json").unlink()
    (out / "half-deleted" / "feature_spec.json").unlink()
    # A build killed before its first finalize leaves only staging.
    (out / "killed" / ".staging" / "train").mkdir(parents=True)
    (out / "killed" / ".staging" / "train" / "0123.tfrecord").write_bytes(b"partial")
    (out / "killed" / ".beam-tfrecords-build").write_bytes(
        ownership.Marker("k" * 32, "killed", "2026-01-01T00:00:00Z", "0.1.0").dumps())

    manifest = cli.run_build([*args, "--version", "b"])
    assert manifest["counts"]["written"] == 300
    assert sorted(p.name for p in out.iterdir()) == ["LATEST", "a", "b"]
    assert (out / "LATEST").read_text().strip() == "b"
    assert (out / "a" / "manifest.json").exists()  # committed versions are kept
