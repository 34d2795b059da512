"""Trust (issue #13): a build deletes only what it can prove it wrote, overlapping builds are
safe, the commit always finishes or rolls back, names are checked whole, and a failed build
keeps its dead letters -- on local disk and, where storage matters, on the GCS emulator.

Each test is one case from the issue's "Why", reproduced as a user or an attacker would.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import time

import pytest

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.verify import verify_path
from beam_tfrecords.runtime import storage, threaded_file
from beam_tfrecords.sinks import commit, conditional, ownership
from beam_tfrecords.sinks.lease import Lease

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo.yaml"
DEMO_CSV = ROOT / "configs" / "data" / "demo.csv"
HEADER = "id,feature0,feature1,feature2,feature3\n"


@pytest.fixture
def small_csv(tmp_path) -> pathlib.Path:
    rows = DEMO_CSV.read_text().splitlines(keepends=True)
    path = tmp_path / "in" / "demo.csv"
    path.parent.mkdir()
    path.write_text("".join(rows[:301]))
    return path


@pytest.fixture(scope="module")
def _committed_once(tmp_path_factory) -> pathlib.Path:
    """An output on local disk holding one version, "v1", of the 300-row demo: committed by
    a real build, once for the module."""
    folder = tmp_path_factory.mktemp("committed")
    data = folder / "demo.csv"
    data.write_text("".join(DEMO_CSV.read_text().splitlines(keepends=True)[:301]))
    out = folder / "out"
    assert cli.main(args(DEMO, data, str(out), "--version", "v1")) == 0
    return out


@pytest.fixture
def committed(tmp_path, _committed_once) -> pathlib.Path:
    """``tmp_path/out`` holding a copy of that output, byte for byte: what a test that starts
    from a committed version would have built first."""
    out = tmp_path / "out"
    shutil.copytree(_committed_once, out)
    assert commit.read_latest(str(out)) == "v1"
    return out


@pytest.fixture(scope="module")
def _committed_once_on_gcs(gcs_emulator, tmp_path_factory) -> dict[str, bytes]:
    """The same on the GCS emulator, once for the module: its objects (name below the output
    -> content)."""
    folder = tmp_path_factory.mktemp("committed-gcs")
    data = folder / "demo.csv"
    data.write_text("".join(DEMO_CSV.read_text().splitlines(keepends=True)[:301]))
    out = gcs_emulator.unique_prefix("committed")
    assert cli.main(args(DEMO, data, out, "--version", "v1")) == 0
    return tree(out)


def committed_on_gcs(request) -> str:
    """A fresh prefix on the emulator holding a copy of that output, object for object."""
    emulator = request.getfixturevalue("gcs_emulator")
    out = emulator.unique_prefix("trust")
    for name, data in request.getfixturevalue("_committed_once_on_gcs").items():
        emulator.upload(f"{out}/{name}", data)
    assert commit.read_latest(out) == "v1"
    return out


@pytest.fixture(params=["local", "gcs"])
def committed_root(request, tmp_path) -> str:
    """An output root on local disk or on the GCS emulator holding a copy of version "v1"
    (the ``committed`` fixture's, or its counterpart's on the emulator)."""
    if request.param == "local":
        return str(request.getfixturevalue("committed"))
    return committed_on_gcs(request)


@pytest.fixture(params=["local", "gcs"])
def root(request, tmp_path) -> str:
    """An output root on local disk or on the GCS emulator."""
    if request.param == "local":
        return str(tmp_path / "out")
    emulator = request.getfixturevalue("gcs_emulator")
    return emulator.unique_prefix("trust")


def put(path: str, data: bytes) -> None:
    if storage.is_local(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    storage.write_atomic(path, data)


def tree(root: str) -> dict[str, bytes]:
    """Every file below ``root`` (relative path -> bytes)."""
    prefix = root.rstrip("/") + "/"
    out = {}
    for path in storage.list_files(root):
        with storage.open_read(path) as handle:
            out[path[len(prefix):]] = handle.read()
    return out


def args(config, data, root, *more) -> list[str]:
    return ["build", "--config", str(config), "--input", str(data), "--output", root, *more]


# -- ownership --

FOREIGN = {
    # Another tool's TFRecord export, named exactly like ours, with its spec beside it.
    "train/demo-00000-of-00002.tfrecord": b"theirs-0",
    "train/demo-00001-of-00002.tfrecord": b"theirs-1",
    "feature_spec.json": b"{}",
    # A folder that happens to hold a .staging/ directory, and one shaped like a version.
    "project/.staging/notes.txt": b"keep me",
    "old/manifest.json": b'{"created": "2020"}',
    "old/train/x-00000-of-00001.tfrecord": b"not ours either",
}


@pytest.mark.slow
def test_another_tools_files_are_never_deleted_or_changed(small_csv, root, capsys):
    for name, data in FOREIGN.items():
        put(f"{root}/{name}", data)
    assert cli.main(args(DEMO, small_csv, root, "--version", "v1")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--allow-non-empty-output" in err
    assert tree(root) == FOREIGN  # refused: nothing written, nothing removed

    assert cli.main(args(DEMO, small_csv, root, "--version", "v1",
                         "--allow-non-empty-output")) == 0
    after = tree(root)
    assert {k: after[k] for k in FOREIGN} == FOREIGN  # beside them, never over them
    assert commit.read_latest(root) == "v1"
    assert all(check.ok for check in verify_path(f"{root}/v1"))


@pytest.mark.slow
def test_a_folder_with_our_marker_but_foreign_files_keeps_the_foreign_files(small_csv, root):
    """Leftovers of a dead build lose what that build writes; a file someone put there stays."""
    marker = ownership.Marker("d" * 32, "dead", "2026-01-01T00:00:00Z", "0.1.0")
    put(f"{root}/dead/.beam-tfrecords-build", marker.dumps())
    put(f"{root}/dead/.staging/train/part.tfrecord", b"partial")
    put(f"{root}/dead/train/demo-00000-of-00001.tfrecord", b"finalized")
    put(f"{root}/dead/mine.txt", b"someone's note")
    assert cli.main(args(DEMO, small_csv, root, "--version", "v1",
                         "--allow-non-empty-output")) == 0
    left = {k for k in tree(root) if k.startswith("dead/")}
    assert left == {"dead/mine.txt"}


# -- names --

@pytest.mark.parametrize("version", ["LATEST", "latest", "v1\n", ".lease", ".failed", "..",
                                     "a/b", ".staging", "dead_letter", "x" * 129])
def test_bad_version_names_are_refused_before_anything_runs(small_csv, tmp_path, version,
                                                            capsys):
    out = tmp_path / "out"
    assert cli.main(args(DEMO, small_csv, str(out), "--version", version)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "version name" in err
    assert not out.exists()


@pytest.mark.slow
def test_latest_as_a_version_cannot_break_the_location(small_csv, tmp_path):
    out = tmp_path / "out"
    assert cli.main(args(DEMO, small_csv, str(out), "--version", "LATEST")) == 1
    assert cli.main(args(DEMO, small_csv, str(out), "--version", "ok")) == 0
    assert cli.main(args(DEMO, small_csv, str(out))) == 0  # later builds still work


# -- the lease --

@pytest.mark.slow
def test_a_second_build_refuses_at_start_naming_the_holder(small_csv, root, capsys):
    holder = Lease(root, "f" * 32)
    holder.acquire()
    try:
        assert cli.main(args(DEMO, small_csv, root, "--version", "v1")) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "leased by build ffffffff" in err and "until" in err
        assert "--wait-for-lease" in err
        started = time.monotonic()
        assert cli.main(args(DEMO, small_csv, root, "--version", "v1",
                             "--wait-for-lease", "1")) == 1
        assert time.monotonic() - started >= 1
        assert not [k for k in tree(root) if not k.startswith(".lease")]
    finally:
        holder.release()
    assert cli.main(args(DEMO, small_csv, root, "--version", "v1")) == 0
    assert not [k for k in tree(root) if k.startswith(".lease")]  # released at the end


@pytest.fixture
def spawn(preforked):
    """Start ``beam-tfrecords ARGV`` (the console script's ``entry()``) as a process of its
    own, in a session of its own, forked from a server that imported Beam once (the
    ``preforked`` fixture): these tests are about overlapping and killed builds, not about
    how the program starts, and a fresh interpreter per build would double their cost."""
    return lambda argv: preforked.command(argv, cwd=ROOT)


@pytest.mark.slow
def test_two_builds_of_the_same_version_started_together(small_csv, tmp_path, spawn):
    """Both exit, one commits; the other refuses (lease) or, waiting, finds it committed."""
    out = str(tmp_path / "out")
    procs = [spawn(args(DEMO, small_csv, out, "--version", "v", *extra))
             for extra in ([], ["--wait-for-lease", "60"])]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    (failed_err,) = [err for code, err in results if code == 1]
    assert "leased by build" in failed_err or "already committed" in failed_err, failed_err
    assert commit.read_latest(out) == "v"
    assert all(check.ok for check in verify_path(f"{out}/v"))


@pytest.mark.slow
def test_overlapping_default_versions_both_commit_when_the_second_waits(small_csv, tmp_path,
                                                                        spawn):
    out = str(tmp_path / "out")
    # Either may take the lease first (interpreter start-up varies): both wait for it.
    first = spawn(args(DEMO, small_csv, out, "--wait-for-lease", "60"))
    second = spawn(args(DEMO, small_csv, out, "--wait-for-lease", "60"))
    for proc in (first, second):
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    versions = commit.committed_versions(out)
    assert len(versions) == 2
    assert commit.read_latest(out) == versions[-1][1]  # the one committed last
    for _, version in versions:
        assert all(check.ok for check in verify_path(f"{out}/{version}"))


# -- the commit --

@pytest.mark.slow
def test_a_failure_between_manifest_and_latest_is_completed_by_a_rerun(small_csv,
                                                                       committed_root,
                                                                       monkeypatch, capsys):
    root = committed_root  # v1
    real = commit.move_latest

    def disk_full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(commit, "move_latest", disk_full)
    assert cli.main(args(DEMO, small_csv, root, "--version", "v2")) == 1
    assert storage.exists(f"{root}/v2/manifest.json")  # committed, not yet published
    assert commit.read_latest(root) == "v1"
    monkeypatch.setattr(commit, "move_latest", real)
    capsys.readouterr()
    # The same command again completes the commit instead of refusing the version.
    assert cli.main(args(DEMO, small_csv, root, "--version", "v2")) == 0
    assert "completed its commit" in capsys.readouterr().err
    assert commit.read_latest(root) == "v2"
    assert not [k for k in tree(root) if "/.staging/" in k]
    assert all(check.ok for check in verify_path(f"{root}/v2"))


@pytest.mark.slow
def test_a_full_disk_while_writing_parts_fails_the_build_naming_the_file(small_csv, committed,
                                                                          monkeypatch, capsys):
    """Staged parts are written by a thread of their own (runtime/threaded_file.py): its error
    still fails the build, with the file named, and nothing is committed."""
    root = str(committed)  # v1

    def disk_full(fd, buffers):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(threaded_file.os, "writev", disk_full)
    capsys.readouterr()
    assert cli.main(args(DEMO, small_csv, root, "--version", "v2")) == 1
    said = capsys.readouterr().err
    assert said.startswith("beam-tfrecords build: StorageWriteError: writing "), said
    assert "No space left on device" in said and ".staging" in said, said
    assert not storage.exists(f"{root}/v2/manifest.json")
    assert commit.read_latest(root) == "v1"


@pytest.mark.slow
def test_any_next_build_completes_an_interrupted_commit(small_csv, tmp_path, monkeypatch):
    out = str(tmp_path / "out")
    real = commit.move_latest
    monkeypatch.setattr(commit, "move_latest",
                        lambda *a, **k: (_ for _ in ()).throw(OSError(28, "disk full")))
    assert cli.main(args(DEMO, small_csv, out, "--version", "a")) == 1
    assert (tmp_path / "out" / "a" / ".staging").exists()
    monkeypatch.setattr(commit, "move_latest", real)
    assert cli.main(args(DEMO, small_csv, out, "--version", "b")) == 0
    assert commit.read_latest(out) == "b"
    assert not (tmp_path / "out" / "a" / ".staging").exists()  # committed: staging removed
    assert (tmp_path / "out" / "a" / "manifest.json").exists()


def test_latest_never_moves_back(tmp_path):
    root = str(tmp_path)
    for name, created in (("old", "2026-01-01T00:00:00Z"), ("new", "2026-06-01T00:00:00Z")):
        put(f"{root}/{name}/manifest.json", json.dumps({"created": created}).encode())
    assert commit.move_latest(root, "new", "2026-06-01T00:00:00Z")
    assert not commit.move_latest(root, "old", "2026-01-01T00:00:00Z")
    assert commit.read_latest(root) == "new"


def test_a_committed_manifest_is_never_rewritten(tmp_path):
    path = str(tmp_path / "v" / "manifest.json")
    assert conditional.create(path, b"first") is not None
    assert conditional.create(path, b"second") is None
    assert pathlib.Path(path).read_bytes() == b"first"


# -- failed builds keep their dead letters --

@pytest.mark.slow
def test_a_failed_build_keeps_its_dead_letters_and_names_the_top_reasons(small_csv, root,
                                                                         capsys):
    bad = small_csv.parent / "bad.csv"
    bad.write_text(HEADER + "1,true,1,dog,0.5\n" + "2,maybe,1,dog,0.5\n" * 3
                   + "3,true,1,dog,1e40\n" * 2 + "4,true,x,dog,0.5\n" + "5,false\n")
    assert cli.main(args(DEMO, bad, root, "--version", "v")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "7 of 8 records were rejected" in err
    assert "/.failed/v-" in err and "dead_letter" in err
    assert ("top reasons: 3 x column 'feature0': not an integer or true/false | 2 x feature "
            "'feature3': expected float") in err
    kept = [k for k in tree(root) if k.startswith(".failed/")]
    assert any(k.endswith("failure.json") for k in kept)
    assert not storage.exists(f"{root}/v/manifest.json")
    assert not [k for k in tree(root) if k.startswith("v/")]  # rolled back whole
    # The next build -- even of the same version -- keeps them.
    assert cli.main(args(DEMO, small_csv, root, "--version", "v")) == 0
    assert [k for k in tree(root) if k.startswith(".failed/")] == kept


@pytest.mark.slow
def test_retention_removes_old_failed_builds_dead_letters(small_csv, tmp_path):
    out = str(tmp_path / "out")
    bad = small_csv.parent / "bad.csv"
    bad.write_text(HEADER + "2,maybe,1,dog,0.5\n")
    for version in ("f1", "f2", "f3"):
        assert cli.main(args(DEMO, bad, out, "--version", version)) == 1
    assert cli.main(args(DEMO, small_csv, out, "--version", "ok", "--keep-versions", "2")) == 0
    kept = sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "out" / ".failed").iterdir())
    assert kept == ["f2", "f3"]


# -- kill -9 at any moment of two overlapping builds --

def _check_location(out: str) -> None:
    """Every committed version passes verify and LATEST names one of them."""
    versions = [v for _, v in commit.committed_versions(out)]
    for version in versions:
        checks = verify_path(f"{out}/{version}")
        assert all(c.ok for c in checks), (version, [c.problems for c in checks if not c.ok])
    latest = commit.read_latest(out)
    assert latest is None or latest in versions, (latest, versions)


@pytest.mark.parametrize("beside_marker", [False, True])
def test_a_claim_killed_before_its_marker_was_linked_is_cleaned_up(small_csv, committed,
                                                                   beside_marker):
    """On local disk the marker is written to a temporary, then linked into place: a build
    killed between the two leaves ``.beam-tfrecords-build.tmp-<id>`` in its folder, alone or
    beside the marker. That folder is an abandoned claim, not someone else's files: the next
    build removes it rather than refusing the output."""
    out = committed  # v1
    folder = out / "r0"
    folder.mkdir()
    marker = ownership.Marker("d" * 32, "r0", "2026-11-26T00:00:00Z", "0.1.0").dumps()
    (folder / f".beam-tfrecords-build.tmp-{'e' * 32}").write_bytes(marker[:20])
    if beside_marker:
        (folder / ".beam-tfrecords-build").write_bytes(marker)
    assert cli.main(args(DEMO, small_csv, str(out), "--version", "after")) == 0
    assert not folder.exists()
    state = ownership.scan(str(out))
    assert not state.claimed and not state.foreign


def pause(seconds: float, procs) -> None:
    """Sleep ``seconds``, or less once none of ``procs`` runs any more: a kill drawn for a
    moment after both builds ended would find nothing to kill."""
    deadline = time.monotonic() + seconds
    while any(proc.poll() is None for proc in procs):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(0.05, left))


@pytest.mark.parametrize("where,seed", [("local", 0), ("local", 1), ("local", 2),
                                        ("local", 3), ("gcs", 4)])
@pytest.mark.slow
def test_kill_9_at_any_moment_of_two_overlapping_builds(small_csv, request, spawn,
                                                        where, seed):
    rng = random.Random(seed)
    if where == "local":
        out = str(request.getfixturevalue("committed"))  # v1
    else:
        out = committed_on_gcs(request)  # v1
    for round_ in range(2):
        same = rng.random() < 0.5  # the same --version for both, or defaults
        extra = ["--version", f"r{round_}"] if same else []
        procs = [spawn(args(DEMO, small_csv, out, *extra, "--wait-for-lease", "30")),
                 spawn(args(DEMO, small_csv, out, *extra, "--wait-for-lease", "30"))]
        pause(rng.uniform(0.5, 4.0), procs)
        for proc in procs:
            if rng.random() < 0.7 and proc.poll() is None:  # still running: kill it now
                os.killpg(proc.pid, signal.SIGKILL)
            pause(rng.uniform(0.0, 0.5), procs)
        for proc in procs:
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        _check_location(out)
    # The next build succeeds and leaves no leftovers of the killed ones.
    assert cli.main(args(DEMO, small_csv, out, "--version", "after")) == 0
    _check_location(out)
    state = ownership.scan(out)
    assert not state.claimed and not state.foreign
    assert not [f for f in storage.list_files(out) if "/.staging/" in f]


# -- every input byte is accounted for ----------------------------------------------------------

def test_unread_input_fails_the_build_by_default_and_is_counted_when_allowed(tmp_path, capsys):
    """The issue's case: a long valid cell, a malformed quote and an unterminated one. The long
    cell is a value, the malformed row one dead letter, the rest after the unterminated quote
    unread input -- which fails the build unless errors.max_unread_fraction allows it."""
    data = tmp_path / "in.csv"
    long_cell = "x" * 150_000
    data.write_text(HEADER + f"1,true,1,{long_cell},0.5\n" + "2,true,1,\"do\"g,0.5\n"
                    + "".join(f"{i},true,1,cat,0.5\n" for i in range(3, 103))
                    + "103,true,1,\"never closed,0.5\n" + "104,true,1,cat,0.5\n" * 50)
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text(DEMO.read_text().replace(
        "max_bad_fraction: 0.0", "max_bad_fraction: 0.5\n  max_unread_fraction: 0.5"))
    out = tmp_path / "out"
    assert cli.main(args(lenient, data, str(out), "--version", "ok")) == 0
    manifest = json.loads((out / "ok" / "manifest.json").read_text())
    counts = manifest["counts"]
    assert counts["written"] == 101 and counts["rejected"] == 1  # the long cell is a value
    assert counts["read"] == counts["written"] + counts["rejected"]
    assert counts["unread"]["files"] == 1 and counts["unread"]["bytes"] > 50 * 18
    dead = [json.loads(line) for f in (out / "ok" / "dead_letter").iterdir()
            for line in f.read_text().splitlines()]
    assert sorted(row.get("kind") for row in dead) == ["rejected", "unread"]
    capsys.readouterr()
    strict = tmp_path / "strict.yaml"
    strict.write_text(DEMO.read_text().replace("max_bad_fraction: 0.0", "max_bad_fraction: 0.5"))
    assert cli.main(args(strict, data, str(out), "--version", "strict")) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "could not be read" in err and "max_unread_fraction" in err
    assert commit.read_latest(str(out)) == "ok"


@pytest.mark.slow
def test_a_latest_set_by_hand_to_an_older_version_is_not_rolled_forward(small_csv, tmp_path):
    """Only an interrupted commit is completed: a LATEST pinned back on purpose stays."""
    out = str(tmp_path / "out")
    for version in ("v1", "v2"):
        assert cli.main(args(DEMO, small_csv, out, "--version", version)) == 0
    (tmp_path / "out" / "LATEST").write_text("v1\n")  # an operator's rollback
    assert cli.main(args(DEMO, small_csv, out, "--skip-if-unchanged")) == 0  # prepares, skips
    assert commit.read_latest(out) == "v1"


def test_temporary_files_of_a_killed_atomic_write_do_not_block_the_next_build(small_csv,
                                                                               committed):
    out = committed  # v1
    (out / ("LATEST.tmp-" + "a" * 32)).write_text("v0\n")
    (out / (".lease.tmp-" + "b" * 32)).write_text("{")
    assert cli.main(args(DEMO, small_csv, str(out), "--version", "v2")) == 0


@pytest.mark.slow
def test_a_failed_build_prints_one_line_not_beams_traceback(tmp_path, spawn):
    """Beam logs a step's error with its traceback; for a user error the command's one line
    is all a scheduler's log gets (``--debug`` brings the traceback back). The command's
    ``entry()`` in a process of its own; test_kill.py starts the installed script itself."""
    data = tmp_path / "bad.csv"
    data.write_text(HEADER + "1,true,1,dog,0.5\n2,maybe,1,dog,0.5\n")
    command = args(DEMO, data, str(tmp_path / "out"), "--version", "v")
    done = spawn(command)
    assert done.wait(timeout=120) == 1
    said = done.stderr.read()
    assert said.count("\n") == 1, said
    assert "max_bad_fraction" in said
    debug = spawn(["--debug", *command])
    assert debug.wait(timeout=120) == 1 and "Traceback" in debug.stderr.read()
