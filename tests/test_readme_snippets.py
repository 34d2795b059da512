"""Every example of README.md's "Use it in your own pipeline" section runs as printed.

The rule for the section: each ```python / ```yaml block is preceded by the line
``<!-- snippet: python -->`` or ``<!-- snippet: yaml -->`` (a block without it fails
``test_every_block_is_marked``), is complete, and uses relative paths only. Each runs in an
empty temporary directory as the current directory, unchanged -- nothing is substituted: a
python snippet with this interpreter, a yaml snippet with ``python -m apache_beam.yaml.main
--yaml_pipeline_file=...``. A snippet passes when it exits 0 and every data set it wrote
(``output/**/LATEST``) is a committed version that ``verify`` accepts. The snippets start
together, three at a time, and each test awaits its own.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from beam_tfrecords.pipelines.verify import verify_path

ROOT = pathlib.Path(__file__).resolve().parent.parent
SECTION = "## Use it in your own pipeline"
MARK = re.compile(r"<!-- snippet: (python|yaml) -->\n```(\w+)\n(.*?)^```", re.S | re.M)
FENCE = re.compile(r"^```(python|yaml)\s*$", re.M)
TIMEOUT = 300


def section() -> str:
    text = (ROOT / "README.md").read_text()
    assert SECTION in text, f"README.md has no {SECTION!r} section"
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start:] if end < 0 else text[start:end]


def snippets() -> list[tuple[str, str]]:
    """(kind, code) of every marked block, in order."""
    found = []
    for kind, lang, code in MARK.findall(section()):
        assert kind == lang, f"a block marked {kind} is fenced as {lang}"
        found.append((kind, code))
    return found


SNIPPETS = snippets()


def snippet_id(index: int) -> str:
    kind, code = SNIPPETS[index]
    output = re.search(r"output[=:]\s*\"?(output/[\w-]+)", code)
    return f"{index}-{kind}-{output[1].split('/')[1] if output else 'snippet'}"


def run_snippet(index: int, folder: pathlib.Path) -> subprocess.CompletedProcess:
    kind, code = SNIPPETS[index]
    folder.mkdir(parents=True)
    if kind == "python":
        (folder / "snippet.py").write_text(code)
        command = [sys.executable, "snippet.py"]
    else:
        (folder / "pipeline.yaml").write_text(code)
        command = [sys.executable, "-m", "apache_beam.yaml.main",
                   "--yaml_pipeline_file=pipeline.yaml"]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=TIMEOUT,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("readme")
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {i: pool.submit(run_snippet, i, tmp / f"snippet-{i}")
                   for i in range(len(SNIPPETS))}
        yield lambda i: (futures[i].result(), tmp / f"snippet-{i}")


def test_every_block_is_marked():
    fences = FENCE.findall(section())
    assert len(fences) == len(SNIPPETS), "every python/yaml block of the section is a snippet"
    kinds = [kind for kind, _ in SNIPPETS]
    assert kinds.count("python") >= 5 and kinds.count("yaml") >= 2, kinds


@pytest.mark.parametrize("index", range(len(SNIPPETS)), ids=snippet_id)
def test_snippet_runs_and_commits_a_verified_version(results, index):
    done, folder = results(index)
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
