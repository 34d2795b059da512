"""What the command prints when it fails: one line for an error the user can act on (a
UserError, however a runner wrapped it), a traceback for anything else, a traceback always with
--debug; Ctrl-C exits 130."""

from __future__ import annotations

import json
import pathlib

import apache_beam as beam
import pytest

from beam_tfrecords.errors import UserError
from beam_tfrecords.pipelines import cli
from beam_tfrecords.sinks.commit import CommitError
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpecError

TRACEBACK = "Traceback (most recent call last)"


def _command_raising(monkeypatch, error: BaseException, name: str = "verify") -> None:
    def command(argv):
        raise error

    monkeypatch.setitem(cli.COMMANDS, name, command)


def test_a_user_error_is_one_line(tmp_path, capsys):
    code = cli.main(["schema", "--config", str(tmp_path / "missing.yaml")])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1, err
    assert err.startswith("beam-tfrecords schema: ConfigError: cannot read config "), err


def test_an_unexpected_error_prints_its_traceback(monkeypatch, capsys):
    _command_raising(monkeypatch, KeyError("no_such_key"))
    assert cli.main(["verify", "somewhere"]) == 1
    err = capsys.readouterr().err
    assert TRACEBACK in err and "KeyError: 'no_such_key'" in err, err
    assert err.splitlines()[-1].startswith("beam-tfrecords verify: unexpected KeyError"), err


@pytest.mark.parametrize("argv", [
    ["--debug", "schema", "--config", "MISSING"],
    ["schema", "--debug", "--config", "MISSING"],
    ["schema", "--config", "MISSING", "--debug"],
])
def test_debug_anywhere_prints_the_traceback_of_a_user_error(argv, tmp_path, capsys):
    argv = [str(tmp_path / "missing.yaml") if a == "MISSING" else a for a in argv]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert TRACEBACK in err, err
    assert err.splitlines()[-1].startswith("beam-tfrecords schema: ConfigError: "), err


def test_the_usage_names_debug(capsys):
    assert cli.main(["--help"]) == 0
    assert "--debug" in capsys.readouterr().out
    assert cli.main(["no-such-command"]) == 2
    assert "--debug" in capsys.readouterr().err


def test_an_error_shipped_back_from_a_worker_as_text_is_one_line(monkeypatch, capsys):
    """multi_processing and PortableRunner raise a RuntimeError holding the worker's text."""
    text = ("Pipeline BeamApp-x failed in state FAILED: Traceback (most recent call last):\n"
            '  File "apache_beam/runners/common.py", line 1498, in process\n'
            "    raise new_exn\n"
            "beam_tfrecords.sinks.commit.CommitError: x [while running 'Commit/Finish']\n")
    _command_raising(monkeypatch, RuntimeError(text), "build")
    assert cli.main(["build"]) == 1
    assert capsys.readouterr().err == "beam-tfrecords build: CommitError: x\n"


def test_an_error_raised_while_handling_a_user_error_is_still_a_bug(monkeypatch, capsys):
    def command(argv):
        try:
            raise CommitError("the user's problem")
        except CommitError:
            return {}["a bug in the handler"]

    monkeypatch.setitem(cli.COMMANDS, "verify", command)
    assert cli.main(["verify"]) == 1
    err = capsys.readouterr().err
    assert TRACEBACK in err and "unexpected KeyError" in err, err


def test_interrupted_exits_130(monkeypatch, capsys):
    _command_raising(monkeypatch, KeyboardInterrupt())
    assert cli.main(["verify"]) == 130
    assert capsys.readouterr().err == "beam-tfrecords: interrupted\n"


def _fail_in_a_step(make_error) -> BaseException:
    def fail(_):
        raise make_error()  # made on the worker: an error with its own __init__ may not pickle

    with pytest.raises(Exception) as raised:
        with beam.Pipeline() as p:
            _ = p | beam.Create([1]) | "Fail here" >> beam.Map(fail)
    return raised.value


@pytest.mark.parametrize("make_error, name", [
    (lambda: CommitError("cannot commit: why"), "CommitError"),  # rebuilt, step appended
    # A constructor Beam cannot call with one message: it raises a RuntimeError instead.
    (lambda: FeatureSpecError("shape", "cannot commit: why"), "FeatureSpecError"),
])
def test_an_error_beam_wrapped_on_the_in_process_runner_is_one_line(make_error, name):
    line = cli.user_error_line(_fail_in_a_step(make_error))
    assert line is not None
    assert line[0] == name and line[1].endswith("cannot commit: why"), line
    assert "while running" not in line[1]


def test_every_user_error_class_is_known_by_name():
    """The names found for wrapped errors cover the classes that derive from UserError, even
    those whose modules nothing imported yet."""
    names = cli._user_error_names()
    assert {"CommitError", "BuildError", "ConfigError", "LeaseHeld", "LeaseLost",
            "ManifestError", "CorruptRecordError", "StorageUnavailable"} <= names
    assert "UserError" not in names and "ValueError" not in names
    assert all(issubclass(cls, UserError) for cls in (CommitError, FeatureSpecError))


def test_a_worker_processes_relayed_report_of_a_user_error_is_dropped():
    """multi_processing: the local job service relays each worker's log as text; the report
    of a user error goes (the command prints its one line), anything else stays."""
    import logging

    relayed = "apache_beam.runners.portability.local_job_service"
    assert relayed in cli._BEAM_STEP_LOGGERS

    def record(level, text):
        return logging.LogRecord(relayed, level, __file__, 1, "Worker: %s", (text,), None)

    drop = cli._DropUserErrorReports()
    user = ('severity: ERROR message: "Error processing instruction bundle_3. Original '
            'traceback is Traceback ... beam_tfrecords.sinks.early_stop.StoppedEarly: stopped '
            'early: 8000 of the first 10000 records"')
    assert not drop.filter(record(logging.ERROR, user))
    assert drop.filter(record(logging.WARNING, 'severity: WARN message: "No semi_persistent"'))
    assert drop.filter(record(logging.ERROR, 'message: "Traceback ... KeyError: \'x\'"'))


