"""What a build reads, found at launch: the input files, their fingerprint, the image plan.

Before any pipeline is built, the launcher lists the inputs once (each file's identity
travels with its work item, so a reader can tell whether the file changed since), refuses a
folder, FIFO or device among them, and checks the config's field names against the first
file's header, schema or first records. Nothing here builds a pipeline or writes anything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from beam_tfrecords.errors import UserError
from beam_tfrecords.pipelines.config import FORMAT_SUFFIXES, Config, check_columns
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.format.file_identity import FileIdentity, not_a_file
from beam_tfrecords.sinks.format.layout import InvalidName, check_name
from beam_tfrecords.transforms.codec.splits import SplitSpec
from beam_tfrecords.transforms.readers.declared_fields import declared_fields
from beam_tfrecords.transforms.readers.events import HEAD_BYTES, unreadable_text
from beam_tfrecords.transforms.readers.formats import descriptor

if TYPE_CHECKING:
    from beam_tfrecords.transforms.readers.read_images import ImagePlan

__all__ = ["BuildError", "Inputs", "first_columns", "input_fingerprint", "list_inputs",
           "plan_inputs"]


class BuildError(UserError):
    """A build that must not start or commit; the message is the one line a scheduler log
    shows."""


def input_fingerprint(pattern: str, metadata: Sequence[Any] | None = None
                      ) -> tuple[list[str], dict[str, Any]]:
    """The matched input files and a fingerprint of them (paths, sizes, modification times).

    Args:
        pattern: the input glob.
        metadata: Beam FileMetadata, when the caller has listed the files already.

    Returns:
        The paths, and the fingerprint the manifest records (``pattern``, ``files``,
        ``bytes``, ``sha256``).
    """
    metadata = storage.match(pattern) if metadata is None else list(metadata)
    if not metadata:
        raise BuildError(f"no input files match {pattern!r}")
    digest = hashlib.sha256()
    for m in metadata:
        digest.update(f"{m.path}\0{m.size_in_bytes}\0{m.last_updated_in_seconds}\n".encode())
    return [m.path for m in metadata], {
        "pattern": pattern,
        "files": len(metadata),
        "bytes": sum(m.size_in_bytes for m in metadata),
        "sha256": digest.hexdigest(),
    }


def list_inputs(pattern: str, fmt: str) -> tuple[list[FileIdentity], dict[str, Any]]:
    """The input files as listed at launch -- each with its identity, which travels with its
    work item so the worker that reads it can tell whether it changed -- and their
    fingerprint. A folder, a FIFO, a device or a socket among them is refused in one line,
    never opened.

    Args:
        pattern: the input glob.
        fmt: the source format (names the suffix in the hint for a folder).

    Returns:
        The identities, in path order, and the fingerprint.
    """
    def folder_slip(folder: str) -> BuildError:
        folder = folder.rstrip("/") or "/"
        return BuildError(f"input {folder} is a directory, not a file or a glob of files; use "
                          f"a glob of its files, e.g. "
                          f"{folder.rstrip('/')}/*{FORMAT_SUFFIXES.get(fmt, '')}")

    metadata = storage.match(pattern)
    if not metadata:
        if storage.is_gcs(pattern) and "*" not in pattern and storage.exists(pattern):
            raise folder_slip(pattern)  # a prefix with objects below it
        raise BuildError(f"no input files match {pattern!r}")
    listed = storage.identify(metadata)
    for identity in listed:
        if identity.kind == "directory":
            folder = identity.path  # as the user wrote it when it is the pattern itself
            same = storage.is_local(pattern) and os.path.normpath(folder) == os.path.normpath(
                pattern)
            raise folder_slip(pattern if same else folder)
        why = not_a_file(identity)
        if why is not None:
            raise BuildError(f"input {why}")
    # The fingerprint's sizes are those the readers compare with (os.stat's, not Beam's).
    _, fingerprint = input_fingerprint(pattern, [
        storage.FileMetadata(m.path, i.size, m.last_updated_in_seconds)
        for m, i in zip(metadata, listed, strict=True)])
    return listed, fingerprint


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What a build reads, found at launch: the files, their fingerprint, the image plan."""

    files: list[str | FileIdentity]  # an images source: paths; any other: identities
    fingerprint: dict[str, Any]
    images: ImagePlan | None = None


