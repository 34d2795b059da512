"""The Dockerfile read as Docker reads it, for the checks that cannot run Docker here (no engine
runs on this machine): the final stage's instructions, the files its COPY lines put into the
image, and a replay of that stage -- COPY, WORKDIR, ENV and RUN -- in a folder standing in for
the image's filesystem, with a virtual environment standing in for its Python
(scripts/smoke.py). Reading the steps from the Dockerfile itself means a check cannot test
other commands than the image build runs.
"""

from __future__ import annotations

import pathlib
import posixpath
import shlex
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
# Instructions of the final stage that the replay performs, and those that change nothing a
# replay could check; any other instruction stops it, rather than being skipped unnoticed.
REPLAYED = {"WORKDIR", "COPY", "ENV", "RUN"}
INERT = {"FROM", "ARG", "LABEL", "ENTRYPOINT", "CMD", "EXPOSE"}


def final_stage(path: pathlib.Path = DOCKERFILE) -> list[str]:
    """The instructions of the Dockerfile's last stage, its FROM first.

    Args:
        path: the Dockerfile.

    Returns:
        One string per instruction, continuation lines joined and comments left out.
    """
    text = path.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    last_from = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    return lines[last_from:]


def copies(stage: list[str]) -> list[tuple[pathlib.Path, str]]:
    """Every file the stage's COPY lines take from this repository (``COPY --from=`` takes from
    another image and is left out), with the absolute path it gets in the image.

    Args:
        stage: instructions, as ``final_stage`` returns them.

    Returns:
        ``(file in the repository, path in the image)`` pairs, in COPY order.
    """
    workdir, found = "/", []
    for line in stage:
        words = line.split()
        if words[0] == "WORKDIR":
            workdir = posixpath.join(workdir, words[1])
        elif words[0] == "COPY" and not any(w.startswith("--from=") for w in words):
            *sources, raw_dest = words[1:]
            dest = posixpath.normpath(posixpath.join(workdir, raw_dest))
            into_folder = raw_dest.endswith("/") or raw_dest in (".", "./") or len(sources) > 1
            for pattern in sources:
                matches = sorted(ROOT.glob(pattern))
                if not matches:
                    raise SystemExit(f"Dockerfile: COPY {pattern}: not in the repository")
                for path in matches:
                    if path.is_dir():
                        found += [(f, posixpath.join(dest, f.relative_to(path).as_posix()))
                                  for f in sorted(path.rglob("*")) if f.is_file()]
                    else:
                        into_folder = into_folder or "*" in pattern
                        found.append((path, posixpath.join(dest, path.name)
                                      if into_folder else dest))
    return found


def replay(stage: list[str], root: pathlib.Path, env: dict[str, str]) -> None:
    """Perform the stage's instructions with the image's filesystem at ``root``: COPY from this
    repository, WORKDIR, ENV, and each RUN through ``/bin/sh -c`` (Docker's shell form) in the
    working directory, with ``env``; ``PATH`` there decides which Python's ``pip`` runs.

    Args:
        stage: instructions, as ``final_stage`` returns them.
        root: an empty folder standing in for ``/`` of the image.
        env: the environment of every RUN (ENV instructions add to a copy of it).

    Raises:
        SystemExit: a RUN failed, or the stage holds an instruction the replay does not know.
    """
    for source, target in copies(stage):
        placed = root / target.lstrip("/")
        placed.parent.mkdir(parents=True, exist_ok=True)
        placed.write_bytes(source.read_bytes())
    env, workdir = dict(env), "/"
    for line in stage:
        keyword, _, rest = line.partition(" ")
        if keyword not in REPLAYED | INERT:
            raise SystemExit(f"Dockerfile: the replay does not know `{keyword}`: teach "
                             "scripts/dockerfile.py what it does, or the check would skip it")
        if keyword == "WORKDIR":
            workdir = posixpath.join(workdir, rest.strip())
            (root / workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
        elif keyword == "ENV":
            words = shlex.split(rest)
            pairs = [w.split("=", 1) for w in words] if "=" in words[0] else [words[:1] + [
                " ".join(words[1:])]]
            env.update(dict(pairs))
        elif keyword == "RUN":
            done = subprocess.run(["/bin/sh", "-c", rest], cwd=root / workdir.lstrip("/"),
                                  env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"Dockerfile: `RUN {rest}` exited {done.returncode}:\n"
                                 f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")

