"""Inputs that are not what a build can read, through the installed console script: a
folder, a FIFO, a device, a socket, a symlink to a device, a Parquet or Avro file read as
text -- each refused in one line before anything is opened or written -- and an input that is
replaced after the launch listed it, which never commits short (the command's ``entry()`` in a
process of its own, forked from a server that imported Beam once: what it shows is what the
build reads, not how the program starts)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = pathlib.Path(sys.executable).with_name("beam-tfrecords")
DATA = ROOT / "configs" / "data"
TIMEOUT = 180  # seconds: a FIFO that is opened hangs until this kills the test


def command(*argv, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT, env=dict(os.environ))


def one_line(result: subprocess.CompletedProcess, prefix: str) -> str:
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(prefix), result.stderr
    return result.stderr


def _rows(first: int, last: int, tag: str) -> str:
    return "id,name\n" + "".join(f"{i},{tag}-{i}\n" for i in range(first, last))


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text(_rows(0, 100, "a"))
    (tmp_path / "c.yaml").write_text(textwrap.dedent("""\
        name: t
        source: {format: csv, path: in/*.csv}
        features: {id: {type: int64}, name: {type: string}}
        output: {path: out}
        """))
    return tmp_path


def build(folder, *argv):
    return command("build", "--config", "c.yaml", *argv, cwd=folder)


def test_an_input_folder_is_refused_with_the_glob_to_use(folder):
    line = one_line(build(folder, "--input", "in"), "beam-tfrecords build: BuildError: ")
    assert "input in is a directory" in line and "e.g. in/*.csv" in line
    assert not (folder / "out").exists()


def _fifo(path):
    os.mkfifo(path)


def _socket(path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))  # the file stays after the socket closes
    server.close()


def _zero(path):
    path.symlink_to("/dev/zero")


@pytest.mark.parametrize("make,kind", [(_fifo, "a FIFO (named pipe)"), (_socket, "a socket"),
                                       (_zero, "a character device")])
def test_a_special_file_in_the_glob_is_refused_unopened(folder, make, kind):
    make(folder / "in" / "b.csv")  # sorted after a.csv: not the file the launch samples
    line = one_line(build(folder), "beam-tfrecords build: BuildError: ")
    assert f"input in/b.csv is {kind}, not a regular file; not opened" in line
    assert not (folder / "out").exists()


def test_dev_zero_as_the_input_is_refused(folder):
    line = one_line(build(folder, "--input", "/dev/zero"), "beam-tfrecords build: BuildError: ")
    assert "/dev/zero is a character device" in line


@pytest.mark.parametrize("data,fmt,name", [("products.parquet", "csv", "Parquet"),
                                           ("users.avro", "jsonl", "Avro")])
def test_a_binary_format_read_as_text_is_named(folder, data, fmt, name):
    shutil.copy(DATA / data, folder / "in" / f"x.{fmt}")
    line = one_line(build(folder, "--input", f"in/x.{fmt}"),
                    "beam-tfrecords build: BuildError: ")
    assert f"in/x.{fmt}: the file is {name} data" in line
    assert f"read it with format {name.lower()}" in line


def test_init_on_a_folder_of_data_files_says_so(folder):
    line = one_line(command("init", "--input", "in", cwd=folder),
                    "beam-tfrecords init: InitError: ")
    assert "no image files" not in line
    assert "in is a directory of csv files" in line and "--input in/*.csv" in line


def test_init_on_special_files_and_binary_formats_is_one_line(folder):
    _fifo(folder / "in" / "p.csv")
    line = one_line(command("init", "--input", "in/p.csv", cwd=folder),
                    "beam-tfrecords init: InitError: ")
    assert "in/p.csv is a FIFO (named pipe)" in line
    os.remove(folder / "in" / "p.csv")
    shutil.copy(DATA / "products.parquet", folder / "in" / "p.csv")
    line = one_line(command("init", "--input", "in/p.csv", cwd=folder),
                    "beam-tfrecords init: InitError: ")
    assert "the file is Parquet data" in line and "--format parquet" in line


# -- an input replaced after the listing --------------------------------------------------------

# Run before the command's entry(): when the build's reader opens SWAP_ON_OPEN, the file is
# first replaced by SWAP_ON_OPEN + ".new" -- after the launch listed it, before it is read; a
# hook at the filesystem boundary, not a race.
SWAPPING_BUILD = """
import os
from beam_tfrecords.runtime import storage
target = os.environ["SWAP_ON_OPEN"]
_open = storage.open_read
def open_read(path):
    if os.path.abspath(path) == target and os.path.exists(target + ".new"):
        os.replace(target + ".new", target)
    return _open(path)
storage.open_read = open_read
from beam_tfrecords.pipelines.cli import entry
entry()
"""


def swapping_build(preforked, folder) -> subprocess.CompletedProcess:
    """``beam-tfrecords build --config c.yaml`` in ``folder``, its ``in/b.csv`` replaced by
    ``in/b.csv.new`` when the build opens it; answered as ``subprocess.run`` does."""
    env = dict(os.environ, SWAP_ON_OPEN=str(folder / "in" / "b.csv"))
    proc = preforked.start(SWAPPING_BUILD, ["build", "--config", "c.yaml"], cwd=folder, env=env)
    returncode = proc.wait(timeout=TIMEOUT)
    return subprocess.CompletedProcess(proc.pid, returncode, proc.stdout.read(),
                                       proc.stderr.read())


def test_an_input_replaced_after_the_listing_fails_the_build_naming_it(folder, preforked):
    (folder / "in" / "b.csv").write_text(_rows(100, 200, "b"))
    (folder / "in" / "b.csv.new").write_text(_rows(100, 150, "c"))  # half as long
    line = one_line(swapping_build(preforked, folder),
                    "beam-tfrecords build: CommitError: 1 input file(s) changed while the "
                    "build read them")
    assert "in/b.csv was replaced by another file" in line
    assert not (folder / "in" / "b.csv.new").exists()  # the hook did swap it
    assert not (folder / "out" / "LATEST").exists()
    assert not list((folder / "out").glob("*/manifest.json"))


def test_where_unread_input_is_allowed_the_manifest_says_what_was_read(folder, preforked):
    (folder / "in" / "b.csv").write_text(_rows(100, 200, "b"))
    (folder / "in" / "b.csv.new").write_text(_rows(100, 150, "c"))
    listed_b = (folder / "in" / "b.csv").stat().st_size
    listed = listed_b + (folder / "in" / "a.csv").stat().st_size
    config = (folder / "c.yaml").read_text() + "errors: {max_unread_fraction: 0.9}\n"
    (folder / "c.yaml").write_text(config)
    done = swapping_build(preforked, folder)
    assert done.returncode == 0, done.stderr
    version = (folder / "out" / "LATEST").read_text().strip()
    manifest = json.loads((folder / "out" / version / "manifest.json").read_text())
    read = sum(p.stat().st_size for p in (folder / "in").glob("*.csv"))
    assert read < listed
    assert manifest["inputs"]["bytes"] == read and manifest["inputs"]["changed_files"] == 1
    assert manifest["counts"]["read"] == 150  # 100 of a.csv, 50 of the new b.csv
    # The replaced file as listed is what the build cannot vouch for.
    assert manifest["counts"]["unread"] == {"files": 1, "bytes": listed_b, "rows": 0,
                                            "changed_files": 1}
