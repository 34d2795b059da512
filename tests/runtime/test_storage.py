"""runtime/storage.py (and runtime/gcs.py under it) on local disk and on gs:// (a real GCS
emulator on 127.0.0.1).

Every function runs against both; gs:// also gets the compose-specific checks (the 32-source
limit, temporary objects, the crc32c Cloud Storage reports) and retries through a proxy that
injects 503/429 and dropped connections.
"""

from __future__ import annotations

import errno
import os
import pathlib
import pickle

import crc32c
import pytest

from beam_tfrecords.runtime import gcs, storage


@pytest.fixture(params=["local", "gcs"])
def root(request, tmp_path):
    """A fresh, empty directory-like root: a tmp dir, or a unique prefix in the bucket."""
    if request.param == "local":
        return str(tmp_path / "root")
    emulator = request.getfixturevalue("gcs_emulator")
    return emulator.unique_prefix(request.node.originalname)


def write(path: str, data: bytes) -> None:
    with storage.open_write(path) as handle:
        handle.write(data)


def read(path: str) -> bytes:
    with storage.open_read(path) as handle:
        return handle.read()


def payload(i: int) -> bytes:
    return (f"part {i:03d} ".encode() * (i % 7 + 1)) + bytes(range(i % 256))


def test_write_read_text(root):
    path = storage.join(root, "a", "b.txt")
    write(path, "héllo\n".encode())
    assert read(path) == "héllo\n".encode()
    assert storage.read_text(path) == "héllo\n"


def test_gz_suffix_is_not_compressed_again(root):
    path = storage.join(root, "x.tfrecord.gz")
    write(path, b"\x1f\x8bnot really gzip")
    assert read(path) == b"\x1f\x8bnot really gzip"


def test_exists_files_and_directories(root):
    assert not storage.exists(root)
    write(storage.join(root, "dir", "sub", "f.bin"), b"x")
    assert storage.exists(storage.join(root, "dir", "sub", "f.bin"))
    assert storage.exists(storage.join(root, "dir", "sub"))
    assert storage.exists(storage.join(root, "dir"))
    assert storage.exists(root)
    assert not storage.exists(storage.join(root, "di"))  # a name prefix is not a directory
    assert not storage.exists(storage.join(root, "dir", "sub", "f.bi"))
    assert not storage.exists(storage.join(root, "missing"))


def test_match_sorted_with_sizes(root):
    for name, size in (("b.csv", 3), ("a.csv", 5), ("c.txt", 1)):
        write(storage.join(root, name), b"x" * size)
    found = storage.match(storage.join(root, "*.csv"))
    assert [m.path for m in found] == [storage.join(root, "a.csv"), storage.join(root, "b.csv")]
    assert [m.size_in_bytes for m in found] == [5, 3]
    assert storage.match(storage.join(root, "*.none")) == []


def test_list_files(root):
    assert storage.list_files(root) == []
    names = ["a/1.bin", "a/b/2.bin", "a/b/c/3.bin", "z.bin"]
    for name in names:
        write(storage.join(root, *name.split("/")), b"x")
    write(root + "-sibling/other.bin", b"x")  # shares the string prefix, not the directory
    assert storage.list_files(root) == [storage.join(root, *n.split("/")) for n in names]
    assert storage.list_files(storage.join(root, "a", "b")) == [
        storage.join(root, "a", "b", "2.bin"), storage.join(root, "a", "b", "c", "3.bin")]
    assert storage.list_files(storage.join(root, "missing")) == []
    storage.delete_tree(root + "-sibling")


def test_delete_tree(root):
    for name in ("keep/k.bin", "gone/1.bin", "gone/deep/2.bin", "gone/deep/er/3.bin"):
        write(storage.join(root, *name.split("/")), b"x")
    write(storage.join(root, "gone-not", "s.bin"), b"x")
    storage.delete_tree(storage.join(root, "gone"))
    assert not storage.exists(storage.join(root, "gone"))
    assert storage.list_files(root) == [storage.join(root, "gone-not", "s.bin"),
                                        storage.join(root, "keep", "k.bin")]
    storage.delete_tree(storage.join(root, "gone"))  # absent: nothing to do
    storage.delete_tree(root)
    assert not storage.exists(root)
    assert storage.list_files(root) == []


