"""The quick start's two commands, with nothing but Python 3 needed beforehand.

    python3 scripts/dev.py demo   # build configs/demo.yaml on DirectRunner into ./output/demo
    python3 scripts/dev.py test   # run the whole test suite (TensorFlow cross-checks included)
    python3 scripts/dev.py test --fast   # only the quick tier (no test marked in pytest.ini)
    python3 scripts/dev.py docs   # build the documentation (mkdocs build --strict) into site/

Each command creates what it needs and reuses it next time:
  .venv/     the project's virtual environment (this package, editable, with its dev extras)
  .venv-tf/  TensorFlow, only a test oracle, in its own environment because it needs
             protobuf 7 while Apache Beam needs protobuf 6 (tests talk to it via files)
  .venv-tfdv/  TensorFlow Data Validation 1.16.1, the oracle of our statistics: it pins
             TensorFlow < 2.17, protobuf < 6, pyarrow < 11 and a Beam of its own
  .venv-croissant/  mlcroissant, the oracle of every version's croissant.json
  .venv-docs/  MkDocs and its plugins (`docs` only), with this package for the API page
Every package comes from a lock in locks/ (exact versions and hashes, installed with
--require-hashes --no-deps; scripts/lock.py makes them), so a fresh machine installs what CI
tested. An environment is reinstalled when its lock changes. The installer is uv, pinned with
its hashes in locks/uv.txt and put into .cache/uv by pip: it fetches in parallel, so the three
environments a fresh machine needs take about a minute rather than five. Where uv has no wheel,
pip installs the same locks.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import venv
from concurrent.futures import ThreadPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
TF_VENV = ROOT / ".venv-tf"
TFDV_VENV = ROOT / ".venv-tfdv"
CROISSANT_VENV = ROOT / ".venv-croissant"
DOCS_VENV = ROOT / ".venv-docs"
UV_HOME = ROOT / ".cache" / "uv"
LOCKS = ROOT / "locks"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def _python(env: pathlib.Path) -> pathlib.Path:
    return env / ("Scripts" if os.name == "nt" else "bin") / "python"


def _lock(name: str) -> pathlib.Path:
    lock = LOCKS / f"{name}-py{PYTHON}.txt"
    if not lock.exists():
        known = sorted(p.name for p in LOCKS.glob(f"{name}-py*.txt"))
        sys.exit(f"[dev] no lock for Python {PYTHON} ({lock.relative_to(ROOT)}); run this "
                 f"script with a Python that has one: {', '.join(known)}")
    return lock


def _ensure_env(env: pathlib.Path, lock: pathlib.Path, project: bool,
                check: bool = True) -> pathlib.Path:
    """Create ``env`` from ``lock`` (and this package, editable, when ``project``) unless the
    lock and setup.py are unchanged since the last install. ``check``: ``pip check`` the
    result (not for an environment that holds this package without its dependencies)."""
    stamp = env / ".installed"
    pinned = [lock, ROOT / "setup.py"] if project else [lock]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in pinned)).hexdigest()
    python = _python(env)
    if python.exists() and stamp.exists() and stamp.read_text() == digest:
        return python
    print(f"[dev] setting up {env.name} from {lock.relative_to(ROOT)} (the first run takes a "
          "few minutes)", flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(env)
    install_locked(python, lock, ["-e", str(ROOT)] if project else [], check=check)
    stamp.write_text(digest)
    return python


def uv() -> pathlib.Path | None:
    """The pinned uv, installed from locks/uv.txt into .cache/uv on first use; ``None`` where
    pip cannot install it (no wheel for this platform), and the locks are then installed with
    pip."""
    binary = UV_HOME / ("Scripts" if os.name == "nt" else "bin") / "uv"
    if binary.exists():
        return binary
    venv.EnvBuilder(with_pip=True, clear=True).create(UV_HOME)
    done = subprocess.run(
        [str(_python(UV_HOME)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--only-binary", ":all:", "--require-hashes", "--no-deps", "-r", str(LOCKS / "uv.txt")],
        cwd=ROOT)
    if done.returncode != 0 or not binary.exists():
        print("[dev] uv could not be installed here; installing with pip", flush=True)
        return None
    return binary


def install_locked(python: pathlib.Path, lock: pathlib.Path, package: list[str],
                   check: bool = True) -> None:
    """Into the environment of ``python``: every package of ``lock`` with --require-hashes
    --no-deps, then ``package`` (pip arguments naming this package: ``-e ROOT``, a wheel) with
    --no-deps, then ``pip check`` unless ``check`` is false. The one way we install."""
    installer = uv()
    if installer is None:
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    else:
        # uv leaves .pyc files to the first import, as pip does not; where the environment
        # says PYTHONDONTWRITEBYTECODE (CI's may), every process then compiled Beam's ~2,000
        # modules again: 4.6 s to import Beam instead of 1.5 in each command a test runs
        pip = [str(installer), "pip", "install", "--quiet", "--compile-bytecode", "--python",
               str(python)]
    subprocess.run([*pip, "--require-hashes", "--no-deps", "-r", str(lock)], check=True,
                   cwd=ROOT)
    if package:
        subprocess.run([*pip, "--no-deps", *package], check=True, cwd=ROOT)
    if check:
        subprocess.run([str(python), "-m", "pip", "check"], check=True, cwd=ROOT)


def project_env() -> pathlib.Path:
    return _ensure_env(VENV, _lock("dev"), project=True)


def tf_env() -> pathlib.Path:
    return _ensure_env(TF_VENV, _lock("tf-oracle"), project=False)


def tfdv_env() -> pathlib.Path:
    """TensorFlow Data Validation 1.16.1, which has wheels up to Python 3.11 (the oracles'
    Python, scripts/lock.py's ORACLE_PYTHON)."""
    return _ensure_env(TFDV_VENV, _lock("tfdv-oracle"), project=False)


def croissant_env() -> pathlib.Path:
    """mlcroissant (``mlcroissant validate``), the oracle of our croissant.json files."""
    return _ensure_env(CROISSANT_VENV, _lock("croissant-oracle"), project=False)


def docs_env() -> pathlib.Path:
    """MkDocs from locks/docs-py3.11.txt, with this package installed editable and without
    its dependencies: mkdocstrings reads the docstrings from the source, never importing it."""
    return _ensure_env(DOCS_VENV, LOCKS / "docs-py3.11.txt", project=True, check=False)


def demo(args: list[str]) -> int:
    python = project_env()
    cmd = [str(python), "-m", "beam_tfrecords.pipelines.cli", "build",
           "--config", "configs/demo.yaml", *args]
    return subprocess.run(cmd, cwd=ROOT).returncode


def prepare(*makers) -> list[pathlib.Path]:
    """Make the environments ``makers`` make (``project_env``, ``tf_env``...) side by side:
    their downloads overlap, and an environment already up to date costs nothing."""
    uv()  # once, before the threads that use it
    with ThreadPoolExecutor(len(makers)) as pool:
        return [job.result() for job in [pool.submit(make) for make in makers]]


def run_pytest(python: pathlib.Path, args: list[str], tensorflow: bool = True) -> int:
    """Run the suite with ``python`` (a venv holding this package), the TensorFlow and TFDV
    oracles made first unless the chosen tests never use them."""
    env = dict(os.environ)
    if tensorflow:
        tf, tfdv, croissant = prepare(tf_env, tfdv_env, croissant_env)
        env["BEAM_TFRECORDS_TF_PYTHON"] = str(tf)
        env["BEAM_TFRECORDS_TFDV_PYTHON"] = str(tfdv)
        env["BEAM_TFRECORDS_CROISSANT_PYTHON"] = str(croissant)
    return subprocess.run([str(python), "-m", "pytest", *args], cwd=ROOT, env=env).returncode


FAST = ["-m", "not slow and not gcs and not tf and not tfdv and not croissant and not e2e "
        "and not browser"]
# Whole test files spread over the cores (pytest-xdist): a file's module fixtures (builds
# shared by its tests) run once, and tests/conftest.py puts the longest files first. One
# worker more than there are cores: about a fifth of the workers' time is spent waiting (on a
# signal's effect, the Cloud Storage emulator, a lease running out), and the extra worker
# fills it -- on 2 cores, 807 s instead of 888-921 s with two.
PARALLEL = ["-n", str((os.cpu_count() or 1) + 1), "--dist", "loadfile", "--no-loadscope-reorder"]


def test(args: list[str]) -> int:
    """The whole suite on every core; ``--fast`` runs the quick tier alone (no marked test:
    see pytest.ini) and needs no TensorFlow environment. Pass ``-n 0`` to run in one
    process (``-x``, ``--pdb``)."""
    fast = "--fast" in args
    args = [a for a in args if a != "--fast"]
    if not any(a in ("-n", "--numprocesses") or a.startswith(("-n", "--numprocesses="))
               for a in args):
        args = [*PARALLEL, *args]
    if fast:
        return run_pytest(project_env(), [*FAST, *args], tensorflow=False)
    project, _, _, _ = prepare(project_env, tf_env, tfdv_env, croissant_env)
    return run_pytest(project, args)


DOCS_SOURCE = ROOT / ".cache" / "docs-src"  # mkdocs.yml's mkdocstrings `paths`


def _docs_source() -> None:
    """A folder named ``beam_tfrecords`` of links to the package's modules and subpackages, for
    mkdocstrings to read statically (mkdocs.yml sets ``allow_inspection: false``): the
    repository root *is* the package, so its name is nowhere on disk, and importing it would
    need Beam and numpy in the docs environment."""
    package = DOCS_SOURCE / "beam_tfrecords"
    if package.exists():
        shutil.rmtree(package)
    package.mkdir(parents=True)
    for entry in sorted(ROOT.iterdir()):
        is_module = entry.suffix == ".py" and entry.name != "setup.py"
        if is_module or (entry.is_dir() and (entry / "__init__.py").exists()):
            (package / entry.name).symlink_to(entry)


def docs(args: list[str]) -> int:
    """``mkdocs build --strict`` into site/ (or the folder ``-d DIR`` names); the command
    line's page runs ``--help`` through the project's environment (scripts/mkdocs_hooks.py)."""
    env = dict(os.environ, BEAM_TFRECORDS_CLI_PYTHON=str(project_env()),
               NO_MKDOCS_2_WARNING="1")
    python = docs_env()
    _docs_source()
    if "-d" not in args and "--site-dir" not in args:
        args = [*args, "-d", str(ROOT / "site")]
    return subprocess.run([str(python), "-m", "mkdocs", "build", "--strict", *args], cwd=ROOT,
                          env=env).returncode


COMMANDS = {"demo": demo, "test": test, "docs": docs}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__)
        return 2
    return COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
