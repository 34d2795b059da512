"""Loading YAML that may be hostile: safe tags only, and bounded size, nesting and expansion.

``yaml.safe_load`` already refuses tags that build Python objects (``!!python/object``), but
not documents that are small on disk and huge in memory: a "billion laughs" of nested aliases
expands a few hundred bytes into billions of nodes, a self-referencing alias makes a cyclic
structure, and a deeply nested one overflows the stack of whoever walks it. So the document is
first *composed* (nodes only, aliases still shared), measured without expanding it, and only
then constructed with the safe loader.

The composed graph is also where duplicate keys are refused: PyYAML keeps the last of two
equal keys in one mapping without a word, so a second ``errors:`` section or a feature listed
twice would silently replace the first. Keys are compared as the loader constructs them
(``1``, ``0x1`` and ``true`` are one key to a Python dict), each mapping on its own: keys
that ``<<:`` merge keys bring in may be overridden, which is YAML's documented merge, but two
literal ``<<:`` keys in one mapping are a duplicate like any other. Pure: text in, data,
:class:`YamlLimitError` or :class:`DuplicateKeyError` out.
"""

from __future__ import annotations

from typing import Any

import yaml

from beam_tfrecords.errors import UserError

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "PRESCAN_DEPTH",
    "DuplicateKeyError",
    "YamlLimitError",
    "safe_load_limited",
]

MAX_BYTES = 1 << 20  # a config is a page of text; 1 MiB is generous
MAX_NODES = 100_000  # scalars, sequences and mappings after expanding every alias
MAX_DEPTH = 64  # nesting of sequences and mappings

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlLimitError(UserError, ValueError):
    """A document refused for its size or shape; the message says which limit and why."""


class DuplicateKeyError(UserError, ValueError):
    """One mapping holds the same key twice. ``key`` is its dotted path from the document's
    root (``features.age``; ``[i]`` for a list item), ``lines`` the two 1-based lines; the
    one-line message reads ``key 'features.age' appears twice (lines 7 and 12)``.

    Args:
        key: the key's dotted path.
        lines: the two 1-based lines it appears on.
        spellings: the key as written each time (``yes`` and ``true`` load to one key).
    """

    def __init__(self, key: str, lines: tuple[int, int], spellings: tuple[str, str]):
        self.key, self.lines = key, lines
        shown = key if len(key) <= 120 else key[:117] + "..."
        message = f"key {shown!r} appears twice (lines {lines[0]} and {lines[1]})"
        if spellings[0] != spellings[1]:
            message += (f"; {_short(spellings[0])} and {_short(spellings[1])} are the same "
                        "key once loaded")
        super().__init__(message)


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


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


_MERGE_TAG = "tag:yaml.org,2002:merge"
_VALUE_TAG = "tag:yaml.org,2002:value"  # an unquoted ``=`` key: the loader makes it a string


