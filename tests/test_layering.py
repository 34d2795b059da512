"""The package's shape: rules about its modules as a whole, checked over the source tree."""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The folders that install as beam_tfrecords (setup.py maps the package onto the repository root).
PACKAGE_DIRS = ("pipelines", "sinks", "transforms")


def _package_modules() -> list[pathlib.Path]:
    """Every module and package folder that ships, as paths below the repository root."""
    found = [p for p in ROOT.glob("*.py") if p.name != "setup.py"]
    for folder in PACKAGE_DIRS:
        for path in (ROOT / folder).rglob("*"):
            if "__pycache__" in path.parts:
                continue
            if path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").exists()):
                found.append(path)
    return found


def test_no_module_is_named_like_a_standard_library_module():
    """A module named ``inspect.py`` or ``types.py`` shadows the standard library's whenever its
    folder is on sys.path (running a file of that folder as a script puts it first): then
    ``python3 pipelines/build.py`` failed inside dataclasses, which imports ``inspect``."""
    clashes = sorted(
        str(path.relative_to(ROOT)) for path in _package_modules()
        if path.stem in sys.stdlib_module_names and path.stem != "__init__"
    )
    assert clashes == [], f"named like standard-library modules: {clashes}"


def test_the_check_sees_the_package():
    """The walk above finds the modules it is meant to judge (a moved folder must not make the
    first test pass vacuously)."""
    names = {str(p.relative_to(ROOT)) for p in _package_modules()}
    assert {"errors.py", "pipelines/cli.py", "sinks/tfrecord_format.py",
            "transforms/wire.py"} <= names
