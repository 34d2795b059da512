"""Hostile input: YAML bombs and tags, huge and deeply nested fields, paths that escape or
overlap, non-empty outputs that are not ours, and credentials that must not leak.

Each refusal happens before a pipeline starts and writes nothing; each bad record becomes a
dead letter, never a crash; no secret given on the way in is written anywhere on the way out.
"""

from __future__ import annotations

import json
import logging
import pathlib

import pytest
import yaml

from beam_tfrecords.pipelines import build, cli, output_guard, safe_yaml
from beam_tfrecords.pipelines.config import ConfigError, load_config
from beam_tfrecords.sinks import ownership
from beam_tfrecords.sinks.format.redact import REDACTED, redact, redact_text

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo.yaml"
DEMO_CSV = ROOT / "configs" / "data" / "demo.csv"
JSONL = ROOT / "configs" / "jsonl.yaml"


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- YAML -------------------------------------------------------------------------------------

LAUGHS = "\n".join(
    ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    + ["name: *a8"])


@pytest.mark.parametrize("text,needle", [
    (LAUGHS, "expands to more than 100000 nodes"),               # billion laughs (10^9 lols)
    ("name: &x [*x]", "(a cycle)"),                                # a list containing itself
    ("a: &x {b: *x}\nname: *x", "(a cycle)"),
    ("name: " + "[" * 5000 + "]" * 5000, "nested deeper than 64"),  # stack-busting nesting
    ("name: " + "[" * 70 + "]" * 70, "nested deeper than 64"),
    ("name: !!python/object/apply:os.system ['echo pwned']", "could not determine a constructor"),
    ("name: !!python/name:os.system", "could not determine a constructor"),
    ("!!python/object:collections.OrderedDict {}", "could not determine a constructor"),
    ("name: a\n---\nname: b", "expected a single document"),
])
def test_hostile_yaml_is_refused_before_anything_is_built(tmp_path, text, needle):
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "bad.yaml", text))
    message = str(caught.value)
    assert needle in message and "\n" not in message, message
    assert not list(tmp_path.glob("pwned*"))


def test_large_but_honest_yaml_with_aliases_loads():
    text = "base: &b {type: int64}\n" + "".join(f"f{i}: *b\n" for i in range(2000))
    assert len(safe_yaml.safe_load_limited(text)) == 2001


def test_config_over_one_mebibyte_and_not_utf8_are_refused(tmp_path):
    big = write(tmp_path, "big.yaml", "name: x\n" + "#" * (safe_yaml.MAX_BYTES + 10))
    with pytest.raises(ConfigError, match="larger than 1048576 bytes"):
        load_config(big)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(str(latin))


def test_huge_scalar_in_config_is_echoed_short(tmp_path):
    text = DEMO.read_text().replace("compression: none", "compression: " + "x" * 500_000)
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "huge.yaml", text))
    assert len(str(caught.value)) < 400


# --- names and paths that escape --------------------------------------------------------------

@pytest.mark.parametrize("old,new,key", [
    ("name: demo", "name: ..", "'name'"),
    ("  train: 80", "  ..: 80", "splits"),
    ("  train: 80", "  ../train: 80", "splits"),
    ("  train: 80", "  dead_letter: 80", "splits"),
    ("  train: 80", "  .staging: 80", "splits"),
    ("compression: none", "compression: none\n  shard_name: ../x", "output.shard_name"),
])
def test_names_that_become_path_segments_cannot_escape(tmp_path, old, new, key):
    with pytest.raises(ConfigError, match=key):
        load_config(write(tmp_path, "c.yaml", DEMO.read_text().replace(old, new)))


@pytest.mark.parametrize("version", ["..", "../x", "a/b", ".staging", ""])
def test_version_names_cannot_escape(tmp_path, version):
    with pytest.raises(build.BuildError, match="--version"):
        cli.run_build(["--config", str(DEMO), "--output", str(tmp_path / "o"),
                       "--version", version])
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("pattern,output", [
    ("gs://b/in/../*.csv", "gs://b/out"),
    ("gs://b/in/*.csv", "gs://b/out/../in"),
    ("gs://b/in/*.csv", "gs://b/./out"),
])
def test_dot_segments_in_cloud_storage_paths_are_refused(pattern, output):
    with pytest.raises(output_guard.OutputGuardError, match="not normalized"):
        output_guard.check_locations(pattern, output)


SHARD = ["v/train/demo-00000-of-00001.tfrecord", "v/manifest.json"]