def test_rename(root):
    source, destination = storage.join(root, "s", "a.bin"), storage.join(root, "d", "e", "b.bin")
    write(source, b"content")
    storage.rename(source, destination)
    assert not storage.exists(source)
    assert read(destination) == b"content"


def test_write_atomic_overwrites_and_leaves_nothing_else(root):
    path = storage.join(root, "LATEST")
    storage.write_atomic(path, b"v1\n")
    storage.write_atomic(path, b"v2\n")
    assert storage.read_text(path) == "v2\n"
    assert storage.list_files(root) == [path]


def test_delete(root):
    a, b = storage.join(root, "a"), storage.join(root, "b")
    write(a, b"x")
    storage.delete([a, b])  # b is absent
    assert not storage.exists(a)


def test_file_crc32c(root):
    path = storage.join(root, "f.bin")
    data = payload(200) * 50
    write(path, data)
    assert storage.file_crc32c(path) == (len(data), crc32c.crc32c(data))


@pytest.mark.parametrize("known", [False, True], ids=["read", "known-crcs"])
@pytest.mark.parametrize("count", [2, 40])
@pytest.mark.slow
def test_concatenate(root, count, known):
    sources = [storage.join(root, "parts", f"{i:03d}.part") for i in range(count)]
    for i, source in enumerate(sources):
        write(source, payload(i))
    joined = b"".join(payload(i) for i in range(count))
    destination = storage.join(root, "out", "shard.tfrecord")
    crcs = [(len(payload(i)), crc32c.crc32c(payload(i))) for i in range(count)]
    size, crc = storage.concatenate(sources, destination, crcs if known else None)
    assert (size, crc) == (len(joined), crc32c.crc32c(joined))
    assert read(destination) == joined
    assert storage.file_crc32c(destination) == (size, crc)  # GCS metadata on gs://
    # Sources stay (finalize may be retried); no temporary objects or files remain.
    assert storage.list_files(root) == sorted(sources + [destination])


def test_concatenate_replaces_existing_destination(root):
    destination = storage.join(root, "shard")
    write(destination, b"old content, longer than the new")
    sources = [storage.join(root, f"p{i}") for i in range(3)]
    for source in sources:
        write(source, b"new")
    assert storage.concatenate(sources, destination) == (9, crc32c.crc32c(b"new" * 3))
    assert read(destination) == b"new" * 3


def test_concatenate_nothing_is_an_empty_file(root):
    destination = storage.join(root, "empty")
    assert storage.concatenate([], destination) == (0, 0)
    assert read(destination) == b""


def test_concatenate_missing_source_leaves_no_destination(root):
    present = storage.join(root, "present")
    write(present, b"x")
    destination = storage.join(root, "out")
    with pytest.raises(FileNotFoundError):
        storage.concatenate([present, storage.join(root, "absent")], destination)
    assert not storage.exists(destination)
    assert storage.list_files(root) == [present]


def test_a_local_join_with_known_crcs_is_the_kernels_copy_or_else_a_read(tmp_path,
                                                                         monkeypatch):
    """With the parts' sizes and CRC-32Cs known, the bytes are copied by the kernel and the
    CRC-32C combined, not read back; where the kernel cannot copy (another device, an old
    kernel) the join reads them, with the same result; a part whose size is not the one its
    writer counted fails the join and leaves nothing."""
    parts = [os.urandom(n) for n in (0, 1, 70_000, 3, 9_000_000)]
    sources = [str(tmp_path / f"{i}.part") for i in range(len(parts))]
    for source, data in zip(sources, parts):
        write(source, data)
    known = [(len(p), crc32c.crc32c(p)) for p in parts]
    want = (sum(map(len, parts)), crc32c.crc32c(b"".join(parts)))
    copies = []
    real_copy = os.copy_file_range
    monkeypatch.setattr(os, "copy_file_range",
                        lambda *a, **k: copies.append(a[2]) or real_copy(*a, **k))
    monkeypatch.setattr(storage, "CrcCountingWriter", None)  # the read path is not taken
    assert storage.concatenate(sources, str(tmp_path / "a"), known) == want
    assert read(str(tmp_path / "a")) == b"".join(parts) and copies
    monkeypatch.undo()

    def cannot(*args, **kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", cannot)
    assert storage.concatenate(sources, str(tmp_path / "b"), known) == want
    assert read(str(tmp_path / "b")) == b"".join(parts)
    monkeypatch.undo()

    wrong = [*known[:-1], (known[-1][0] + 1, known[-1][1])]
    with pytest.raises(OSError, match=r"staged part .*4\.part has 9000000 bytes, its writer "
                                      r"wrote 9000001"):
        storage.concatenate(sources, str(tmp_path / "c"), wrong)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["a", "b", *(pathlib.Path(s).name for s in sources)])