def test_every_command_names_the_module_it_imports():
    assert set(cli.COMMAND_MODULES) == set(cli.COMMANDS)


def _in_a_fresh_process(code: str) -> list[str]:
    """Run ``code`` in a new interpreter (freezing the collector would last for the rest of
    this test process) and return its printed lines."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    return done.stdout.split()


@pytest.mark.slow
def test_the_command_is_imported_with_the_collector_paused_and_left_as_it_was():
    """build's module (Beam with it) is imported only once its flags are checked
    (``_import_late``), still with the collector paused and the result frozen. The collector
    is left as it was: enabled, as here for Beam's import, and disabled, as before that for
    a command module not imported yet (one process: Beam's import happens once in it)."""
    seen = _in_a_fresh_process("""
import gc, sys
from beam_tfrecords.pipelines import cli
cli.import_command(["--debug", "build", "--config", "somewhere"])
print("apache_beam" in sys.modules)
module = cli.COMMAND_MODULES["verify"]
print(module in sys.modules)
gc.disable()
cli._import_late(module)
print(module in sys.modules, gc.isenabled(), gc.get_freeze_count() > 0)
gc.enable()
during = []
gc.callbacks.append(lambda phase, info: during.append(phase))
cli._import_late(cli.COMMAND_MODULES["build"])
print("beam_tfrecords.pipelines.build" in sys.modules, "apache_beam" in sys.modules,
      gc.isenabled(), gc.get_freeze_count() > 100000, len(during))
""")
    assert seen[:5] == ["False", "False", "True", "False", "True"], seen
    # Unpaused, importing Beam runs hundreds of collections; the few allowed here are for the
    # allocations between re-enabling the collector and the print.
    assert seen[5:9] == ["True", "True", "True", "True"], seen
    assert int(seen[9]) <= 4, seen


_COUNT_COLLECTIONS = """
import atexit, gc, os
seen = [0, 0, 0]
gc.callbacks.append(lambda phase, info: phase == "start" and seen.__setitem__(
    info["generation"], seen[info["generation"]] + 1))
atexit.register(lambda: open(os.environ["COLLECTIONS"], "w").write(
    " ".join(map(str, [*seen, gc.get_freeze_count()]))))
"""


@pytest.mark.slow
@pytest.mark.parametrize("beam_flags", [[], ["--direct_num_workers=1"]])
def test_the_console_script_builds_with_beam_imported_paused_and_frozen(tmp_path, beam_flags):
    """Whichever step of ``build`` imports Beam first -- its own module, or Beam's check of
    the flags' values when there are Beam flags -- it does so with the collector paused and
    freezes the result: Beam's import unpaused runs about 440 collections, and every later
    full collection walks its million objects (0.26 s of a 3 s build). The console script
    itself, watched from a ``sitecustomize`` that counts its collections."""
    import os
    import subprocess
    import sys

    (tmp_path / "watch").mkdir()
    (tmp_path / "watch" / "sitecustomize.py").write_text(_COUNT_COLLECTIONS)
    (tmp_path / "in.csv").write_text("a,b\n1,x\n2,y\n")
    config = tmp_path / "c.yaml"
    config.write_text(f"name: t\nsource: {{format: csv, path: '{tmp_path / 'in.csv'}'}}\n"
                      "features: {a: {type: int64}, b: {type: string}}\n"
                      f"output: {{path: '{tmp_path / 'out'}'}}\n")
    env = {**os.environ, "COLLECTIONS": str(tmp_path / "seen"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "watch"),
                                                       os.environ.get("PYTHONPATH")]))}
    script = pathlib.Path(sys.executable).with_name("beam-tfrecords")
    done = subprocess.run([str(script), "build", "--config", str(config), *beam_flags],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    gen0, gen1, gen2, frozen = map(int, (tmp_path / "seen").read_text().split())
    assert frozen > 100_000, frozen  # Beam's objects
    assert gen2 == 0 and gen0 + gen1 < 200, (gen0, gen1, gen2)


def test_a_failing_import_is_left_for_main_to_report():
    seen = _in_a_fresh_process("""
import gc
from beam_tfrecords.pipelines import cli
cli.COMMAND_MODULES["verify"] = "beam_tfrecords.no_such_module"
cli.import_command(["verify", "x"])
cli.import_command(["no-such-command"])
cli.import_command([])
print(gc.isenabled())
""")
    assert seen == ["True"]


@pytest.mark.slow
def test_the_console_script_exits_with_mains_status_and_flushes_its_output(tmp_path):
    import subprocess
    import sys

    demo = pathlib.Path(__file__).resolve().parents[2] / "configs" / "demo.yaml"
    ok = subprocess.run([sys.executable, "-m", "beam_tfrecords.pipelines.cli", "schema",
                         "--config", str(demo)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and json.loads(ok.stdout), ok.stderr
    bad = subprocess.run([sys.executable, "-m", "beam_tfrecords.pipelines.cli", "verify",
                          str(tmp_path / "missing")],  # a user error that needs no Beam
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    assert bad.stderr.startswith("beam-tfrecords verify: NoMatch: ")
    usage = subprocess.run([sys.executable, "-m", "beam_tfrecords.pipelines.cli"],
                           capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: beam-tfrecords")
