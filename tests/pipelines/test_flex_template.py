"""The Flex Template: its metadata, the parameter mapping onto the build command, the entry
script, and the Dockerfile's launcher settings against the image layout its COPY lines make."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

from beam_tfrecords.pipelines.cli import build_parser
from beam_tfrecords.pipelines.flex_template import template_argv

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import dockerfile  # noqa: E402 -- scripts/dockerfile.py, the Dockerfile as Docker reads it

METADATA = ROOT / "pipelines" / "flex" / "metadata.json"

# A value each template parameter may take, and the build option it must set.
SAMPLES = {
    "config": ("gs://bucket/configs/demo.yaml", "config", "gs://bucket/configs/demo.yaml"),
    "input": ("gs://bucket/raw/*.csv", "input", "gs://bucket/raw/*.csv"),
    "output": ("gs://bucket/datasets/demo", "output", "gs://bucket/datasets/demo"),
    "version": ("nightly-2026.11.23", "version", "nightly-2026.11.23"),
    "skip_if_unchanged": ("true", "skip_if_unchanged", True),
    "keep_versions": ("3", "keep_versions", 3),
}


@pytest.fixture(scope="module")
def metadata() -> dict:
    return json.loads(METADATA.read_text())


def test_metadata_declares_named_documented_parameters(metadata):
    assert metadata["name"] and metadata["description"]
    names = [p["name"] for p in metadata["parameters"]]
    assert len(names) == len(set(names))
    assert set(names) == set(SAMPLES), "give every new parameter a sample here"
    required = [p["name"] for p in metadata["parameters"] if not p.get("isOptional", False)]
    assert required == ["config"]
    for parameter in metadata["parameters"]:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", parameter["name"])
        assert parameter["label"] and len(parameter["helpText"]) > 20
        sample = SAMPLES[parameter["name"]][0]
        for regex in parameter["regexes"]:
            assert re.match(regex, sample), (parameter["name"], regex)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_parameter_as_a_launcher_passes_it_is_a_build_option(name):
    value, dest, expected = SAMPLES[name]
    args, beam_args = build_parser().parse_known_args(
        ["--config=c.yaml", *template_argv([f"--{name}={value}"])])
    assert beam_args == []  # nothing fell through to Beam, where it would be ignored
    assert getattr(args, dest) == expected


def test_switch_parameters_accept_false_and_refuse_nonsense():
    assert template_argv(["--skip_if_unchanged=false", "--output=gs://b/o"]) == ["--output=gs://b/o"]
    assert template_argv(["--skip_if_unchanged=TRUE"]) == ["--skip-if-unchanged"]
    assert template_argv(["--skip-if-unchanged"]) == ["--skip-if-unchanged"]
    with pytest.raises(ValueError, match="expected true or false"):
        template_argv(["--skip_if_unchanged=perhaps"])
    # Dataflow's own options pass through untouched.
    beam = ["--runner=DataflowRunner", "--project=p", "--temp_location=gs://b/tmp"]
    assert template_argv(beam) == beam


# pipelines/flex/main.py run as ``python main.py ARGV`` would run it (its folder first on
# sys.path, as __main__), in a process forked from the session's server that imported Beam.
_AS_SCRIPT = """
import os, runpy, sys
sys.argv[0] = sys.argv[1]
del sys.argv[1]
sys.path[0] = os.path.dirname(sys.argv[0])  # in place of -c's ""
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_entry_script_builds_then_skips_like_the_command(tmp_path, preforked):
    """The launcher runs pipelines/flex/main.py as a script, with --name=value parameters:
    the build in a fresh interpreter (the script's own imports); the skip through the same
    script, forked from the session's server that imported Beam once."""
    data = tmp_path / "in.csv"
    data.write_text("id,feature0,feature1,feature2,feature3\n1,true,1,dog,0.5\n")
    out = tmp_path / "out"
    script = ROOT / "pipelines" / "flex" / "main.py"
    base = [f"--config={ROOT / 'configs' / 'demo.yaml'}", f"--input={data}", f"--output={out}",
            "--keep_versions=2"]
    first = subprocess.run([sys.executable, str(script), *base, "--version=a",
                            "--skip_if_unchanged=false"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads((out / "a" / "manifest.json").read_text())["counts"]["written"] == 1
    second = preforked.start(_AS_SCRIPT, [script, *base, "--version=b",
                                          "--skip_if_unchanged=true"], cwd=tmp_path)
    _, stderr = second.communicate(timeout=300)
    assert second.returncode == 0, stderr[-2000:]
    assert "unchanged since version a" in second.stdout.read()
    assert not (out / "b").exists()


def test_dockerfile_launcher_env_points_at_files_in_the_image():
    stage = dockerfile.final_stage()
    env = {}
    for line in stage:
        if line.startswith("ENV "):
            env.update(re.findall(r"(\w+)=(\S+)", line))
    files = {target for _, target in dockerfile.copies(stage)}
    for name in ("FLEX_TEMPLATE_PYTHON_PY_FILE", "FLEX_TEMPLATE_PYTHON_SETUP_FILE"):
        assert env[name] in files, (name, env[name])
    assert env["FLEX_TEMPLATE_PYTHON_PY_FILE"].endswith("/pipelines/flex/main.py")
    # The launcher binary comes from Google's launcher image, to the path Dataflow runs.
    launcher = "/opt/google/dataflow/python_template_launcher"
    copies = [line.split() for line in stage if line.startswith("COPY --from=")]
    assert [launcher, launcher] in [words[-2:] for words in copies]
    # The worker's entry point stays the SDK image's boot loader.
    entrypoints = [line for line in stage if line.startswith("ENTRYPOINT")]
    assert entrypoints in ([], ['ENTRYPOINT ["/opt/apache/beam/boot"]'])
    assert stage[0].startswith("FROM apache/beam_python3.11_sdk:${BEAM_VERSION}")


@pytest.mark.parametrize("name, runner, prefix", [
    ("dataflow", "DataflowRunner", "gs://"), ("flink", "FlinkRunner", "/shared/"),
])
def test_runner_example_configs_are_valid(name, runner, prefix):
    from beam_tfrecords.pipelines.config import load_config

    path = ROOT / "configs" / f"{name}.yaml"
    config = load_config(str(path))
    assert config.source.path.startswith(prefix) and config.output.path.startswith(prefix)
    assert f"--runner {runner}" in path.read_text()  # the command line that runs it