# --- gs:// only ---------------------------------------------------------------------------


def test_compose_respects_the_source_limit_at_every_level(gcs_emulator, monkeypatch):
    """With the limit lowered to 4, 40 sources need several levels of temporary objects."""
    from google.cloud.storage.blob import Blob

    calls = []
    original = Blob.compose

    def recording(self, sources, *args, **kwargs):
        calls.append((self.name, len(sources)))
        assert "retry" in kwargs and kwargs["retry"] is not None  # always an explicit policy
        return original(self, sources, *args, **kwargs)

    monkeypatch.setattr(Blob, "compose", recording)
    monkeypatch.setattr(gcs, "COMPOSE_LIMIT", 4)
    root = gcs_emulator.unique_prefix("limit")
    sources = [storage.join(root, f"{i:03d}") for i in range(40)]
    for i, source in enumerate(sources):
        gcs_emulator.upload(source, payload(i))
    joined = b"".join(payload(i) for i in range(40))
    destination = storage.join(root, "final")
    assert storage.concatenate(sources, destination) == (len(joined), crc32c.crc32c(joined))
    assert read(destination) == joined
    assert all(1 < n <= 4 for _, n in calls), calls
    assert calls[-1][0] == gcs_emulator.name_of(destination)  # the last compose is the final
    assert len(calls) == 13  # ceil((40 - 1) / (4 - 1)): each request removes up to 3
    assert storage.list_files(root) == sorted(sources + [destination])


def test_compose_with_the_real_limit_uses_two_requests_for_40(gcs_emulator, monkeypatch):
    from google.cloud.storage.blob import Blob

    calls = []
    original = Blob.compose
    monkeypatch.setattr(Blob, "compose",
                        lambda self, s, *a, **k: calls.append(len(s)) or original(self, s, *a, **k))
    root = gcs_emulator.unique_prefix("real-limit")
    sources = [storage.join(root, f"{i:03d}") for i in range(40)]
    for i, source in enumerate(sources):
        gcs_emulator.upload(source, payload(i))
    storage.concatenate(sources, storage.join(root, "final"))
    assert calls == [9, 32]


def test_gcs_crc32c_is_what_cloud_storage_reports(gcs_emulator):
    root = gcs_emulator.unique_prefix("crc")
    sources = [storage.join(root, f"{i}") for i in range(3)]
    for i, source in enumerate(sources):
        gcs_emulator.upload(source, payload(i))
    destination = storage.join(root, "final")
    size, crc = storage.concatenate(sources, destination)
    blob = gcs_emulator.blob(destination)
    assert blob.size == size
    import base64

    assert blob.crc32c == base64.b64encode(crc.to_bytes(4, "big")).decode()


@pytest.fixture
def fast_retry(monkeypatch):
    """The same retry predicate as production, with short sleeps."""
    policy = gcs.retry_policy().with_delay(initial=0.05, maximum=0.2)
    monkeypatch.setattr(gcs, "retry_policy", lambda: policy)


