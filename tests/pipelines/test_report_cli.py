"""``beam-tfrecords report``: the report of real built versions, read back from their
manifest, statistics files and dead letters, locally and on ``gs://``.

Two versions are built from CSV (the second with rejected rows and hostile categories): the
build writes their statistics, and the drift gate holds the second back (its new category
values), leaving the ``anomalies.json`` the report marks.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil

import pytest
from beam_tfrecords_tests_helpers import HOSTILE

from beam_tfrecords.pipelines import cli
from beam_tfrecords.sinks.format.layout import ANOMALIES, REPORT, STATISTICS

pytestmark = pytest.mark.slow  # two whole builds

CONFIG = """name: people
source: {{format: csv, path: {data}}}
features:
  id: {{type: int64}}
  score: {{type: float}}
  tag: {{type: string}}
splits: {{key: id, train: 80, eval: 20}}
output: {{path: {out}, shard_size: {{target: 2KB, min: 1KB, max: 4KB}}}}
errors: {{max_bad_fraction: 0.5}}
validate: {{}}
"""


def _build(tmp: pathlib.Path, name: str, rows: list[str], status: int = 0) -> pathlib.Path:
    data = tmp / f"{name}.csv"
    data.write_text("id,score,tag\n" + "".join(f"{r}\n" for r in rows))
    config = tmp / f"{name}.yaml"
    config.write_text(CONFIG.format(data=data, out=tmp / "out"))
    assert cli.main(["build", "--config", str(config), "--version", name]) == status
    return tmp / "out" / name


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    tags = ["a", "b", "c"]
    first = _build(tmp, "v1", [f"{i},{i % 10},{tags[i % 3]}" for i in range(200)])
    # The drift gate holds it back (new values of tag): committed, LATEST stays at v1.
    second = _build(tmp, "v2", [f"{i},{'oops' if i % 40 == 0 else i % 7},"
                                f"\"{(tags + list(HOSTILE))[i % 5]}\"" for i in range(160)],
                    status=cli.EXIT_DRIFT)
    assert json.loads((second / ANOMALIES).read_text())["passed"] is False
    return first, second


def _report(capsys, *args):
    code = cli.main(["report", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_version_without_statistics_gets_a_report_that_says_so(versions, tmp_path, capsys):
    """A version built before statistics existed (or with them turned off)."""
    bare = tmp_path / "bare"
    shutil.copytree(versions[0], bare, ignore=shutil.ignore_patterns(STATISTICS, REPORT))
    out = tmp_path / "r.html"
    code, printed, err = _report(capsys, bare, "--out", out)
    assert (code, err) == (0, "")
    assert f"wrote {out}" in printed
    page = out.read_text()
    assert "This version has no statistics" in page
    assert ">200</div><div class=\"l\">records written" in page


def test_the_report_compares_two_versions_and_escapes_their_data(versions, tmp_path, capsys):
    first, second = versions
    out = tmp_path / "r.html"
    code, printed, err = _report(capsys, second, "--against", first, "--out", out)
    assert (code, err) == (0, "")
    page = out.read_text()
    assert "compared with version <b>v1</b>" in page
    assert "column &#39;score&#39;: not a number" in page  # the dead letters' reason
    assert ">4</td><td>column" in page  # rows 0, 40, 80, 120 were rejected
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page and "<img" not in page
    assert page.count('<section class="feature') == 3  # id, score, tag
    assert re.search(r'<section class="feature flagged" id="f\d+"><h3>tag<', page)
    assert "no statistics" not in page
    # The page the build committed into the version is the same page: compared with the
    # version LATEST named before it, its gate's anomalies marked.
    assert (second / REPORT).read_text() == page


def test_the_report_is_never_written_into_a_version(versions, capsys):
    _, second = versions
    target = second / "again.html"
    code, _, err = _report(capsys, second, "--out", target)
    assert code == 1
    assert err.startswith("beam-tfrecords report: ReportError: refusing to write")
    assert len(err.splitlines()) == 1 and not target.exists()


def test_a_version_on_cloud_storage(versions, gcs_emulator, capsys):
    """Read through the storage facade from ``gs://``; the page is stored as text/html so a
    browser opening it from the bucket shows it."""
    _, second = versions
    root = gcs_emulator.unique_prefix("report")
    for path in sorted(second.rglob("*")):
        if path.is_file():
            gcs_emulator.upload(f"{root}/v2/{path.relative_to(second).as_posix()}",
                                path.read_bytes())
    out = f"{root}/pages/report.html"
    code, _, err = _report(capsys, f"{root}/v2", "--out", out)
    assert (code, err) == (0, "")
    blob = gcs_emulator.blob(out)
    assert blob.content_type.startswith("text/html")
    page = blob.download_as_bytes().decode()
    assert "&lt;/svg&gt;&lt;img src=x onerror=alert(1)&gt;" in page
