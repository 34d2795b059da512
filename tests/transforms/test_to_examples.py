"""ToExamples' handling of row kinds: plain dicts skip conversion, anything holding Rows,
NamedTuples or dataclasses is converted first, and both give the same Examples."""

from __future__ import annotations

import typing

import apache_beam as beam
import pytest

from beam_tfrecords.transforms.to_examples import (
    _is_plain,
    _ToExamplesFn,
    as_feature_specs,
    as_split_spec,
    plain,
)


class Meta(typing.NamedTuple):
    height: int
    tags: list


@pytest.mark.parametrize("record,expected", [
    ({"a": 1, "b": 2.5, "c": "x", "d": b"y", "e": None, "f": True}, True),
    ({"a": [1, 2], "b": {"c": [0.5], "d": "z"}}, True),
    ({"a": Meta(1, ["t"])}, False),
    ({"a": [beam.Row(x=1)]}, False),
    ({"a": {"b": beam.Row(x=1)}}, False),
    ({"a": (1, 2)}, False),  # a tuple may be a NamedTuple: convert
])
def test_is_plain(record, expected):
    assert _is_plain(record) is expected


FEATURES = {"height": {"type": "int64", "source": "meta.height"},
            "tags": {"type": "string", "shape": [-1], "source": "meta.tags"},
            "id": {"type": "int64"}}


def _payloads(rows) -> list[bytes]:
    """The serialized Examples ToExamples' DoFn makes of ``rows``, driven by hand."""
    fn = _ToExamplesFn(as_feature_specs(FEATURES), as_split_spec(None), None, 4096, "test")
    fn.setup()
    fn.start_bundle()
    out = [o for row in rows for o in fn.process(row)] + list(fn.finish_bundle())
    batches = [getattr(o, "value", o) for o in out if not isinstance(o, beam.pvalue.TaggedOutput)]
    return sorted(bytes(b.payload[b.offsets[i]:b.offsets[i + 1]])
                  for _, b in batches for i in range(len(b)))


def test_namedtuples_inside_dicts_encode_like_plain_dicts():
    nested = [{"id": i, "meta": Meta(i * 10, [f"t{i}"])} for i in range(5)]
    assert not _is_plain(nested[0])
    plain_rows = [plain(r) for r in nested]
    assert _is_plain(plain_rows[0])
    assert len(_payloads(nested)) == 5
    assert _payloads(nested) == _payloads(plain_rows)
