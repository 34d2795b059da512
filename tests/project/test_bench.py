"""Smoke test of the benchmark harness (bench/run.py) at its tiny scale: it runs our build,
the protobuf loop and framing-only on generated data, checks their outputs and reports a
table and JSON; and, once each, issue #14's alternatives (the public API on Arrow batches and
on dicts, stock Beam on the same dicts) with their targets, on the smallest tiny case only
(every alternative is a process of its own: a second size would only repeat them). No timing
assertions: only that the numbers exist and the outputs are right.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import pathlib
import re
import sys

import pytest

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def bench_main(script: str, argv: list[str]) -> tuple[int, str]:
    """Run ``bench/<script>.py ARGV`` in this process (its ``main``; every alternative and
    build it measures is still a process of its own, which is what it times): its exit status
    and what it printed. The harness's own start-up is not what these tests prove, and a
    second Python importing pyarrow and the package costs a CPU-second per run."""
    saved = list(sys.path)
    sys.path.insert(0, str(BENCH))  # its siblings, imported by name as when run as a script
    try:
        module = importlib.import_module(script)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            status = module.main(argv)
    finally:
        sys.path[:] = saved
    return status, printed.getvalue()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "results.json"
    status, stdout = bench_main("run", [
        "--scale", "tiny", "--only", "tutorial-csv,images", "--alts", "ours,tf,protobuf,framing",
        "--repeat", "1", "--tf-python", str(tmp / "no-such-python"), "--data-dir",
        str(tmp / "data"), "--json-out", str(out), "--keep-output"])
    assert status == 0, stdout[-3000:]
    return stdout, json.loads(out.read_text()), tmp / "data"


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


API_ALTS = ("ours", "api-arrow", "api-dicts", "beam-dicts")
API_CASES = ("tutorial-parquet@1k",)  # --smallest


@pytest.fixture(scope="module")
def api_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench-api")
    out = tmp / "results.json"
    status, stdout = bench_main("run", [
        "--scale", "tiny", "--smallest", "--only", "tutorial-parquet", "--alts",
        ",".join(API_ALTS), "--repeat", "1", "--data-dir", str(tmp / "data"), "--json-out",
        str(out)])
    assert status == 0, stdout[-3000:]
    return stdout, json.loads(out.read_text())


def test_the_api_alternatives_write_the_same_checked_records(api_run):
    _, results = api_run
    rows = results["cases"]
    assert sorted((r["case"], r["alt"]) for r in rows) == sorted(
        (case, alt) for case in API_CASES for alt in API_ALTS)
    for row in rows:
        assert row["status"] == "ok", row
        assert row["records_out"] == row["input_rows"] == row["rows"]
        assert row["sample_checked"] == min(64, row["input_rows"])
    for case in API_CASES:  # one encoding, four ways
        assert len({r["bytes_out"] for r in rows if r["case"] == case}) == 1


def test_issue_14_targets_are_judged_in_the_same_run(api_run):
    stdout, results = api_run
    assert "== targets (issue #14)" in stdout
    targets = [t for t in results["targets"] if t["issue"] == 14]
    assert sorted((t["case"], t["alt"], t["target"]) for t in targets) == sorted(
        (case, alt, target) for case in API_CASES
        for alt, target in (("api-arrow", "seconds <= 1.2x ours (issue #14)"),
                            ("api-dicts", ">= 3x beam-dicts (issue #14)")))
    by = {(r["case"], r["alt"]): r for r in results["cases"]}
    for t in targets:
        assert t["verdict"] in ("PASS", "MISS")
        api, ref = by[t["case"], t["alt"]], by[t["case"], t["target"].split()[-3]]
        if t["alt"] == "api-arrow":  # a bound on time: api seconds / ours seconds
            assert t["value"] == pytest.approx(api["seconds"] / ref["seconds"])
        else:
            assert t["value"] == pytest.approx(api["rows_per_s"] / ref["rows_per_s"])


def test_the_dicts_alternatives_skip_cases_larger_than_memory_allows(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        import datasets
        import run
    finally:
        sys.path.remove(str(BENCH))
    args = run.make_parser().parse_args([])
    alts = {a.name: a for a in run.ALTS}
    case = datasets.Case("tutorial-parquet", run.DICTS_MAX_ROWS * 10)
    for name in ("api-dicts", "beam-dicts"):  # decided before any child runs
        row = run.run_case(case, tmp_path, alts[name], args, tmp_path / "out")
        assert row["status"] == "skipped" and "in memory as dicts" in row["reason"]
    assert alts["api-arrow"].max_rows is None


def test_the_shuffle_benchmark_runs_and_checks_its_builds(tiny_run):
    """bench/shuffle.py at a tiny size, on its images case (the one with every step the
    tutorial case has, plus the class order) -- the images the harness run above generated:
    every build exits 0, the two shuffled builds have one digest, the class order of the
    images is measured; timings are not judged."""
    _, _, data = tiny_run
    _, out = bench_main("shuffle", ["--only", "images", "--images", "10", "--data-dir",
                                    str(data)])  # its status also judges the timings
    assert out.count("have the same shards_digest") == 1, out
    assert "images: two shuffled builds have the same shards_digest" in out
    assert "images shuffled:" in out and "a random order gives" in out
    assert out.count("shuffled / unshuffled time") == 1
    assert out.count("shuffled peak memory") == 1
    builds = re.findall(r"^(?:tutorial csv|images) (?:unshuffled|shuffled(?: again)?) +"
                        r"[\d.]+ +\d+ +(-?\d+)", out, re.MULTILINE)
    assert builds == ["0"] * 3, out
    assert not (data / "tutorial-csv-10000000").exists()  # not generated


def test_issue18_judges_whole_processes_and_the_cost_per_image():
    """bench/issue18.py's verdicts: whole-process ratios against each reference, and the
    slope between two image sizes (fixed costs out) against the plain loop's."""
    sys.path.insert(0, str(BENCH))
    try:
        import issue18
    finally:
        sys.path.remove(str(BENCH))

    def row(dataset, n, alt, seconds, wall, status="ok"):
        return {"dataset": dataset, "input_rows": n, "alt": alt, "seconds": seconds,
                "wall_seconds": wall, "status": status}

    rows = [row("tutorial-csv", 5, "ours", 6, 8), row("tutorial-csv", 5, "beam", 220, 222),
            row("tutorial-parquet", 5, "ours", 6, 8), row("tutorial-parquet", 5, "beam", 50, 52),
            row("wide", 2, "ours", 1.6, 3.2), row("wide", 2, "tfxbsl", 1.9, 2.5),
            row("images", 10, "ours", 0.6, 2.4), row("images", 100, "ours", 2.4, 4.2),
            row("images", 10, "protobuf", 0.3, 0.5), row("images", 100, "protobuf", 3.0, 3.2),
            row("images", 10, "beam", 1.0, 2.6), row("images", 100, "beam", 7.0, 8.6, "failed")]
    verdicts = {name: (shown, ok) for name, shown, ok in issue18._judge(rows, 100)}
    assert verdicts["tutorial-csv@5: whole process, beam / ours"][1]  # 222 / 8
    assert not verdicts["tutorial-parquet@5: whole process, beam / ours"][1]  # 52 / 8
    assert not verdicts["wide@2: whole process, tfxbsl / ours"][1]  # 2.5 / 3.2
    assert verdicts["images@100: whole process, beam / ours"] == (
        "not measured (a run failed or was skipped)", False)
    assert not verdicts["images@100: whole process, protobuf / ours"][1]
    shown, ok = verdicts["images: cost per image (10 -> 100), ours <= loop"]
    assert ok and shown == "ours 20000 us, protobuf 30000 us"  # 1.8 s and 2.7 s / 90 images
