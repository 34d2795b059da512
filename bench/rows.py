"""Input rows as plain Python dicts, for the alternatives that build one Example per row.

Standard library only (pyarrow is imported when a Parquet file is read), because the
TensorFlow and tfx-bsl alternatives run this module in their own virtual environments, which
do not have this package. A row maps feature name -> value: ``int``, ``float``, ``str``,
``bytes`` or a list of floats; image rows carry ``image`` (the file's bytes), ``label``
(the index of its text in the sorted vocabulary) and ``path``, but not height and width --
each alternative reads those its own way.
"""

from __future__ import annotations

import csv
import json
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["csv_parser", "image_entries", "iter_rows", "load_meta", "preload"]

_PARSE: dict[str, Callable[[str], Any]] = {"int64": int, "float": float, "string": str,
                                           "bytes": str.encode}


def load_meta(folder: str | pathlib.Path) -> dict[str, Any]:
    """A data set's ``meta.json`` (see datasets.py), with ``folder`` added."""
    folder = pathlib.Path(folder)
    meta = json.loads((folder / "meta.json").read_text())
    meta["folder"] = str(folder)
    return meta


def csv_parser(meta: dict[str, Any], header: str) -> Callable[[str], dict[str, Any]]:
    """A function turning one unquoted CSV line into a typed row, for the data set's features.

    The benchmark's CSV files hold plain numbers and words, so a split on commas is a full
    parse (what a user's ``Map(line.split(','))`` would do).
    """
    columns = header.strip().split(",")
    types = {f["name"]: f["type"] for f in meta["features"]}
    parsers = [(name, _PARSE[types[name]]) for name in columns]

    def parse(line: str) -> dict[str, Any]:
        return {name: conv(cell) for (name, conv), cell in zip(parsers, line.rstrip("\n")
                                                               .split(","))}

    return parse


def image_entries(meta: dict[str, Any]) -> list[tuple[str, int]]:
    """``(absolute path, label index)`` for every image of an images data set, in CSV order."""
    folder = pathlib.Path(meta["folder"])
    index = {text: n for n, text in enumerate(meta["vocabulary"])}
    with open(folder / "labels.csv", newline="") as handle:
        return [(str(folder / row["path"]), index[row["label"]])
                for row in csv.DictReader(handle)]


def preload(meta: dict[str, Any]) -> None:
    """Import what :func:`iter_rows` will need, so the import is not timed; ImportError if
    this environment cannot read the data set."""
    if meta["format"] == "parquet":
        import pyarrow.parquet  # noqa: F401


def iter_rows(meta: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every input row of the data set, read the plain way (csv module, pyarrow, open())."""
    folder = pathlib.Path(meta["folder"])
    if meta["format"] == "images":
        for path, label in image_entries(meta):
            with open(path, "rb") as handle:
                yield {"image": handle.read(), "label": label, "path": path}
        return
    for name in meta["files"]:
        if meta["format"] == "csv":
            with open(folder / name) as handle:
                parse = csv_parser(meta, handle.readline())
                for line in handle:
                    yield parse(line)
        else:
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(folder / name).iter_batches(batch_size=65536):
                yield from batch.to_pylist()
