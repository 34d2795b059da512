"""verify catches every corruption we inject; inspect and schema print what users need."""

from __future__ import annotations

import gzip
import json
import pathlib
import shutil
import struct
import subprocess
import sys
import zlib

import crc32c
import pytest
from beam_tfrecords_tests_helpers import shard_paths

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.verify import verify_path
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.format import tfrecord_format as tff

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo.yaml"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("verify") / "out"
    config = out.parent / "demo.yaml"
    config.write_text(DEMO.read_text().replace(
        "shard_size: {target: 150MB, min: 100MB, max: 200MB}",
        "shard_size: {target: 200KB, min: 100KB, max: 400KB}"))
    cli.run_build(["--config", str(config), "--output", str(out), "--version", "v"])
    return out / "v"


@pytest.fixture
def copy(built, tmp_path) -> pathlib.Path:
    target = tmp_path / "v"
    shutil.copytree(built, target)
    return target


def shards(version: pathlib.Path) -> list[pathlib.Path]:
    manifest = json.loads((version / "manifest.json").read_text())
    return shard_paths(version, manifest)


def run_verify(path, capsys):
    code = cli.main(["verify", str(path)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_clean_version_verifies(built, capsys):
    code, out, err = run_verify(built, capsys)
    assert code == 0, out + err
    assert "0 with problems" in out
    assert len(shards(built)) > 2


def flip(path: pathlib.Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage,needle", [
    ("flip_data", "corrupt TFRecord at byte offset"),
    ("flip_length", "corrupt TFRecord at byte offset 0"),
    ("truncate", "truncated"),
    ("missing", "missing: listed in the manifest"),
    ("extra", "extra: a file in split folder"),
    ("manifest_records", "records, the manifest says"),
    ("manifest_crc", "crc32c"),
])
def test_verify_reports_damage(copy, capsys, damage, needle):
    target = shards(copy)[1]
    if damage == "flip_data":
        flip(target, 40)
    elif damage == "flip_length":
        flip(target, 2)
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-7])
    elif damage == "missing":
        target.unlink()
    elif damage == "extra":
        shutil.copy(target, target.with_name("demo-00099-of-00100.tfrecord"))
    else:
        manifest = json.loads((copy / "manifest.json").read_text())
        shard = next(s for info in manifest["splits"].values() for s in info["shards"]
                     if copy / s["path"] == target)
        if damage == "manifest_records":
            shard["records"] += 1
        else:
            shard["crc32c"] = "AAAAAA=="
        (copy / "manifest.json").write_text(json.dumps(manifest))
    code, out, err = run_verify(copy, capsys)
    assert code == 1
    assert needle in out
    assert target.name in err or "demo-00099" in err
    if damage.startswith("flip") or damage == "truncate":
        assert str(target) in err and "offset" in err


def add_dead_letters(version: pathlib.Path) -> str:
    """A dead-letter file and its manifest entry, as a build that rejected a record writes."""
    name = "dead_letter/rejected-00000-of-00001.jsonl"
    (version / "dead_letter").mkdir()
    (version / name).write_text('{"reason": "bad"}\n')
    manifest = json.loads((version / "manifest.json").read_text())
    manifest["dead_letter"] = [{"path": name, "records": 1}]
    (version / "manifest.json").write_text(json.dumps(manifest))
    return name


def forget_metadata_files(version: pathlib.Path) -> None:
    manifest = json.loads((version / "manifest.json").read_text())
    del manifest["metadata_files"]  # as versions written before the list existed
    (version / "manifest.json").write_text(json.dumps(manifest))


def put(version: pathlib.Path, name: str, data: bytes) -> None:
    (version / name).parent.mkdir(parents=True, exist_ok=True)
    (version / name).write_bytes(data)


def framed(*records: bytes) -> bytes:
    return b"".join(tff.frame(r) for r in records)


TFRECORD_BY_NAME = "extra: a TFRecord file (by its name) the manifest does not list"
TFRECORD_BY_BYTES = "extra: a TFRecord file (by its first bytes) the manifest does not list"

