"""Every public function and method says what its arguments mean and what it returns.

Read statically with ``ast`` (nothing is imported), over the package's modules whose path has
no underscore-prefixed part. A public function (no leading underscore) that takes parameters
other than ``self``/``cls`` needs a Google-style ``Args:`` section with an entry for each of
them and none for a name it does not take; one that returns a value needs ``Returns:`` (or
``Yields:``). A public class whose ``__init__`` takes parameters documents them in the class
docstring's ``Args:``, which is where the API page and ``help()`` show them. The exemptions
below are overrides whose contract Beam or Python documents. The test fails listing every gap
as ``file:line name: missing ...``.
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Top-level folders that are not the package (tests, tools, environments, generated files).
_NOT_PACKAGE = {"tests", "bench", "scripts", "docs", "build", "configs", "locks", "site"}

# Beam's DoFn and PTransform hooks (apache_beam/transforms/core.py, ptransform.py): their
# contract is Beam's, and repeating it on each override would drift.
_BEAM_HOOKS = {"expand", "process", "setup", "start_bundle", "finish_bundle", "teardown",
               "display_data"}

# Overrides of a Beam base class's methods, by the base's name: Beam documents what they take
# and return. Only on a class that names such a base, so an ``encode`` elsewhere is checked.
_DOCUMENTED_BY_BASE = {
    "CombineFn": {"create_accumulator", "add_input", "add_inputs", "merge_accumulators",
                  "extract_output", "compact"},
    "Coder": {"encode", "decode", "is_deterministic", "to_type_hint", "estimate_size"},
    "RestrictionProvider": {"initial_restriction", "create_tracker", "split",
                            "restriction_size", "restriction_coder", "truncate"},
    "RestrictionTracker": {"current_restriction", "try_claim", "try_split", "check_done",
                           "current_progress", "is_bounded"},
}

# Methods of the io stream protocol, on classes that derive from an io base class: Python's io
# module documents what write/read/seek... take and return.
_IO_BASES = {"IOBase", "RawIOBase", "BufferedIOBase", "TextIOBase"}
_IO_METHODS = {"read", "readinto", "readable", "readline", "write", "writable", "seek",
               "seekable", "tell", "flush", "close", "fileno", "isatty", "truncate"}

def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in _NOT_PACKAGE or rel.parts[0].startswith("."):
            continue
        if any(part.startswith("_") and part != "__init__.py" for part in rel.parts):
            continue
        if rel.parts[0] == "setup.py":
            continue
        yield rel, ast.parse(path.read_text(), str(rel))


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return [name for name in names if name not in ("self", "cls")]


def _returns_value(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A ``return <value>`` in the function itself, not in a function or class nested in it."""
    todo = list(node.body)
    while todo:
        child = todo.pop()
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(child, ast.Return) and child.value is not None:
            if not (isinstance(child.value, ast.Constant) and child.value.value is None):
                return True
        todo.extend(ast.iter_child_nodes(child))
    return False