def plan_inputs(config: Config) -> tuple[Config, Inputs]:
    """List the inputs and check the config's field names against the first one, before any
    pipeline (the sample check, which reads records, is the launcher's: build.py).

    An images source is listed (folders) or read (manifest CSV) here: its fingerprint covers
    every image file, and a folder layout with ``<split>/`` levels supplies the splits when
    the config names none.

    Args:
        config: the loaded config, with the command line's overrides.

    Returns:
        The config (its splits taken from an image folder layout when it names none) and
        the :class:`Inputs` found.
    """
    source = config.source
    if source.format != "images":
        files, fingerprint = list_inputs(source.path, source.format)
        first = files[0].path
        columns = first_columns(config, first)
        if columns is not None:
            check_columns(config, columns, first)
        return config, Inputs(list(files), fingerprint)
    # The image reader (and Beam with it) only for an images source: a slip in any other
    # source is refused above without importing Beam.
    from beam_tfrecords.transforms.readers.read_images import RESERVED, list_images, plan_images

    opts = source.images
    try:
        if opts.layout == "folders":  # one listing serves the plan and the fingerprint
            root = source.path.rstrip("/")
            listed = storage.match(root + "/**")
            plan = plan_images(opts, root, paths=[m.path for m in listed])
        else:
            plan = list_images(source.path, opts)
    except (ValueError, OSError) as err:
        raise BuildError(f"source {source.path!r}: {err}") from None
    image_paths = sorted({entry.path for entry in plan.entries})
    if opts.layout != "folders":
        listed = _manifest_metadata(config, image_paths)
    for identity in storage.identify([m for m in listed if storage.is_local(m.path)]):
        why = not_a_file(identity)  # a FIFO among the images would hang its reader
        if why is not None:
            raise BuildError(f"input {why}")
    _, fingerprint = input_fingerprint(source.path, listed)
    if plan.splits and config.splits == SplitSpec():
        config = dataclasses.replace(config, splits=_splits_named_by(plan, source.path))
    fields = list(RESERVED) + (["split"] if plan.splits else [])
    fields += [name for name, _ in (plan.entries[0].extra if plan.entries else ())]
    check_columns(config, fields, source.path)
    return config, Inputs(image_paths, fingerprint, plan)


def _splits_named_by(plan: ImagePlan, path: str) -> SplitSpec:
    """The splits an image plan's ``split`` values name, taken from its records' own field.

    A value that cannot be a split name (``..``, ``a/b``, ``.staging``) names no split: the
    records that carry it become dead letters saying why. A plan with no usable split name at
    all is refused here, in one line, since every record would be rejected.
    """
    usable, refused = [], {}
    for name in plan.splits:
        try:
            usable.append(check_name("split", name))
        except InvalidName as err:
            refused[name] = str(err)
    if not usable:
        why = next(iter(refused.values()))
        raise BuildError(f"source {path!r}: no image names a usable split ({len(refused)} "
                         f"refused; {why})")
    share = 100.0 / len(usable)
    try:
        return SplitSpec(shares=tuple((name, share) for name in usable), field=("split",))
    except ValueError as err:
        raise BuildError(f"source {path!r}: {err}") from None


def _manifest_metadata(config: Config, image_paths: Sequence[str]) -> list:
    """FileMetadata of a manifest CSV and the image files it names, for the fingerprint.

    One listing of the images' common folder instead of one request per image; a file the
    listing lacks is simply absent (its read becomes a dead letter).
    """
    opts = config.source.images
    manifest = storage.match(opts.manifest or config.source.path)
    dirs = [path.split("/")[:-1] for path in image_paths]
    common = dirs[0] if dirs else []
    for parts in dirs[1:]:
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    if len([c for c in common if c and not c.endswith(":")]) < 1:  # no folder in common
        found = [m for path in image_paths for m in storage.match(path)]
    else:
        wanted = set(image_paths)
        found = [m for m in storage.match("/".join(common) + "/**") if m.path in wanted]
    return sorted(found + manifest, key=lambda m: m.path)


def first_columns(config: Config, path: str) -> list[str] | None:
    """The field names of the first input, to validate the config before the pipeline.

    Reads at most about ``source.max_record_bytes`` of any one record, as the readers do.

    Args:
        config: the build's config (its source format and options).
        path: the first input file.

    Returns:
        The CSV header (or the configured columns), the Parquet or Avro schema's top-level
        fields, or the keys of the first JSON Lines records; None when there is nothing to
        check against. BuildError when a text file is not UTF-8 text or a schema cannot be read.
    """
    source = config.source
    fmt = descriptor(source.format)
    if fmt.text:  # UTF-16 or gzip would give garbled names
        with storage.open_read(path) as raw:
            foreign = unreadable_text(raw.read(HEAD_BYTES))
        if foreign is not None:
            raise BuildError(f"{path}: {foreign}")
        return declared_fields(fmt.name, path, getattr(source, fmt.name),
                               source.max_record_bytes)
    try:
        return declared_fields(fmt.name, path, getattr(source, fmt.name, None),
                               source.max_record_bytes)
    except Exception as err:  # not a Parquet/Avro file, unreadable: say which
        raise BuildError(f"cannot read the schema of {path!r} ({fmt.name}): {err}") from None
