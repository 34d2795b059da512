"""docs/config.md's table names every key a config accepts.

The table is written by hand (the code has no single table of config keys); this test reads the
keys the validation accepts from the options the code parses into -- the feature keys, the
dataclasses of each section and of each reader's options -- and fails naming any key the page
does not list as ``section.key``.
"""

from __future__ import annotations

import dataclasses
import pathlib

from beam_tfrecords.pipelines.config import Config, ErrorPolicy, OutputConfig, SourceConfig
from beam_tfrecords.transforms.codec.specs import _FEATURE_KEYS
from beam_tfrecords.transforms.readers.read_csv import CsvOptions
from beam_tfrecords.transforms.readers.read_images import ImagesOptions
from beam_tfrecords.transforms.readers.read_jsonl import JsonlOptions

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "config.md"
# A dataclass field whose config key differs, or that the config sets elsewhere.
KEY_OF_FIELD = {("output", "shuffle_seed"): "shuffle",
                ("source.csv", "max_record_bytes"): None,  # it is source.max_record_bytes
                # sections: the table names their keys (and source.parquet/avro, which have none)
                **{("", section): None for section in ("source", "features", "splits",
                                                       "output", "errors")},
                **{("source", fmt): None for fmt in ("csv", "jsonl", "images")}}


def accepted_keys() -> list[str]:
    keys = [f"features.<name>.{key}" for key in _FEATURE_KEYS]
    for section, options in (("", Config), ("source", SourceConfig), ("output", OutputConfig),
                             ("errors", ErrorPolicy), ("source.csv", CsvOptions),
                             ("source.jsonl", JsonlOptions), ("source.images", ImagesOptions)):
        for field in dataclasses.fields(options):
            key = KEY_OF_FIELD.get((section, field.name), field.name)
            if key:
                keys.append(f"{section}.{key}" if section else key)
    return keys


def test_every_accepted_key_is_in_the_table():
    page = PAGE.read_text()
    start = page.index("## Every key")
    table = page[start:page.index("\n## ", start)]
    missing = [key for key in accepted_keys() if f"`{key}`" not in table]
    assert not missing, f"docs/config.md's table lacks {missing}"
