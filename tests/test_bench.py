"""Smoke test of the benchmark harness (bench/run.py) at its tiny scale: it runs our build,
the protobuf loop and framing-only on generated data, checks their outputs and reports a
table and JSON. No timing assertions: only that the numbers exist and the outputs are right.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "results.json"
    done = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--scale", "tiny",
         "--only", "tutorial-csv,images", "--alts", "ours,tf,protobuf,framing",
         "--tf-python", str(tmp / "no-such-python"), "--data-dir", str(tmp / "data"),
         "--json-out", str(out), "--keep-output"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, json.loads(out.read_text()), tmp / "data"


def test_prints_a_table_per_case_and_the_targets(tiny_run):
    stdout, _, _ = tiny_run
    for case in ("tutorial-csv@1k", "tutorial-csv@2k", "images@10"):
        assert f"== {case} " in stdout
    assert "rows/s" in stdout and "x beam" in stdout
    assert "== targets (issue #6)" in stdout


def test_every_case_ran_and_its_output_was_checked(tiny_run):
    _, results, _ = tiny_run
    cases = results["cases"]
    ran = [r for r in cases if r["alt"] != "tf"]
    assert sorted((r["case"], r["alt"]) for r in ran) == sorted(
        (case, alt) for case in ("tutorial-csv@1k", "tutorial-csv@2k", "images@10")
        for alt in ("ours", "protobuf", "framing"))
    for row in ran:
        assert row["status"] == "ok", row
        assert row["records_out"] == row["input_rows"] == row["rows"]
        assert row["sample_checked"] == min(64, row["input_rows"])
        assert row["rows_per_s"] > 0 and row["bytes_out"] > 0
        assert row["peak_rss"] > 10_000_000  # bytes; a Python process is never smaller
    by = {(r["case"], r["alt"]): r for r in ran}
    for case in ("tutorial-csv@1k", "images@10"):  # the same records, framed the same way
        assert by[case, "protobuf"]["bytes_out"] == by[case, "framing"]["bytes_out"]


def test_a_missing_interpreter_is_a_skipped_row_with_its_reason(tiny_run):
    _, results, _ = tiny_run
    skipped = [r for r in results["cases"] if r["alt"] == "tf"]
    assert len(skipped) == 3
    assert all(r["status"] == "skipped" and "no-such-python" in r["reason"] for r in skipped)


def test_targets_are_judged_for_our_build(tiny_run):
    _, results, _ = tiny_run
    targets = results["targets"]
    # stock Beam and tfx-bsl did not run, so their ratios are n/a; framing did, so images
    # and the memory growth between the two tutorial sizes get a verdict.
    assert {t["verdict"] for t in targets if "beam" in t["target"]} == {"n/a"}
    framing = [t for t in targets if "framing" in t["target"]]
    assert len(framing) == 1 and framing[0]["verdict"] in ("PASS", "MISS")
    memory = [t for t in targets if t["target"].startswith("peak RSS")]
    assert len(memory) == 1 and memory[0]["verdict"] in ("PASS", "MISS")


def test_the_sample_check_catches_records_of_other_data(tiny_run):
    _, _, data = tiny_run
    sys.path.insert(0, str(BENCH))
    try:
        import checks
        import measure
        import rows
    finally:
        sys.path.remove(str(BENCH))
    files = measure.output_files(data / "out" / "tutorial-csv-1000" / "protobuf")
    assert checks.check_sample(rows.load_meta(data / "tutorial-csv-1000"), files) == 64
    with pytest.raises(checks.CheckError, match="no input row has feature3"):
        checks.check_sample(rows.load_meta(data / "tutorial-csv-2000"), files)
