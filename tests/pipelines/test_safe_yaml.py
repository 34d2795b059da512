"""pipelines/safe_yaml.py: duplicate keys are refused on the composed node graph.

PyYAML keeps the last of two equal keys in one mapping without a word; these tests pin down
what counts as a duplicate (keys equal once constructed, at any depth, two literal ``<<``
keys) and what does not (a merge key's values overridden: YAML's documented semantics); and
that nesting is bounded by our own pass over the text, which must fire before any PyYAML
version's own limit (libyaml refuses 1,000 flow levels with its own message) and must never
refuse a document the exact measure accepts. The size and alias limits are tested in
tests/e2e/test_hostile_input.py.
"""

from __future__ import annotations

import datetime

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecords.pipelines.safe_yaml import (
    MAX_DEPTH,
    DuplicateKeyError,
    YamlLimitError,
    _check_text_depth,
    safe_load_limited,
)


def duplicate(text: str) -> DuplicateKeyError:
    with pytest.raises(DuplicateKeyError) as caught:
        safe_load_limited(text)
    assert "\n" not in str(caught.value)
    return caught.value


@pytest.mark.parametrize("text, key, lines", [
    ("a: 1\nb: 2\na: 3\n", "a", (1, 3)),
    ("errors:\n  max_bad_fraction: 0\nname: x\nerrors:\n  max_bad_fraction: 1.0\n",
     "errors", (1, 4)),
    ("features:\n  age: {type: int64}\n  name: {type: string}\n  age: {type: float}\n",
     "features.age", (2, 4)),
    ("a:\n  b:\n    c: 1\n    d: 2\n    c: 3\n", "a.b.c", (3, 5)),
    ("x:\n  y: {p: 1, p: 2}\n", "x.y.p", (2, 2)),                   # flow mapping
    ("x:\n  - {a: 1}\n  - b: 1\n    b: 2\n", "x[1].b", (3, 4)),     # inside a list
    ('a: 1\n"a": 2\n', "a", (1, 2)),                                # quoting is spelling
    ("'a': 1\n!!str a: 2\n", "a", (1, 2)),
], ids=["top", "second_errors_section", "feature", "deep", "flow", "in_list", "quoted",
        "tagged"])
def test_duplicate_key_names_its_path_and_both_lines(text, key, lines):
    err = duplicate(text)
    assert err.key == key and err.lines == lines
    assert str(err).startswith(f"key {key!r} appears twice (lines {lines[0]} and {lines[1]})")


@pytest.mark.parametrize("text, spellings", [
    ("m:\n  1: a\n  0x1: b\n", ("1", "0x1")),
    ("m:\n  1: a\n  +1: b\n", ("1", "+1")),
    ("m:\n  yes: a\n  true: b\n", ("yes", "true")),
    ("m:\n  on: a\n  True: b\n", ("on", "True")),
    ("m:\n  1: a\n  true: b\n", ("1", "true")),         # True == 1: one dict slot
    ("m:\n  1: a\n  1.0: b\n", ("1", "1.0")),
    ("m:\n  ~: a\n  null: b\n", ("~", "null")),
    ("m:\n  .nan: a\n  .NaN: b\n", (".nan", ".NaN")),   # the loader's one shared nan
    ("m:\n  2001-1-1 1:00:00: a\n  2001-01-01T01:00:00: b\n",
     ("2001-1-1 1:00:00", "2001-01-01T01:00:00")),
])
def test_keys_equal_once_constructed_are_duplicates(text, spellings):
    err = duplicate(text)
    assert err.key == f"m.{spellings[0]}" and err.lines == (2, 3)
    assert f"{spellings[0]!r} and {spellings[1]!r} are the same key" in str(err)


@pytest.mark.parametrize("text, expected", [
    ("m:\n  1: a\n  '1': b\n", {1: "a", "1": "b"}),            # int and str differ
    ("m:\n  !!str 1: a\n  1: b\n", {"1": "a", 1: "b"}),
    ("m:\n  yes: a\n  'yes': b\n", {True: "a", "yes": "b"}),
    ("m:\n  a: 1\n  A: 2\n", {"a": 1, "A": 2}),
    ("m:\n  =: 1\n  b: 2\n", {"=": 1, "b": 2}),
], ids=["int_str", "tag_str_int", "bool_str", "case", "value_key"])
def test_keys_that_differ_once_constructed_are_kept(text, expected):
    assert safe_load_limited(text) == {"m": expected}


def test_the_same_key_in_different_mappings_is_not_a_duplicate():
    text = "a: {x: 1}\nb: {x: 2}\nc: [{x: 3}, {x: 4}]\nx: 5\n"
    assert safe_load_limited(text) == {"a": {"x": 1}, "b": {"x": 2},
                                       "c": [{"x": 3}, {"x": 4}], "x": 5}


# --- merge keys: an override is the documented semantics, not a duplicate --------------------

def test_an_explicit_key_overrides_a_merged_one():
    text = "base: &b {type: int64, shape: [2]}\nf:\n  <<: *b\n  type: float\n"
    assert safe_load_limited(text)["f"] == {"type": "float", "shape": [2]}


def test_the_first_of_several_merged_mappings_wins():
    text = "a: &a {x: 1}\nb: &b {x: 2, y: 2}\nc:\n  <<: [*a, *b]\n"
    assert safe_load_limited(text)["c"] == {"x": 1, "y": 2}