# damage -> (exit status, {file: what its one line says}); files relative to the version
LISTING_CASES = {
    # A TFRecord file outside the split folders: any glob a reader writes may match it.
    "stray shard at the version root": (
        lambda v: shutil.copy(shards(v)[0], v / "demo-00000-of-00001.tfrecord"),
        1, {"demo-00000-of-00001.tfrecord": TFRECORD_BY_NAME}),
    "gzip TFRecord in a new folder": (
        lambda v: put(v, "extra/part.tfrecord.gz", gzip.compress(framed(b"x"))),
        1, {"extra/part.tfrecord.gz": TFRECORD_BY_NAME}),
    "empty TFRecord named as TFDS names them": (
        lambda v: put(v, "more/ds-train.tfrecord-00000-of-00001", b""),
        1, {"more/ds-train.tfrecord-00000-of-00001": TFRECORD_BY_NAME}),
    "TFRecord under index/ with another name": (
        lambda v: put(v, "index/data.bin", shards(v)[0].read_bytes()),
        1, {"index/data.bin": TFRECORD_BY_BYTES}),
    "gzip TFRecord at the root with no suffix": (
        lambda v: put(v, "blob", gzip.compress(framed(b"a" * 100, b"b"))),
        1, {"blob": TFRECORD_BY_BYTES}),
    "zlib TFRecord under dead_letter/": (
        lambda v: put(v, "dead_letter/old.jsonl", zlib.compress(framed(b"{}"))),
        1, {"dead_letter/old.jsonl": TFRECORD_BY_BYTES}),
    "gzip text at the root": (
        lambda v: put(v, "notes.txt.gz", gzip.compress(b"just notes\n" * 50)),
        0, {"notes.txt.gz": "warning: not listed in the manifest"}),
    "an index sidecar nobody lists": (
        lambda v: put(v, "index/train/x.tfrecord.index", b"0 30\n30 30\n"),
        0, {"index/train/x.tfrecord.index": "warning: not listed in the manifest"}),
    "stray shard in a split folder": (
        lambda v: shutil.copy(shards(v)[0], v / "train" / "demo-00007-of-00009.tfrecord"),
        1, {"train/demo-00007-of-00009.tfrecord":
            "extra: a file in split folder 'train' the manifest does not list (a train/* glob "
            "reads it as data)"}),
    "any file in a split folder": (
        lambda v: (v / "eval" / "notes.txt").write_text("x"),
        1, {"eval/notes.txt": "extra: a file in split folder 'eval'"}),
    "dead-letter folder gone": (
        lambda v: shutil.rmtree(v / "dead_letter"),
        1, {"dead_letter/rejected-00000-of-00001.jsonl":
            "missing: a dead-letter file listed in the manifest, not on disk"}),
    "metadata file gone": (
        lambda v: (v / "schema.pbtxt").unlink(),
        1, {"schema.pbtxt": "missing: a metadata file listed in the manifest, not on disk"}),
    "unlisted file at the root": (
        lambda v: (v / "notes.txt").write_text("x"),
        0, {"notes.txt": "warning: not listed in the manifest (no reader of a split reads it)"}),
    "unlisted dead letter": (
        lambda v: (v / "dead_letter" / "old.jsonl").write_text("{}"),
        0, {"dead_letter/old.jsonl": "warning: not listed in the manifest"}),
    "leftover staging folder": (
        lambda v: [(v / ".staging" / "a" / n).parent.mkdir(parents=True, exist_ok=True)
                   or (v / ".staging" / "a" / n).write_text("x") for n in ("p1", "p2")],
        0, {".staging": "warning: a build's staging folder (2 file(s)): the build is still "
                        "writing, or did not finish removing it"}),
    "metadata files of a manifest without the list": (
        forget_metadata_files,
        0, {"schema.pbtxt": "warning: not listed in the manifest"}),
}


@pytest.mark.parametrize("case", list(LISTING_CASES))
def test_verify_compares_the_version_folder_with_the_manifest(copy, capsys, case):
    """Listed files that are gone (dead letters and metadata too) fail; unlisted files fail in
    a split folder, which a ``<split>/*`` glob reads, and so does an unlisted TFRecord file
    anywhere (by name, or by its first frame); other unlisted files are warnings. One line
    per finding."""
    add_dead_letters(copy)
    code, out, err = run_verify(copy, capsys)
    assert code == 0 and "warning" not in out, out + err
    damage, status, expected = LISTING_CASES[case]
    if case == "metadata files of a manifest without the list":  # each one it held
        listed = json.loads((copy / "manifest.json").read_text())["metadata_files"]
        assert "schema.pbtxt" in listed
        expected = {name: expected["schema.pbtxt"] for name in listed}
    damage(copy)
    code, out, err = run_verify(copy, capsys)
    assert code == status, out + err
    for name, says in expected.items():
        lines = [line for line in out.splitlines() if line.startswith(f"{copy / name} ")]
        assert len(lines) == 1 and says in lines[0], out
    findings = [line for line in out.splitlines()[1:-1] if not line.endswith("  ok")]
    assert len(findings) == len(expected), out
    if status:
        assert err.startswith(f"beam-tfrecords verify: 1 problem file(s); first: "
                              f"{copy / next(iter(expected))}: "), err
    else:
        assert err == "" and "with warnings" in out.splitlines()[-1]


