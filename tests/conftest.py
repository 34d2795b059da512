"""Shared fixtures: the TensorFlow oracle (a separate virtual environment) and paths."""

from __future__ import annotations

import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
TF_READER = ROOT / "tests" / "tf_oracle" / "read_with_tf.py"


@pytest.fixture(scope="session")
def tf_python() -> str:
    """The TensorFlow venv's interpreter; `python3 scripts/dev.py test` creates it.

    Missing TensorFlow fails the tests that need it instead of skipping them: a green run
    must mean TensorFlow really read our files.
    """
    candidate = os.environ.get("BEAM_TFRECORDS_TF_PYTHON") or str(ROOT / ".venv-tf/bin/python")
    if not pathlib.Path(candidate).exists():
        pytest.fail(f"no TensorFlow environment at {candidate}; run `python3 scripts/dev.py "
                    "test`, which creates it, or set BEAM_TFRECORDS_TF_PYTHON")
    return candidate


@pytest.fixture(scope="session")
def tfdv_python() -> str:
    """The TensorFlow Data Validation venv's interpreter; `python3 scripts/dev.py test`
    creates it. Missing, it fails the tests that need it (a green run must mean TFDV really
    checked our statistics)."""
    candidate = (os.environ.get("BEAM_TFRECORDS_TFDV_PYTHON")
                 or str(ROOT / ".venv-tfdv/bin/python"))
    if not pathlib.Path(candidate).exists():
        pytest.fail(f"no TensorFlow Data Validation environment at {candidate}; run "
                    "`python3 scripts/dev.py test`, which creates it, or set "
                    "BEAM_TFRECORDS_TFDV_PYTHON")
    return candidate


@pytest.fixture(scope="session")
def croissant_python() -> str:
    """The mlcroissant venv's interpreter; `python3 scripts/dev.py test` creates it. Missing,
    it fails the tests that need it (a green run must mean mlcroissant validated our files)."""
    candidate = (os.environ.get("BEAM_TFRECORDS_CROISSANT_PYTHON")
                 or str(ROOT / ".venv-croissant/bin/python"))
    if not pathlib.Path(candidate).exists():
        pytest.fail(f"no mlcroissant environment at {candidate}; run `python3 scripts/dev.py "
                    "test`, which creates it, or set BEAM_TFRECORDS_CROISSANT_PYTHON")
    return candidate


# Debian's packages; .ci/run installs them (apt-get install chromium chromium-driver).
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromedriver")
# Set by .ci/run only when the machine cannot install them: the browser tests skip saying why.
NO_BROWSER = "BEAM_TFRECORDS_NO_BROWSER"


@pytest.fixture(scope="session")
def chromium():
    """A headless Chromium driven by its chromedriver through Selenium, logging the console
    (``get_log("browser")``) and the DevTools network events (``get_log("performance")``).

    Missing, it fails the tests that use it (a green run must mean a real browser opened
    the page) unless .ci/run found it could not install it and said why in
    ``BEAM_TFRECORDS_NO_BROWSER``.
    """
    missing = [path for path in CHROMIUM if not pathlib.Path(path).exists()]
    if missing:
        if os.environ.get(NO_BROWSER):
            pytest.skip(f"no browser: {os.environ[NO_BROWSER]}")
        pytest.fail(f"no {' or '.join(missing)}: run `apt-get install chromium "
                    "chromium-driver` (as .ci/run does)", pytrace=False)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM[0]
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--hide-scrollbars", "--window-size=1280,1000", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMIUM[1]), options=options)
    try:
        yield driver
    finally:
        driver.quit()


