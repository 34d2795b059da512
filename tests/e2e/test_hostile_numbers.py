"""Numbers no parser should crash on, each build and ``init`` a command of its own (a crash
there cannot take the tests down with it); and what a native crash still says (crash_note),
in the installed console script too.

pyarrow 25's decimal cast segfaults on ``0e-999999999`` and ``1e-2147483647``: one such CSV
cell killed ``beam-tfrecords build`` with SIGSEGV, no line, a lease left behind; an exponent
past Decimal's range and an integer past ``int()``'s 4300 digits raised and failed the build.
Here each hostile cell goes into an int64, a float and a ``scale:`` int64 feature, as a CSV
cell and as a JSON number, and the build ends as the range rules say (coercion.RANGE_RULES):
a value or a dead letter with its reason, never a signal. And if native code does crash,
faulthandler's dump names the stage and the file that was being read or encoded.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import struct
import subprocess
import sys
import textwrap
import time

import pytest
from beam_tfrecords_tests_helpers import Preforked, read_examples, shard_paths

from beam_tfrecords.runtime import crash_note

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

SCRIPT = pathlib.Path(sys.executable).with_name("beam-tfrecords")
KINDS = {"n": "{type: int64}", "x": "{type: float}", "p": "{type: int64, scale: 2}"}
GOOD = {"n": "7", "x": "2.5", "p": "1.25"}
GOOD_STORED = {"n": 7, "x": 2.5, "p": 125}
F32_RANGE = "outside the float32 range; it would become inf"
# cell -> feature -> the stored value, or the words of its dead letter's reason
HOSTILE = {
    "0e-999999999": {"n": 0, "x": 0.0, "p": 0},
    "1e-2147483647": {"n": "has a fractional part", "x": 0.0, "p": "more than 2 decimal places"},
    "1e999999999999": {"n": "outside the int64 range", "x": F32_RANGE,
                       "p": "outside the int64 range"},
    "-0e-99999": {"n": 0, "x": -0.0, "p": 0},
    # past Decimal's exponent range, and past int()'s 4300 digits
    "1e-99999999999999999999": {"n": "has a fractional part", "x": 0.0,
                                "p": "more than 2 decimal places"},
    "9" * 5000: {"n": "outside the int64 range", "x": F32_RANGE, "p": "outside the int64 range"},
}


def _cases():
    """(id, feature, cell, expected) for one hostile cell per row, the other cells good."""
    cases, row_id = [], 0
    for cell, outcomes in HOSTILE.items():
        for feature, expected in outcomes.items():
            row_id += 1
            cases.append((row_id, feature, cell, expected))
    return cases


def _write_input(tmp_path: pathlib.Path, fmt: str) -> pathlib.Path:
    rows = []
    for row_id, feature, cell, _ in _cases():
        values = dict(GOOD, **{feature: cell})
        rows.append((row_id, values))
    if fmt == "csv":
        path = tmp_path / "in.csv"
        lines = ["id,n,x,p"] + [f"{i},{v['n']},{v['x']},{v['p']}" for i, v in rows]
    else:
        path = tmp_path / "in.jsonl"
        lines = [f'{{"id": {i}, "n": {v["n"]}, "x": {v["x"]}, "p": {v["p"]}}}' for i, v in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(command) -> subprocess.CompletedProcess:
    """Wait for a command forked by the ``preforked`` fixture (helpers.Preforked, whose
    server runs without faulthandler: only what a command turns on itself is on), as
    ``subprocess.run`` would. How the installed console script starts is tested below, and
    in test_kill.py."""
    try:
        command.wait(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(command.pid, signal.SIGKILL)
        command.wait()
        raise
    return subprocess.CompletedProcess([], command.returncode, command.stdout.read(),
                                       command.stderr.read())


def _bits(value):
    return struct.pack("<f", value) if isinstance(value, float) else value


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_hostile_numbers_are_values_or_dead_letters_never_a_crash(preforked, tmp_path, fmt):
    data = _write_input(tmp_path, fmt)
    out = tmp_path / "out"
    features = "\n".join(f"  {name}: {spec}" for name, spec in {"id": "{type: int64}",
                                                                 **KINDS}.items())
    config = tmp_path / "c.yaml"
    config.write_text(f"name: hostile\nsource: {{format: {fmt}, path: '{data}'}}\n"
                      f"features:\n{features}\noutput: {{path: '{out}'}}\n"
                      "errors: {max_bad_fraction: 1.0}\n")
    done = _run(preforked.command(["build", "--config", str(config)], cwd=tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    version = out / (out / "LATEST").read_text().strip()
    manifest = json.loads((version / "manifest.json").read_text())
    stored = {}
    for shard in shard_paths(version, manifest):
        for example in read_examples(shard):
            stored[example["id"][1][0]] = example
    letters = {}
    for path in version.glob("dead_letter/**/*.jsonl"):
        for line in path.read_text().splitlines():
            letter = json.loads(line)
            letters[letter["row"]] = letter
    for row_id, feature, cell, expected in _cases():
        if isinstance(expected, str):
            assert row_id in letters and row_id not in stored, (cell, feature)
            assert letters[row_id]["feature"] == feature, letters[row_id]
            assert expected in letters[row_id]["reason"], (cell, feature, letters[row_id])
        else:
            assert row_id in stored and row_id not in letters, (cell, feature, letters.get(
                row_id))
            got = stored[row_id][feature][1][0]
            assert _bits(got) == _bits(expected), (cell, feature, got)
            for other in set(GOOD) - {feature}:
                assert stored[row_id][other][1][0] == GOOD_STORED[other]
    assert manifest["counts"]["read"] == len(_cases())
    assert not (out / ".lease").exists()


# -- a native crash still names the stage and the file -------------------------------------------

def test_frame_names_are_printable_redacted_and_short():
    name = crash_note.frame_name("reading", "/data/a.csv")
    assert name == "[beam-tfrecords: reading /data/a.csv]"
    long = "gs://b/x.csv?access_token=SECRET\n\u00e9" + "y" * 999
    name = crash_note.frame_name("reading", long)
    assert "SECRET" not in name and "\n" not in name and name.isascii() and len(name) < 400


def _crash(preforked: Preforked, tmp_path: pathlib.Path, body: str
           ) -> subprocess.CompletedProcess:
    """Run ``body`` (which crashes in native code) in a Python process, without faulthandler,
    that enabled crash notes as the command line does."""
    env = dict(os.environ)
    env.pop("PYTHONFAULTHANDLER", None)
    return _run(preforked.start(
        "import ctypes, sys\nfrom beam_tfrecords.runtime import crash_note\n"
        "crash_note.enable()\n" + textwrap.dedent(body), [], cwd=tmp_path, env=env))


def test_a_native_crash_while_reading_names_the_file(preforked, tmp_path):
    data = tmp_path / "part-7.csv"
    data.write_text("a\n1\n")
    done = _crash(preforked, tmp_path, f"""
        from beam_tfrecords.transforms.readers.framework import ReadFileFn

        class Reader(ReadFileFn):
            def events(self, path, handle):
                handle.read(1)
                ctypes.string_at(0)  # a segfault in native code, as Arrow's cast was
                yield

        fn = Reader(None)
        fn.setup()
        list(fn.process({str(data)!r}))
        """)
    assert done.returncode == -signal.SIGSEGV, done.stderr[-2000:]
    assert "Fatal Python error: Segmentation fault" in done.stderr
    assert f"[beam-tfrecords: reading {data}]" in done.stderr, done.stderr[-2000:]


def test_a_native_crash_while_encoding_names_the_file(preforked, tmp_path):
    done = _crash(preforked, tmp_path, """
        import pyarrow as pa
        from beam_tfrecords.transforms.build_examples import _BuildExamplesFn
        from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
        from beam_tfrecords.transforms.codec.splits import SplitSpec
        from beam_tfrecords.transforms.readers.framework import RecordChunk

        fn = _BuildExamplesFn([FeatureSpec("a", "int64")], SplitSpec())
        fn.setup()
        fn._columnar.encode = lambda batch, *_: ctypes.string_at(0)
        batch = pa.record_batch({"a": [1, 2]})
        list(fn.process(RecordChunk("/data/part-3.parquet", 1, [], batch=batch)))
        """)
    assert done.returncode == -signal.SIGSEGV, done.stderr[-2000:]
    assert "[beam-tfrecords: encoding records of /data/part-3.parquet]" in done.stderr, \
        done.stderr[-2000:]


def test_the_console_script_dumps_its_stacks_on_a_fatal_signal(tmp_path):
    """faulthandler is on in the installed command: SIGSEGV mid-build prints every thread's
    stack (the frames that read or encode a file are named after it) instead of dying
    silently."""
    data = tmp_path / "big.csv"
    with data.open("w") as handle:
        handle.write("id,n\n")
        for start in range(0, 600_000, 10_000):
            handle.write("".join(f"{i},{i * 7}\n" for i in range(start, start + 10_000)))
    out = tmp_path / "out"
    config = tmp_path / "c.yaml"
    config.write_text(f"name: big\nsource: {{format: csv, path: '{data}'}}\n"
                      "features:\n  id: {type: int64}\n  n: {type: int64}\n"
                      f"output: {{path: '{out}'}}\n")
    env = dict(os.environ)
    env.pop("PYTHONFAULTHANDLER", None)
    proc = subprocess.Popen([str(SCRIPT), "build", "--config", str(config)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / ".lease").exists() and proc.poll() is None:
            assert time.monotonic() < deadline, "the build never took its lease"
            time.sleep(0.05)
        time.sleep(0.5)
        assert proc.poll() is None, "the build ended before the signal: make the input larger"
        proc.send_signal(signal.SIGSEGV)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGSEGV, err[-2000:]
    assert "Fatal Python error: Segmentation fault" in err, err[-2000:]
    assert "most recent call first" in err, err[-2000:]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_init_samples_hostile_numbers_without_crashing(preforked, tmp_path, fmt):
    """init types its sample with the reader's own casts (and looks for fixed decimal places
    with the scale: path's): the same cells end in a config, exit 0."""
    data = _write_input(tmp_path, fmt)
    done = _run(preforked.command(["init", "--input", str(data)], cwd=tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "features:" in done.stdout and "  n: {type:" in done.stdout, done.stdout