def test_verify_compares_a_version_folder_on_gcs(gcs_emulator, built):
    """The same comparison with one listing of a gs:// prefix."""
    version = gcs_emulator.unique_prefix("verify") + "/v"
    for path in built.rglob("*"):
        if path.is_file():
            gcs_emulator.upload(f"{version}/{path.relative_to(built)}", path.read_bytes())
    assert all(c.ok and not c.warnings for c in verify_path(version))
    manifest = json.loads((built / "manifest.json").read_text())
    entry = next(iter(manifest["splits"].values()))["shards"][0]
    shard, records = entry["path"], entry["records"]
    gcs_emulator.upload(f"{version}/train/demo-00007-of-00009.tfrecord", b"stray")
    gcs_emulator.upload(f"{version}/notes.txt", b"x")
    gcs_emulator.upload(f"{version}/copies/blob", gzip.compress(framed(b"a record")))
    storage.delete([f"{version}/{shard}", f"{version}/schema.pbtxt"])
    found = {c.path.removeprefix(version + "/"): c.problems or ["warning"] + c.warnings
             for c in verify_path(version) if not c.ok or c.warnings}
    assert found == {
        shard: ["missing: listed in the manifest, not on disk"],
        "schema.pbtxt": ["missing: a metadata file listed in the manifest, not on disk"],
        "train/demo-00007-of-00009.tfrecord": [
            "extra: a file in split folder 'train' the manifest does not list (a train/* glob "
            "reads it as data)"],
        "notes.txt": ["warning", "not listed in the manifest (no reader of a split reads it)"],
        "copies/blob": [TFRECORD_BY_BYTES + " (a reader's glob may read it as data)"],
        "manifest.json": [f"counts.written is 10000, the shards hold {10000 - records}"],
    }


def test_verify_reads_only_the_start_of_an_unlisted_file(copy, monkeypatch):
    """Telling a TFRecord file by its content reads its first bytes, never the whole file."""
    big = framed(b"x" * (8 << 20))
    (copy / "archive").mkdir()
    (copy / "archive" / "big.bin").write_bytes(big)
    read = []
    real = storage.open_read

    class Counting:
        def __init__(self, handle):
            self._handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._handle.close()

        def read(self, n=-1):
            data = self._handle.read(n)
            read.append(len(data))
            return data

    def open_read(path, *a, **k):
        handle = real(path, *a, **k)
        return Counting(handle) if path.endswith("big.bin") else handle

    monkeypatch.setattr(storage, "open_read", open_read)
    found = [c for c in verify_path(str(copy)) if not c.ok]
    assert [c.path for c in found] == [str(copy / "archive" / "big.bin")]
    assert TFRECORD_BY_BYTES in found[0].problems[0]
    assert 0 < sum(read) <= tff.SNIFF_BYTES < len(big)


def test_verify_a_glob_of_shards(built, capsys):
    code, out, _ = run_verify(f"{built}/train/*.tfrecord", capsys)
    assert code == 0
    assert "0 with problems" in out


