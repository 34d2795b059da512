"""docs/config.md's reference is generated from the table of config keys
(pipelines/config_table.py) when the site is built (scripts/mkdocs_hooks.py): the page made
from it lists every key with its type and the default the code really holds, read here from
the dataclasses themselves."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest
import yaml

from beam_tfrecords.pipelines.config import About, ErrorPolicy, OutputConfig
from beam_tfrecords.pipelines.config_table import config_keys, markdown
from beam_tfrecords.sinks.format.shard_plan import ShardSize
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.codec.splits import SplitSpec
from beam_tfrecords.transforms.readers.events import DEFAULT_MAX_RECORD_BYTES
from beam_tfrecords.transforms.readers.ranges import DEFAULT_SPLIT_BYTES
from beam_tfrecords.transforms.readers.read_csv import CsvOptions
from beam_tfrecords.transforms.readers.read_images import ImagesOptions
from beam_tfrecords.transforms.readers.read_jsonl import JsonlOptions
from beam_tfrecords.transforms.stats.drift import Thresholds

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "config.md").read_text()
# The object holding each section's defaults, as the code builds it.
DEFAULTS = {"source.csv": CsvOptions(), "source.jsonl": JsonlOptions(),
            "source.images": ImagesOptions(), "features.<name>": FeatureSpec("f", "int64"),
            "splits": SplitSpec(), "output": OutputConfig("out"),
            "output.shard_size": ShardSize(), "errors": ErrorPolicy(),
            "validate": Thresholds(), "about": About()}


MARK = "<!-- config-keys -->"


def _generated() -> str:
    """The page as the docs build makes it, the table printed in this process (the build
    prints it through the project's environment: test_docs_site.py)."""
    return PAGE.replace(MARK, markdown())


@pytest.fixture(scope="module")
def rows() -> dict[str, list[str]]:
    """The generated page's reference rows, by key: ``[type, values, default, meaning]``."""
    page = _generated()
    assert PAGE.count(MARK) == 1 and MARK not in page
    section = page[page.index("## Every key"):]
    section = section[:section.index("\n## ")]
    found = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split(" | ")]
            found[cells[0].strip("`")] = cells[1:]
    return found


def _loaded(cell: str):
    """A default cell's value: the YAML between its first backticks."""
    return yaml.safe_load(cell.split("`")[1])


def test_every_key_is_listed_with_its_type(rows):
    keys = config_keys()
    assert list(rows) == [k.key for k in keys]
    for key in keys:
        assert rows[key.key][0] == key.type, key.key
        assert rows[key.key][2], f"{key.key} has no default shown"
        assert (rows[key.key][2] == "required") == key.required, key.key


def test_the_defaults_shown_are_the_codes(rows):
    """Each default a dataclass holds is on the page, compared with the dataclass's own value
    (not with what the table says of it)."""
    checked = []
    for key in config_keys():
        if not key.field:
            continue
        if key.key == "source.max_record_bytes":
            value = DEFAULT_MAX_RECORD_BYTES
        elif key.key == "source.split_bytes":
            value = DEFAULT_SPLIT_BYTES
        elif key.key == "output.shard_size":
            value = dataclasses.asdict(ShardSize())  # shown as the whole band
        else:
            assert key.parent in DEFAULTS, f"{key.key}: no default object for {key.parent}"
            value = getattr(DEFAULTS[key.parent], key.leaf)
        expected = list(value) if isinstance(value, tuple) else value
        assert _loaded(rows[key.key][2]) == expected, (key.key, value, rows[key.key][2])
        checked.append(key.key)
    assert {"source.csv.delimiter", "features.<name>.missing", "errors.abort_window",
            "output.shard_size.max", "source.images.extensions"} <= set(checked)
    assert rows["source.max_record_bytes"][2] == "`67108864` (64 MiB)"