@pytest.mark.parametrize("pattern,output,needle", [
    ("data/in", "data/in", "is the input"),
    ("data/in/", "data/in", "is the input"),
    ("data/in/*.csv", "data/in", "is the input"),
    ("gs://b/in/*", "gs://b/in/", "is the input"),
    ("data/out/raw/*.csv", "data/out", "lie inside the output"),
    ("gs://b/d/raw/x.csv", "gs://b/d", "lie inside the output"),
    ("data/**", "data/out", "matches the output"),
    ("data/*/*/*/*.tfrecord", "data/out", "matches the output"),
    ("data/*/*/manifest.json", "data/out", "matches the output"),
    ("gs://b/**.json", "gs://b/out", "matches the output"),
    ("images", "images/out", "inside the input folder"),
])
def test_overlapping_input_and_output_are_refused(pattern, output, needle):
    with pytest.raises(output_guard.OutputGuardError, match=needle):
        output_guard.check_locations(pattern, output, SHARD)


@pytest.mark.parametrize("pattern,output", [
    ("data/in/*.csv", "data/out"),
    ("data/in/*.csv", "data/in-out"),
    ("data/*.csv", "data/out"),             # '*' does not cross folders; outputs are deeper
    ("data/in.csv", "data/in.csv-out"),
    ("gs://b/in/*.csv", "gs://b/out"),
    ("gs://b/in/*.csv", "data/in"),         # different filesystems
    ("images", "images-out"),
])
def test_separate_input_and_output_are_accepted(pattern, output):
    output_guard.check_locations(pattern, output, SHARD)


