"""Beam YAML's view of our transforms: short names for a ``type: python`` provider, and
YAML's ``error_handling`` on the write.

A pipeline lists them once and then uses them by name; nothing is installed (a ``python``
provider without ``packages`` imports from the running environment)::

    providers:
      - type: python
        config: {}
        transforms:
          WriteTFRecordDataset: beam_tfrecords.pipelines.yaml_transforms.WriteTFRecordDataset
          ToExamples: beam_tfrecords.ToExamples

``WriteTFRecordDataset`` here is the public transform plus one argument, ``error_handling:
{output: NAME}``: with it the transform has two outputs, the manifest and ``NAME``, the
rejected rows as schema'd Rows (``element`` -- the record as text --, ``msg`` -- why --, ``stack``
as YAML's own error outputs have, and our dead-letter fields ``source``, ``row``, ``feature``,
``value``). They are also written to the version's ``dead_letter/`` folder as always, and
``max_bad_fraction`` still fails the pipeline above it: set it to let bad rows through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import apache_beam as beam
from apache_beam.typehints.row_type import RowTypeConstraint

from beam_tfrecords.transforms import write_dataset as api
from beam_tfrecords.transforms.readers.framework import REJECTED
from beam_tfrecords.transforms.to_examples import ToExamples

__all__ = ["ERROR_ROW", "ToExamples", "WriteTFRecordDataset", "error_row"]

# The rows of the error output: YAML's standard three fields, then our dead-letter fields.
# typing.Optional: Beam 2.77 types ``int | None`` as an opaque Python object, not a nullable int.
ERROR_ROW = RowTypeConstraint.from_fields([
    ("element", str), ("msg", str), ("stack", str), ("source", str),
    ("row", Optional[int]), ("feature", str), ("value", str)])  # noqa: UP045


def error_row(letter: Mapping[str, Any]) -> beam.Row:
    """One dead-letter dict -> the Row YAML's error output carries.

    Args:
        letter: a dead-letter row.

    Returns:
        A Row with ``element``, ``msg``, ``stack`` and where the record came from.
    """
    return beam.Row(element=str(letter.get("record", "")), msg=str(letter.get("reason", "")),
                    stack="", source=str(letter.get("source", "")), row=letter.get("row"),
                    feature=str(letter.get("feature", "")), value=str(letter.get("value", "")))


class WriteTFRecordDataset(api.WriteTFRecordDataset):
    """``beam_tfrecords.WriteTFRecordDataset`` with Beam YAML's ``error_handling``.

    Args:
      output: the output root, as for ``beam_tfrecords.WriteTFRecordDataset``.
      name: the data set's name, as there.
      error_handling: ``{"output": NAME}``: also return the rejected rows, as Rows, under
        ``NAME`` (the manifest is then the output named ``manifest``).
      kwargs: every other argument of ``beam_tfrecords.WriteTFRecordDataset``.
    """

    def __init__(self, output: str, name: str, *,
                 error_handling: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(output, name, **kwargs)
        self.error_output = None
        if error_handling is not None:
            if not isinstance(error_handling, Mapping) or set(error_handling) != {"output"} \
                    or not isinstance(error_handling["output"], str):
                raise api.DatasetError("error_handling must be {output: NAME}, not "
                                       f"{error_handling!r}")
            self.error_output = error_handling["output"]
            if self.error_output == "manifest":
                raise api.DatasetError("error_handling's output cannot be named manifest")

    def expand(self, pvalueish):
        manifest, parts = self._apply(pvalueish)
        if self.error_output is None:
            return manifest
        errors = parts[REJECTED] | "ErrorRows" >> beam.Map(error_row).with_output_types(
            ERROR_ROW)
        return {"manifest": manifest, self.error_output: errors}
