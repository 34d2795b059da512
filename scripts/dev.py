"""The quick start's two commands, with nothing but Python 3 needed beforehand.

    python3 scripts/dev.py demo   # build configs/demo.yaml on DirectRunner into ./output/demo
    python3 scripts/dev.py test   # run the whole test suite (TensorFlow cross-checks included)

Each command creates what it needs and reuses it next time:
  .venv/     the project's virtual environment (this package, editable, with its dev extras)
  .venv-tf/  TensorFlow, only a test oracle, in its own environment because it needs
             protobuf 7 while Apache Beam needs protobuf 6 (tests talk to it via files)
An environment is reinstalled when the file that pins it changes.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import venv

ROOT = pathlib.Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
TF_VENV = ROOT / ".venv-tf"
TF_REQUIREMENTS = ROOT / "tests" / "tf_oracle" / "requirements.txt"


def _python(env: pathlib.Path) -> pathlib.Path:
    return env / ("Scripts" if os.name == "nt" else "bin") / "python"


def _ensure_env(env: pathlib.Path, pins: pathlib.Path, install: list[str]) -> pathlib.Path:
    """Create ``env`` and run ``pip install <install>`` unless ``pins`` is unchanged."""
    stamp = env / ".installed"
    digest = hashlib.sha256(pins.read_bytes()).hexdigest()
    python = _python(env)
    if python.exists() and stamp.exists() and stamp.read_text() == digest:
        return python
    print(f"[dev] setting up {env.name} (first run takes a few minutes)", flush=True)
    if not python.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(env)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
                   check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *install], check=True,
                   cwd=ROOT)
    stamp.write_text(digest)
    return python


def project_env() -> pathlib.Path:
    return _ensure_env(VENV, ROOT / "setup.py", ["-e", ".[dev]"])


def tf_env() -> pathlib.Path:
    return _ensure_env(TF_VENV, TF_REQUIREMENTS, ["-r", str(TF_REQUIREMENTS)])


def demo(args: list[str]) -> int:
    python = project_env()
    cmd = [str(python), "-m", "beam_tfrecords.pipelines.cli", "build",
           "--config", "configs/demo.yaml", *args]
    return subprocess.run(cmd, cwd=ROOT).returncode


def test(args: list[str]) -> int:
    python = project_env()
    env = dict(os.environ, BEAM_TFRECORDS_TF_PYTHON=str(tf_env()))
    cmd = [str(python), "-m", "pytest", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


COMMANDS = {"demo": demo, "test": test}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__)
        return 2
    return COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
