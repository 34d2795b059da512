"""The output layout's names: what ``check_name`` lets through as a version, data set or split
name, and what ``resolve_in_version`` refuses to write -- decided here, before any path exists.
"""

from __future__ import annotations

import pytest

from beam_tfrecords.errors import UserError
from beam_tfrecords.sinks.format import layout as lay
from beam_tfrecords.sinks.format.layout import (
    RESERVED,
    InvalidName,
    UnsafePath,
    check_name,
    index_path,
    resolve_in_version,
)
from beam_tfrecords.transforms.codec.specs import parse_splits

# Names that must never become a path segment of the output, and why.
HOSTILE = [
    ("", "is empty"),
    (".", "may only hold"),
    ("..", "may only hold"),
    ("...", "may only hold"),
    ("../x", "may only hold"),
    ("../../etc", "may only hold"),
    ("a/b", "may only hold"),
    ("a\\b", "may only hold"),
    ("/abs", "may only hold"),
    ("C:", "may only hold"),
    (".staging", "may only hold"),
    (".lease", "may only hold"),
    (".beam-tfrecords-build", "may only hold"),
    ("LATEST", "reserved"),
    ("latest", "reserved"),
    ("manifest.json", "reserved"),
    ("Manifest.JSON", "reserved"),
    ("feature_spec.json", "reserved"),
    ("failure.json", "reserved"),
    ("schema.pbtxt", "reserved"),
    ("features.json", "reserved"),
    ("dataset_info.json", "reserved"),
    ("index", "reserved"),
    ("dead_letter", "reserved"),
    ("shuffle", "reserved"),
    ("early_stop", "reserved"),
    ("publishing", "reserved"),
    ("a\x00b", "may only hold"),
    ("a\nb", "may only hold"),
    ("train\n", "may only hold"),  # re.match's "$" would let this through
    ("train\r", "may only hold"),
    (" train", "may only hold"),
    ("train/", "may only hold"),
    ("x" * 129, "longer than 128"),
    ("été", "may only hold"),  # fine as a label, not as a folder name
    ("chats été", "may only hold"),
]


@pytest.mark.parametrize("name, why", HOSTILE, ids=repr)
def test_hostile_split_names_are_refused_whole_naming_the_reason(name, why):
    with pytest.raises(InvalidName) as err:
        check_name("split", name)
    message = str(err.value)
    assert why in message and "\n" not in message and "\x00" not in message
    assert message.startswith("split name ")


@pytest.mark.parametrize("name", ["train", "eval", "test_2", "v1.2-rc", "_x", "7", "x" * 128,
                                  "latest1", "indexes", "manifest"])
def test_ordinary_names_pass_unchanged(name):
    assert check_name("split", name) is name


@pytest.mark.parametrize("name", [7, None, b"train", ["train"]])
def test_a_name_that_is_not_text_is_refused(name):
    with pytest.raises(InvalidName, match="must be a string"):
        check_name("split", name)


def test_reserved_holds_every_name_the_layout_writes():
    """RESERVED is the one list: every file or folder name the layout module defines is in it,
    so a split can never take one, whatever module writes it."""
    names = {getattr(lay, n) for n in lay.__all__
             if n.isupper() and isinstance(getattr(lay, n), str) and n != "INDEX_SUFFIX"}
    names |= set(lay.METADATA_FILES)
    assert {n.lower() for n in names} <= RESERVED
    assert {"failure.json", "feature_spec.json", ".beam-tfrecords-build", ".staging", ".lease",
            "latest", "manifest.json", "schema.pbtxt", "features.json", "dataset_info.json",
            "index", "dead_letter", ".failed", "shuffle", "early_stop", ".progress",
            "publishing"} <= RESERVED


# -- resolve_in_version: the one place a written path is made --

V = "/out/v1"


@pytest.mark.parametrize("args, kwargs, path", [
    ((lay.MANIFEST,), {}, "/out/v1/manifest.json"),
    ((lay.STAGING,), {}, "/out/v1/.staging"),
    ((lay.DEAD_LETTER, "rejected-00000-of-00001.jsonl"), {},
     "/out/v1/dead_letter/rejected-00000-of-00001.jsonl"),
    (("ds-00000-of-00001.tfrecord",), {"split": "train"},
     "/out/v1/train/ds-00000-of-00001.tfrecord"),
    (("a.run",), {"within": (lay.STAGING, lay.SHUFFLE), "split": "eval"},
     "/out/v1/.staging/shuffle/eval/a.run"),
    ((lay.PUBLISHING,), {"within": (lay.STAGING,)}, "/out/v1/.staging/publishing"),
])
def test_resolve_joins_the_layouts_names_and_split_folders(args, kwargs, path):
    assert resolve_in_version(V, *args, **kwargs) == path
    assert resolve_in_version("gs://b/out/v1/", *args, **kwargs) == "gs://b" + path


@pytest.mark.parametrize("split", [name for name, _ in HOSTILE])
def test_resolve_refuses_a_hostile_split_before_any_path_exists(split):
    with pytest.raises(UnsafePath) as err:
        resolve_in_version(V, "ds-00000-of-00001.tfrecord", split=split)
    assert "refusing to write below '/out/v1'" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("names", [("..",), (".", "x"), ("../x",), ("a/b",), ("/abs",), ("",),
                                   ("x\x00",), ("x\n",), ("x" * 256,), ("train", ".."),
                                   ("dead_letter", "../../x.jsonl")])
def test_resolve_refuses_names_that_are_not_one_segment(names):
    with pytest.raises(UnsafePath, match="not one path segment"):
        resolve_in_version(V, *names, split="train" if names[0] not in RESERVED else None)


@pytest.mark.parametrize("kwargs, why", [
    ({"names": ("stray.tfrecord",)}, "neither a name of the output layout"),
    ({"names": ("train", "x.tfrecord")}, "neither a name of the output layout"),
    ({"names": ("x",), "within": ("train",)}, "not a folder of the output layout"),
    ({"names": ("x",), "within": ("..",)}, "not a folder of the output layout"),
    ({"names": ()}, "itself"),
])
def test_resolve_writes_only_layout_names_outside_split_folders(kwargs, why):
    names = kwargs.pop("names")
    with pytest.raises(UnsafePath, match=why):
        resolve_in_version(V, *names, **kwargs)


def test_resolve_needs_a_folder():
    with pytest.raises(UnsafePath, match="no folder"):
        resolve_in_version("", lay.MANIFEST)


def test_index_path_goes_through_the_same_check():
    assert index_path("/out/v1/train/ds-00000-of-00001.tfrecord") == (
        "/out/v1/index/train/ds-00000-of-00001.tfrecord.index")
    with pytest.raises(UnsafePath):
        index_path("/out/v1/.staging/ds-00000-of-00001.tfrecord")


def test_a_layout_refuses_a_bad_version_and_resolves_its_own_files():
    layout = lay.Layout("gs://b/out/", "v1")
    assert layout.manifest == "gs://b/out/v1/manifest.json"
    assert layout.staging == "gs://b/out/v1/.staging"
    assert layout.marker == "gs://b/out/v1/.beam-tfrecords-build"
    for bad in ("..", "v1\n", "LATEST", "a/b"):
        with pytest.raises(InvalidName):
            lay.Layout("/out", bad)


@pytest.mark.parametrize("raw", [{"train": 50, "Train": 50},
                                 {"field": "s", "names": ["eval", "EVAL"]}])
def test_split_names_that_differ_only_by_case_are_refused(raw):
    """On a case-insensitive filesystem they would be one folder."""
    with pytest.raises(UserError, match="differ only by case"):
        parse_splits(raw)
