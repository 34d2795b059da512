"""Every code block of README.md and docs/**/*.md runs as printed, or is parsed if it cannot.

A block's fence names its language (``python``, ``sh``, ``yaml``, ``json``, or ``text`` for
output shown as a command prints it, which is not code); the line right before the fence may
mark it:

- ``<!-- snippet: python -->`` / ``<!-- snippet: yaml -->``: a complete pipeline, run unchanged
  in an empty temporary directory (a python snippet as ``python snippet.py``, a yaml one with
  ``python -m apache_beam.yaml.main``; each in a process of its own, forked from one that
  imported Beam once: tests/run_preloaded.py). It passes when it exits 0 and every data set it wrote
  (``output/**/LATEST``) is a committed version that ``verify`` accepts.
- ``<!-- consumer: NAME -->``: a reader of a data set, run by
  tests/consumers/test_tfds_ray_loaders.py on every
  sample config (PyTorch, DALI and TFX by tests/consumers/run_heavy.py, by hand).
- ``<!-- check-only -->``: commands for clouds, schedulers and installs that cannot run here;
  parsed only.
- no mark: run in order, one page's blocks in one workspace -- a temporary directory holding
  ``configs/`` (this repository's) and a build of ``configs/demo.yaml`` in ``output/demo`` --
  with ``.venv/bin`` first on the PATH: shell with ``bash -e -o pipefail``, python with this
  interpreter (in the TensorFlow oracle's process when it imports TensorFlow), a yaml data set
  config through the config validation, json through the JSON parser.

Every block of code is also parsed, marked or not: YAML loaded, shell through ``bash -n``,
Python compiled, JSON parsed. The snippets (one after another) and the pages start together,
and each test awaits its own.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from beam_tfrecords.pipelines.config import parse_config
from beam_tfrecords.pipelines.verify import verify_path

ROOT = pathlib.Path(__file__).resolve().parents[2]
# RELIABILITY.md is a page of the site too (docs/reliability.md includes it).
PAGES = [ROOT / "README.md", ROOT / "RELIABILITY.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
MARK = re.compile(r"<!-- (snippet: (?:python|yaml)|consumer: [\w.-]+|check-only) -->\n\Z")
LANGUAGES = {"python", "sh", "yaml", "json", "text"}
CONSUMERS = {"tf.data", "tfds", "ray", "beam", "pytorch", "dali", "tfx"}
BIN = pathlib.Path(sys.executable).parent
TIMEOUT = 300


@dataclasses.dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    mark: str  # "" | "snippet: python" | "consumer: ray" | "check-only" ...

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for fence in FENCE.finditer(text):
            before = text[:fence.start()]
            mark = MARK.search(before)
            found.append(Block(str(page.relative_to(ROOT)), before.count("\n") + 1,
                               fence.group(1).strip(), fence.group(2),
                               mark.group(1) if mark else ""))
    return found


BLOCKS = blocks()
CODE = [b for b in BLOCKS if b.lang != "text"]
SNIPPETS = [b for b in BLOCKS if b.mark.startswith("snippet:")]
TENSORFLOW = re.compile(r"^\s*(import tensorflow|from tensorflow)\b", re.M)
TF_BLOCKS = [b for b in CODE if not b.mark and b.lang == "python" and TENSORFLOW.search(b.code)]
WORKSPACE = [b for b in CODE if not b.mark and b not in TF_BLOCKS]


def test_every_block_names_its_language_and_a_known_mark():
    assert len(PAGES) > 10 and len(BLOCKS) > 40
    for block in BLOCKS:
        assert block.lang in LANGUAGES, f"{block.name}: ```{block.lang}: not one of {LANGUAGES}"
        if block.mark.startswith("snippet:"):
            assert block.mark == f"snippet: {block.lang}", (block.name, block.mark, block.lang)
        if block.mark.startswith("consumer:"):
            assert block.lang == "python" and block.page == "docs/reading.md", block.name
        assert not (block.lang == "text" and block.mark), f"{block.name}: output is not marked"


def test_the_readers_snippets_are_the_ones_test_consumers_runs():
    names = [b.mark.split(": ")[1] for b in BLOCKS if b.mark.startswith("consumer:")]
    assert sorted(names) == sorted(CONSUMERS)


def test_the_pipeline_pages_keep_their_runnable_examples():
    kinds = [b.lang for b in SNIPPETS if b.page == "docs/pipelines.md"]
    assert kinds.count("python") >= 5 and kinds.count("yaml") >= 2, kinds
    assert [b.lang for b in SNIPPETS if b.page == "README.md"] == ["python"]


def test_readme_is_short_and_keeps_the_quick_start():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert "python3 scripts/dev.py demo" in text and "python3 scripts/dev.py test" in text
    assert "pip install beam-tfrecords" not in text and "pip install 'beam-tfrecords" not in text


@pytest.mark.parametrize("block", CODE, ids=lambda b: b.name)
def test_every_code_block_parses(block, tmp_path):
    if block.lang == "python":
        compile(block.code, block.name, "exec")
    elif block.lang == "yaml":
        assert list(yaml.safe_load_all(block.code)), block.name
    elif block.lang == "json":
        json.loads(block.code)
    else:
        script = tmp_path / "block.sh"
        script.write_text(block.code)
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, (block.name, done.stderr)


# -- running them -------------------------------------------------------------------------------


PRELOADED = ROOT / "tests" / "run_preloaded.py"


def run_snippets(blocks: list[Block], tmp: pathlib.Path, preloaded: Preloaded) -> list[tuple[
        subprocess.CompletedProcess, pathlib.Path]]:
    """Run each snippet unchanged in an empty folder of its own, one after another: a python
    snippet as ``python snippet.py``, a yaml one as ``python -m apache_beam.yaml.main
    --yaml_pipeline_file=pipeline.yaml``, each in its own process forked from the one that
    imported Beam (and Beam YAML's providers) once (tests/run_preloaded.py)."""
    runs = []
    for i, block in enumerate(blocks):
        folder = tmp / f"snippet-{i}"
        folder.mkdir(parents=True)
        if block.lang == "python":
            (folder / "snippet.py").write_text(block.code)
            argv = ["snippet.py"]
        else:
            (folder / "pipeline.yaml").write_text(block.code)
            argv = ["-m", "apache_beam.yaml.main", "--yaml_pipeline_file=pipeline.yaml"]
        with open(tmp / f"{i}.stdout", "w+") as out, open(tmp / f"{i}.stderr", "w+") as err:
            done = subprocess.run(preloaded.python(*argv), cwd=folder, stdout=out, stderr=err,
                                  timeout=TIMEOUT, env=dict(os.environ, PYTHONWARNINGS="ignore"))
        runs.append((subprocess.CompletedProcess(argv, done.returncode,
                                                 (tmp / f"{i}.stdout").read_text(),
                                                 (tmp / f"{i}.stderr").read_text()), folder))
    return runs


def make_workspace(demo: pathlib.Path, folder: pathlib.Path) -> pathlib.Path:
    """A folder holding ``configs/`` and a copy of the demo build in ``output/demo``."""
    folder.mkdir(parents=True)
    (folder / "configs").symlink_to(ROOT / "configs")
    shutil.copytree(demo, folder / "output" / "demo")
    return folder


@dataclasses.dataclass(frozen=True)
class Preloaded:
    """A server forking every call from one process that imported Beam and this package once
    (tests/run_preloaded.py ``--serve``), and ``bin/beam-tfrecords``, a script calling the
    console script through it with the caller's folder, environment and streams."""

    socket: pathlib.Path
    bin: pathlib.Path

    def python(self, *argv: str) -> list[str]:
        """The command line running ``python ARGV`` through the server."""
        return [sys.executable, "-I", str(PRELOADED), "--call", str(self.socket), *argv]


def workspace_env(preloaded: Preloaded | None = None) -> dict:
    path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    if preloaded is not None:
        path = f"{preloaded.bin}{os.pathsep}{path}"
    return dict(os.environ, PATH=path, PYTHONWARNINGS="ignore")


def run_block(block: Block, folder: pathlib.Path, preloaded: Preloaded):
    """Run one block in ``folder``: a CompletedProcess for shell and python, else what parsing
    returned (a failed parse raises)."""
    if block.lang == "json":
        return json.loads(block.code)
    if block.lang == "yaml":
        return parse_config(yaml.safe_load(block.code))
    if block.lang == "python":
        (folder / "block.py").write_text(block.code)
        command = preloaded.python("block.py")
    else:
        (folder / "block.sh").write_text(block.code)
        command = ["bash", "-e", "-o", "pipefail", "block.sh"]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=TIMEOUT,
                          env=workspace_env(preloaded))


