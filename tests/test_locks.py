"""The locks in locks/ agree with setup.py: every pin and range there holds in every lock of the
project's environment, every Python a classifier names has a lock, and every lock pins each
package with hashes (pip refuses a lock line without one under --require-hashes).

Installs go through the locks only (scripts/dev.py, .ci/run), so a lock that drifted from
setup.py would test versions users never get; `python3 scripts/lock.py` regenerates them.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOCKS = ROOT / "locks"


def _setup_literal(name: str):
    """A module-level list in setup.py (INSTALL_REQUIRES, ...), read without running it."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    beam = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", "") == "BEAM_VERSION")
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == name:
            items = []
            for element in node.value.elts:
                if isinstance(element, ast.Starred):
                    items.extend(_setup_literal(element.value.id))
                elif isinstance(element, ast.JoinedStr):
                    items.append("".join(beam if isinstance(v, ast.FormattedValue) else v.value
                                         for v in element.values))
                else:
                    items.append(element.value)
            return items
    raise AssertionError(f"setup.py has no {name}")


def _classifier_pythons() -> list[str]:
    text = (ROOT / "setup.py").read_text()
    return re.findall(r'"Programming Language :: Python :: (3\.\d+)"', text)


def _pins(lock: pathlib.Path) -> dict[str, str]:
    pins = {}
    for line in lock.read_text().splitlines():
        found = re.match(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^\s;\\]+)", line)
        if found:
            pins[canonicalize_name(found.group(1))] = found.group(3)
    return pins


@pytest.mark.parametrize("kind", ["dev", "runtime"])
@pytest.mark.parametrize("python", _classifier_pythons())
def test_every_pin_in_setup_holds_in_the_lock_of_each_python(python, kind):
    lock = LOCKS / f"{kind}-py{python}.txt"
    assert lock.exists(), f"no lock for Python {python}: run `python3 scripts/lock.py`"
    pins = _pins(lock)
    environment = dict(default_environment(), python_version=python,
                       python_full_version=f"{python}.0", extra=kind)
    wanted = [*_setup_literal("INSTALL_REQUIRES"),
              *(_setup_literal("DEV_REQUIRES") if kind == "dev" else [])]
    for text in wanted:
        requirement = Requirement(text)
        if requirement.marker and not requirement.marker.evaluate(environment):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{lock.name} lacks {requirement}"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{lock.name} pins {name}=={pins[name]}, setup.py wants {requirement}")


def test_every_supported_python_is_a_classifier_with_a_lock():
    pythons = _classifier_pythons()
    assert pythons == ["3.10", "3.11", "3.12", "3.13"]
    text = (ROOT / "setup.py").read_text()
    assert 'python_requires=">=3.10,<3.14"' in text
    for kind in ("dev", "runtime"):
        assert sorted(p.name for p in LOCKS.glob(f"{kind}-py*.txt")) == [
            f"{kind}-py{p}.txt" for p in pythons]


@pytest.mark.parametrize("lock", sorted(LOCKS.glob("*.txt")), ids=lambda p: p.name)
def test_every_locked_package_is_exact_and_hashed(lock):
    entries = re.split(r"\n(?=[A-Za-z0-9])", lock.read_text().split("\n", 2)[2].strip())
    assert entries
    for entry in entries:
        head = entry.splitlines()[0]
        assert re.match(r"^[A-Za-z0-9_.\-]+(\[[^\]]*\])?==\S+", head), head
        assert "--hash=sha256:" in entry, f"{lock.name}: {head} has no hash"


def test_the_oracle_lock_holds_the_oracle_requirements():
    pins = _pins(LOCKS / "tf-oracle-py3.11.txt")
    for line in (ROOT / "tests/tf_oracle/requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            name = canonicalize_name(requirement.name)
            assert requirement.specifier.contains(pins[name]), (name, pins.get(name))


def test_the_docs_lock_holds_the_docs_requirements():
    pins = _pins(LOCKS / "docs-py3.11.txt")
    for line in (ROOT / "docs/requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            name = canonicalize_name(requirement.name)
            assert name in pins and requirement.specifier.contains(pins[name]), (
                name, pins.get(name))
            for extra in requirement.extras:  # mkdocstrings[python] needs mkdocstrings-python
                assert canonicalize_name(f"{name}-{extra}") in pins, (name, extra)
