"""A version's Croissant 1.1 description (``croissant.json``), from its manifest.

Croissant (MLCommons) describes a data set for the tools that load one -- the data set's name,
description, license, citation and version, its files (the distribution) and its records
(record sets of typed fields). Ours describes the shards of every split as one ``cr:FileSet``
(``application/x-tfrecord``, a glob ``<split>/*.tfrecord[.gz|.deflate]`` per split) rather than a
``cr:FileObject`` per shard with its sha256: a FileSet needs no digest, and the manifest
already holds each shard's crc32c, which ``beam-tfrecords verify`` checks; a sha256 of every
shard would read every byte written a second time. One record set, ``examples``, holds a
field per feature, its Croissant type from the feature's (``int64``: ``sc:Integer``,
``float``: ``sc:Float``, ``string``: ``sc:Text``, ``bytes``: ``sc:Text`` for binary too --
Croissant has no bytes type in 1.1; see the feature spec), ``repeated`` when the feature
holds a list, and its values extracted from the Example's feature of the same name.

The same manifest gives the same bytes. Pure: the standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["CONFORMS_TO", "CONTEXT", "DEFAULT_VERSION", "ENCODING", "SEMVER",
           "croissant_document", "dumps"]

CONFORMS_TO = "http://mlcommons.org/croissant/1.1"
ENCODING = "application/x-tfrecord"
# Croissant's JSON-LD context (as mlcroissant writes it).
CONTEXT: dict[str, Any] = {
    "@language": "en", "@vocab": "https://schema.org/", "citeAs": "cr:citeAs",
    "column": "cr:column", "conformsTo": "dct:conformsTo",
    "cr": "http://mlcommons.org/croissant/", "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"}, "dct": "http://purl.org/dc/terms/",
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"}, "extract": "cr:extract",
    "field": "cr:field", "fileProperty": "cr:fileProperty", "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet", "format": "cr:format", "includes": "cr:includes",
    "isLiveDataset": "cr:isLiveDataset", "jsonPath": "cr:jsonPath", "key": "cr:key",
    "md5": "cr:md5", "parentField": "cr:parentField", "path": "cr:path",
    "recordSet": "cr:recordSet", "references": "cr:references", "regex": "cr:regex",
    "repeated": "cr:repeated", "replace": "cr:replace", "samplingRate": "cr:samplingRate",
    "sc": "https://schema.org/", "separator": "cr:separator", "source": "cr:source",
    "subField": "cr:subField", "transform": "cr:transform",
}
_TYPES = {"int64": "sc:Integer", "float": "sc:Float", "float32": "sc:Float",
          "string": "sc:Text", "bytes": "sc:Text"}
_SUFFIXES = {"none": ".tfrecord", "gzip": ".tfrecord.gz", "zlib": ".tfrecord.deflate"}
RECORD_SET = "examples"
SHARDS = "shards"
# Croissant wants MAJOR.MINOR.PATCH (semver); a version folder's name (a timestamp) is not one,
# so it goes into the description, and the data set's version is the config's about.version.
DEFAULT_VERSION = "1.0.0"
SEMVER = r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?"


def _fields(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A field per feature of the manifest's ``feature_spec`` (``tf_parse_spec``)."""
    features = (manifest.get("feature_spec") or {}).get("features") or {}
    fields = []
    for name, spec in sorted(features.items()):
        field: dict[str, Any] = {
            "@type": "cr:Field", "@id": f"{RECORD_SET}/{name}", "name": name,
            "dataType": _TYPES.get(str(spec.get("dtype", "string")), "sc:Text"),
            "source": {"fileSet": {"@id": SHARDS}, "extract": {"column": name}},
        }
        shape = spec.get("shape")
        if spec.get("type") != "FixedLenFeature" or (shape and shape != [1]):
            field["repeated"] = True  # a list: variable, ragged or a fixed shape
        fields.append(field)
    return fields


def croissant_document(manifest: Mapping[str, Any], about: Mapping[str, Any]
                       ) -> dict[str, Any]:
    """The ``croissant.json`` document of a committed version.

    Args:
      manifest: the version's manifest document (its name, version, created, compression,
        splits and feature spec).
      about: the config's ``about:`` section: ``description``, ``license`` (a URL or SPDX
        name), ``citation``, ``url`` and ``version`` ("" where not given: a default says
        what is unknown; ``version``, MAJOR.MINOR.PATCH, defaults to
        :data:`DEFAULT_VERSION`; the version folder's name is in the description).

    Returns:
      The JSON-LD document.
    """
    name = str(manifest.get("name", ""))
    version = str(about.get("version") or DEFAULT_VERSION)
    suffix = _SUFFIXES.get(str(manifest.get("compression", "none")), ".tfrecord")
    splits = sorted(manifest.get("splits") or {})
    distribution = [{"@type": "cr:FileSet", "@id": SHARDS, "name": SHARDS,
                     "description": "The TFRecord shards (serialized tf.train.Example) of "
                                    f"the splits {', '.join(splits)}, one folder each.",
                     "encodingFormat": ENCODING,
                     "includes": [f"{split}/*{suffix}" for split in splits]}]
    document: dict[str, Any] = {
        "@context": CONTEXT, "@type": "sc:Dataset", "conformsTo": CONFORMS_TO, "name": name,
        "description": (str(about.get("description") or f"The {name} data set.")
                        + f" Version folder {manifest.get('version', '')}, written by "
                        "beam-tfrecords as TFRecord files of tf.train.Example."),
        "license": str(about.get("license") or "unknown"),
        "version": version,
        "datePublished": str(manifest.get("created", ""))[:10],
        "citeAs": str(about.get("citation") or f"{name}, version {version}"),
        "distribution": distribution,
        **({"url": str(about["url"])} if about.get("url") else {}),
        "recordSet": [{"@type": "cr:RecordSet", "@id": RECORD_SET, "name": RECORD_SET,
                       "description": "One record per tf.train.Example.",
                       "field": _fields(manifest)}],
    }
    return document


def dumps(document: Mapping[str, Any]) -> str:
    """The document as ``croissant.json``'s text (indented, keys in the document's order).

    Args:
        document: the Croissant document (:func:`croissant_document`'s result).

    Returns:
        The JSON text, ending in a newline.
    """
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