def run_page(blocks: list[Block], demo: pathlib.Path, folder: pathlib.Path,
             preloaded: Preloaded) -> dict:
    """Run a page's unmarked blocks in order in one workspace, as a reader following the page
    would (a later block may use what an earlier one wrote); after a failure the rest are not
    run."""
    folder = make_workspace(demo, folder)
    results = {}
    for block in blocks:
        try:
            done = run_block(block, folder, preloaded)
        except Exception as error:  # noqa: BLE001 -- reported by the block's own test
            done = error
        results[block] = done
        if isinstance(done, Exception) or getattr(done, "returncode", 0) != 0:
            break
    return results


@pytest.fixture(scope="module")
def preloaded(tmp_path_factory):
    """The snippets and the pages' ``beam-tfrecords`` commands and python blocks each run as
    a process of its own, forked from one that imported Beam and Beam YAML's providers once
    (Beam's import costs 1-2 CPU-s, the providers' several more)."""
    tmp = tmp_path_factory.mktemp("preloaded")
    server = subprocess.Popen([sys.executable, str(PRELOADED), "--serve", str(tmp / "socket"),
                               "--yaml"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env=workspace_env())
    try:
        assert server.stdout.readline() == b"ready\n", "tests/run_preloaded.py --serve failed"
        (tmp / "bin").mkdir()
        script = tmp / "bin" / "beam-tfrecords"
        script.write_text(f'#!/bin/bash\nexec "{sys.executable}" -I "{PRELOADED}" --call '
                          f'"{tmp / "socket"}" --script beam-tfrecords "$@"\n')
        script.chmod(0o755)
        yield Preloaded(tmp / "socket", tmp / "bin")
    finally:
        server.stdin.close()
        server.wait(timeout=TIMEOUT)


@pytest.fixture(scope="module")
def demo(tmp_path_factory, preloaded) -> pathlib.Path:
    """``output/demo`` as ``python3 scripts/dev.py demo`` leaves it."""
    base = tmp_path_factory.mktemp("demo")
    (base / "configs").symlink_to(ROOT / "configs")
    done = subprocess.run([str(preloaded.bin / "beam-tfrecords"), "build", "--config",
                           "configs/demo.yaml"],
                          cwd=base, capture_output=True, text=True, timeout=TIMEOUT,
                          env=workspace_env(preloaded))
    assert done.returncode == 0, done.stderr[-4000:]
    return base / "output" / "demo"


@pytest.fixture(scope="module")
def results(demo, preloaded, tmp_path_factory):
    """``block -> result``: the snippets (a snippet printed twice, on README.md and on its
    page, runs once; one after another) beside the pages' workspace blocks (a page at a
    time, two pages at once)."""
    tmp = tmp_path_factory.mktemp("blocks")
    pages: dict[str, list[Block]] = {}
    for block in WORKSPACE:
        pages.setdefault(block.page, []).append(block)
    unique: dict[tuple[str, str], Block] = {}
    for block in SNIPPETS:
        unique.setdefault((block.lang, block.code), block)
    with ThreadPoolExecutor(max_workers=3) as pool:
        snippet_runs = pool.submit(run_snippets, list(unique.values()), tmp / "snippets",
                                   preloaded)
        runs = {page: pool.submit(run_page, blocks, demo, tmp / f"page-{i}", preloaded)
                for i, (page, blocks) in enumerate(pages.items())}

        def result(block: Block):
            if block.mark:
                return dict(zip(unique, snippet_runs.result()))[block.lang, block.code]
            return runs[block.page].result().get(block, "not run: an earlier block failed")

        yield result


@pytest.mark.slow
@pytest.mark.parametrize("block", SNIPPETS, ids=lambda b: b.name)
def test_snippet_runs_and_commits_a_verified_version(results, block):
    done, folder = results(block)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    latest = list(folder.glob("output/**/LATEST"))
    assert latest, "the snippet wrote no data set"
    for path in latest:
        version_dir = path.parent / path.read_text().strip()
        manifest = json.loads((version_dir / "manifest.json").read_text())
        checks = verify_path(str(version_dir))
        assert checks and all(c.ok for c in checks), [c.problems for c in checks]
        assert manifest["counts"]["written"] == sum(c.records for c in checks) > 0
        assert manifest["feature_spec"]["features"], "feature_spec.json describes the data"


@pytest.mark.slow
@pytest.mark.parametrize("block", WORKSPACE, ids=lambda b: b.name)
def test_block_runs_in_a_workspace(results, block):
    done = results(block)
    if isinstance(done, Exception | str):
        pytest.fail(f"{block.name}: {done}")
    if isinstance(done, subprocess.CompletedProcess):
        assert done.returncode == 0, (block.name, done.stdout[-2000:], done.stderr[-4000:])


@pytest.mark.slow
@pytest.mark.parametrize("block", TF_BLOCKS, ids=lambda b: b.name)
def test_tensorflow_block_runs_with_the_oracle(block, demo, tf_oracle, tmp_path):
    """Run as ``python block.py`` in a workspace, in the TensorFlow oracle's process
    (``tf_oracle.script``: TensorFlow's import, seconds of CPU, is paid once per worker)."""
    folder = make_workspace(demo, tmp_path / "workspace")
    (folder / "block.py").write_text(block.code)
    done = tf_oracle.script(folder / "block.py", cwd=folder)
    assert done.returncode == 0, (block.name, done.stdout[-2000:], done.stderr[-4000:])


# -- the install section ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.e2e
def test_the_install_from_a_git_url_gives_the_command(tmp_path):
    """README's ``pip install 'git+file:///path/to/clone'``, with this clone's path (committed
    HEAD; ``--no-deps`` keeps it to the package itself: the locks install its dependencies),
    into a fresh virtual environment by this environment's pip (``--python``: the new one's
    own pip would add seconds of ``ensurepip`` and install the same way), without compiling
    the installed modules to bytecode (``--no-compile``: pip ignores a failure there anyway;
    Python compiles a module when it first imports it)."""
    block = next(b for b in CODE if b.page == "README.md" and "git+file://" in b.code)
    assert "pip install 'git+file:///path/to/clone'" in block.code
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True,
                   timeout=TIMEOUT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install",
         "--quiet", "--no-deps", "--no-compile", "--disable-pip-version-check",
         f"git+file://{ROOT}"],
        capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    version = re.search(r'^__version__ = "([^"]+)"', (ROOT / "__init__.py").read_text(), re.M)
    shown = subprocess.run([str(env_dir / "bin" / "beam-tfrecords"), "--version"],
                           capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path, env=env)
    assert shown.stdout.strip() == f"beam-tfrecords {version.group(1)}", shown