def test_inspect_prints_examples_and_summary(built, capsys):
    assert cli.main(["inspect", str(built), "--limit", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["examples"]) == 2
    assert doc["examples"][0]["feature2"]["value"][0] in {"cat", "dog", "chicken", "horse",
                                                          "goat"}
    summary = doc["summary"]
    assert summary["examples_scanned"] == 10000
    assert summary["features"]["feature1"]["distinct"] == [0, 1, 2, 3, 4]
    assert summary["features"]["feature3"]["values_per_example"] == [1, 1]


def test_schema_from_version_and_config_agree(built, capsys):
    assert cli.main(["schema", str(built)]) == 0
    from_version = json.loads(capsys.readouterr().out)
    assert cli.main(["schema", "--config", str(DEMO)]) == 0
    assert json.loads(capsys.readouterr().out) == from_version


def test_errors_are_one_line_with_nonzero_exit(tmp_path, capsys):
    code = cli.main(["verify", str(tmp_path / "nothing-here")])
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1 and err.startswith("beam-tfrecords verify:")


@pytest.mark.parametrize("command", ["verify", "inspect", "schema"])
def test_an_output_root_means_the_version_its_latest_names(built, command, capsys):
    """The config's output.path, where LATEST lives, is what a user points the commands at."""
    root = built.parent
    assert (root / "LATEST").read_text().strip() == built.name
    assert cli.main([command, str(root)]) == 0
    from_root = capsys.readouterr().out
    assert cli.main([command, str(built)]) == 0
    assert from_root == capsys.readouterr().out


@pytest.mark.parametrize("command", ["verify", "inspect", "schema"])
def test_a_folder_that_is_no_version_nor_output_root_is_one_line(tmp_path, command, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "stale").mkdir()
    (tmp_path / "stale" / "LATEST").write_text("gone\n")
    for folder, says in (("empty", "is neither a version directory (no manifest.json)"),
                         ("stale", "names version 'gone', which has no manifest.json")):
        code = cli.main([command, str(tmp_path / folder)])
        err = capsys.readouterr().err
        assert code != 0 and err.count("\n") == 1, err
        assert err.startswith(f"beam-tfrecords {command}: ") and says in err, err


# --- records of any size, in bounded memory (issue #15) ----------------------------------------

def write_zeros_shard(path: pathlib.Path, size: int, compression: str = "gzip") -> None:
    """A shard of one record of ``size`` zero bytes, written a MiB at a time so that nothing
    holds the record; zeros compress ~250:1 at level 1, so 300 MB is a 1.3 MB file."""
    piece, crc, left = memoryview(bytes(1 << 20)), 0, size
    with open(path, "wb") as handle:
        stream = tff.StreamCompressor(handle, compression, level=1)
        length = struct.pack("<Q", size)
        stream.write(length + struct.pack("<I", tff.masked_crc32c(length)))
        while left:
            part = piece[:min(left, len(piece))]
            stream.write(part)
            crc = crc32c.crc32c(part, crc)
            left -= len(part)
        stream.write(struct.pack("<I", tff.mask_crc32c(crc)))
        stream.close()


# Runs a command twice in a fresh interpreter: on a small file (imports, first allocations),
# then on the large one; prints how far the peak resident size grew during the second run.
PEAK_GROWTH = """
import resource, sys
from beam_tfrecords.pipelines import cli
command, small, large = sys.argv[1:]
cli.main([command, small])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("LARGE")
code = cli.main([command, large])
print("PEAK", code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""
LARGE_RECORD = 300 << 20
MEMORY_BOUND_KIB = 64 << 10  # the 300 MB record was held three times (900 MB) before


@pytest.fixture(scope="module")
def one_large_record(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
    folder = tmp_path_factory.mktemp("large")
    small, large = folder / "small.tfrecord.gz", folder / "large.tfrecord.gz"
    write_zeros_shard(small, 100)
    write_zeros_shard(large, LARGE_RECORD)
    return small, large


def peak_growth(command: str, small: pathlib.Path, large: pathlib.Path) -> tuple[int, str]:
    """(KiB the peak RSS grew by while ``command`` ran on ``large``, its stdout)."""
    done = subprocess.run([sys.executable, "-c", PEAK_GROWTH, command, str(small), str(large)],
                          capture_output=True, text=True, timeout=120, check=True)
    *output, last = done.stdout.split("\nLARGE\n")[1].splitlines()
    _, code, grew = last.split()
    assert code == "0", done.stdout + done.stderr
    return int(grew), "\n".join(output)


@pytest.mark.slow
def test_verify_streams_a_300_mb_record_in_bounded_memory(one_large_record):
    """Both CRCs of a record are computed piece by piece as it is decompressed: a 300 MB
    record never sits in memory (a 2 GiB one peaked at 6.3 GB before)."""
    grew, out = peak_growth("verify", *one_large_record)
    assert grew < MEMORY_BOUND_KIB, f"peak RSS grew by {grew} KiB"
    assert f"{one_large_record[1]}          1" in out and "0 with problems" in out, out


@pytest.mark.slow
def test_inspect_shows_a_record_over_the_limit_by_its_size(one_large_record):
    grew, out = peak_growth("inspect", *one_large_record)
    assert grew < MEMORY_BOUND_KIB, f"peak RSS grew by {grew} KiB"
    shown = json.loads(out.splitlines()[0].split(": ", 1)[1])
    assert shown == {"not_decoded": "larger than the limit of 4194304 bytes "
                                    "(--max-record-bytes)",
                     "file": str(one_large_record[1]), "offset": 0, "bytes": LARGE_RECORD}
    assert out.splitlines()[1] == "summary of 1 example(s), 1 not decoded:"


def test_inspect_never_shows_a_record_of_zeros_as_an_empty_example(tmp_path, capsys):
    """A 64 MiB record of zeros printed as ``{}``: over the limit it is shown by its size;
    under a larger limit, as not an Example (field number 0), and the scan goes on."""
    path = tmp_path / "zeros.tfrecord.gz"
    write_zeros_shard(path, 64 << 20)
    assert cli.main(["inspect", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["examples"] == [{"not_decoded": "larger than the limit of 4194304 bytes "
                                               "(--max-record-bytes)",
                                "file": str(path), "offset": 0, "bytes": 64 << 20}]
    assert doc["summary"] == {"examples_scanned": 1, "not_decoded": 1, "features": {}}
    assert cli.main(["inspect", str(path), "--max-record-bytes", str(65 << 20)]) == 0
    out = capsys.readouterr().out
    assert "{}" not in out
    assert ("not a valid serialized Example: invalid field number 0 (tag 0) at byte 0"
            in out), out