def test_build_refuses_overlap_before_writing_anything(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "demo.csv").write_bytes(DEMO_CSV.read_bytes())
    for output in (data, data / "out"):
        with pytest.raises(build.BuildError, match="input"):
            cli.run_build(["--config", str(DEMO), "--input", f"{data}/**", "--output", str(output)])
    assert [p.name for p in data.rglob("*")] == ["demo.csv"]
    with pytest.raises(build.BuildError, match="lie inside the output"):
        cli.run_build(["--config", str(DEMO), "--input", str(data / "demo.csv"),
                       "--output", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["data", "demo.csv"]


# --- non-empty outputs that are not ours ----------------------------------------------------

def test_output_classification_is_by_content_not_names():
    """Only markers and manifests make a folder ours: another tool's export with our file
    names, or any folder with a ``.staging/`` in it, is foreign."""
    marker = ownership.Marker("b" * 32, "v2", "2026-01-01T00:00:00Z", "0.1.0")
    ours = {"format_version": 1, "tool_version": "0.1.0", "counts": {}, "splits": {}}
    tops = {"v1": ["manifest.json", "train/x-00000-of-00001.tfrecord"],
            "v2": [".beam-tfrecords-build", ".staging/train/abc.tfrecord"],
            "export": ["train/ds-00000-of-00002.tfrecord", "feature_spec.json"],
            "other": [".staging/part", "manifest.json"],
            "photos": ["cat.jpg"]}
    state = ownership.classify(tops, ["LATEST", "notes.txt"], {"v2": marker},
                               {"v1": ours, "other": {"created": "x"}}, "v1")
    assert state.committed_names() == ["v1"]
    assert [e.name for e in state.claimed] == ["v2"]
    assert state.foreign == ("notes.txt", "export/", "other/", "photos/")


def test_non_empty_foreign_output_needs_the_flag_and_is_left_alone(tmp_path, capsys):
    out = tmp_path / "home"
    (out / "photos").mkdir(parents=True)
    (out / "photos" / "cat.jpg").write_bytes(b"meow")
    (out / "notes.txt").write_text("mine")
    args = ["build", "--config", str(DEMO), "--output", str(out), "--version", "v1"]
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--allow-non-empty-output" in err and "notes.txt" in err
    assert sorted(p.name for p in out.rglob("*")) == ["cat.jpg", "notes.txt", "photos"]

    assert cli.main([*args, "--allow-non-empty-output"]) == 0
    assert (out / "LATEST").read_text().strip() == "v1"
    assert (out / "photos" / "cat.jpg").read_bytes() == b"meow"  # never deleted
    assert (out / "notes.txt").read_text() == "mine"


# --- huge and deeply nested records -----------------------------------------------------------

def jsonl_build(tmp_path, lines: list[str]) -> tuple[dict, list[dict]]:
    data = tmp_path / "events.jsonl"
    data.write_text("\n".join(lines) + "\n")
    config = write(tmp_path, "jsonl.yaml", JSONL.read_text().replace(
        "output:\n  path: output/events",
        "output:\n  path: output/events\nerrors:\n  max_bad_fraction: 0.5"))
    manifest = cli.run_build(["--config", config, "--input", str(data),
                              "--output", str(tmp_path / "out"), "--version", "v"])
    rows = [json.loads(line) for path in (tmp_path / "out" / "v" / "dead_letter").iterdir()
            for line in path.read_text().splitlines()]
    return manifest, rows


EVENTS = (ROOT / "configs" / "data" / "events.jsonl").read_text().splitlines()
DEEP = '{"id": 9001, "user": ' + "[" * 100_000 + "]" * 100_000 + "}"


def test_deep_and_huge_json_records_are_dead_letters_not_crashes(tmp_path):
    huge = json.loads(EVENTS[0]) | {"id": 9002, "note": "n" * 3_000_000}  # 3 MB: a value
    lines = EVENTS * 3 + [DEEP, json.dumps(huge)]  # past the 100 lines checked at launch
    manifest, rows = jsonl_build(tmp_path, lines)
    counts = manifest["counts"]
    assert counts["read"] == len(lines) == counts["written"] + counts["rejected"]
    assert counts["rejected"] == len(rows)
    deep = [r for r in rows if "deep" in r["reason"] or "nest" in r["reason"]]
    assert len(deep) == 1, [r["reason"] for r in rows]
    assert len(json.dumps(deep[0])) < 10_000  # a preview, not the 200 kB line
    assert not [r for r in rows if "9002" in json.dumps(r)[:200]]  # the huge value was written


def test_deep_json_among_the_first_lines_is_a_dead_letter(tmp_path):
    manifest, rows = jsonl_build(tmp_path, [DEEP, *EVENTS])
    assert manifest["counts"]["rejected"] == 1


# --- credentials --------------------------------------------------------------------------------

SECRETS = ("s3cr3tT0ken", "hunter2pw", "AbCdSig0123", "ya29.Zx9-oauth")


@pytest.mark.parametrize("text,kept", [
    ("gs://b/o?X-Goog-Algorithm=GOOG4&X-Goog-Signature=AbCdSig0123", "X-Goog-Algorithm=GOOG4"),
    ("/in?access_token=s3cr3tT0ken&key=hunter2pw/x.csv", "/x.csv"),
    ("https://me:hunter2pw@example.com/data", "example.com/data"),
    ("Authorization: Bearer ya29.Zx9-oauth", "Authorization: Bearer"),
    ("token=s3cr3tT0ken", "token="),
])
def test_redact_text(text, kept):
    cleaned = redact_text(text)
    assert REDACTED in cleaned and kept in cleaned
    assert not any(secret in cleaned for secret in SECRETS), cleaned


def test_redact_leaves_ordinary_text_alone():
    for text in ("data/date=2024-01-01/part.csv", "monkey=3", "tokens", "gs://b/keys/x"):
        assert redact_text(text) == text
    assert redact({"a": ["x?sig=AbCdSig0123"], "n": 3}) == {"a": [f"x?sig={REDACTED}"], "n": 3}


def test_no_secret_reaches_manifest_dead_letters_or_logs(tmp_path, caplog, capsys):
    """Input folder and output root whose names carry a token, a key and a signature (``?``
    is a one-character wildcard in a glob, so it matches the literal character)."""
    secret_dir = tmp_path / "in?access_token=s3cr3tT0ken&key=hunter2pw"
    secret_dir.mkdir()
    rows = DEMO_CSV.read_text().splitlines()
    rows.insert(5, rows[5].replace(rows[5].split(",")[1], "not-a-number", 1))  # a dead letter
    (secret_dir / "demo.csv").write_text("\n".join(rows[:400]) + "\n")
    out = tmp_path / "out?X-Goog-Signature=AbCdSig0123"
    (out / "stale" / ".staging").mkdir(parents=True)  # leftovers: their removal is logged
    (out / "stale" / ".staging" / "part").write_text("x")
    (out / "stale" / ".beam-tfrecords-build").write_bytes(
        ownership.Marker("d" * 32, "stale", "2026-01-01T00:00:00Z", "0.1.0").dumps())
    config = write(tmp_path, "c.yaml", DEMO.read_text().replace(
        "max_bad_fraction: 0.0", "max_bad_fraction: 0.5"))
    caplog.set_level(logging.DEBUG, logger="beam_tfrecords")
    code = cli.main(["build", "--config", config, "--input", f"{secret_dir}/*.csv",
                     "--output", str(out), "--version", "v",
                     "--job_name", "nightly", "--labels", "auth=Bearer ya29.Zx9-oauth"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    manifest = (out / "v" / "manifest.json").read_text()
    assert json.loads(manifest)["counts"]["rejected"] == 1
    dead = "".join(p.read_text() for p in (out / "v" / "dead_letter").iterdir())
    logs = "\n".join(r.getMessage() for r in caplog.records)
    assert "removing the leftovers" in logs  # a log line with the output path was written
    assert REDACTED in manifest and REDACTED in dead and REDACTED in logs
    for where, text in (("manifest", manifest), ("dead letters", dead), ("logs", logs),
                        ("stdout", captured.out), ("stderr", captured.err)):
        leaked = [s for s in SECRETS if s in text]
        assert not leaked, (where, leaked)


def test_yaml_module_is_never_asked_for_unsafe_loading():
    # The loaders we use construct only plain data: the full Loader's Python tags are absent.
    assert not issubclass(safe_yaml._Loader, yaml.FullLoader)
    assert "tag:yaml.org,2002:python/object" not in safe_yaml._Loader.yaml_multi_constructors
