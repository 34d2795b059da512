"""Fuzzing the TFRecord reader and ``verify`` with damaged copies of real files.

Byte flips, truncations, appended and replacing garbage, empty files, and reading with the
wrong compression: the reader either returns records or raises ``CorruptRecordError`` naming
the file and a byte offset -- never any other exception. ``verify`` turns every such damage,
including a damaged ``manifest.json``, into a reported problem with the file (and offset for a
corrupt record), never a traceback.
"""

from __future__ import annotations

import io
import json
import random
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_tfrecords.pipelines.verify import check_file, verify_path
from beam_tfrecords.sinks.format import tfrecord_format as tff

FUZZ = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def real_file(compression: str, seed: int = 7, n: int = 40) -> bytes:
    """A genuine TFRecord stream: records of varied sizes, some of them empty."""
    rng = random.Random(seed)
    buffer = io.BytesIO()
    with tff.TFRecordWriter(buffer, compression) as writer:
        for _ in range(n):
            writer.write(rng.randbytes(rng.choice((0, 3, 60, 700))))
    return buffer.getvalue()


FILES = {c: real_file(c) for c in tff.COMPRESSIONS}

damage = st.one_of(
    st.tuples(st.just("flip"), st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)),
                                        min_size=1, max_size=4)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6)),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("garbage"), st.binary(max_size=200)),
    st.tuples(st.just("empty"), st.none()),
)


def damaged(data: bytes, how: tuple) -> bytes:
    kind, arg = how
    if kind == "flip":
        out = bytearray(data)
        for position, mask in arg:
            out[position % len(out)] ^= mask
        return bytes(out)
    if kind == "truncate":
        return data[:arg % max(len(data), 1)]
    if kind == "append":
        return data + arg
    if kind == "garbage":
        return arg
    return b""


def read_all(data: bytes, compression: str) -> list[tuple[int, bytes]]:
    return list(tff.iter_records_with_offsets(io.BytesIO(data), compression, path="f.tfrecord"))


@FUZZ
@given(written=st.sampled_from(tff.COMPRESSIONS), how=damage,
       read_as=st.sampled_from(("auto", *tff.COMPRESSIONS)))
def test_reader_raises_only_located_corrupt_record_errors(written, how, read_as):
    data = damaged(FILES[written], how)
    try:
        records = read_all(data, read_as)
    except tff.CorruptRecordError as err:
        assert err.path == "f.tfrecord"
        assert isinstance(err.offset, int) and err.offset >= 0
        assert str(err).startswith(f"f.tfrecord: corrupt TFRecord at byte offset {err.offset}")
        return
    # Read without complaint: then every record it returned was framed with valid CRCs.
    assert all(isinstance(r, bytes) for _, r in records)


@FUZZ
@given(written=st.sampled_from(tff.COMPRESSIONS), how=damage)
def test_reader_without_crc_checks_never_crashes(written, how):
    data = damaged(FILES[written], how)
    try:
        list(tff.iter_records_with_offsets(io.BytesIO(data), written, path="f",
                                           verify_crc=False))
    except tff.CorruptRecordError as err:
        assert err.path == "f" and err.offset >= 0


@pytest.mark.parametrize("written,read_as", [
    (w, r) for w in tff.COMPRESSIONS for r in tff.COMPRESSIONS if w != r])
def test_wrong_compression_is_a_located_error(written, read_as):
    with pytest.raises(tff.CorruptRecordError) as caught:
        read_all(FILES[written], read_as)
    assert caught.value.offset >= 0


@pytest.mark.parametrize("compression", tff.COMPRESSIONS)
def test_undamaged_files_read_in_full(compression):
    assert len(read_all(FILES[compression], "auto")) == 40
    assert len(read_all(FILES[compression], compression)) == 40


@FUZZ
@given(written=st.sampled_from(tff.COMPRESSIONS), how=damage)
def test_check_file_reports_damage_with_file_and_offset(tmp_path_factory, written, how):
    path = tmp_path_factory.mktemp("fuzz") / f"shard{tff.file_suffix(written)}"
    data = damaged(FILES[written], how)
    path.write_bytes(data)
    check = check_file(str(path), written)
    assert check.bytes == len(data)
    for problem in check.problems:
        assert problem.startswith(f"{path}: corrupt TFRecord at byte offset "), problem


