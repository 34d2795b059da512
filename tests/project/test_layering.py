"""The package's shape: rules about its modules as a whole, checked over the source tree."""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The folders that install as beam_tfrecords (setup.py maps the package onto the repository root).
PACKAGE_DIRS = ("pipelines", "runtime", "sinks", "transforms")


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
    assert {"errors.py", "pipelines/cli.py", "sinks/format/tfrecord_format.py",
            "transforms/codec/wire.py", "sinks/format/report_html.py"} <= names


# -- the layers ------------------------------------------------------------------------------------

# Beam-free, I/O-free cores: tested directly, importable anywhere (sinks/format holds the
# version report's renderer too, so the commit can write report.html).
PURE = ("transforms/codec", "transforms/stats", "sinks/format", "runtime/serialized_batch")
# What a pure module may import from this package: other pure modules, the error base, and
# the generated protobuf classes.
PURE_MAY_IMPORT = ("beam_tfrecords.transforms.codec", "beam_tfrecords.transforms.stats",
                   "beam_tfrecords.sinks.format", "beam_tfrecords.runtime.serialized_batch",
                   "beam_tfrecords.errors", "beam_tfrecords.transforms.proto")
# Outside modules no pure module may import: Beam, storage clients, filesystems.
FORBIDDEN_IN_PURE = ("apache_beam", "google", "fsspec", "gcsfs", "s3fs", "pyarrow.fs",
                     "requests", "urllib3", "shutil", "tempfile", "pathlib", "glob")


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["beam_tfrecords", *parts])


def _imports(path: pathlib.Path) -> set[str]:
    """Every module ``path`` imports, at any depth (function-level imports included)."""
    import ast

    found: set[str] = set()
    package = _module_name(path) if path.name == "__init__.py" else _module_name(
        path).rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _sources() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in _package_modules() if p.suffix == ".py"}


def _under(name: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_codec_and_format_cores_import_no_beam_no_filesystem_no_pipelines():
    pure = tuple("beam_tfrecords." + p.replace("/", ".") for p in PURE)
    bad = []
    for module, imports in _sources().items():
        if not _under(module, pure):
            continue
        for name in sorted(imports):
            ours = name.startswith("beam_tfrecords")
            if (ours and name != "beam_tfrecords" and not _under(name, PURE_MAY_IMPORT)) or (
                    not ours and _under(name, FORBIDDEN_IN_PURE)):
                bad.append(f"{module} imports {name}")
    assert bad == []


def test_transforms_and_sinks_never_import_pipelines():
    bad = [f"{module} imports {name}" for module, imports in _sources().items()
           if _under(module, ("beam_tfrecords.transforms", "beam_tfrecords.sinks"))
           for name in sorted(imports) if _under(name, "beam_tfrecords.pipelines")]
    assert bad == []


def test_the_runtime_layer_sits_below_readers_and_sinks():
    """runtime/ (storage, spread, the batch type and its coders) is what readers and sinks
    both use: it imports neither, nor pipelines/ -- only itself, the pure cores and errors."""
    allowed = ("beam_tfrecords.runtime", *PURE_MAY_IMPORT)
    bad = [f"{module} imports {name}" for module, imports in _sources().items()
           if _under(module, "beam_tfrecords.runtime")
           for name in sorted(imports)
           if _under(name, "beam_tfrecords") and name != "beam_tfrecords"
           and not _under(name, allowed)]
    assert bad == []


def test_folders_depend_one_way_transforms_then_sinks():
    """Records flow from transforms/ (readers, encoders) into sinks/ (shards, the commit):
    transforms/ may use sinks/ (the commit, the layout's names), never the other way round,
    so the two folders never form a circle."""
    bad = [f"{module} imports {name}" for module, imports in _sources().items()
           if _under(module, "beam_tfrecords.sinks")
           for name in sorted(imports) if _under(name, "beam_tfrecords.transforms")]
    assert bad == []


def _module_graph(sources: dict[str, set[str]]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at any depth (a function-level import
    breaks a cycle at import time, not in the design). ``from pkg import name`` counts as an
    import of ``pkg.name`` when that is a module, else of ``pkg``."""
    graph: dict[str, set[str]] = {}
    for module, imports in sources.items():
        edges = set()
        for name in imports:
            while name not in sources and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in sources and name != module:
                edges.add(name)
        graph[module] = edges
    return graph


def _folder_graph(graph: dict[str, set[str]], packages: set[str]) -> dict[str, set[str]]:
    """Folder -> the folders its modules import (a package's ``__init__`` is in its own
    folder; ``transforms`` and ``transforms.readers`` are two folders)."""

    def folder(module: str) -> str:
        return module if module in packages else module.rsplit(".", 1)[0]

    out: dict[str, set[str]] = {folder(m): set() for m in graph}
    for module, edges in graph.items():
        out[folder(module)].update(folder(e) for e in edges if folder(e) != folder(module))
    return out


def _packages() -> set[str]:
    return {_module_name(p) for p in _package_modules() if p.is_dir()} | {"beam_tfrecords"}


def test_no_import_cycle_between_modules():
    cycles = _cycles(_module_graph(_sources()))
    assert cycles == [], cycles


def test_no_circle_between_folders():
    """Folders form layers: when modules of one folder import another, no module of the other
    imports back (readers/ used transforms/' coders while transforms/ used the readers' chunk
    type: the coders moved below both)."""
    circles = _cycles(_folder_graph(_module_graph(_sources()), _packages()))
    assert circles == [], circles


def test_the_cycle_checks_fail_on_a_cycle():
    """The checks above on made-up sources: a function-level import closing a cycle, and two
    folders importing each other through different modules."""
    sources = {
        "beam_tfrecords.a": {"beam_tfrecords.b.thing"},      # from beam_tfrecords.b import thing
        "beam_tfrecords.b": {"beam_tfrecords.c"},
        "beam_tfrecords.c": {"beam_tfrecords.a", "os"},      # inside a function
        "beam_tfrecords.x": set(),
        "beam_tfrecords.up.one": {"beam_tfrecords.up.low.two"},
        "beam_tfrecords.up.low.two": set(),
        "beam_tfrecords.up.low.three": {"beam_tfrecords.up.four"},
        "beam_tfrecords.up.four": set(),
    }
    graph = _module_graph(sources)
    assert _cycles(graph) == [["beam_tfrecords.a", "beam_tfrecords.b", "beam_tfrecords.c"]]
    folders = _folder_graph(graph, {"beam_tfrecords", "beam_tfrecords.up",
                                    "beam_tfrecords.up.low"})
    assert ["beam_tfrecords.up", "beam_tfrecords.up.low"] in _cycles(folders)
    del sources["beam_tfrecords.up.low.three"]
    acyclic = _folder_graph(_module_graph(sources), {"beam_tfrecords", "beam_tfrecords.up",
                                                     "beam_tfrecords.up.low"})
    assert ["beam_tfrecords.up", "beam_tfrecords.up.low"] not in _cycles(acyclic)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_every_package_folder_ships():
    """setup.py lists the packages by hand (the root maps onto ``beam_tfrecords``): a new
    folder left out of the list imports in a checkout and fails in every installed copy."""
    import ast

    listed: set[str] = set()
    for node in ast.walk(ast.parse((ROOT / "setup.py").read_text())):
        if isinstance(node, ast.keyword) and node.arg == "packages":
            listed = {ast.literal_eval(element) for element in node.value.elts}
    folders = {_module_name(p) for p in _package_modules() if p.is_dir()} | {"beam_tfrecords"}
    assert listed and folders - listed == set()
