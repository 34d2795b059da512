"""The end-of-build summary: the table from a manifest, and what the build command prints."""

from __future__ import annotations

import json
import pathlib

from beam_tfrecords.pipelines.summary import format_summary, summary_rows

NOTHING_UNREAD = {"files": 0, "bytes": 0, "rows": 0}
ROOT = pathlib.Path(__file__).resolve().parents[2]

MANIFEST = {
    "counts": {"read": 10_012, "written": 10_000, "rejected": 12},
    "splits": {
        "train": {"records": 8_000, "bytes": 510_000_000, "shards": [
            {"path": "train/ds-00000-of-00003.tfrecord", "records": 3000, "bytes": 170_000_000},
            {"path": "train/ds-00001-of-00003.tfrecord", "records": 3200, "bytes": 190_000_000},
            {"path": "train/ds-00002-of-00003.tfrecord", "records": 1800, "bytes": 150_000_000},
        ]},
        "eval": {"records": 2_000, "bytes": 2_000_000, "shards": [
            {"path": "eval/ds-00000-of-00001.tfrecord", "records": 2000, "bytes": 2_000_000},
        ]},
        "test": {"records": 0, "bytes": 0, "shards": []},
    },
    "dead_letter": [{"path": "dead_letter/rejected-00000-of-00001.jsonl", "records": 12}],
}


def test_rows_per_split_then_total():
    assert summary_rows(MANIFEST) == [
        ("train", "-", "8,000", "-", "3", "510.0 MB", "150.0 MB", "190.0 MB"),
        ("eval", "-", "2,000", "-", "1", "2.0 MB", "2.0 MB", "2.0 MB"),
        ("test", "-", "0", "-", "0", "0 B", "-", "-"),
        ("total", "10,012", "10,000", "12", "4", "512.0 MB", "2.0 MB", "190.0 MB"),
    ]


def test_table_footnote_dead_letters_and_rates():
    text = format_summary(MANIFEST, 100.0)
    lines = text.splitlines()
    assert lines[0].split() == ["split", "read", "written", "rejected", "shards", "bytes",
                                "smallest", "largest"]
    assert set(lines[1].replace(" ", "")) == {"-"} and lines[1] == lines[-5]
    assert lines[-4].split() == ["total", "10,012", "10,000", "12", "4", "512.0", "MB", "2.0",
                                 "MB", "190.0", "MB"]
    # Columns line up: every row is as wide as the header once padded.
    assert len({len(line) for line in lines[:-3]}) == 1
    assert "totals only" in lines[-3]
    assert lines[-2] == ("12 rejected record(s) in 1 dead-letter file(s): "
                         "dead_letter/rejected-00000-of-00001.jsonl")
    assert lines[-1] == "wall time 0:01:40, 100 records/s read, 5.1 MB/s written"


def test_no_dead_letter_line_without_rejects_and_zero_time_is_safe():
    manifest = {"counts": {"read": 0, "written": 0, "rejected": 0},
                "splits": {"train": {"records": 0, "bytes": 0, "shards": []}},
                "dead_letter": []}
    text = format_summary(manifest, 0.0)
    assert "dead-letter" not in text
    assert text.splitlines()[-1] == "wall time 0.0 s, 0 records/s read, 0 B/s written"


def test_build_command_prints_the_summary_of_its_manifest(tmp_path, capsys):
    from beam_tfrecords.pipelines import cli

    data = tmp_path / "in.csv"
    data.write_text("id,feature0,feature1,feature2,feature3\n1,true,1,dog,0.5\n"
                    "2,false,2,cat,1.5\n3,maybe,3,cow,2.5\n")  # row 3 is rejected
    out = tmp_path / "out"
    args = ["build", "--config", str(ROOT / "configs" / "demo.yaml"), "--input", str(data),
            "--output", str(out), "--version", "v", "--progress-interval", "0"]
    config = (ROOT / "configs" / "demo.yaml").read_text().replace("max_bad_fraction: 0.0",
                                                                  "max_bad_fraction: 0.5")
    (tmp_path / "demo.yaml").write_text(config)
    args[2] = str(tmp_path / "demo.yaml")
    assert cli.main(args) == 0
    stdout = capsys.readouterr().out
    manifest = json.loads((out / "v" / "manifest.json").read_text())
    assert manifest["counts"] == {"read": 3, "written": 2, "rejected": 1,
                                  "unread": NOTHING_UNREAD}
    body = stdout.splitlines()
    assert body[0] == "built demo version v: read 3, written 2, rejected 1"
    expected = format_summary(manifest, 1.0).splitlines()
    last = len(expected)  # the wall time's line, which differs; the drift gate's note after it
    assert body[1:last] == expected[:-1]
    assert body[last].startswith("wall time ")
    assert body[last + 1:] == [f"drift gate: {manifest['gate']['note']}"]
