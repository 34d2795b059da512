"""RELIABILITY.md's promise: every guarantee names at least one test, and every named test
exists (found by reading the test files' syntax trees, so nothing is imported or run)."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "RELIABILITY.md"
REFERENCE = re.compile(r"tests/((?:\w+/)*test_\w+\.py)::(test_\w+)")


def defined_tests(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name.startswith("test_")}



def guarantees() -> dict[str, list[tuple[str, str]]]:
    """``### R<n>. ...`` heading -> the tests named under it."""
    found: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            current = None
        elif line.startswith("### "):
            current = line[4:].strip()
            found[current] = []
        elif current is not None:
            found[current] += REFERENCE.findall(line)
    return found


def test_every_guarantee_names_a_test():
    found = guarantees()
    assert len(found) >= 20
    assert all(re.match(r"R\d+\. ", title) for title in found), list(found)
    assert not [title for title, tests in found.items() if not tests]


@pytest.mark.slow
def test_every_named_test_exists():
    references = set(REFERENCE.findall(DOC.read_text()))
    assert references
    missing = []
    for file_name, test in sorted(references):
        path = ROOT / "tests" / file_name
        if not path.exists() or test not in defined_tests(path):
            missing.append(f"tests/{file_name}::{test}")
    assert not missing, missing