def _check_duplicate_keys(root: yaml.Node) -> None:
    """Raise :class:`DuplicateKeyError` for the first mapping, in document order, holding two
    keys that construct equal. Walks each node of the (acyclic, measured) graph once, so a
    mapping reached through several aliases is named by its first path."""
    constructor = _Loader("")  # only its constructor is used, for scalar keys
    try:
        seen_nodes: set[int] = set()
        stack: list[tuple[yaml.Node, str]] = [(root, "")]
        while stack:
            node, path = stack.pop()
            if id(node) in seen_nodes:
                continue
            seen_nodes.add(id(node))
            children: list[tuple[yaml.Node, str]] = []
            if isinstance(node, yaml.SequenceNode):
                children = [(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
            elif isinstance(node, yaml.MappingNode):
                keys: dict[Any, yaml.ScalarNode] = {}
                for key_node, value_node in node.value:
                    if not isinstance(key_node, yaml.ScalarNode):
                        # a list or mapping key cannot be a dict key: construction refuses it
                        children.append((value_node, f"{path}.?" if path else "?"))
                        continue
                    spelled = key_node.value
                    child = f"{path}.{spelled}" if path else spelled
                    key = _construct_key(constructor, key_node)
                    if key is not None:
                        first = keys.setdefault(key[0], key_node)
                        if first is not key_node:
                            raise DuplicateKeyError(
                                f"{path}.{first.value}" if path else first.value,
                                (first.start_mark.line + 1, key_node.start_mark.line + 1),
                                (first.value, spelled))
                    children.append((value_node, child))
            stack.extend(reversed(children))
    finally:
        constructor.dispose()


def _construct_key(constructor: Any, node: yaml.ScalarNode) -> tuple[Any] | None:
    """``(key,)`` as the loader would construct the scalar key, or None when it cannot be a
    dict key (the construction that follows reports that)."""
    if node.tag == _MERGE_TAG:
        return (_MERGE_TAG,)  # a second ``<<`` in one mapping is a duplicate too
    if node.tag == _VALUE_TAG:
        return ("=",)
    try:
        key = constructor.construct_object(node, deep=True)
        hash(key)
    except Exception:  # noqa: BLE001 -- the full construction raises it, with its position
        return None
    return (key,)


PRESCAN_DEPTH = 2 * MAX_DEPTH  # the text pass's bound; the composed graph is measured exactly


def _check_text_depth(text: str) -> None:
    """Refuse a document whose text nests deeper than :data:`PRESCAN_DEPTH`, before PyYAML
    reads it.

    PyYAML's own limits differ by version and backend (libyaml refuses 1,000 flow levels with
    its own message, the pure-Python parser recurses until the stack overflows), so the bound
    this module promises is checked on the text first, by a pass that follows just enough of
    YAML's syntax to count nesting: quoted scalars, comments and block scalars are skipped;
    ``[``/``{`` open a level where a node may start; each block indentation level and each
    ``- ``/``? `` indicator opening a line's node adds one. The count can exceed the true depth
    by a level or two (an empty innermost collection, a sequence of scalars), never fall
    short of it, so the bound is set well above :data:`MAX_DEPTH` and the exact depth is
    measured on the composed graph afterwards.
    """
    indents: list[int] = []  # block indentation levels open at this line
    flow = 0  # open [ and { levels
    quote = ""  # the quote character of a scalar spanning lines
    block_scalar_indent = -1  # lines indented deeper than this belong to a | or > scalar
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if block_scalar_indent >= 0:
            if not stripped.strip() or indent > block_scalar_indent:
                continue
            block_scalar_indent = -1
        start, dashes, peak = 0, 0, flow
        if not quote and flow == 0:
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith(("---", "...")) and stripped[3:4] in ("", " ", "\t"):
                indents.clear()
                start = indent + 3
            else:
                while indents and indents[-1] > indent:
                    indents.pop()
                if not indents or indents[-1] < indent:
                    indents.append(indent)
                start = indent
        i, node_start = start, True
        while i < len(line):
            char = line[i]
            if quote:
                if char == "\\" and quote == '"':
                    i += 2
                    continue
                if char == quote:
                    if quote == "'" and line[i + 1:i + 2] == "'":
                        i += 2
                        continue
                    quote, node_start = "", False
                i += 1
                continue
            if char in " \t":
                i += 1
                continue
            if char == "#" and (i == 0 or line[i - 1] in " \t"):
                break
            after = line[i + 1:i + 2]
            if char in "[{" and (node_start or flow):
                flow += 1
                node_start = True
                peak = max(peak, flow)
            elif char in "]}" and flow:
                flow -= 1
                node_start = False
            elif char == "," and flow:
                node_start = True
            elif char == ":" and (flow or after in ("", " ", "\t")):
                node_start = True
            elif char in "-?" and node_start and not flow and after in ("", " ", "\t"):
                dashes += 1  # a block sequence item or complex key opens a level
            elif node_start and char in "\"'":
                quote = char
            elif node_start and char in "|>" and not flow:
                block_scalar_indent = indent
                break
            elif node_start and char in "&!*":
                while i + 1 < len(line) and line[i + 1] not in " \t,[]{}":
                    i += 1  # an anchor, tag or alias: the node (if any) starts after it
            else:
                node_start = False
            i += 1
        if len(indents) + dashes + peak > PRESCAN_DEPTH:
            raise YamlLimitError(f"nested deeper than {MAX_DEPTH} levels")


def safe_load_limited(text: str) -> Any:
    """Parse one YAML document with the safe loader, refusing hostile shapes first.

    Raises :class:`YamlLimitError` for a document over :data:`MAX_BYTES`, one expanding to
    more than :data:`MAX_NODES` nodes, nested deeper than :data:`MAX_DEPTH`, or with cyclic
    aliases; :class:`DuplicateKeyError` for a mapping holding one key twice;
    ``yaml.YAMLError`` for invalid YAML, unsafe tags such as ``!!python/object`` and values
    the safe tags cannot build (a timestamp in month 13).

    Args:
        text: the YAML document.

    Returns:
        The loaded data.
    """
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise YamlLimitError(f"larger than {MAX_BYTES} bytes")
    _check_text_depth(text)
    try:
        root = yaml.compose(text, Loader=_Loader)
    except RecursionError:
        raise YamlLimitError(f"nested deeper than {MAX_DEPTH} levels") from None
    if root is None:
        return None
    _measure(root)
    _check_duplicate_keys(root)
    loader = _Loader("")  # construct the very graph that was measured and checked
    try:
        return loader.construct_document(root)
    except yaml.YAMLError:
        raise
    except (ValueError, TypeError, OverflowError) as err:  # e.g. datetime(2001, 13, 45)
        raise yaml.constructor.ConstructorError(None, None, f"cannot construct a value: {err}",
                                                None) from None
    finally:
        loader.dispose()