def _is_property(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    # A property reads as an attribute: its docstring describes the value.
    for deco in node.decorator_list:
        name = deco.attr if isinstance(deco, ast.Attribute) else getattr(deco, "id", "")
        if name in ("property", "cached_property", "setter"):
            return True
    return False


def _is_overload(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    # Typing overloads are signatures only; the implementation carries the docstring.
    return any(getattr(d, "id", getattr(d, "attr", "")) == "overload" for d in node.decorator_list)


_SECTIONS = ("Args:", "Returns:", "Yields:", "Raises:", "Attributes:", "Example:", "Examples:",
             "Note:")
_ENTRY = re.compile(r"\*{0,2}(\w+)(?: \(.*?\))?:")


def _documented(doc: str) -> list[str]:
    """The names the ``Args:`` section of ``doc`` describes: its lines at the first entry's
    indentation that start ``name:`` (continuation lines are indented deeper)."""
    names, inside, indent = [], False, None
    for line in doc.splitlines():
        text = line.strip()
        if text in _SECTIONS:
            inside, indent = text == "Args:", None
            continue
        if not inside or not text:
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth < indent:
            break
        found = _ENTRY.match(text)
        if depth == indent and found:
            names.append(found.group(1))
    return names


def _args_gaps(doc: str, params: list[str]) -> list[str]:
    """What is wrong with ``doc``'s ``Args:`` for ``params``: a section missing, a parameter
    left out, or an entry naming no parameter (stale, or a typo the API page would show)."""
    if not params:
        return []
    if "Args:" not in doc:
        return ["Args:"]
    documented = _documented(doc)
    gaps = [f"Args: entry for {p!r}" for p in params if p not in documented]
    gaps += [f"a parameter named {d!r} (Args: lists it)" for d in documented if d not in params]
    return gaps


def _function_gaps(node, qualname: str, bases: set[str] | None) -> list[str]:
    """``bases``: the names of the enclosing class's bases; None for a module's function."""
    if _is_property(node) or _is_overload(node):
        return []
    if bases is not None and node.name in _BEAM_HOOKS:
        return []
    if bases is not None and any(node.name in methods for base, methods in
                                 _DOCUMENTED_BY_BASE.items()
                                 if any(b.endswith(base) for b in bases)):
        return []
    if bases is not None and bases & _IO_BASES and node.name in _IO_METHODS:
        return []
    doc = ast.get_docstring(node) or ""
    missing = _args_gaps(doc, _parameters(node))
    if _returns_value(node) and "Returns:" not in doc and "Yields:" not in doc:
        missing.append("Returns:")
    return [f"{qualname}: missing {', '.join(missing)}"] if missing else []


def _class_gaps(node: ast.ClassDef, qualname: str) -> list[tuple[int, str]]:
    gaps = []
    doc = ast.get_docstring(node) or ""
    bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases}
    for child in node.body:
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if child.name == "__init__":
                missing = _args_gaps(doc, _parameters(child))
                if missing:
                    gaps.append((child.lineno, f"{qualname}: missing {', '.join(missing)} in "
                                               "the class docstring (for __init__)"))
            elif not child.name.startswith("_"):
                gaps += [(child.lineno, gap) for gap in
                         _function_gaps(child, f"{qualname}.{child.name}", bases)]
        elif isinstance(child, ast.ClassDef) and not child.name.startswith("_"):
            gaps += _class_gaps(child, f"{qualname}.{child.name}")
    return gaps


def tree_gaps(tree: ast.Module) -> list[tuple[int, str]]:
    """The gaps of one parsed module, as ``(line, "name: missing ...")``."""
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not node.name.startswith("_"):
                found += [(node.lineno, g) for g in _function_gaps(node, node.name, None)]
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            found += _class_gaps(node, node.name)
    return found


def docstring_gaps() -> list[str]:
    """Every gap in the package, as ``path:line name: missing ...``."""
    return [f"{rel}:{line} {gap}" for rel, tree in _modules() for line, gap in tree_gaps(tree)]


def test_public_functions_document_their_arguments_and_results():
    gaps = docstring_gaps()
    assert not gaps, f"{len(gaps)} docstring gaps:\n" + "\n".join(gaps)


_SAMPLE = '''
def bare(a): return a
def listed(a, b):
    """Sum.

    Args:
        a: the first term.
        c: a stale name.

    Returns:
        The sum.
    """
    return a + b
class Taken:
    """No arguments documented."""
    def __init__(self, x): ...
    def expand(self, pcoll): return pcoll
class Fn(beam.CombineFn):
    def add_input(self, acc, x): return acc
class Own:
    def encode(self, record): return record
'''


def test_the_checker_finds_each_kind_of_gap():
    gaps = [gap for _, gap in tree_gaps(ast.parse(_SAMPLE))]
    assert gaps == [
        "bare: missing Args:, Returns:",
        "listed: missing Args: entry for 'b', a parameter named 'c' (Args: lists it)",
        "Taken: missing Args: in the class docstring (for __init__)",
        "Own.encode: missing Args:, Returns:",  # not a Coder: its encode is checked
    ]


if __name__ == "__main__":
    print("\n".join(docstring_gaps()))
