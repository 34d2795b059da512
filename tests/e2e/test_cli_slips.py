"""What users type, through the console script in a process of its own: secrets never reach a
printed line, no line prints raw bytes, odd output states and flag typos end in one line before
anything is written, and a closed pipe (``| head``) ends the command quietly with status 141.
Where only what the command prints matters, its ``entry()`` is forked from a server that
imported Beam once (:func:`forked`); everything else runs the installed script."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from beam_tfrecords.pipelines import cli, flags
from beam_tfrecords.sinks.format.redact import REDACTED, SafeLines, printable, safe_text

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = pathlib.Path(sys.executable).with_name("beam-tfrecords")
DEMO = ROOT / "configs" / "demo.yaml"
DEMO_CSV = ROOT / "configs" / "data" / "demo.csv"
TIMEOUT = 300

# One query string carrying every kind of signed-URL secret, and a URL with a password.
SECRETS = ("Tok3nA", "GoogSigB", "GoogCredC", "AmzSigD", "AmzCredE", "AmzTokF", "AzureSigG",
           "Passw0rdH")
QUERY = ("?access_token=Tok3nA&X-Goog-Signature=GoogSigB&X-Goog-Credential=GoogCredC"
         "&X-Amz-Signature=AmzSigD&X-Amz-Credential=AmzCredE&X-Amz-Security-Token=AmzTokF"
         "&sig=AzureSigG")
PASSWORD_URL = "https://alice:Passw0rdH@example.com/data"


def run(*args, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    """The console script with ``args``; output as bytes, so raw bytes can be looked for."""
    return subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, cwd=cwd,
                          env=os.environ.copy(), timeout=TIMEOUT)


def forked(preforked, *args) -> subprocess.CompletedProcess:
    """``beam-tfrecords ARGS`` as :func:`run` answers it, its ``entry()`` forked from the
    ``preforked`` server (Beam imported once): for what a command prints and leaves, which
    does not depend on how the program started. Slips, flag typos and raw bytes (start-up
    and lazy imports matter there) go through the installed script itself."""
    proc = preforked.command([str(a) for a in args], cwd=ROOT)
    code = proc.wait(timeout=TIMEOUT)
    return subprocess.CompletedProcess(args, code, proc.stdout.read().encode(),
                                       proc.stderr.read().encode())


def leaked(done: subprocess.CompletedProcess) -> list[str]:
    text = (done.stdout + done.stderr).decode("utf-8", "replace")
    return [secret for secret in SECRETS if secret in text]


def tree(folder: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def config(tmp_path) -> pathlib.Path:
    """The demo config over 300 rows, writing to tmp_path/out."""
    data = tmp_path / "in" / "demo.csv"
    data.parent.mkdir()
    data.write_text("".join(DEMO_CSV.read_text().splitlines(keepends=True)[:301]))
    path = tmp_path / "demo.yaml"
    path.write_text(DEMO.read_text().replace("configs/data/demo.csv", str(data))
                    .replace("output/demo", str(tmp_path / "out")))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory, preforked) -> tuple[pathlib.Path, subprocess.CompletedProcess]:
    """A build whose input folder and output root carry secrets in their names (``?`` is a
    glob's one-character wildcard, so it matches itself); progress lines on. Forked
    (:func:`forked`); the tests reading its output run the installed script."""
    base = tmp_path_factory.mktemp("secrets")
    folder = base / f"in{QUERY}"
    folder.mkdir()
    (folder / "demo.csv").write_text(
        "".join(DEMO_CSV.read_text().splitlines(keepends=True)[:301]))
    out = base / f"out{QUERY}"
    done = forked(preforked, "build", "--config", DEMO, "--input", f"{folder}/*.csv",
                  "--output", out, "--version", "v", "--progress-interval", "0.05")
    return out, done


# --- secrets ---------------------------------------------------------------------------------


def test_a_build_over_paths_with_secrets_prints_none_of_them(built):
    out, done = built
    assert done.returncode == 0, done.stderr.decode()
    assert (out / "v" / "manifest.json").exists()
    assert b"built demo version v" in done.stdout
    assert leaked(done) == []


def test_worker_processes_print_no_secret_either(tmp_path, preforked):
    """multi_processing workers print a failed step's traceback to the shared stderr
    themselves; the command asks them (through the environment) to filter it too. The
    command is forked (:func:`forked`); its workers start as they always do."""
    folder = tmp_path / f"in{QUERY}"
    folder.mkdir()
    rows = DEMO_CSV.read_text().splitlines(keepends=True)[:101]
    (folder / "demo.csv").write_text("".join(rows) + "101,maybe,1,dog,0.5\n")  # a reject
    done = forked(preforked, "build", "--config", DEMO, "--input", f"{folder}/*.csv",
                  "--output", tmp_path / f"out{QUERY}", "--direct_running_mode=multi_processing",
                  "--direct_num_workers=2")
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert "CommitError" in err.splitlines()[-1] and REDACTED in err.splitlines()[-1], err
    assert leaked(done) == []


@pytest.mark.parametrize("command, named", [
    (["build", "--config", "CONFIG", "--input", "TMP/nothing" + QUERY + "/*.csv"], "TMP/nothing"),
    (["build", "--config", "CONFIG", "--input", PASSWORD_URL + "/*.csv" + QUERY], "example.com"),
    (["build", "--config", "CONFIG", "--output", "s3://alice:Passw0rdH@b/out" + QUERY], "b/out"),
    (["verify", "TMP/out" + QUERY], "TMP/out"),
    (["verify", PASSWORD_URL], "example.com/data"),
    (["verify", "s3://AKIA:Passw0rdH@bucket/x" + QUERY], "bucket/x"),
    (["inspect", "TMP/out" + QUERY], "TMP/out"),
    (["inspect", PASSWORD_URL + QUERY], "example.com/data"),
    (["schema", "TMP/out" + QUERY], "TMP/out"),
    (["init", "--input", "TMP/in" + QUERY + "/x.csv"], "TMP/in"),
    (["init", "--input", PASSWORD_URL + "/x.csv"], "example.com/data/x.csv"),
])
def test_an_error_line_names_the_path_without_its_secrets(command, named, config, tmp_path,
                                                          preforked):
    """Also where the scheme has no usable filesystem here (https://, s3:// without its
    extra): one line, not a traceback. Forked (:func:`forked`): most of these import Beam."""
    args = [str(config) if a == "CONFIG" else a.replace("TMP", str(tmp_path)) for a in command]
    before = tree(tmp_path)
    done = forked(preforked, *args)
    assert done.returncode == 1, done.stderr.decode()
    assert leaked(done) == []
    err = done.stderr.decode()
    assert err.count("\n") == 1, err  # one line ...
    assert REDACTED in err and named.replace("TMP", str(tmp_path)) in err, err  # ... naming it
    assert tree(tmp_path) == before


def test_a_bugs_traceback_is_redacted_too(monkeypatch, capsys):
    def command(argv):
        raise KeyError(f"gs://b/x.csv{QUERY}")

    monkeypatch.setitem(cli.COMMANDS, "verify", command)
    assert cli.main(["verify", "x"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and REDACTED in err
    assert not [s for s in SECRETS if s in err], err


def test_a_secret_written_in_pieces_is_still_redacted(tmp_path):
    with open(tmp_path / "o", "w") as handle:
        stream = SafeLines(handle)
        for piece in ("no input matches 'gs://b/x?access", "_token=Tok", "3nA' (so", "rry)\n",
                      "partial line?sig=AzureSigG"):
            stream.write(piece)
        stream.flush()
    assert (tmp_path / "o").read_text() == (
        f"no input matches 'gs://b/x?access_token={REDACTED}' (sorry)\n"
        f"partial line?sig={REDACTED}")


@pytest.mark.parametrize("text,expected", [
    ("gs://b/x?X-Amz-Date=20260101T000000Z&X-Amz-SignedHeaders=host&X-Amz-Signature=ab",
     f"gs://b/x?X-Amz-Date={REDACTED}&X-Amz-SignedHeaders={REDACTED}&X-Amz-Signature={REDACTED}"),
    ("a\x1b[31mred\x07\r\x7f\x9b", "a\\x1b[31mred\\x07\\x0d\\x7f\\x9b"),
    ("file-\udcff\udcfe.csv", "file-\\xff\\xfe.csv"),  # invalid UTF-8, as surrogateescape has it
    ("evil\u202etxt.csv\u2028x", "evil\\u202etxt.csv\\u2028x"),
    ("tab\tand été 2 cats, 猫\n", "tab\tand été 2 cats, 猫\n"),  # printable text stays
    ("'s3://me:p@ss:w@rd@bucket/x', 'ftp://h/a@b'", "'s3://REDACTED@bucket/x', 'ftp://h/a@b'"),
])
def test_safe_text(text, expected):
    assert safe_text(text) == expected


def test_printable_escapes_every_unprintable_ascii_character():
    for code in [*range(0x20), 0x7f]:
        char = chr(code)
        assert printable(char) == (char if char in "\t\n" else f"\\x{code:02x}")


# --- raw bytes -------------------------------------------------------------------------------


def test_no_line_prints_raw_bytes(tmp_path):
    """A path with an escape sequence, an invalid UTF-8 byte and a right-to-left override."""
    name = os.fsencode(str(tmp_path)) + b"/v\x1b[2J\xff\xe2\x80\xae"
    done = subprocess.run([str(SCRIPT), "verify", name], capture_output=True,
                          env=os.environ.copy(), timeout=TIMEOUT)
    assert done.returncode == 1
    err = done.stderr.decode("utf-8")  # strict: every byte is UTF-8
    assert err.count("\n") == 1 and "\x1b" not in err and "\u202e" not in err, err
    assert "v\\x1b[2J\\xff\\u202e" in err, err


# --- a reader that goes away -----------------------------------------------------------------


@pytest.mark.parametrize("command", [["inspect", "OUT", "--limit", "300"], ["schema", "OUT"],
                                     ["verify", "OUT/v"]])
def test_a_closed_pipe_ends_the_command_quietly_with_141(command, built):
    """The reader closes the pipe before the command writes (``| head`` at its extreme)."""
    out, _ = built
    args = [a.replace("OUT", str(out)) for a in command]
    proc = subprocess.Popen([str(SCRIPT), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=os.environ.copy())
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=TIMEOUT) == cli.EXIT_BROKEN_PIPE == 141
    assert err == b""


def test_a_broken_pipe_that_is_not_our_output_is_still_an_error(monkeypatch, capsys):
    def command(argv):
        raise BrokenPipeError(32, "Broken pipe (a socket to a job service)")

    monkeypatch.setitem(cli.COMMANDS, "verify", command)
    assert cli.main(["verify", "x"]) == 1
    assert "unexpected BrokenPipeError" in capsys.readouterr().err


# --- odd output states -----------------------------------------------------------------------


@pytest.mark.parametrize("state, output, said", [
    ("file", "afile", "is a file, not a folder"),
    ("file", "afile/sub/out", "lies inside"),
    ("lease-folder", "out", "/.lease' is a folder"),
    ("latest-folder", "out", "/LATEST' is a folder"),
    ("latest-fifo", "out", "/LATEST' is a FIFO"),  # reading it would wait forever
    ("device", "/dev/null", "is a FIFO, socket, device or broken link, not a folder"),
])
def test_an_output_that_cannot_hold_a_data_set_is_refused_in_one_line(state, output, said,
                                                                       config, tmp_path,
                                                                       preforked):
    if state == "file":
        (tmp_path / "afile").write_text("not ours\n")
    elif state == "latest-fifo":
        (tmp_path / "out").mkdir()
        os.mkfifo(tmp_path / "out" / "LATEST")
    elif state != "device":
        (tmp_path / "out" / {"lease-folder": ".lease", "latest-folder": "LATEST"}[state]
         ).mkdir(parents=True)
    before = tree(tmp_path)
    done = forked(preforked, "build", "--config", config, "--output", tmp_path / output)
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert err.count("\n") == 1 and said in err and "BuildError" in err, err
    assert tree(tmp_path) == before  # nothing written, not even the lease
    if state == "file":
        assert (tmp_path / "afile").read_text() == "not ours\n"


# --- our flags -------------------------------------------------------------------------------


@pytest.mark.parametrize("typo, suggested", [
    (["--ouput", "OUT"], "--output"),
    (["--ouput=OUT"], "--output"),
    (["--out", "OUT"], "--output"),  # abbreviations are refused, not taken as --output
    (["--skip_if_unchanged"], "--skip-if-unchanged"),
    (["--direct_num_worker", "2"], "--direct_num_workers"),  # Beam's are suggested too
])
def test_a_mistyped_flag_is_a_usage_error_with_a_suggestion(typo, suggested, config,
                                                             tmp_path):
    before = tree(tmp_path)
    done = run("build", "--config", config,
               *[a.replace("OUT", str(tmp_path / "elsewhere")) for a in typo])
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert f"(did you mean {suggested}?)" in err.splitlines()[-1], err
    assert tree(tmp_path) == before  # nothing built, here or in the config's output


@pytest.mark.parametrize("command, suggested", [
    (["init", "--input", "IN", "--ouput", "x.yaml"], "--output"),
    (["inspect", "IN", "--lim", "2"], "--limit"),  # no abbreviations in any command
])
def test_every_command_suggests_the_flag_meant(command, suggested, config, tmp_path):
    done = run(*[str(tmp_path / "in" / "demo.csv") if a == "IN" else a for a in command])
    assert done.returncode == 2, done.stderr.decode()
    assert f"(did you mean {suggested}?)" in done.stderr.decode().splitlines()[-1]
    assert done.stdout == b""


def test_a_stray_argument_and_a_bad_beam_value_are_usage_errors(config, tmp_path, preforked):
    """A value is checked by Beam's own parser, so the bad value is forked (:func:`forked`):
    the same check, without a second Beam import; the stray one runs the script."""
    stray = run("build", "--config", config, "stray")
    assert stray.returncode == 2 and b"'stray'" in stray.stderr
    bad = forked(preforked, "build", "--config", config, "--direct_num_workers", "two")
    assert bad.returncode == 2 and b"--direct_num_workers" in bad.stderr
    assert not (tmp_path / "out").exists()


def test_beam_options_and_flags_after_a_lone_dash_dash_pass(tmp_path, preforked):
    """Refused for its missing config (exit 1), so every flag passed the check. Forked
    (:func:`forked`): Beam's parser checks them, and the server has not imported the option
    modules the check imports (--render_output's among them) any more than the script has."""
    done = forked(preforked, "build", "--config", tmp_path / "missing.yaml",
                  "--runner", "DirectRunner", "--project", "p", "--region", "r",
                  "--temp_location", tmp_path, "--experiments", "a", "--experiments=b",
                  "--save_main_session", "--no_use_public_ips", "--job_name=nightly",
                  "--parallelism", "3", "--direct_running_mode=in_memory",
                  "--tfrecords_progress_dir", tmp_path,
                  "--render_output=graph.png",  # defined by a runner module build never imports
                  "--", "--a_job_service_option", "5")
    assert done.returncode == 1, done.stderr.decode()
    assert b"ConfigError: cannot read config" in done.stderr


def test_the_flex_template_entry_passes_template_parameters_unchecked(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "beam_tfrecords.pipelines.flex_template",
         f"--config={tmp_path / 'missing.yaml'}", "--a_template_parameter=x"],
        capture_output=True, text=True, env=os.environ.copy(), timeout=TIMEOUT)
    assert done.returncode == 1, done.stderr
    assert "ConfigError: cannot read config" in done.stderr


def test_every_option_beam_collects_is_known():
    """Beam's own collection (PipelineOptions.get_all_options, over its direct subclasses) is
    a subset of ours, which also reaches subclasses of subclasses."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    class RunnerOptions(StandardOptions):  # a runner's options, two levels down
        @classmethod
        def _add_argparse_args(cls, parser):
            parser.add_argument("--a_runners_own_option")

    parser = flags.pipeline_option_parser()
    dests = {action.dest for action in parser._actions}
    assert set(PipelineOptions([]).get_all_options()) <= dests
    assert "a_runners_own_option" in dests
    _, unknown = parser.parse_known_args(["--a_runners_own_option=1", "--ouput", "x"])
    assert unknown == ["--ouput", "x"]


def test_the_flag_table_is_what_the_installed_beam_registers():
    """pipelines/beam_option_table.py refuses flags without importing Beam; after a Beam
    upgrade this fails until the table is made again
    (``python -m beam_tfrecords.pipelines.flags --write-table``)."""
    from beam_tfrecords.pipelines import beam_option_table

    live = flags.option_table()
    assert beam_option_table.BEAM_VERSION == live["beam_version"], "regenerate the table"
    assert beam_option_table.FLAGS == live["flags"], "regenerate the table"
    assert "--tfrecords_progress_dir" in live["flags"]  # ours, from OPTION_MODULES
    assert "--render_output" in live["flags"]  # a runner module's, at any depth


def test_a_beam_version_the_table_is_not_of_is_checked_by_importing_beam(monkeypatch,
                                                                          capsys):
    """Another installed Beam: the table is not trusted, and the check imports Beam's
    parser as before -- the same refusal and suggestion as with the table."""
    said = []
    for version in (None, "0.0.0"):
        if version is not None:
            monkeypatch.setattr(flags, "_installed_beam_version", lambda v=version: v)
            assert flags._table_parser() is None
        with pytest.raises(SystemExit) as stopped:
            flags.check_pipeline_flags(cli.build_parser(), ["--direct_num_worker", "2"])
        assert stopped.value.code == 2
        said.append(capsys.readouterr().err.splitlines()[-1])
    assert said[0] == said[1]
    assert "(did you mean --direct_num_workers?)" in said[0]


# --- answered without Beam -------------------------------------------------------------------

# Runs the console script as its own entry, then says whether Beam was ever imported.
BEAM_PROBE = """import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print("apache_beam imported:", "apache_beam" in sys.modules, file=sys.stderr)
"""


@pytest.mark.parametrize("command, status", [
    (["build", "--ouput", "x"], 2),
    (["build", "--config", "CONFIG", "--ouput=x", "--runner", "DirectRunner"], 2),
    (["build", "--config", "CONFIG", "stray"], 2),
    (["build", "--config", "CONFIG", "--input", "NOWHERE/*.csv"], 1),  # nothing matches
    (["build", "--config", "CONFIG", "--input", "DATA"], 1),  # a folder
    (["build", "--config", "NOWHERE"], 1),  # no config
    (["verify", "OUT/v"], 0),
    (["verify", "NOWHERE"], 1),
    (["inspect", "OUT", "--limit", "2"], 0),
    (["schema", "OUT"], 0),
    (["init", "--input", "CSV"], 0),
    (["init", "--input", "DATA"], 1),  # a folder of data files: "give a glob"
    (["--version"], 0),
], ids=["slip", "slip-with-beam-flags", "stray", "no-match", "input-folder", "no-config",
        "verify", "verify-nothing", "inspect", "schema", "init", "init-folder", "version"])
def test_slips_and_local_reads_never_import_beam(command, status, built, tmp_path):
    """Beam's import alone costs over a second: a slip, a build refused for its config or
    input, and a command that reads only local files answer without it (through the
    installed console script)."""
    out, _ = built
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.csv").write_text("id,x\n1,2\n")
    subs = {"OUT": str(out), "NOWHERE": str(tmp_path / "nowhere"), "CONFIG": str(DEMO),
            "CSV": str(DEMO_CSV), "DATA": str(tmp_path / "data")}
    args = [subs.get(a.split("/")[0], a.split("/")[0]) + a[len(a.split("/")[0]):]
            for a in command]
    done = subprocess.run([sys.executable, "-c", BEAM_PROBE, str(SCRIPT), *args],
                          capture_output=True, env=os.environ.copy(), timeout=TIMEOUT)
    err = done.stderr.decode()
    assert done.returncode == status, err
    assert err.splitlines()[-1] == "apache_beam imported: False", err
    assert command[0] != "build" or status == 2 or "BuildError" in err or "ConfigError" in err
    if command[-1] == "DATA":
        assert "is a directory" in err, err
