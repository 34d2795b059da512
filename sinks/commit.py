"""The commit protocol: claim a version, commit it or roll it back, move LATEST, keep N.

A build's life on an output root, every step proven by what it reads back:

0. **Start** (:func:`begin_build`, the one launch protocol): steps 1 and 2 below, run by the
   job's first step (:func:`initialize_write`, when the pipeline runs -- never while it is
   built) and, for the command line, by the launcher just before it runs the pipeline
   (:func:`start_build`, which also renews the lease from the launcher and releases it, or
   hands it over to a job it does not wait for). Beginning a build twice is harmless: a
   version whose marker names the build is only re-leased. Read-only checks (the output is
   ours: :func:`check_output`) come before, in the launcher.
1. **Lease** (sinks/lease.py): one build at a time writes to a root. Only while holding it
   does a build clean up, and it cleans only the leftovers of builds that hold no lease. The
   job keeps it alive from the bundles that write (``JobLease``); the commit releases it.
2. **Prepare** (:func:`prepare_output`): finish what a dead build committed but did not
   publish -- a version whose manifest exists but which ``LATEST`` does not name yet, newer
   than ``LATEST``: ``LATEST`` moves to it and its staging goes (*roll forward*); remove the
   leftovers of dead builds (sinks/ownership.py says what is theirs); refuse foreign files
   unless allowed; then **claim** the new version folder by creating its marker exclusively.
3. **Write** (sinks/tfrecord_sink.py): parts under ``.staging/``, then final shard names.
4. **Commit** (:func:`commit_version`, the pipeline's last step): re-check the lease and the
   marker, check the counts, then -- fenced on the lease (``Lease.fence``: no takeover
   falls between the check and the step) -- either *fail* -- dead letters kept under
   ``.failed/<version>-<build>/`` with ``failure.json``, the version folder rolled back --
   or write ``feature_spec.json``, the files other readers need (``schema.pbtxt``, TFDS's
   ``features.json`` and ``dataset_info.json``), the statistics of every split
   (``statistics/Split-<split>/FeatureStats.pb``), the version's ``report.html`` (compared
   with the version ``LATEST`` names) and ``manifest.json`` (created exclusively:
   a committed version is never rewritten), move ``LATEST`` (never back to an older version), remove
   staging and apply retention. With a drift gate (``CommitSpec.gate``) it also writes
   ``anomalies.json``; a gate that did not pass commits the version without moving ``LATEST``
   (and without the roll-forward flag: only ``promote`` publishes it). A build a worker
   stopped early (sinks/early_stop.py) never reaches this step: its launcher fails it the
   same way (:func:`fail_stopped_early`).

A failure between the manifest and ``LATEST`` leaves a committed version that step 2 of the
next build -- or a re-run of the same command -- publishes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import crc32c

import beam_tfrecords
from beam_tfrecords.errors import UserError
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks import conditional, early_stop, ownership
from beam_tfrecords.sinks.dead_letters import DeadLetterFile, staged_dead_letters, top_reasons
from beam_tfrecords.sinks.format import croissant
from beam_tfrecords.sinks.format import duplicates as dup
from beam_tfrecords.sinks.format import layout as lay
from beam_tfrecords.sinks.format import manifest as mf
from beam_tfrecords.sinks.format.layout import Layout
from beam_tfrecords.sinks.format.tfds_info import tfds_dataset_info
from beam_tfrecords.sinks.lease import JobLease, Lease, LeaseLost, default_ttl, former_holders

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "Build",
    "CommitError",
    "CommitSpec",
    "Prepared",
    "begin_build",
    "make_commit_spec",
    "start_build",
    "apply_retention",
    "check_counts",
    "check_output",
    "claim_version",
    "commit_version",
    "committed_versions",
    "default_version",
    "fail_stopped_early",
    "initialize_write",
    "judge_thresholds",
    "move_latest",
    "prepare_output",
    "read_latest",
    "sum_counts",
]

_LOG = logging.getLogger(__name__)
_LATEST_TRIES = 20
PUBLISHING = f"{lay.STAGING}/{lay.PUBLISHING}"  # relative to a version folder


class CommitError(UserError):
    """A build that must not commit, or an output location it must not touch; one line."""


@dataclasses.dataclass(frozen=True)
class CommitSpec:
    """Everything the commit step needs besides the pipeline's results (picklable, small)."""

    layout: Layout
    build_id: str
    name: str
    compression: str
    feature_spec: Mapping[str, Any]
    config: Mapping[str, Any]
    config_sha256: str
    inputs: Mapping[str, Any]
    runner: str
    tool_version: str
    max_bad_fraction: float = 0.0
    max_unread_fraction: float = 0.0
    # Records a worker reads before it may stop the build early (sinks/early_stop.py); 0:
    # never. Only a launcher that calls fail_stopped_early when the pipeline fails may set it.
    abort_window: int = 0
    keep: int = 5
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Files for other readers, written at the version root with the feature spec: name (one
    # of layout.METADATA_FILES) -> text. With ``features.json`` the commit adds TFDS's
    # ``dataset_info.json`` when TFDS can load the version; ``tfds_note`` says why not when
    # the caller could not describe the features for TFDS.
    documents: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tfds_note: str = ""
    # Write the shards in this seed's order (sinks/shuffled_shards.py); None: arrival order.
    shuffle_seed: int | None = None
    use_lease: bool = True  # fence on the output's lease, and release it when done
    # How the job's first step takes the output (initialize_write): write beside foreign
    # files; seconds to wait for another build's lease.
    allow_non_empty: bool = False
    wait_for_lease: float = 0.0
    # The lease's time to live, fixed where the build was launched (default_ttl()): every
    # worker renews it with the same one.
    lease_ttl: float = dataclasses.field(default_factory=default_ttl)
    # Statistics on: per split name, the serialized statistics of a split without Examples
    # (what the commit writes for a split no statistics arrived for); None: statistics off.
    statistics: Mapping[str, bytes] | None = None
    # The drift gate (with statistics): called as gate(root, the version LATEST names or None,
    # the manifest document, {split: statistics bytes}) -> the anomalies.json document
    # ({"passed": bool, "against", "line", ...}). A gate that did not pass commits the
    # version but leaves LATEST where it is. None: no gate.
    gate: Any = None
    # The version's report: called as report(root, the version LATEST names or None, the
    # manifest document, {split: statistics bytes} or None, the anomalies.json document or
    # None) -> the HTML page, written as ``report.html`` before the manifest. None: no page.
    report: Any = None
    # The config's ``about:`` (description, license, citation, url, version): the commit
    # writes the version's ``croissant.json`` from it and the manifest. None: no Croissant.
    about: Mapping[str, Any] | None = None
    # Count duplicate records per split and records in several splits (the writers
    # fingerprint them, sinks/duplicates.py) into the manifest's ``duplicates``: called as
    # preview(a sampled record's first bytes) -> the short text its example shows; its
    # ``method``, when it has one, names what was compared (a key: ``key:<field>``, the
    # encoder fingerprinted the key's values). None: off.
    duplicates: Any = None

    @property
    def job_lease(self) -> JobLease | None:
        """What the job's writing steps renew the lease with; None without a lease."""
        return (JobLease(self.layout.root, self.build_id, self.lease_ttl) if self.use_lease
                else None)


def make_commit_spec(*, layout: Layout, build_id: str, name: str, compression: str,
                     feature_spec: Mapping[str, Any], config: Mapping[str, Any],
                     inputs: Mapping[str, Any], runner: str, config_sha256: str = "",
                     documents: Mapping[str, str] | None = None, tfds_note: str = "",
                     max_bad_fraction: float = 0.0, max_unread_fraction: float = 0.0,
                     abort_window: int = 0, keep: int = 5,
                     extra: Mapping[str, Any] | None = None, shuffle_seed: int | None = None,
                     allow_non_empty: bool = False, wait_for_lease: float = 0.0,
                     use_lease: bool = True, statistics: Mapping[str, bytes] | None = None,
                     gate: Any = None, report: Any = None,
                     about: Mapping[str, Any] | None = None,
                     duplicates: Any = None) -> CommitSpec:
    """The one way a launcher (the command line, the library transform) describes a build to
    its commit step; the tool's version and the lease's time to live are this process's.

    Args:
      layout: the output root and the version folder the build writes.
      build_id: the build's id, unique per launch; the lease and the folder's marker name it.
      name: the data set's name.
      compression: ``none``, ``gzip`` or ``zlib``.
      feature_spec: the ``feature_spec.json`` document (``tf_parse_spec``).
      config: the resolved configuration recorded in the manifest.
      inputs: the input fingerprint recorded in the manifest.
      runner: the runner's name, for the manifest.
      config_sha256: the config's hash, recorded in the manifest.
      documents: files for other readers (``reader_documents``).
      tfds_note: why no TensorFlow Datasets files are written (``""`` when they are).
      max_bad_fraction: the largest share of records read that may be rejected.
      max_unread_fraction: the largest share of input bytes that may go unread.
      abort_window: records a worker reads before it may stop the build early (0: never).
      keep: committed versions to keep.
      extra: more manifest keys.
      shuffle_seed: write the shards in this seed's order; None: arrival order.
      allow_non_empty: the job's first step writes beside foreign files
        (:func:`initialize_write`).
      wait_for_lease: seconds the job's first step waits for another build's lease.
      use_lease: fence on the output's lease (off only for tests that drive the sink alone).
      statistics: write per-split statistics: per split, those of no Examples (for a split
        that gets none); None: no statistics.
      gate: the drift gate (``CommitSpec.gate``), with statistics only; None: no gate.
      report: what makes ``report.html`` (``CommitSpec.report``); None: no page.
      about: the data set's description for ``croissant.json``; None: no Croissant file.
      duplicates: count duplicates and leaks (``CommitSpec.duplicates``: the preview of a
        sampled record); None: no count.

    Returns:
      The CommitSpec.
    """
    return CommitSpec(
        layout=layout, build_id=build_id, name=name, compression=compression,
        feature_spec=feature_spec, config=config, config_sha256=config_sha256, inputs=inputs,
        runner=runner, tool_version=beam_tfrecords.__version__,
        max_bad_fraction=max_bad_fraction, max_unread_fraction=max_unread_fraction,
        abort_window=abort_window, keep=keep, extra=dict(extra or {}),
        documents=dict(documents or {}), tfds_note=tfds_note, shuffle_seed=shuffle_seed,
        allow_non_empty=allow_non_empty, wait_for_lease=wait_for_lease, use_lease=use_lease,
        statistics=None if statistics is None else dict(statistics), gate=gate,
        report=report, about=None if about is None else dict(about), duplicates=duplicates)


# -- counts ------------------------------------------------------------------------------------

def sum_counts(pairs: Iterable[tuple[str, Any]]) -> dict[str, int]:
    """The partial counts the steps emit, ``(name, n)`` per chunk or file, summed by name.

    An ``n`` that is not a number is a part that only adds up with the other parts of its
    name -- a reader's range of one file (transforms/readers/ranges.py ``RangePart``), whose
    files' counts are not the sums of their ranges' -- and its class's ``merge(parts)`` gives
    the counts they make together (and raises, naming the file and byte, when they do not
    fit together). The class travels with the parts, so this module imports no reader.

    Args:
        pairs: ``(name, n)`` pairs; ``n`` an int or a reader's range part.

    Returns:
        Each name's total.
    """
    totals: dict[str, int] = {}
    parts: dict[str, list[Any]] = {}
    for name, n in pairs:
        if isinstance(n, int):
            totals[name] = totals.get(name, 0) + n
        else:
            parts.setdefault(name, []).append(n)
    for found in parts.values():
        for name, n in type(found[0]).merge(found).items():
            totals[name] = totals.get(name, 0) + n
    return totals


def check_counts(counts: Mapping[str, int], written: int, dead_letters: int) -> None:
    """Every record read is written or rejected, once, and every rejected record and every
    unread region of input has its dead-letter row; anything else is a bug, never a build.

    Args:
        counts: the build's summed counts (:func:`sum_counts`).
        written: records in the written shards.
        dead_letters: rows in the dead-letter files.

    Raises:
        CommitError: the counts do not add up, naming each mismatch.
    """
    read = counts.get("read", 0)
    rejected = counts.get("rejected_at_read", 0) + counts.get("rejected_at_build", 0)
    regions = counts.get("unread_regions", 0)
    problems = []
    if counts.get("built", 0) != written:
        problems.append(f"{counts.get('built', 0)} examples were built but the shards hold "
                        f"{written}")
    if rejected + regions != dead_letters:
        what = f"{rejected} records were rejected"
        if regions:
            what += f" and {regions} regions of input were unread"
        problems.append(f"{what} but the dead letters hold {dead_letters}")
    if read != written + rejected:
        problems.append(f"read {read} != written {written} + rejected {rejected}")
    if problems:
        raise CommitError("record counts do not add up: " + "; ".join(problems))


def judge_thresholds(counts: Mapping[str, int], input_bytes: int, max_bad_fraction: float,
                     max_unread_fraction: float) -> str | None:
    """Why the build must fail on its counts, or None. Pure.

    Args:
        counts: the build's summed counts.
        input_bytes: the inputs' total size in bytes (0 when unknown).
        max_bad_fraction: the largest share of records read that may be rejected (0 to 1).
        max_unread_fraction: the largest share of input bytes that may go unread (0 to 1).

    Returns:
        One line saying which threshold the build exceeded, or None.
    """
    read = counts.get("read", 0)
    rejected = counts.get("rejected_at_read", 0) + counts.get("rejected_at_build", 0)
    unread = counts.get("unread_bytes", 0)
    if unread and (not input_bytes or unread / input_bytes > max_unread_fraction):
        files = counts.get("unread_files", 0)
        rows = counts.get("unread_rows", 0)
        share = f" ({unread / input_bytes:.4%})" if input_bytes else ""
        changed = counts.get("changed_files", 0)
        if changed:  # the reasons (top reasons) name the files and how they changed
            return (f"{changed} input file(s) changed while the build read them, so "
                    f"{unread} bytes of input{share} are not the files listed at launch, "
                    f"more than errors.max_unread_fraction={max_unread_fraction}")
        return (f"{unread} bytes of input{share} in {files} file(s) could not be read"
                + (f" ({rows} rows known lost)" if rows else "")
                + f", more than errors.max_unread_fraction={max_unread_fraction}")
    if read and rejected / read > max_bad_fraction:
        return (f"{rejected} of {read} records were rejected ({rejected / read:.4%}), more "
                f"than errors.max_bad_fraction={max_bad_fraction}")
    return None


def manifest_counts(counts: Mapping[str, int], written: int, rejected: int) -> dict[str, Any]:
    """The manifest's ``counts`` section: records read, written and rejected, and the input left
    unread.

    Args:
        counts: the build's summed counts.
        written: records in the written shards.
        rejected: records rejected at read or at build.

    Returns:
        The section as a JSON-ready dict.
    """
    return {
        "read": counts.get("read", 0),
        "written": written,
        "rejected": rejected,
        "unread": {"files": counts.get("unread_files", 0),
                   "bytes": counts.get("unread_bytes", 0),
                   "rows": counts.get("unread_rows", 0),
                   # of the files unread, those that changed after the launch listed them
                   **({"changed_files": counts["changed_files"]}
                      if counts.get("changed_files") else {})},
    }


# -- versions and LATEST ----------------------------------------------------------------------

def read_latest(root: str) -> str | None:
    """The version ``LATEST`` under ``root`` names.

    Args:
        root: the output root.

    Returns:
        The version's name, or None when there is no ``LATEST`` (or it is empty).
    """
    path = storage.join(root, lay.LATEST)
    return storage.read_text(path).strip() or None if storage.exists(path) else None


def _created(root: str, version: str) -> str | None:
    path = storage.join(root, version, lay.MANIFEST)
    try:
        return str(json.loads(storage.read_text(path)).get("created", "")) or None
    except (OSError, ValueError, AttributeError):
        return None


def move_latest(root: str, version: str, created: str) -> bool:
    """Point ``LATEST`` at ``version`` unless it names a version committed later; returns
    whether it now names ``version``. A compare-and-swap on LATEST's generation, so two
    commits racing cannot move it back.

    Args:
        root: the output root.
        version: the version just committed.
        created: its manifest's ``created`` time, compared with the current one's.

    Returns:
        Whether ``LATEST`` names ``version`` now.
    """
    path = storage.join(root, lay.LATEST)
    data = (version + "\n").encode()
    for _ in range(_LATEST_TRIES):
        current = conditional.read(path)
        if current is None:
            if conditional.create(path, data) is not None:
                return True
            continue
        text, generation = current
        name = text.decode("utf-8", "replace").strip()
        if name == version:
            return True
        theirs = _created(root, name) if name else None
        if theirs is not None and theirs > created:
            _LOG.warning("LATEST names %s, committed after %s; it stays", name, version)
            return False
        if conditional.replace(path, data, generation) is not None:
            return True
    raise CommitError(f"{path} kept changing while this build tried to move it to {version}")


def default_version(root: str) -> str:
    """A UTC timestamp that sorts in build order, ``20261122T083000Z``; a second build in the
    same second gets ``20261122T083000Z-1``.

    Args:
        root: the output root, looked in for a version of the same name.

    Returns:
        The version's name.
    """
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    version, n = stamp, 0
    while storage.exists(storage.join(root, version)):
        n += 1
        version = f"{stamp}-{n}"
    return version


def committed_versions(root: str) -> list[tuple[str, str]]:
    """(created, version) of every committed version of ours under ``root``, oldest first.

    Args:
        root: the output root.

    Returns:
        ``(created, version)`` pairs.
    """
    state = ownership.scan(root)
    return sorted((str(e.manifest.get("created", "")), e.name) for e in state.committed)


def _delete_relative(base: str, relative: Sequence[str]) -> None:
    """Delete files below ``base`` in the order given (first things first: the manifest)."""
    if relative and relative[0] in (lay.MANIFEST, lay.FAILURE):
        storage.remove_files([storage.join(base, relative[0])])
        relative = relative[1:]
    if relative:  # batched on Cloud Storage: a version of many shards, few requests
        storage.remove_files([storage.join(base, r) for r in relative])
    if storage.is_local(base):
        _remove_empty_dirs(base)


def _remove_empty_dirs(base: str) -> None:
    import os

    if not os.path.isdir(base):
        return
    for folder, _, _ in sorted(os.walk(base), key=lambda t: -t[0].count(os.sep)):
        try:
            os.rmdir(folder)
        except OSError:
            pass  # not empty: something that is not ours stays, and so does its folder


def _awaiting_promotion(manifest: Mapping[str, Any], latest_created: str) -> bool:
    """A version the drift gate held back, newer than LATEST's: kept for review."""
    gate = manifest.get("gate")
    return (isinstance(gate, dict) and gate.get("passed") is False
            and str(manifest.get("created", "")) > latest_created)


def apply_retention(root: str, keep: int, latest: str | None) -> list[str]:
    """Delete all but the newest ``keep`` committed versions -- never the one LATEST names --
    nor one the drift gate held back that is newer (awaiting promotion) -- and all but the
    newest ``keep`` failed builds' dead letters. Only files a version's
    manifest lists (or a failed build's failure.json) are deleted, the manifest first, so a
    deletion cut short leaves no broken data set; anything else in the folder stays.

    Args:
        root: the output root.
        keep: how many committed versions (and failed builds' dead letters) to keep.
        latest: the version ``LATEST`` names, never deleted.

    Returns:
        The names of the versions deleted.
    """
    state = ownership.scan(root)
    versions = sorted(state.committed, key=lambda e: str(e.manifest.get("created", "")))
    latest_created = next((str(e.manifest.get("created", "")) for e in versions
                           if e.name == latest), "")
    doomed = [e for e in versions[:max(len(versions) - keep, 0)] if e.name != latest
              and not _awaiting_promotion(e.manifest, latest_created)]
    for entry in doomed:
        _delete_relative(storage.join(root, entry.name), ownership.listed_by_manifest(entry))
        _LOG.info("retention: removed version %s", entry.name)
    failed = sorted(state.failed, key=lambda e: str(e.manifest.get("failed", "")))
    for entry in failed[:max(len(failed) - keep, 0)]:
        _delete_relative(storage.join(root, lay.FAILED, entry.name),
                         ownership.listed_by_failure(entry))
        _LOG.info("retention: removed the dead letters of failed build %s", entry.name)
    return [e.name for e in doomed]


# -- before the pipeline -------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Prepared:
    """What preparing an output root did: versions whose commit it completed, leftovers it
    removed (``(version, build id)``) and foreign entries it left alone."""

    completed: tuple[str, ...] = ()
    removed: tuple[tuple[str, str], ...] = ()
    foreign: tuple[str, ...] = ()


def _roll_forward(root: str, state: ownership.OutputState) -> list[str]:
    """Publish committed versions whose commit was cut short between the manifest and LATEST
    (they still hold ``.staging/publishing``) when newer than LATEST's; remove committed
    versions' staging. Returns the versions LATEST moved to."""
    latest_created = None
    if state.latest is not None:
        latest_created = next((str(e.manifest.get("created", "")) for e in state.committed
                               if e.name == state.latest), None)
    moved = []
    for entry in sorted(state.committed, key=lambda e: str(e.manifest.get("created", ""))):
        created = str(entry.manifest.get("created", ""))
        interrupted = PUBLISHING in entry.files  # a LATEST set by hand to an older one stays
        if interrupted and entry.name != state.latest and (
                latest_created is None or created > latest_created):
            if move_latest(root, entry.name, created):
                _LOG.warning("completed the commit of version %s: LATEST now names it",
                             entry.name)
                moved.append(entry.name)
                latest_created = created
        if any(f.startswith(lay.STAGING + "/") for f in entry.files):
            storage.delete_tree(storage.join(root, entry.name, lay.STAGING))
    return moved


def prepare_output(layout: Layout, build_id: str, allow_non_empty: bool = False,
                   live_builds: Sequence[str] = (), lease: Lease | None = None) -> Prepared:
    """Make ``layout.root`` ready for this build, which must hold the root's lease.

    Completes interrupted commits, removes the leftovers of builds not in ``live_builds``
    (other than this one) -- with the lease's history, also what builds that lost the lease
    wrote after their marker was removed -- and refuses a root holding foreign files unless
    ``allow_non_empty`` -- they are never touched either way. With ``lease`` it all runs
    fenced on it (``Lease.fence``): a build that lost the lease deletes nothing.

    Args:
        layout: the build's output layout.
        build_id: this build's id.
        allow_non_empty: go on when the root holds files that are not ours.
        live_builds: ids of other builds still running, whose files stay.
        lease: the lease this build holds on the root; its fence guards every deletion.

    Returns:
        What was completed, removed and left alone.

    Raises:
        CommitError: the root holds foreign files and ``allow_non_empty`` is false.
    """
    fenced = lease.fence("cleanup") if lease is not None else contextlib.nullcontext()
    with fenced:
        return _prepare(layout, build_id, allow_non_empty, live_builds)


def _prepare(layout: Layout, build_id: str, allow_non_empty: bool,
             live_builds: Sequence[str]) -> Prepared:
    root = layout.root
    state = _scan(root, build_id, live_builds)
    completed = _roll_forward(root, state)
    removed = []
    for entry in state.claimed:
        if entry.marker.build_id == build_id or entry.marker.build_id in live_builds:
            continue
        _LOG.info("removing the leftovers of build %s in %s", entry.marker.build_id[:8],
                  storage.join(root, entry.name))
        _delete_relative(storage.join(root, entry.name), ownership.written_by_build(entry))
        removed.append((entry.name, entry.marker.build_id))
    _refuse_foreign(root, state, allow_non_empty)
    return Prepared(tuple(completed), tuple(removed), tuple(state.foreign))


def _scan(root: str, build_id: str, live_builds: Sequence[str] = ()) -> ownership.OutputState:
    """``root`` sorted into ours and foreign, knowing -- from the lease's history -- what
    builds that lost the lease wrote without their marker."""
    formers = {f.version: f.build_id for f in former_holders(root)
               if f.version and f.build_id != build_id and f.build_id not in live_builds}
    return ownership.scan(root, formers)


def _refuse_foreign(root: str, state: ownership.OutputState, allow_non_empty: bool) -> None:
    if state.foreign and not allow_non_empty:
        shown = ", ".join(state.foreign[:5]) + (", ..." if len(state.foreign) > 5 else "")
        raise CommitError(
            f"the output {root!r} is not empty and does not look like a beam-tfrecords output "
            f"(found {shown}); choose an empty location, or pass --allow-non-empty-output to "
            "write beside those files (they are never deleted)")


def check_output(root: str, allow_non_empty: bool = False) -> None:
    """Refuse, before anything is written, an output root holding files that are not ours
    (unless ``allow_non_empty``): the read-only part of :func:`prepare_output`, for a
    launcher to call while it checks its arguments. Writes nothing, takes no lease.

    Args:
        root: the output root.
        allow_non_empty: accept a root that holds files that are not ours.

    Raises:
        CommitError: the root holds foreign files.
    """
    _refuse_foreign(root.rstrip("/") or "/", _scan(root, ""), allow_non_empty)


def claim_version(layout: Layout, build_id: str, tool_version: str,
                  lease: Lease | None = None) -> ownership.Marker:
    """Create the version folder's marker exclusively; refuse a folder that exists already.
    With ``lease``, note the version in it: should the build lose the lease, the lease's
    history says whose the folder is (``prepare_output``).

    Args:
        layout: the build's output layout; its version folder is claimed.
        build_id: this build's id, written into the marker.
        tool_version: this package's version, written into the marker.
        lease: the build's lease, which records the claimed version.

    Returns:
        The marker written.

    Raises:
        CommitError: the version exists (committed or not ours) or another build claimed it first.
    """
    if storage.exists(layout.version_dir) and storage.list_files(layout.version_dir):
        if storage.exists(layout.manifest):
            raise CommitError(f"version {layout.version!r} is already committed at "
                              f"{layout.version_dir}; choose another --version")
        raise CommitError(f"{layout.version_dir} exists and is not a folder this build can "
                          "claim; choose another --version")
    marker = ownership.Marker(build_id, layout.version, mf.utc_now(), tool_version)
    if conditional.create(layout.marker, marker.dumps()) is None:
        raise CommitError(f"version {layout.version!r} was claimed by another build at the "
                          "same moment; choose another --version")
    if lease is not None:
        lease.record_version(layout.version)
    return marker


# -- the launch protocol -------------------------------------------------------------------------

@dataclasses.dataclass
class Build:
    """A build that has its output: the lease held, the output prepared, the version claimed
    (or, with ``completed``, found committed by an earlier run whose last step was cut short,
    and that commit completed instead)."""

    layout: Layout
    build_id: str
    lease: Lease | None
    prepared: Prepared = Prepared()
    completed: bool = False
    handed_over: bool = False

    def hand_over(self) -> None:
        """The job runs on without the launcher (it was submitted, not waited for): leave the
        lease to it instead of releasing it (``Lease.hand_over``); its bundles renew it and
        its commit releases it, or it expires."""
        if self.lease is not None and not self.handed_over:
            self.lease.hand_over()
        self.handed_over = True


def begin_build(root: str, version: str | None, build_id: str, *,
                allow_non_empty: bool = False, wait_for_lease: float = 0.0,
                lease: Lease | None = None, ttl: float | None = None, job: bool = False,
                use_lease: bool = True,
                before_claim: Callable[[Layout, Prepared], None] | None = None) -> Build:
    """Take the output's lease, prepare the output, claim the version folder: the one way a
    build starts, from a launcher (:func:`start_build`) or from inside the running job (the
    sink's first step, ``sinks/dataset.py``).

    Idempotent: a version folder whose marker names this build is already begun -- by the
    launcher that started the job, or by an earlier attempt of the same step -- and is only
    re-leased.

    Args:
      root: the output root.
      version: the folder's name (None: the first free UTC timestamp, chosen after
        preparing).
      build_id: this build's id (the lease's holder, the folder's marker).
      allow_non_empty: write beside foreign files instead of refusing the output.
      wait_for_lease: seconds to wait for another build's lease (LeaseHeld after that).
      lease: the Lease object to take (default: a new one for ``root`` and ``build_id``).
      ttl: the lease's time to live (default: ``default_ttl()``).
      job: take it for a running job (``Lease(job=True)``: it names no process).
      use_lease: False only for tests that drive the sink alone (nothing is leased).
      before_claim: called after preparing, before claiming (``--skip-if-unchanged``).

    Returns:
      The Build. On any error the lease is released and nothing is claimed.
    """
    if lease is None and use_lease:
        lease = Lease(root, build_id, ttl, job=job)
    if lease is not None:
        lease.acquire(wait=wait_for_lease)
    try:
        if version is not None:
            layout = Layout(root, version)
            marker = ownership.read_marker(layout.version_dir)
            if marker is not None and marker.build_id == build_id:
                return Build(layout, build_id, lease)
        layout = Layout(root, version or default_version(root))
        prepared = prepare_output(layout, build_id, allow_non_empty, lease=lease)
        if layout.version in prepared.completed:
            return Build(layout, build_id, lease, prepared, completed=True)
        if version is None:  # the root was cleaned: the first free name may have changed
            layout = Layout(root, default_version(root))
        if before_claim is not None:
            before_claim(layout, prepared)
        claim_version(layout, build_id, beam_tfrecords.__version__, lease=lease)
    except BaseException:
        if lease is not None:
            lease.release(build_done=True)
        raise
    return Build(layout, build_id, lease, prepared)


@contextlib.contextmanager
def start_build(root: str, version: str | None, build_id: str, *,
                allow_non_empty: bool = False, wait_for_lease: float = 0.0,
                lease: Lease | None = None,
                before_claim: Callable[[Layout, Prepared], None] | None = None
                ) -> Iterator[Build]:
    """A launcher's build: :func:`begin_build`, then the lease renewed from this process
    while the block runs (``Lease.keep_alive``) and released when it ends -- unless the
    block handed it over to a job it did not wait for (``Build.hand_over``). The job's
    own first step begins the same build again (a no-op but for the lease) and keeps the
    lease from its bundles, so it holds the lease wherever it runs.

    Args:
      root: the output root.
      version: the folder's name (None: the first free UTC timestamp).
      build_id: this build's id.
      allow_non_empty: write beside foreign files instead of refusing the output.
      wait_for_lease: seconds to wait for another build's lease.
      lease: the Lease object to take (default: a new one).
      before_claim: called after preparing, before claiming.

    Yields:
      The Build.
    """
    build = begin_build(root, version, build_id, allow_non_empty=allow_non_empty,
                        wait_for_lease=wait_for_lease, lease=lease, before_claim=before_claim)
    try:
        with build.lease.keep_alive() if build.lease is not None else contextlib.nullcontext():
            yield build
    finally:
        if build.lease is not None and not build.handed_over:
            build.lease.release()


def initialize_write(spec: CommitSpec) -> str:
    """The sink's first step, run by the job: begin the build the spec describes (the lease
    taken for the job, the output prepared, the version claimed), so that a pipeline that
    is built but never run touches nothing. Returns the version's name.

    Args:
        spec: the build's commit spec.

    Returns:
        The version's name.

    Raises:
        CommitError: an earlier run already committed the version.
    """
    build = begin_build(spec.layout.root, spec.layout.version, spec.build_id,
                        allow_non_empty=spec.allow_non_empty,
                        wait_for_lease=spec.wait_for_lease, ttl=spec.lease_ttl, job=True,
                        use_lease=spec.use_lease)
    if build.completed:
        if build.lease is not None:
            build.lease.release(build_done=True)
        raise CommitError(f"version {spec.layout.version!r} was committed by an earlier run "
                          "whose last step was cut short; its commit is now complete -- "
                          "choose another version to write a new one")
    return spec.layout.version


# -- the commit step -----------------------------------------------------------------------------

def _check_marker(spec: CommitSpec) -> None:
    marker = ownership.read_marker(spec.layout.version_dir)
    if marker is None or marker.build_id != spec.build_id:
        raise CommitError(f"not committing {spec.layout.version_dir}: the folder is no longer "
                          "this build's (its marker is gone or names another build)")


def _lost(spec: CommitSpec, err: Exception) -> CommitError:
    after = getattr(err, "after_step", "")
    if after:  # Cloud Storage: the step ran, then the lease was found lost (Lease.fence)
        return CommitError(f"{err}, seen only after {after} of {spec.layout.version_dir} was "
                           "done; what it did is complete, but this build stops here")
    return CommitError(f"{err}; not committing {spec.layout.version_dir} (the next build "
                       "removes what this one wrote)")


def _job_lease(spec: CommitSpec) -> Lease:
    return Lease(spec.layout.root, spec.build_id, spec.lease_ttl, job=True)


def _fence(spec: CommitSpec) -> None:
    """Refuse to commit unless this build still holds the lease and owns the version."""
    if spec.use_lease:
        try:
            _job_lease(spec).check()
        except LeaseLost as err:
            raise _lost(spec, err) from None
    _check_marker(spec)


@contextlib.contextmanager
def _fenced(spec: CommitSpec, step: str) -> Iterator[None]:
    """Run an irreversible step only while this build holds the lease and owns the version,
    so that no takeover falls between the check and the step (``Lease.fence``)."""
    if not spec.use_lease:
        _check_marker(spec)
        yield
        return
    try:
        with _job_lease(spec).fence(step):
            _check_marker(spec)
            yield
    except LeaseLost as err:
        raise _lost(spec, err) from None


def _publish_dead_letters(dead: Sequence[DeadLetterFile], folder: str) -> list[tuple[str, int]]:
    """Move staged dead-letter files to ``<folder>/dead_letter/rejected-i-of-n.jsonl``."""
    finals = []
    for index, item in enumerate(sorted(dead, key=lambda d: d.path)):
        final = lay.resolve_in_version(folder, lay.DEAD_LETTER,
                                       f"rejected-{index:05d}-of-{len(dead):05d}.jsonl")
        if storage.exists(item.path):
            storage.rename(item.path, final)
        finals.append((final, item.rows))
    return finals


def _fail(spec: CommitSpec, reason: str, shards: Mapping[str, Sequence[Any]],
          dead: Sequence[DeadLetterFile], counts: Mapping[str, Any],
          extra: Mapping[str, Any] | None = None) -> CommitError:
    """Keep the dead letters where no later build removes them (retention decides), roll the
    version folder back, and return the one-line error naming both. ``extra``: more keys
    for ``failure.json``."""
    layout = spec.layout
    kept = layout.failed_dir(spec.build_id)
    top = top_reasons(dead)
    with _fenced(spec, "the failure record and rollback"):
        finals = _publish_dead_letters(dead, kept)
        document = {
            "tool": ownership.TOOL, "build_id": spec.build_id, "version": layout.version,
            "failed": mf.utc_now(), "reason": reason, "counts": dict(counts),
            "top_reasons": [{"reason": r, "count": n} for r, n in top],
            "dead_letter": [{"path": mf.relative_path(p, kept), "records": n}
                            for p, n in finals],
            **(extra or {}),
        }
        storage.write_atomic(lay.resolve_in_version(kept, lay.FAILURE), mf.dumps(document))
        _rollback(layout, shards)
    where = f"; dead letters kept in {kept}/{lay.DEAD_LETTER}" if finals else ""
    reasons = ("; top reasons: " + " | ".join(f"{n} x {r}" for r, n in top)) if top else ""
    return CommitError(f"{reason}{where}{reasons}")


def fail_stopped_early(spec: CommitSpec) -> CommitError | None:
    """After the pipeline failed: when a worker stopped the build early (its note is under
    staging), fail it as a threshold failure at the commit does -- dead letters so far kept
    under ``.failed/`` with ``failure.json``, the version folder rolled back -- and return the
    one-line error; None when no worker stopped it (the failure is another one). Call it once
    no worker runs any more: it moves their staged files.

    A worker the runner tore down after another one stopped (before it looked for the note)
    leaves no note of its own, but the dead letters it wrote are kept: each of their rows
    counts as read and rejected too (``stopped_early.rejected_without_note``), so the
    failure's rejected count is always the number of rows kept.

    Args:
        spec: the build's commit spec.

    Returns:
        The build's error, or None.
    """
    notes = early_stop.read_notes(storage.join(spec.layout.staging, early_stop.FOLDER))
    if not notes:
        return None
    _fence(spec)
    reason, counts = early_stop.stopped_reason(notes)
    dead = staged_dead_letters(spec.layout.staging)
    unnoted = max(0, sum(d.rows for d in dead) - counts["rejected"])
    counts = {**counts, "read": counts["read"] + unnoted,
              "rejected": counts["rejected"] + unnoted}
    return _fail(spec, reason, {}, dead, counts, extra={"stopped_early": {
        "abort_window": spec.abort_window, "workers": len(notes),
        "rejected_without_note": unnoted}})


def _rollback(layout: Layout, shards: Mapping[str, Sequence[Any]]) -> None:
    """Remove what this build wrote into its version folder: shards, staging, the marker."""
    paths = [info.path for infos in shards.values() for info in infos]
    paths += [info.index for infos in shards.values() for info in infos
              if getattr(info, "index", "")]
    storage.remove_files(paths)
    storage.delete_tree(layout.staging)
    storage.remove_files([layout.feature_spec, layout.marker]
                   + [storage.join(layout.version_dir, n)
                      for n in (*lay.METADATA_FILES, lay.ANOMALIES, lay.REPORT)]
                   + [lay.statistics_path(layout.version_dir, s) for s in shards])
    if storage.is_local(layout.version_dir):
        _remove_empty_dirs(layout.version_dir)


def _write_reader_files(spec: CommitSpec, document: Mapping[str, Any]) -> dict[str, Any]:
    """Write the files other readers need; returns the manifest's account of them:
    ``metadata_files`` (what was written) and ``tfds`` (whether TFDS can load the version,
    and if not, why)."""
    files = dict(spec.documents)
    tfds_note = spec.tfds_note or "no TensorFlow Datasets features were given"
    if lay.TFDS_FEATURES in files:
        info, tfds_note = tfds_dataset_info(
            name=spec.name, version=spec.layout.version, compression=spec.compression,
            splits=document["splits"], tool=f"beam-tfrecords {spec.tool_version}")
        if info is None:
            del files[lay.TFDS_FEATURES]
        else:
            files[lay.TFDS_INFO] = json.dumps(info, indent=2) + "\n"
    if spec.about is not None:
        files[lay.CROISSANT] = croissant.dumps(croissant.croissant_document(document,
                                                                           spec.about))
    unknown = sorted(set(files) - set(lay.METADATA_FILES))
    if unknown:
        raise ValueError(f"not a reader file of the layout: {unknown}")
    for name in lay.METADATA_FILES:
        if name in files:
            storage.write_atomic(lay.resolve_in_version(spec.layout.version_dir, name),
                                 files[name].encode())
    tfds = ({"loadable": True} if lay.TFDS_INFO in files
            else {"loadable": False, "why": tfds_note})
    return {"metadata_files": [n for n in lay.METADATA_FILES if n in files], "tfds": tfds}


def _statistics_files(spec: CommitSpec, splits: Iterable[str],
                      statistics: Iterable[tuple[str, bytes]]) -> dict[str, bytes]:
    """Each split's serialized statistics: those computed, else those of no Examples."""
    got = {split: bytes(data) for split, data in statistics}
    files = {}
    for split in sorted(set(splits) | set(spec.statistics or {}) | set(got)):
        data = got.get(split)
        if data is None:
            data = (spec.statistics or {}).get(split)
        if data is None:
            raise ValueError(f"no statistics for split {split!r}")
        files[split] = data
    return files


def _write_statistics(spec: CommitSpec, files: Mapping[str, bytes]) -> dict[str, Any]:
    """Write each split's ``statistics/Split-<split>/FeatureStats.pb``; returns the
    manifest's account of them: per split its path, bytes and crc32c."""
    entries = {}
    for split, data in files.items():
        path = lay.statistics_path(spec.layout.version_dir, split)
        storage.write_atomic(path, bytes(data))
        entries[split] = {"path": mf.relative_path(path, spec.layout.version_dir),
                          "bytes": len(data), "crc32c": mf.crc32c_b64(crc32c.crc32c(data))}
    return entries


def _judge(spec: CommitSpec, document: dict[str, Any], files: Mapping[str, bytes],
           against: str | None) -> dict[str, Any]:
    """Run the drift gate against ``against`` (the version LATEST names), write
    ``anomalies.json`` and record the verdict in the manifest's ``gate``; returns the
    gate's document."""
    layout = spec.layout
    found = spec.gate(layout.root, against, document, files)
    storage.write_atomic(lay.resolve_in_version(layout.version_dir, lay.ANOMALIES),
                         mf.dumps(found))
    document["gate"] = {"path": lay.ANOMALIES, "passed": bool(found["passed"]),
                        "against": found["against"], "anomalies": len(found["anomalies"]),
                        "line": found.get("line", ""),
                        **({"note": found["note"]} if found.get("note") else {})}
    return found


def _write_report(spec: CommitSpec, document: dict[str, Any], against: str | None,
                  files: Mapping[str, bytes] | None, found: Mapping[str, Any] | None) -> None:
    """Write the version's ``report.html`` and list it (path, bytes, crc32c) in the
    manifest's ``report``."""
    page = spec.report(spec.layout.root, against, document, files, found).encode("utf-8")
    path = lay.resolve_in_version(spec.layout.version_dir, lay.REPORT)
    storage.write_atomic(path, page, content_type="text/html; charset=utf-8")
    document["report"] = {"path": lay.REPORT, "bytes": len(page),
                          "crc32c": mf.crc32c_b64(crc32c.crc32c(page))}


def commit_version(spec: CommitSpec, shards: Mapping[str, Sequence[Any]],
                   dead: Sequence[DeadLetterFile], counts: Iterable[tuple[str, int]],
                   statistics: Iterable[tuple[str, bytes]] = (),
                   duplicates: Iterable[dup.BucketResult] = ()) -> dict[str, Any]:
    """Commit (or fail and roll back) one build; returns the manifest document. Either way
    the build is over, and its lease on the output is released. ``statistics``:
    ``(split, serialized DatasetFeatureStatisticsList)`` of the splits that hold Examples,
    when ``spec.statistics`` is on.

    Args:
        spec: the build's commit spec.
        shards: each split's written shards (``ShardInfo``).
        dead: the dead-letter files the build wrote.
        counts: the steps' ``(name, n)`` counts, summed here.
        statistics: ``(split, serialized statistics)`` per split.
        duplicates: the fingerprint buckets' results, when ``spec.duplicates`` is on.

    Returns:
        The committed manifest (or, for a failed build, the failure record).
    """
    try:
        return _commit_version(spec, shards, dead, counts, statistics, duplicates)
    finally:
        if spec.use_lease:
            _job_lease(spec).release(build_done=True)


def _commit_version(spec: CommitSpec, shards: Mapping[str, Sequence[Any]],
                    dead: Sequence[DeadLetterFile], counts: Iterable[tuple[str, int]],
                    statistics: Iterable[tuple[str, bytes]] = (),
                    duplicates: Iterable[dup.BucketResult] = ()) -> dict[str, Any]:
    layout = spec.layout
    _fence(spec)
    totals = sum_counts(counts)
    written = sum(info.records for infos in shards.values() for info in infos)
    dead_rows = sum(d.rows for d in dead)
    check_counts(totals, written, dead_rows)
    rejected = totals.get("rejected_at_read", 0) + totals.get("rejected_at_build", 0)
    reason = judge_thresholds(totals, int(spec.inputs.get("bytes", 0) or 0),
                              spec.max_bad_fraction, spec.max_unread_fraction)
    if reason is not None:
        raise _fail(spec, reason, shards, dead, manifest_counts(totals, written, rejected))
    finals = _publish_dead_letters(dead, layout.version_dir)
    storage.write_atomic(layout.feature_spec,
                         (json.dumps(dict(spec.feature_spec), indent=2) + "\n").encode())
    inputs = dict(spec.inputs)
    if totals.get("changed_files"):  # what was read, not what was listed
        inputs["bytes"] = int(inputs.get("bytes", 0) or 0) + totals.get("changed_bytes", 0)
        inputs["changed_files"] = totals["changed_files"]
    document = mf.make_manifest(
        name=spec.name, version=layout.version, version_dir=layout.version_dir,
        created=mf.utc_now(), compression=spec.compression,
        counts=manifest_counts(totals, written, rejected), shards=shards, dead_letters=finals,
        feature_spec=spec.feature_spec, config=spec.config, config_sha256=spec.config_sha256,
        inputs=inputs, tool_version=spec.tool_version, runner=spec.runner,
        shuffle_seed=spec.shuffle_seed,
    )
    document["build_id"] = spec.build_id
    document.update(spec.extra)
    document.update(_write_reader_files(spec, document))
    if spec.duplicates is not None:
        document["duplicates"] = dup.summarize(
            duplicates, list(shards), spec.duplicates,
            method=getattr(spec.duplicates, "method", dup.BYTES_METHOD))
    against = read_latest(layout.root)  # the version this one is compared with
    files = found = None
    if spec.statistics is not None:
        files = _statistics_files(spec, shards, statistics)
        document["statistics"] = _write_statistics(spec, files)
        if spec.gate is not None:
            found = _judge(spec, document, files, against)
    passed = found is None or bool(found["passed"])
    if spec.report is not None:
        _write_report(spec, document, against, files, found)
    with _fenced(spec, "the commit"):  # no takeover can fall between its check and these
        # Says "the manifest may exist but LATEST may not name it yet" until staging goes,
        # after LATEST moved: what the next build's roll-forward looks for. A version the
        # gate held back has none: only promote moves LATEST to it.
        if passed:
            storage.write_atomic(lay.resolve_in_version(layout.version_dir, lay.PUBLISHING,
                                                        within=(lay.STAGING,)), b"")
        if conditional.create(layout.manifest, mf.dumps(document)) is None:
            raise CommitError(f"{layout.manifest} appeared while this build committed; a "
                              "committed version is never rewritten")
        if passed:
            move_latest(layout.root, layout.version, document["created"])
        storage.delete_tree(layout.staging)
        apply_retention(layout.root, spec.keep, read_latest(layout.root))
    return document
