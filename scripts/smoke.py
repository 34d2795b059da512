"""What a user gets from the wheel, on every Python we support, outside the repository.

    python3 scripts/smoke.py              # every Python that setup.py's classifiers name,
                                          #   then the Dockerfile's pip step (4 below)
    python3 scripts/smoke.py 3.10 3.13    # only these Pythons
    python3 scripts/smoke.py docker       # only the Dockerfile's pip step

1. The sdist and the wheel are built (``python -m build``) and checked (``twine check``).
2. For each Python: a fresh virtual environment in a temporary folder, the lock of a plain
   install (locks/runtime-py<X>.txt) with ``--require-hashes --no-deps``, the wheel with
   ``--no-deps``, and ``pip check``.
3. There, in a folder outside the repository: ``beam-tfrecords --version``; ``init`` on the
   demo's CSV; ``build`` of the demo config; ``verify``; the records read back with
   ``btf.read_examples`` (no TensorFlow); and a Python pipeline of dicts written with
   ``btf.WriteTFRecordDataset``.
4. The Dockerfile's pip step without Docker: a virtual environment on the image's Python stands
   in for Beam's SDK image -- Beam's published pins (locks/beam-sdk-image-py3.11.txt) with
   ``--no-deps``, then Beam itself, as Beam's own image build does -- and the Dockerfile's final
   stage is replayed on it (scripts/dockerfile.py: its COPY lines and RUN steps, read from the
   Dockerfile). Then ``pip check``, ``beam-tfrecords --version`` and the import, and the versions
   that changed must be exactly those locks/docker-py3.11.txt's header names.

An interpreter is found with pyenv (``$(pyenv root)/versions/3.X.*``) or as ``python3.X`` on
PATH; a supported Python that cannot be found fails the run, so CI never skips one silently.
Exit status 0 when every Python passed.
"""

from __future__ import annotations

import glob
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import dev  # noqa: E402 -- beside this script
import dockerfile  # noqa: E402
import lock  # noqa: E402

API_SNIPPET = """
import apache_beam as beam
import beam_tfrecords as btf

features = {"age": {"type": "int64"}, "name": {"type": "string", "missing": "omit"},
            "emb": {"type": "float", "shape": [3]}}
rows = [{"id": i, "age": i, "name": None if i % 7 == 0 else f"n{i}",
         "emb": [i, i + 0.5, -i]} for i in range(200)]
with beam.Pipeline() as p:
    _ = (p | beam.Create(rows)
           | btf.WriteTFRecordDataset(output="api_out", name="people", features=features,
                                      splits={"key": "id", "train": 80, "eval": 20}))
seen = sorted(int(r["age"]) for r in btf.read_examples("api_out"))
assert seen == list(range(200)), seen[:10]
print("api ok", len(seen))
"""

READ_SNIPPET = """
import sys
import beam_tfrecords as btf
records = list(btf.read_examples(sys.argv[1]))
assert len(records) == 10000 and {"feature0", "feature3"} <= set(records[0]), len(records)
print("read ok", len(records))
"""


def interpreter(python: str) -> str:
    """The path of a Python ``python`` (``"3.12"``) interpreter, or exit with a reason."""
    candidates = []
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True,
                              check=True).stdout.strip()
        candidates += sorted(glob.glob(f"{root}/versions/{python}.*/bin/python{python}"))
    except (OSError, subprocess.CalledProcessError):
        pass
    found = shutil.which(f"python{python}")
    if found and "/shims/" not in found:  # a pyenv shim fails unless that version is active
        candidates.append(found)
    if not candidates:
        sys.exit(f"[smoke] no Python {python} here (pyenv or python{python} on PATH): "
                 "install it, since setup.py claims it")
    return candidates[0]


def build_dists(out: pathlib.Path) -> pathlib.Path:
    python = str(dev.project_env())
    subprocess.run([python, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), "."],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    dists = sorted(out.iterdir())
    subprocess.run([python, "-m", "twine", "check", "--strict", *map(str, dists)], check=True)
    (wheel,) = [d for d in dists if d.suffix == ".whl"]
    return wheel


def run(args: list[str], cwd: pathlib.Path, env: dict) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"[smoke] `{' '.join(args)}` exited {done.returncode}:\n"
                         f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return done.stdout