@pytest.fixture(scope="module")
def version(tmp_path_factory):
    """A tiny committed-looking version directory: two shards and their manifest."""
    from beam_tfrecords.sinks.format import manifest as mf

    root = tmp_path_factory.mktemp("version")
    shards = []
    for i, compression in enumerate(("none", "none")):
        data = real_file(compression, seed=i, n=10)
        path = root / "train" / f"ds-{i:05d}-of-00002.tfrecord"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        import crc32c

        shards.append({"path": f"train/{path.name}", "records": 10, "bytes": len(data),
                       "crc32c": mf.crc32c_b64(crc32c.crc32c(data))})
    manifest = {"compression": "none", "counts": {"read": 20, "written": 20, "rejected": 0},
                "splits": {"train": {"records": 20, "bytes": sum(s["bytes"] for s in shards),
                                     "shards": shards}}}
    (root / "manifest.json").write_text(json.dumps(manifest))
    assert all(c.ok for c in verify_path(str(root)))
    return root


@FUZZ
@given(how=damage, target=st.sampled_from(("manifest.json", "train/ds-00001-of-00002.tfrecord")))
def test_verify_reports_every_damage_without_raising(tmp_path_factory, version, how, target):
    copy = tmp_path_factory.mktemp("v") / "v"
    shutil.copytree(version, copy)
    path = copy / target
    path.write_bytes(damaged(path.read_bytes(), how))
    checks = verify_path(str(copy))
    bad = [c for c in checks if not c.ok]
    if path.read_bytes() == (version / target).read_bytes():
        assert not bad  # the damage happened to change nothing (e.g. truncate at the end)
        return
    if target == "manifest.json" and not bad:
        # A flip inside a string or number that still describes these shards truthfully.
        return
    assert bad
    assert all(c.path.startswith(str(copy)) for c in bad), [c.path for c in bad]


@pytest.mark.parametrize("edit,needle", [
    (lambda m: m["splits"]["train"]["shards"][0].update(path="../../../etc/passwd"),
     "leaves the version directory"),
    (lambda m: m["splits"]["train"]["shards"][0].update(path="/etc/passwd"),
     "leaves the version directory"),
    (lambda m: m["splits"]["train"]["shards"][0].update(records="10"), "needs path, records"),
    (lambda m: m.update(splits=[]), "'splits' is not an object"),
    (lambda m: m.update(compression="zstd"), "unknown compression"),
    (lambda m: m["splits"].update({"..": m["splits"]["train"]}), "not a directory name"),
    (lambda m: m.update(dead_letter=[{"path": "../../x.jsonl", "records": 1}]),
     "dead letter path '../../x.jsonl' leaves the version directory"),
    (lambda m: m.update(dead_letter={"path": "x"}), "'dead_letter' must be a list"),
    (lambda m: m.update(metadata_files=["/etc/passwd"]),
     "metadata_files path '/etc/passwd' leaves the version directory"),
    (lambda m: m.update(metadata_files="schema.pbtxt"), "'metadata_files' must be a list"),
])
def test_hostile_manifest_is_a_reported_problem(tmp_path, version, edit, needle):
    copy = tmp_path / "v"
    shutil.copytree(version, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    (check,) = verify_path(str(copy))
    assert check.path == str(copy / "manifest.json")
    assert needle in check.problems[0] and check.problems[0].startswith("unusable manifest")


@pytest.mark.parametrize("path", ["../../../etc/passwd", "/etc/passwd", "train/../../x"])
def test_inspect_and_read_examples_refuse_paths_outside_the_version(tmp_path, version, path,
                                                                   capsys):
    """What verify refuses, every command that follows manifest paths refuses (issue #15)."""
    import beam_tfrecords as btf
    from beam_tfrecords.pipelines import cli
    from beam_tfrecords.pipelines.verify import ManifestError

    copy = tmp_path / "v"
    shutil.copytree(version, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["splits"]["train"]["shards"][0]["path"] = path
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert cli.main(["inspect", str(copy)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "leaves the version directory" in err
    with pytest.raises(ManifestError, match="leaves the version directory"):
        next(iter(btf.read_examples(str(copy), split="train")))