def test_one_anchored_mapping_merged_in_many_places_is_fine():
    text = "base: &b {type: int64}\n" + "".join(f"f{i}:\n  <<: *b\n  shape: [{i}]\n"
                                               for i in range(1, 50))
    loaded = safe_load_limited(text)
    assert loaded["f49"] == {"type": "int64", "shape": [49]}


def test_two_literal_merge_keys_in_one_mapping_are_a_duplicate():
    err = duplicate("a: &a {x: 1}\nb: &b {y: 2}\nc:\n  <<: *a\n  <<: *b\n")
    assert err.key == "c.<<" and err.lines == (4, 5)


def test_a_duplicate_inside_a_merged_mapping_is_found_where_it_is_written():
    err = duplicate("base: &b {x: 1, x: 2}\nc:\n  <<: *b\n")
    assert err.key == "base.x" and err.lines == (1, 1)


def test_a_duplicate_beside_a_merge_key_is_still_a_duplicate():
    err = duplicate("base: &b {x: 1}\nc:\n  <<: *b\n  x: 2\n  x: 3\n")
    assert err.key == "c.x" and err.lines == (4, 5)


# --- what is constructed is what was checked ----------------------------------------------------

def test_aliases_still_share_and_load_as_before():
    loaded = safe_load_limited("a: &x [1, 2]\nb: *x\nwhen: 2001-02-03\n")
    assert loaded == {"a": [1, 2], "b": [1, 2], "when": datetime.date(2001, 2, 3)}
    assert loaded["a"] is loaded["b"]


def test_an_unbuildable_value_is_a_yaml_error_not_a_bare_value_error():
    with pytest.raises(yaml.YAMLError, match="month must be in 1..12"):
        safe_load_limited("when: 2001-13-01\n")


def test_a_list_as_key_is_still_refused_by_the_constructor():
    with pytest.raises(yaml.YAMLError, match="unhashable"):
        safe_load_limited("? [a]\n: 1\n")


def test_a_very_long_duplicate_key_is_shown_short():
    name = "k" * 5000
    err = duplicate(f"? {name}\n: 1\n? {name}\n: 2\n")
    assert err.key == name and err.lines == (1, 3) and len(str(err)) < 200


# --- nesting is bounded by our own pass over the text, before PyYAML reads it ------------------

def _deep_block(levels: int) -> str:
    return "".join("  " * i + f"k{i}:\n" for i in range(levels)) + "  " * levels + "v: 1\n"


@pytest.mark.parametrize("text", [
    "name: " + "[" * 5000 + "]" * 5000,              # libyaml refuses 1,000 flow levels itself
    "name: " + "{a: " * 3000 + "1" + "}" * 3000,
    "- " * 3000 + "x\n",                               # compact block sequences on one line
    "a:\n" + "".join(" " * i + "- \n" for i in range(1, 1200)),
    _deep_block(900),                                  # indentation, one level per line
    "x: [\n" + "[\n" * 2000 + "]\n" * 2000 + "]\n",     # flow levels across lines
], ids=["flow", "flow_mappings", "compact", "dashes_per_line", "block", "flow_lines"])
def test_deep_documents_are_refused_with_our_message_on_every_pyyaml(text):
    with pytest.raises(YamlLimitError, match="^nested deeper than 64 levels$"):
        _check_text_depth(text)
    with pytest.raises(YamlLimitError, match="^nested deeper than 64 levels$"):
        safe_load_limited(text)


@pytest.mark.parametrize("text", [
    "name: '" + "[" * 500 + "'\n",                     # brackets in quoted scalars
    'name: "' + "{" * 500 + '\\" ' + "[" * 200 + '"\n',
    "doc: |\n  " + "[" * 500 + "\n  " + "- " * 200 + "\nname: x\n",   # a block scalar
    "doc: >-\n  " + "{" * 500 + "\nname: x\n",
    "# " + "[" * 500 + "\nname: x  # " + "{" * 500 + "\n",            # comments
    "name: a[b{c" + "[" * 300 + "\n",                  # plain scalars may hold brackets
    "name: it's [" + "[" * 300 + "\n",
    'x: {"a":"' + "{" * 300 + '"}\n',                  # JSON-style flow with quoted values
    "k: &anchor !!str " + "'" + "[" * 300 + "'\n",
])
def test_brackets_that_do_not_nest_are_not_counted(text):
    _check_text_depth(text)
    safe_load_limited(text)


nested = st.recursive(
    st.one_of(st.integers(), st.text(alphabet="ab[]{}'\"#:- |>", max_size=6), st.none()),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.text(alphabet="abc", min_size=1, max_size=3), children, max_size=3)),
    max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(value=nested, flow=st.booleans())
@pytest.mark.slow
def test_the_text_pass_never_refuses_what_the_exact_measure_accepts(value, flow):
    text = yaml.safe_dump({"root": value}, default_flow_style=flow)
    assert safe_load_limited(text) == {"root": value}


@settings(max_examples=100, deadline=None)
@given(depth=st.integers(MAX_DEPTH + 1, 400), flow=st.booleans())
def test_every_document_past_the_limit_is_refused_with_our_message(depth, flow):
    value: object = 1
    for _ in range(depth):
        value = [value]
    text = yaml.safe_dump({"root": value}, default_flow_style=flow)
    with pytest.raises(YamlLimitError, match="^nested deeper than 64 levels$"):
        safe_load_limited(text)