def test_compose_and_upload_retry_503_429_and_dropped_connections(gcs_emulator, monkeypatch,
                                                                  fast_retry):
    root = gcs_emulator.unique_prefix("retry")
    sources = [storage.join(root, f"{i:03d}") for i in range(40)]
    for i, source in enumerate(sources):
        gcs_emulator.upload(source, payload(i))
    plan = {"compose": [503, "drop", 429], "upload": [503, "drop"]}

    def fault(method, path):
        kind = "compose" if path.split("?")[0].endswith("/compose") else (
            "upload" if method == "POST" and path.startswith("/upload/") else None)
        return plan[kind].pop(0) if kind and plan[kind] else None

    with gcs_emulator.fault_proxy(fault) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        destination = storage.join(root, "final")
        joined = b"".join(payload(i) for i in range(40))
        assert storage.concatenate(sources, destination) == (len(joined), crc32c.crc32c(joined))
        storage.write_atomic(storage.join(root, "LATEST"), b"v1\n")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.url)  # the proxy is gone
    assert [a for *_, a in proxy.injected] == [503, "drop", 429, 503, "drop"]
    assert plan == {"compose": [], "upload": []}
    assert read(destination) == joined
    assert storage.read_text(storage.join(root, "LATEST")) == "v1\n"
    assert storage.list_files(root) == sorted(sources + [destination,
                                                         storage.join(root, "LATEST")])


def test_compose_failure_cleans_temporary_objects(gcs_emulator):
    root = gcs_emulator.unique_prefix("fail")
    sources = [storage.join(root, f"{i:03d}") for i in range(40)]
    for i, source in enumerate(sources[:-1]):  # the last one is missing
        gcs_emulator.upload(source, payload(i))
    destination = storage.join(root, "final")
    with pytest.raises(FileNotFoundError, match="source object is missing"):
        storage.concatenate(sources, destination)
    assert storage.list_files(root) == sources[:-1]  # no final, no .tmp- objects


def test_file_crc32c_missing_object(gcs_emulator):
    with pytest.raises(FileNotFoundError):
        storage.file_crc32c(gcs_emulator.path("no", "such", "object"))


def test_client_is_lazy_per_process_and_endpoint(gcs_emulator, monkeypatch):
    client = gcs.client()
    assert gcs.client() is client
    assert client._connection.API_BASE_URL == gcs_emulator.url
    assert all(pid == os.getpid() for pid, _ in gcs._clients)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    assert gcs.client() is not client
    # Functions are pickled by reference, so no client travels to workers.
    assert b"Client" not in pickle.dumps(storage.concatenate)


def test_exists_of_bucket_root(gcs_emulator):
    assert storage.exists(f"gs://{gcs_emulator.bucket}")
    assert not storage.exists("gs://no-such-bucket-for-sure")


def test_a_local_folder_listing_equals_beams_match(tmp_path):
    """storage.match walks a local ``folder/**`` itself (one stat per file): the very
    FileMetadata Beam's match gives, on a tree with nested, hidden and odd names, a symlinked
    file, a symlinked folder (not entered) and a broken symlink (skipped)."""
    from apache_beam.io.filesystems import FileSystems

    root = tmp_path / "tree"
    for rel, size in [("a.jpg", 3), (".hidden", 1), ("sub/b c.png", 10), ("sub/deep/x", 0),
                      ("sub/deep/y [1].jpg", 7), ("é/ü.jpg", 5)]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"z" * size)
    (root / "link.jpg").symlink_to(root / "a.jpg")
    (root / "linked-folder").symlink_to(root / "sub")
    (root / "broken").symlink_to(root / "nowhere")
    for pattern in (f"{root}/**", f"{root}/sub/**"):
        ours = storage.match(pattern)
        beams = sorted(FileSystems.match([pattern])[0].metadata_list, key=lambda m: m.path)
        assert [(m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in ours] == [
            (m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in beams]
    assert len(storage.match(f"{root}/**")) == 7


def test_the_retry_variables_are_the_names_the_docs_give():
    """The environment variables bounding our Cloud Storage retries are read under the names
    docs/cli.md and RELIABILITY.md tell operators to set."""
    root = pathlib.Path(__file__).resolve().parents[2]
    docs = (root / "docs" / "cli.md").read_text() + (root / "RELIABILITY.md").read_text()
    assert gcs.RETRY_TIMEOUT_ENV == "BEAM_TFRECORDS_GCS_RETRY_TIMEOUT"
    assert gcs.RETRY_TIMEOUT_ENV in docs
    prefix = gcs.RETRY_TIMEOUT_ENV.removesuffix("TIMEOUT")
    assert (gcs.RETRY_INITIAL_ENV, gcs.RETRY_MAXIMUM_ENV) == (prefix + "INITIAL",
                                                               prefix + "MAXIMUM")
