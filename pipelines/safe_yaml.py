"""Loading YAML that may be hostile: safe tags only, and bounded size, nesting and expansion.

``yaml.safe_load`` already refuses tags that build Python objects (``!!python/object``), but
not documents that are small on disk and huge in memory: a "billion laughs" of nested aliases
expands a few hundred bytes into billions of nodes, a self-referencing alias makes a cyclic
structure, and a deeply nested one overflows the stack of whoever walks it. So the document is
first *composed* (nodes only, aliases still shared), measured without expanding it, and only
then constructed with the safe loader. Pure: text in, data or :class:`YamlLimitError` out.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "YamlLimitError", "safe_load_limited"]

MAX_BYTES = 1 << 20  # a config is a page of text; 1 MiB is generous
MAX_NODES = 100_000  # scalars, sequences and mappings after expanding every alias
MAX_DEPTH = 64  # nesting of sequences and mappings

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlLimitError(ValueError):
    """A document refused for its size or shape; the message says which limit and why."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _measure(root: yaml.Node) -> tuple[int, int]:
    """(nodes, depth) of the document as it would be constructed, with every alias expanded,
    computed over the shared node graph (memoized, iterative, cycles detected)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = (1 + max((depth[id(k)] for k in kids), default=0)
                          if kids else 0)
            active.discard(key)
            if size[key] > MAX_NODES:
                raise YamlLimitError(f"expands to more than {MAX_NODES} nodes (aliases are "
                                     "expanded; a 'billion laughs' document?)")
            if depth[key] > MAX_DEPTH:
                raise YamlLimitError(f"nested deeper than {MAX_DEPTH} levels")
            continue
        if key in size:
            continue
        if key in active:
            raise YamlLimitError("an alias refers to a node that contains it (a cycle)")
        active.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in size)
        if len(stack) > 4 * MAX_NODES:
            raise YamlLimitError(f"more than {MAX_NODES} nodes")
    return size[id(root)], depth[id(root)]


def safe_load_limited(text: str) -> Any:
    """Parse one YAML document with the safe loader, refusing hostile shapes first.

    Raises :class:`YamlLimitError` for a document over :data:`MAX_BYTES`, one expanding to
    more than :data:`MAX_NODES` nodes, nested deeper than :data:`MAX_DEPTH`, or with cyclic
    aliases; ``yaml.YAMLError`` for invalid YAML and unsafe tags such as ``!!python/object``.
    """
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise YamlLimitError(f"larger than {MAX_BYTES} bytes")
    try:
        root = yaml.compose(text, Loader=_Loader)
    except RecursionError:
        raise YamlLimitError(f"nested deeper than {MAX_DEPTH} levels") from None
    if root is None:
        return None
    _measure(root)
    return yaml.load(text, Loader=_Loader)  # noqa: S506 -- a SafeLoader (C or Python)