class TfOracle:
    """One TensorFlow process answering many reads (tests/tf_oracle/read_with_tf.py
    ``--serve``): importing TensorFlow costs several CPU seconds, once per test process
    instead of once per read. Started on first use; a process that died (TensorFlow crashed
    on a file) is started afresh for the next read, and the read that killed it fails
    with its log."""

    def __init__(self, python: str, log: pathlib.Path) -> None:
        self.python, self.log = python, log
        self.proc: subprocess.Popen | None = None

    def run(self, args: list[str]) -> tuple[int, str]:
        answer = self._ask(args)
        return answer["status"], answer["stderr"]

    def script(self, path, argv=(), *, cwd) -> subprocess.CompletedProcess:
        """Run the Python file ``path`` as ``python path ARGV`` in ``cwd`` would, in the
        oracle's process (read_with_tf.py ``run_script``): what it printed and its status."""
        answer = self._ask({"script": str(path), "argv": list(map(str, argv)),
                            "cwd": str(cwd)})
        return subprocess.CompletedProcess([str(path), *map(str, argv)], answer["status"],
                                           answer["stdout"], answer["stderr"])

    def _ask(self, request) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [self.python, str(TF_READER), "--serve"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=self.log.open("ab"), text=True,
                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:
            self.proc.wait()
            raise AssertionError(f"TensorFlow died ({self.proc.returncode}): "
                                 f"{self.log.read_text(errors='replace')[-3000:]}")
        return json.loads(reply)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


@pytest.fixture(scope="session")
def tf_oracle(tf_python, tmp_path_factory):
    oracle = TfOracle(tf_python, tmp_path_factory.mktemp("tf-oracle") / "stderr.log")
    try:
        yield oracle
    finally:
        oracle.close()


@pytest.fixture
def read_with_tf(tf_oracle, tmp_path):
    """Run TensorFlow over files: ``read_with_tf(files, spec=path | raw=True, compression)``."""

    def run(files, *, spec=None, compression="none", example_type="Example"):
        out = tmp_path / f"tf-{len(list(tmp_path.iterdir()))}.json"
        if spec:
            mode = ["--spec", str(spec), "--validate-ragged"]
        else:
            mode = ["--dump-raw", "--example-type", example_type]
        status, stderr = tf_oracle.run(
            [*mode, "--compression", compression, "--out", str(out), *map(str, files)])
        if status != 0:
            raise AssertionError(f"TensorFlow failed ({status}): {stderr[-3000:]}")
        return json.loads(out.read_text())

    return run


def _load(name: str, filename: str):
    """A module of tests/ loaded by path as ``name`` (tests/ is not a package on sys.path)."""
    import importlib.util
    import sys

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / filename)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _gcs_emulator_module():
    return _load("beam_tfrecords_tests_gcs_emulator", "gcs_emulator.py")


# The tiers a fixture puts a test in (markers registered in pytest.ini).
_FIXTURE_TIERS = {"gcs_emulator": "gcs", "tf_python": "tf", "tf_oracle": "tf",
                  "read_with_tf": "tf", "tfdv_python": "tfdv",
                  "croissant_python": "croissant", "chromium": "browser"}


# The longest test files, longest first (measured with BEAM_TFRECORDS_TEST_COST). The README's
# test command hands whole files to pytest-xdist's workers in collection order, so starting
# with these keeps one long file from running alone at the end while the other cores idle.
# A stale entry costs balance, never correctness.
_LONGEST_FIRST = ("test_kill.py", "test_bench.py", "test_tfds_ray_loaders.py", "test_trust.py",
                  "test_readme_snippets.py", "test_gcs_build.py", "test_shuffle_runners.py",
                  "test_range_builds.py", "test_stats_tfdv.py", "test_many_shards.py",
                  "test_beam_yaml.py", "test_api.py", "test_cli_slips.py", "test_launch.py",
                  "test_read_jsonl_parquet_avro.py", "test_reliability_gcs.py",
                  "test_storage.py", "test_runner_choice.py", "test_init_mixed.py",
                  "test_early_stop.py", "test_init_config.py", "test_missing_empty.py",
                  "test_drift_gate.py", "test_split_hasher.py")