def user_env(bin_dir: pathlib.Path) -> dict[str, str]:
    """This process's environment without what points Python at the repository, with
    ``bin_dir`` (a virtual environment's) first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def our_version() -> str:
    return re.search(r'^__version__ = "([^"]+)"', (ROOT / "__init__.py").read_text(), re.M)[1]


def smoke(python: str, wheel: pathlib.Path, work: pathlib.Path) -> float:
    start = time.monotonic()
    env_dir = work / f"venv-{python}"
    subprocess.run([interpreter(python), "-m", "venv", str(env_dir)], check=True)
    bin_dir = env_dir / "bin"
    dev.install_locked(bin_dir / "python", lock.runtime_lock(python), [str(wheel)])

    here = work / f"user-{python}"  # a user's folder: nothing of the repository in it
    (here / "data").mkdir(parents=True)
    shutil.copy(ROOT / "configs" / "data" / "demo.csv", here / "data" / "demo.csv")
    config = (ROOT / "configs" / "demo.yaml").read_text().replace(
        "configs/data/demo.csv", "data/demo.csv")
    (here / "demo.yaml").write_text(config)
    env = user_env(bin_dir)
    cli = str(bin_dir / "beam-tfrecords")
    version = run([cli, "--version"], here, env).strip()
    assert version == f"beam-tfrecords {our_version()}", version
    inferred = run([cli, "init", "--input", "data/demo.csv"], here, env)
    assert re.search(r"^\s+feature3: \{type: float", inferred, re.M), inferred[:2000]
    run([cli, "build", "--config", "demo.yaml", "--output", "out"], here, env)
    version_dir = here / "out" / (here / "out" / "LATEST").read_text().strip()
    manifest = json.loads((version_dir / "manifest.json").read_text())
    assert manifest["counts"]["written"] == 10000, manifest["counts"]
    run([cli, "verify", str(version_dir)], here, env)
    run([str(bin_dir / "python"), "-c", READ_SNIPPET, str(version_dir)], here, env)
    run([str(bin_dir / "python"), "-c", API_SNIPPET], here, env)
    return time.monotonic() - start


def installed(python: pathlib.Path) -> dict[str, str]:
    """Every distribution pip sees in ``python``'s environment, by normalized name."""
    listed = json.loads(run([str(python), "-m", "pip", "list", "--format=json"], ROOT,
                            user_env(python.parent)))
    return {re.sub(r"[-_.]+", "-", d["name"]).lower(): d["version"] for d in listed}


def docker_image(work: pathlib.Path) -> tuple[float, float]:
    """The Dockerfile's final stage replayed on a stand-in for Beam's SDK image (step 4).

    Returns:
        The seconds taken to make the stand-in, and to replay the stage and check the result.
    """
    start = time.monotonic()
    image = work / "beam-sdk-image"
    subprocess.run([interpreter(lock.DOCKER_PYTHON), "-m", "venv", str(image)], check=True)
    python = image / "bin" / "python"
    uv = [str(lock.uv()), "pip", "install", "--quiet", "--python", str(python), "--no-deps"]
    subprocess.run([*uv, "-r", str(lock.image_requirements())], check=True)
    subprocess.run([*uv, f"apache-beam=={lock.beam_version()}"], check=True)
    before = installed(python)
    env = user_env(python.parent)
    made = time.monotonic()
    dockerfile.replay(dockerfile.final_stage(), work / "image-root", env)

    after = installed(python)
    changed = {name: (before.get(name, "none"), version) for name, version in after.items()
               if before.get(name) != version}
    declared = {**lock.docker_changes(lock.docker_lock()),
                "beam-tfrecords": ("none", our_version())}
    gone = sorted(set(before) - set(after))
    if changed != declared or gone:
        raise SystemExit(f"[smoke] the Dockerfile's pip step changed {changed} (removed {gone}) "
                         f"in the image; {lock.docker_lock().name} declares {declared}")
    run([str(python), "-m", "pip", "check"], work, env)
    version = run([str(image / "bin" / "beam-tfrecords"), "--version"], work, env).strip()
    assert version == f"beam-tfrecords {our_version()}", version
    run([str(python), "-c", "import apache_beam, beam_tfrecords as btf; "
         f"assert apache_beam.__version__ == {lock.beam_version()!r}; "
         "btf.WriteTFRecordDataset, btf.read_examples"], work, env)
    return made - start, time.monotonic() - made


def main(argv: list[str]) -> int:
    targets = argv or [*lock.PYTHONS, "docker"]
    with tempfile.TemporaryDirectory(prefix="beam-tfrecords-smoke-") as temp:
        work = pathlib.Path(temp)
        pythons = [t for t in targets if t != "docker"]
        if pythons:
            wheel = build_dists(work / "dist")
            print(f"[smoke] built and checked {wheel.name}", flush=True)
        for python in pythons:
            seconds = smoke(python, wheel, work)
            print(f"[smoke] Python {python}: wheel installed outside the repository; "
                  f"--version, init, build, verify, read_examples and the API passed "
                  f"({seconds:.0f} s)", flush=True)
        if "docker" in targets:
            made, replayed = docker_image(work)
            print(f"[smoke] Dockerfile: its pip step on Beam's SDK image changed only what "
                  f"{lock.docker_lock().name} declares; pip check, --version and the import "
                  f"passed ({made:.0f} s to stand the image in, {replayed:.0f} s the stage)",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
