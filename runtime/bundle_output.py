"""What a DoFn's ``finish_bundle`` yields: its elements placed in the global window.

``finish_bundle`` has no input element to take a timestamp and windows from, so Beam wants
each output as a ``WindowedValue``; batch pipelines here only ever use the global window.
Every DoFn that holds output until its bundle ends (writers, batchers) yields through
:func:`finish_bundle_outputs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

__all__ = ["finish_bundle_outputs"]


def finish_bundle_outputs(elements: Iterable[Any]) -> Iterator[Any]:
    """Each element as ``finish_bundle`` must yield it.

    Args:
        elements: main outputs, and ``beam.pvalue.TaggedOutput`` for the other outputs.

    Returns:
        An iterator of ``WindowedValue`` (a tagged output's value wrapped, the tag kept), in
        the global window; the timestamp means nothing to these batch steps.
    """
    window = [GlobalWindow()]
    for element in elements:
        if isinstance(element, beam.pvalue.TaggedOutput):
            yield beam.pvalue.TaggedOutput(element.tag, WindowedValue(element.value, -1, window))
        else:
            yield WindowedValue(element, -1, window)