def _file_rank(item) -> int:
    name = item.path.name
    return _LONGEST_FIRST.index(name) if name in _LONGEST_FIRST else len(_LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    """Mark each test with the tiers its fixtures imply, so `-m "not gcs"` and friends need no
    marker kept by hand beside every use of the emulator or TensorFlow; then put the longest
    files first (a stable sort: each file's tests keep their order)."""
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            tier = _FIXTURE_TIERS.get(fixture)
            if tier:
                item.add_marker(tier)
    items.sort(key=_file_rank)


# BEAM_TFRECORDS_TEST_COST=FILE appends one JSON line per test to FILE: its wall seconds and
# the CPU seconds it used, its own and its subprocesses' (builds through the console script,
# TensorFlow, Beam's worker processes). CPU time hardly changes with the machine's load, so a
# profile taken on a busy machine still says which tests cost the suite its minutes.
_COST_FILE = os.environ.get("BEAM_TFRECORDS_TEST_COST")


def _cpu_seconds() -> float:
    return sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not _COST_FILE:
        yield
        return
    wall, cpu = time.monotonic(), _cpu_seconds()
    yield
    line = json.dumps({"test": item.nodeid, "wall": round(time.monotonic() - wall, 3),
                       "cpu": round(_cpu_seconds() - cpu, 3)})
    with open(_COST_FILE, "a", encoding="utf-8") as out:
        out.write(line + "\n")


# Loaded before any test module is imported, so tests can import the shared helpers by name.
_load("beam_tfrecords_tests_helpers", "helpers.py")


@pytest.fixture(scope="session", autouse=True)
def direct_runner_without_prism():
    """Beam's DirectRunner first tries Prism, whose job server fetches a binary from GitHub;
    this machine has no route there, so every attempt fails and Beam falls back to the
    FnApiRunner -- after about 0.1-0.3 s of CPU per pipeline and a ``beam-temp*`` folder left
    in the temporary folder. The tests pin that fallback (refusing Prism at once, as
    tests/run_preloaded.py does for the programs it runs), so every run uses the runner it
    always ends up on, with or without internet."""
    try:
        from apache_beam.runners.portability import prism_runner
    except ImportError:  # an environment without Beam (none of ours today)
        yield
        return
    original = prism_runner.PrismRunner.run_pipeline
    _load("beam_tfrecords_tests_run_preloaded", "run_preloaded.py")._without_prism()
    yield
    prism_runner.PrismRunner.run_pipeline = original


@pytest.fixture(scope="session")
def preforked(tmp_path_factory):
    """Commands forked from one server that imported Beam once (helpers.Preforked), for the
    whole session: ``preforked.command(argv, cwd=...)`` runs ``beam-tfrecords ARGV`` as a
    process of its own without paying the Beam import again."""
    server = sys.modules["beam_tfrecords_tests_helpers"].Preforked(
        tmp_path_factory.mktemp("preforked"))
    yield server
    server.close()


@pytest.fixture(scope="session")
def gcs_emulator():
    """A Cloud Storage emulator on 127.0.0.1 with one bucket, for the whole session.

    Started as a subprocess (``gcp-storage-emulator``); while it runs, STORAGE_EMULATOR_HOST
    and NO_GCE_CHECK are set in os.environ (worker subprocesses inherit them) and Beam's
    credential lookup is skipped. Yields a ``GcsEmulator``: ``.bucket``, ``.url``,
    ``.client()``, ``.path(...)``, ``.unique_prefix(label)``, ``.blob(gs_path)``,
    ``.fault_proxy(fault)``. A failure to start fails the tests that use it, with the log.
    """
    module = _gcs_emulator_module()
    try:
        emulator = module.start()
    except module.EmulatorError as error:
        pytest.fail(str(error), pytrace=False)
    try:
        yield emulator
    finally:
        emulator.stop()


# The sample configs whose input ships with the repository (dataflow.yaml and flink.yaml name
# cluster paths).
def local_sample_configs() -> list[str]:
    from beam_tfrecords.pipelines.config import load_config

    return sorted(p.stem for p in (ROOT / "configs").glob("*.yaml")
                  if (ROOT / load_config(str(p)).source.path).exists())


@pytest.fixture(scope="session")
def sample_builds(tmp_path_factory) -> dict[str, pathlib.Path]:
    """``{name: version folder}``: each local sample config built as configured (its own
    input, ``--version v1``), once for the whole run -- by the first pytest-xdist worker to
    ask, under the run's common temporary folder and a lock; the others reuse it.

    Shared and read-only: a test must not change anything in these folders or beside them
    (copy one first, or write elsewhere)."""
    import fcntl

    from beam_tfrecords.pipelines import cli
    from beam_tfrecords.pipelines.config import load_config

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, holding every worker's
    root = base / "sample-builds"
    root.mkdir(exist_ok=True)
    built = {}
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name in local_sample_configs():
            out, done = root / name, root / f"{name}.built"
            if not done.exists():
                shutil.rmtree(out, ignore_errors=True)  # a worker's unfinished build
                config = ROOT / "configs" / f"{name}.yaml"
                cli.run_build(["--config", str(config), "--input",
                               str(ROOT / load_config(str(config)).source.path),
                               "--output", str(out), "--version", "v1"])
                done.touch()
            built[name] = out / "v1"
    return built
