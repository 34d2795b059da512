"""``beam-tfrecords promote VERSION``: move ``LATEST`` to a version the drift gate held back.

A build whose statistics drifted past the config's ``validate:`` thresholds is committed for
inspection but leaves ``LATEST`` where it was (transforms/drift_gate.py); after review --
``anomalies.json`` in the version says what drifted -- this moves ``LATEST`` to it. It moves
``LATEST`` the way a commit does (a compare-and-swap, never back past a version committed
later), and refuses a folder that is not a committed version.
"""

from __future__ import annotations

import json

from beam_tfrecords.errors import UserError
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks import commit
from beam_tfrecords.sinks.format import layout as lay

__all__ = ["PromoteError", "promote"]


class PromoteError(UserError):
    """A version that cannot be promoted; the message says why."""


def promote(version_dir: str) -> tuple[str | None, str]:
    """Point its output's ``LATEST`` at the committed version in ``version_dir``.

    Args:
      version_dir: ``<output.path>/<version>``, local or ``gs://``.

    Returns:
      (the version LATEST named before, the version it names now).
    """
    folder = version_dir.rstrip("/")
    if "/" not in folder:
        folder = "./" + folder
    root, version = folder.rsplit("/", 1)
    try:
        lay.check_name("version", version)
    except lay.InvalidName as err:
        raise PromoteError(f"{version_dir}: {err}") from None
    manifest_path = storage.join(folder, lay.MANIFEST)
    if not storage.exists(manifest_path):
        raise PromoteError(f"{version_dir} is not a committed version (no {lay.MANIFEST})")
    try:
        manifest = json.loads(storage.read_text(manifest_path))
        created = str(manifest["created"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise PromoteError(f"{manifest_path}: unusable manifest ({err})") from None
    if manifest.get("version") != version:
        raise PromoteError(f"{manifest_path} describes version {manifest.get('version')!r}, "
                           f"not {version!r}: it was moved or copied; promote it where it was "
                           "built")
    before = commit.read_latest(root)
    if not commit.move_latest(root, version, created):
        raise PromoteError(f"LATEST names {commit.read_latest(root)}, committed after {version}; "
                           "it stays (promote only moves LATEST forward)")
    return before, version
