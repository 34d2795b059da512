"""The per-format descriptor table (transforms/readers/formats.py) agrees with every place
that spells a format out today, so those places can loop over it instead."""

from __future__ import annotations

import pytest

from beam_tfrecords.pipelines import config, init_config
from beam_tfrecords.transforms.readers import formats


def test_the_names_are_the_configs_formats_in_order():
    assert formats.names() == config.SOURCE_FORMATS


def test_the_first_suffix_is_the_one_a_glob_suggests():
    assert {f.name: f.suffix for f in formats.FORMATS if f.suffix} == config.FORMAT_SUFFIXES


def test_the_suffixes_are_inits():
    table = {suffix: f.name for f in formats.FORMATS for suffix in f.suffixes}
    assert table == init_config._FORMATS
    assert all(formats.by_suffix(f"a/B{s.upper()}").name == n for s, n in table.items())
    assert formats.by_suffix("a.txt") is None


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=lambda f: f.name)
def test_the_option_keys_are_the_parsers(fmt):
    """The parser refuses an unknown key with the list of allowed ones: the table's."""
    parse = fmt.options_parser()
    with pytest.raises(ValueError) as err:
        parse({"no_such_key": 1}, f"source.{fmt.name}")
    allowed = str(err.value).split("allowed here: ", 1)[1].rsplit(" (got", 1)[0]
    shown = () if allowed.startswith("nothing") else tuple(allowed.split(", "))
    assert shown == fmt.option_keys


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=lambda f: f.name)
def test_each_names_its_public_source(fmt):
    assert fmt.source_class().__name__ == fmt.source
    assert fmt.splittable == (fmt.split is not None)
    assert fmt.text == (fmt.splits == "bytes")


def test_an_unknown_format_names_the_known_ones():
    with pytest.raises(KeyError, match="known: csv, jsonl, parquet, avro, images"):
        formats.descriptor("xml")
    assert formats.descriptor("avro").splits == "blocks"


@pytest.mark.parametrize("name,path,head,count,reason", [
    ("csv", "a.csv", b"id\n", 4, False), ("jsonl", "a.jsonl", b"{", 4, False),
    ("avro", "a.avro", b"Obj\x01", 4, False), ("images", "img/", b"", 1, False),
    ("parquet", "a.parquet", b"PAR1", 1, False), ("csv", "a.csv.gz", b"", 1, True),
    ("jsonl", "a.jsonl", b"\x1f\x8b\x08", 1, True)])
def test_plan_file_follows_each_formats_rule(name, path, head, count, reason):
    ranges, why = formats.plan_file(formats.descriptor(name), path, 1000, 250, head)
    assert len(ranges) == count and ranges[0].start == 0 and ranges[-1].end == 1000
    assert (why is not None) == reason
    assert formats.plan_file(formats.descriptor(name), path, 100, 250, head)[1] is None
