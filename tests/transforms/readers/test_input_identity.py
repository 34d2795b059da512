"""An input is read as it was listed, or the build says it was not.

Where it is decided: the pure comparison of a file as listed with the file as found
(sinks/format/file_identity.py, a table); the readers, given a file's listed identity, with the
file truncated, appended to, rewritten or replaced between the listing and the reading and
while it is read (a hook at the filesystem boundary, never timing); special files, which no
reader opens; and on the Cloud Storage emulator, a re-uploaded object (a new generation).
End to end through the console script: tests/e2e/test_input_slips.py.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import stat

import pytest

from beam_tfrecords.pipelines.config import CsvOptions
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.format.file_identity import (
    MISSING,
    FileIdentity,
    change,
    changed_region,
    kind_of_mode,
    not_a_file,
)
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec as F
from beam_tfrecords.transforms.readers.framework import COUNTS, REJECTED, RecordChunk
from beam_tfrecords.transforms.readers.read_csv import _ReadCsvFile
from beam_tfrecords.transforms.readers.read_jsonl import JsonlOptions, _ReadJsonlFile

LISTED = FileIdentity("in/a.csv", 100, device=1, inode=7, mtime_ns=10, ctime_ns=10)


@pytest.mark.parametrize("seen,phrase,region", [
    (LISTED, None, None),
    (FileIdentity("in/a.csv", 100), None, None),  # nothing more to compare: the same
    (FileIdentity("in/a.csv", 40, device=1, inode=7, mtime_ns=11, ctime_ns=11),
     "shrank from 100 to 40 bytes", (40, 60)),
    (FileIdentity("in/a.csv", 130, device=1, inode=7, mtime_ns=11, ctime_ns=11),
     "grew from 100 to 130 bytes", (0, 130)),
    (FileIdentity("in/a.csv", 100, device=1, inode=8, mtime_ns=10, ctime_ns=10),
     "was replaced by another file (inode 7 -> 8, 100 -> 100 bytes)",
     (0, 100)),
    (FileIdentity("in/a.csv", 40, device=2, inode=7, mtime_ns=10, ctime_ns=10),
     "was replaced by another file", (0, 100)),  # not a truncation
    (FileIdentity("in/a.csv", 100, device=1, inode=7, mtime_ns=12, ctime_ns=10),
     "was rewritten in place (same size, 100 bytes; its timestamps changed)", (0, 100)),
    (FileIdentity("in/a.csv", 100, device=1, inode=7, mtime_ns=10, ctime_ns=12),
     "was rewritten in place", (0, 100)),  # mtime put back (touch -d): ctime still moved
    (FileIdentity("in/a.csv", 0, kind="FIFO (named pipe)", device=1, inode=7),
     "was replaced by a FIFO (named pipe)", (0, 100)),
    (FileIdentity("in/a.csv", 0, kind=MISSING), "was deleted", (0, 100)),
])
def test_a_change_is_named_and_its_region_is_what_cannot_be_vouched_for(seen, phrase, region):
    found = change(LISTED, seen)
    if phrase is None:
        assert found is None
        return
    assert found is not None and found.startswith(phrase), found
    assert changed_region(LISTED, seen) == region


@pytest.mark.parametrize("listed_generation,seen_generation,size,phrase", [
    (5, 5, 100, None),
    (5, 6, 100, "was replaced (object generation 5 -> 6, 100 -> 100 bytes)"),
    (5, 6, 40, "was replaced (object generation 5 -> 6, 100 -> 40 bytes)"),  # not a truncation
    (5, None, 40, "shrank from 100 to 40 bytes"),
])
def test_on_cloud_storage_the_generation_tells(listed_generation, seen_generation, size,
                                               phrase):
    listed = FileIdentity("gs://b/a.csv", 100, generation=listed_generation)
    seen = FileIdentity("gs://b/a.csv", size, generation=seen_generation)
    assert change(listed, seen) == phrase


@pytest.mark.parametrize("mode,kind,says", [
    (stat.S_IFREG | 0o644, "file", None),
    (stat.S_IFIFO | 0o644, "FIFO (named pipe)", "wait for a writer"),
    (stat.S_IFCHR | 0o666, "character device", "/dev/zero never ends"),
    (stat.S_IFBLK | 0o660, "block device", "not a data file"),
    (stat.S_IFSOCK | 0o777, "socket", "not a data file"),
    (stat.S_IFDIR | 0o755, "directory", "only regular files"),
])
def test_what_is_not_a_regular_file_is_named(mode, kind, says):
    assert kind_of_mode(mode) == kind
    why = not_a_file(FileIdentity("x/in", 0, kind=kind))
    if says is None:
        assert why is None
    else:
        assert why.startswith(f"x/in is a {kind}, not a regular file; not opened") and says in why


# -- the readers --------------------------------------------------------------------------------

ROWS = 400
FEATURES = [F("i", "int64"), F("s", "string")]


def _csv(path, rows=ROWS, tag="row"):
    path.write_text("i,s\n" + "".join(f"{n},{tag}-{n:05d}\n" for n in range(rows)))


def _jsonl(path, rows=ROWS, tag="row"):
    path.write_text("".join(f'{{"i": {n}, "s": "{tag}-{n:05d}"}}\n' for n in range(rows)))


READERS = {
    "csv": (_csv, lambda: _ReadCsvFile(CsvOptions(), FEATURES, columnar=False)),
    "csv-columnar": (_csv, lambda: _ReadCsvFile(CsvOptions(), FEATURES, columnar=True,
                                                block_bytes=4096)),
    "jsonl": (_jsonl, lambda: _ReadJsonlFile(JsonlOptions(), FEATURES, columnar=False)),
}


def run(fn, element):
    """Drive a reader DoFn by hand: (records, dead letters, {count: n})."""
    fn.setup()
    records, letters, counts = [], [], {}
    try:
        for out in fn.process(element):
            if isinstance(out, RecordChunk):
                records += out.records()
            elif out.tag == REJECTED:
                letters.append(out.value)
            else:
                assert out.tag == COUNTS
                counts[out.value[0]] = out.value[1]
    finally:
        fn.teardown()
    return records, letters, counts


def _listed(path) -> FileIdentity:
    found = storage.identify(storage.match(str(path)))
    assert len(found) == 1 and found[0].kind == "file"
    return found[0]


def _truncate(path):
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) // 2)


def _append(path):
    with open(path, "ab") as handle:
        handle.write(b"")  # opened for appending: the rows follow
        handle.write(b'{"i": 1, "s": "late"}\n' if path.suffix == ".jsonl" else b"1,late\n")


def _rewrite(path):
    data = path.read_bytes()
    info = os.stat(path)
    path.write_bytes(data.replace(b"row-", b"new-"))  # same size, same inode
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))


def _replace(path):
    other = path.with_name("other" + path.suffix)
    make = _jsonl if path.suffix == ".jsonl" else _csv
    make(other, tag="new")  # the same size, another inode
    os.replace(other, path)


CHANGES = {"truncated": (_truncate, "shrank from"), "appended": (_append, "grew from"),
           "rewritten": (_rewrite, "was rewritten in place"),
           "replaced": (_replace, "was replaced by another file")}


@pytest.mark.parametrize("listed", [True, False])
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_file_read_as_listed_has_no_unread_region(tmp_path, reader, listed):
    """Nor has a plain path (a user's own PCollection of file names): nothing to compare."""
    make, fn = READERS[reader]
    path = tmp_path / ("in.jsonl" if reader == "jsonl" else "in.csv")
    make(path)
    records, letters, counts = run(fn(), _listed(path) if listed else str(path))
    assert len(records) == ROWS and letters == [] and counts["unread_regions"] == 0


@pytest.mark.parametrize("what", sorted(CHANGES))
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_file_changed_between_listing_and_reading_is_an_unread_region(tmp_path, reader,
                                                                         what):
    make, fn = READERS[reader]
    path = tmp_path / ("in.jsonl" if reader == "jsonl" else "in.csv")
    make(path)
    listed = _listed(path)
    mutate, phrase = CHANGES[what]
    mutate(path)
    records, letters, counts = run(fn(), listed)
    unread = [d for d in letters if d["kind"] == "unread"]
    assert len(unread) == 1, letters
    reason = unread[0]["reason"]
    assert reason.startswith(f"{path} {phrase}"), reason
    assert counts["unread_regions"] == counts["unread_files"] == 1
    assert counts["unread_bytes"] == unread[0]["bytes"] > 0
    if what == "truncated":  # the part cut off, not the whole file
        assert unread[0]["offset"] == os.path.getsize(path)
        assert unread[0]["bytes"] == listed.size - os.path.getsize(path)
        assert len(records) < ROWS
    else:
        assert unread[0]["offset"] == 0


class _TruncatingHandle:
    """A file handle that truncates its file to half once its first read returned: the file
    shrinks while it is read, at a boundary of our choosing, not a moment of the clock's."""

    def __init__(self, handle, path):
        self._handle, self._path, self._done = handle, path, False

    def _after(self):
        if not self._done:
            self._done = True
            _truncate(self._path)

    def read(self, *args):
        data = self._handle.read(*args)
        self._after()
        return data

    def readline(self, *args):
        data = self._handle.readline(*args)
        self._after()
        return data

    def readinto(self, buffer):
        n = self._handle.readinto(buffer)
        self._after()
        return n

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __iter__(self):
        return self

    def __next__(self):
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_file_truncated_while_it_is_read_is_never_read_short_in_silence(tmp_path,
                                                                         monkeypatch, reader):
    make, fn = READERS[reader]
    path = tmp_path / ("in.jsonl" if reader == "jsonl" else "in.csv")
    make(path, rows=20000)  # larger than one read
    listed = _listed(path)
    opened = storage.open_read
    monkeypatch.setattr(storage, "open_read",
                        lambda p: _TruncatingHandle(opened(p), path))
    records, letters, counts = run(fn(), listed)
    unread = [d for d in letters if d["kind"] == "unread"]
    assert [d["reason"].split(" after the launch")[0] for d in unread] == [
        f"{path} shrank from {listed.size} to {os.path.getsize(path)} bytes"], letters
    assert counts["unread_bytes"] == listed.size - os.path.getsize(path)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_fifo_is_never_opened_by_a_reader(tmp_path, reader):
    """A FIFO that took a listed file's name: opening it would wait forever for a writer."""
    make, fn = READERS[reader]
    path = tmp_path / ("in.jsonl" if reader == "jsonl" else "in.csv")
    make(path)
    listed = _listed(path)
    path.unlink()
    os.mkfifo(path)
    records, letters, counts = run(fn(), listed)  # returns: nothing opened it
    assert records == []
    assert [d["reason"] for d in letters] == [
        f"{path} is a FIFO (named pipe), not a regular file; not opened (opening it would "
        "wait for a writer)"]
    assert counts["unread_bytes"] == listed.size and counts["unread_files"] == 1


def test_a_device_is_never_opened_by_a_reader():
    records, letters, counts = run(READERS["csv"][1](), "/dev/zero")
    assert records == [] and counts["unread_regions"] == 1
    assert "/dev/zero is a character device" in letters[0]["reason"]


@pytest.mark.parametrize("data,name", [("products.parquet", "Parquet"),
                                       ("users.avro", "Avro")])
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_binary_file_among_text_files_is_unread_as_a_whole_naming_its_format(tmp_path, reader,
                                                                            data, name):
    """The file the launch samples is refused by name (test_input_slips.py); a later one is
    one unread region, never a header of garbled names and rows of dead letters."""
    import shutil

    path = tmp_path / "in.data"
    shutil.copy(pathlib.Path(__file__).resolve().parents[3] / "configs" / "data" / data, path)
    records, letters, counts = run(READERS[reader][1](), _listed(path))
    assert records == [] and len(letters) == 1, letters
    assert letters[0]["reason"].startswith(f"the file is {name} data (magic bytes ")
    assert counts["unread_bytes"] == path.stat().st_size and counts["read"] == 0


# -- Cloud Storage ------------------------------------------------------------------------------

def test_a_reuploaded_object_is_a_new_generation(gcs_emulator):
    path = gcs_emulator.unique_prefix("identity") + "/in.csv"
    first = "i,s\n" + "".join(f"{n},row-{n:05d}\n" for n in range(ROWS))
    with storage.open_write(path) as handle:
        handle.write(first.encode())
    listed = storage.identify(storage.match(path))[0]
    assert listed.generation is not None and listed.size == len(first)
    records, letters, _ = run(READERS["csv"][1](), listed)
    assert len(records) == ROWS and letters == []
    with storage.open_write(path) as handle:  # rewritten: half the rows
        handle.write(first[: len(first) // 2].rsplit("\n", 1)[0].encode() + b"\n")
    records, letters, counts = run(READERS["csv"][1](), listed)
    assert len(records) < ROWS
    assert [d["reason"].split(" after the launch")[0] for d in letters] == [
        f"{path} was replaced (object generation {listed.generation} -> "
        f"{storage.observe(path).generation}, {listed.size} -> "
        f"{storage.observe(path).size} bytes)"]
    assert counts["unread_bytes"] == listed.size


def test_a_cloud_storage_folder_as_the_input_is_named_a_directory(gcs_emulator):
    from beam_tfrecords.pipelines import build_inputs

    folder = gcs_emulator.unique_prefix("folder")
    with storage.open_write(folder + "/a.csv") as handle:
        handle.write(b"i\n1\n")
    with pytest.raises(build_inputs.BuildError,
                       match=rf"input {folder} is a directory, not a file or a glob of files; "
                             rf"use a glob of its files, e.g. {folder}/\*\.jsonl"):
        build_inputs.list_inputs(folder, "jsonl")
    listed = build_inputs.list_inputs(folder + "/*", "csv")[0]
    assert [f.path for f in listed] == [folder + "/a.csv"]


# -- at launch: the public sources and an image folder ------------------------------------------

def test_a_public_source_refuses_a_fifo_in_its_glob(tmp_path):
    import apache_beam as beam

    from beam_tfrecords.transforms.readers.framework import SourceError
    from beam_tfrecords.transforms.readers.read_csv import ReadCsv

    _csv(tmp_path / "a.csv")
    os.mkfifo(tmp_path / "b.csv")
    with pytest.raises(SourceError, match=r"ReadCsv: .*b\.csv is a FIFO \(named pipe\), not a "
                                          r"regular file; not opened"):
        beam.Pipeline() | ReadCsv(str(tmp_path / "*.csv"), {"i": {"type": "int64"}})


def test_a_fifo_among_images_is_refused_at_launch(tmp_path):
    import shutil

    from beam_tfrecords.pipelines import build_inputs
    from beam_tfrecords.pipelines.config import load_config

    root = tmp_path / "images"
    shutil.copytree(pathlib.Path(__file__).resolve().parents[3] / "configs" / "data" /
                    "images", root)
    os.mkfifo(root / "train" / "cat" / "zz.jpg")
    config = load_config(str(pathlib.Path(__file__).resolve().parents[3] / "configs" /
                             "images.yaml"))
    config = dataclasses.replace(config, source=dataclasses.replace(config.source,
                                                                    path=str(root)))
    with pytest.raises(build_inputs.BuildError, match=r"zz\.jpg is a FIFO"):
        build_inputs.plan_inputs(config)
