"""``beam-tfrecords init``'s output: the config text for the inferred columns.

Every scalar is written so that YAML reads back this very text (``on``, ``null`` and ``12``
are quoted; characters YAML refuses are escaped), every note is a one-line comment, and a
column with no feature type is listed as a comment saying why.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from beam_tfrecords.pipelines.init_inference import Column, InitError

__all__ = ["feature_entry", "render", "scalar"]

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def scalar(value: str) -> str:
    """A YAML scalar: plain when safe (YAML reads it back as this very text: not ``on``,
    ``null`` or ``12``), else double-quoted (:func:`_quoted`).

    Args:
        value: the text.

    Returns:
        The scalar as it goes after ``key:`` in the config.
    """
    if re.fullmatch(r"[A-Za-z0-9_./:*-]+", value) and value[0] not in "-*:" and _reads_back(
            value):
        return value
    return _quoted(value)


# What YAML accepts unescaped in a document (PyYAML's reader), less the line breaks, which a
# double-quoted scalar folds and a comment ends at.
_YAML_RAW = re.compile("[\x20-\x7E\xA0-\u2027\u202A-\uD7FF\uE000-\uFEFE\uFF00-\uFFFD"
                       "\U00010000-\U0010FFFF]")


def _quoted(text: str) -> str:
    """``text`` as a YAML double-quoted scalar, every character YAML would refuse or fold
    written as an escape (JSON's escapes are not enough: YAML refuses a surrogate pair)."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif _YAML_RAW.fullmatch(char):
            out.append(char)
        else:
            code = ord(char)
            out.append(f"\\x{code:02X}" if code <= 0xFF else f"\\u{code:04X}")
    return '"' + "".join(out) + '"'


def _comment(text: str) -> str:
    """``text`` fit for a YAML comment: one line, only characters YAML accepts."""
    return "".join(char if _YAML_RAW.fullmatch(char) else repr(char)[1:-1] for char in text)


def _reads_back(text: str) -> bool:
    import yaml

    try:
        return yaml.safe_load(text) == text
    except yaml.YAMLError:
        return False


def _key(name: str) -> str:
    return name if _PLAIN_KEY.fullmatch(name) and _reads_back(name) else _quoted(name)


def feature_entry(column: Column) -> dict[str, Any]:
    """``column``'s entry under ``features:`` as the config states it (what the printed line
    says, and what init_config's ``_fit_records`` parses to hold the sample to).

    Args:
        column: a kept column.

    Returns:
        The feature's mapping: ``type`` and, where they differ from the defaults, ``shape``,
        ``source``, ``missing`` and ``unit``.
    """
    raw: dict[str, Any] = {"type": column.dtype}
    if column.shape:
        raw["shape"] = list(column.shape)
    if column.source != tuple(column.name.split("/")):  # a name's default source
        raw["source"] = ".".join(column.source)
    if column.missing != "error":
        raw["missing"] = column.missing
    if column.unit:
        raw["unit"] = column.unit
    return raw


def _feature_line(column: Column) -> str:
    parts = []
    for key, value in feature_entry(column).items():
        shown = scalar(value) if key == "source" else (
            str(list(value)) if key == "shape" else value)
        parts.append(f"{key}: {shown}")
    body = f"  {_key(column.name)}: {{{', '.join(parts)}}}"
    notes = [column.note] if column.note else []
    if column.missing == "omit":
        notes.append("missing in some records: left out (or missing: empty / default)")
    return f"{body:<60}# {_comment('; '.join(notes))}" if notes else body


def _split_key(columns: Sequence[Column], unique: Mapping[str, bool]) -> Column | None:
    for column in columns:
        lowered = column.name.lower()
        if (lowered == "id" or lowered.endswith("_id")) and column.missing == "error" and (
                column.dtype in ("int64", "string", "bytes") and not column.shape
                and unique.get(column.name, False)):
            return column
    return None


def render(*, name: str, fmt: str, path: str, output: str, columns: Sequence[Column],
           options: Mapping[str, Any], read: str, unique: Mapping[str, bool]) -> str:
    """The config text.

    Args:
        name: the data set's name.
        fmt: the source format.
        path: the input pattern, as given.
        output: the output path.
        columns: every column, kept and skipped (skipped ones become comments).
        options: the format's reader options (``csv: {...}``), or none.
        read: what was sampled, for the header comment (``"10,000 rows"``).
        unique: for id-like columns, whether the sample's values were all different (the
            split key is the first such column).

    Returns:
        The YAML text, comments included, ending in a newline.
    """
    today = datetime.date.today().isoformat()
    lines = [f"# beam-tfrecords init, {today}: inferred from {path} ({read}).",
             "# Check the types, shapes and missing policies, then build it.",
             f"name: {scalar(name)}", "source:", f"  format: {fmt}", f"  path: {scalar(path)}"]
    if options:
        inner = ", ".join(f"{k}: {json.dumps(v)}" for k, v in options.items())
        lines.append(f"  {fmt}: {{{inner}}}")
    lines.append("features:")
    kept = [c for c in columns if not c.skip]
    if not kept:
        raise InitError(f"{path}: no column has a feature type")
    lines += [_feature_line(c) for c in kept]
    for column in columns:
        if column.skip:
            where = ".".join(column.source) or repr("")
            lines.append(_comment(f"  # {where}: not a feature: {column.skip}"))
    key = _split_key(kept, unique)
    if key is not None:
        lines += ["splits:", f"  key: {scalar(key.name)}   # id-like: unique in the sample",
                  "  train: 80", "  eval: 20"]
    else:
        lines.append("# splits: none found (no id-like column); every record goes to 'train'")
    lines += ["output:", f"  path: {scalar(output)}"]
    return "\n".join(lines) + "\n"
