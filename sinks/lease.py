"""The output lease: one build at a time writes to an output location, on local disk or gs://.

A build takes ``<root>/.lease`` before it writes anything, renews it while it runs, and
deletes it at the end. The lease object names the holder (build id, host, pid, the pid's
start time) and when it expires; every change to it is a compare-and-swap through
sinks/conditional.py (``create`` if absent, ``replace``/``delete`` at the generation read),
so of several builds racing for it exactly one wins, on local disk as on Cloud Storage.

What it guarantees:

- A second build sees a live lease and refuses at once with one line naming the holder and
  when its lease expires (``LeaseHeld``), or polls until it is free (``acquire(wait=...)``).
- A lease is free again when it is released, when its ``expires`` time has passed (a build
  killed with ``kill -9`` stops renewing), or at once when the holder ran on this same host
  (same hostname, boot and pid namespace) and its process is gone or its pid now belongs to
  another process (compared by start time from ``/proc``).
- Taking over an expired or abandoned lease returns the previous holder, so the new build
  knows whose leftovers it may remove -- and only leftovers of builds whose lease is no
  longer live (``is_live``) may be removed. A holder that may still be running (its lease
  expired, its process not known gone) joins the lease's bounded history with the version
  folder it claimed and whom it lost to; a build ending after that leaves the lease as a
  *released* record holding the history, so what a stalled build writes after it resumes
  stays provably its own (sinks/ownership.py) and it learns whom it lost the lease to.
- A lease object no build wrote (unreadable, a non-finite expiry, one more than ``MAX_TTL``
  ahead) counts as expired, with one warning line naming the file.
- Re-entrant: a process of the same build (same ``build_id``; a commit step in a worker)
  acquires it again without waiting; it then extends the lease but leaves it in the name of
  the process that took it (if that one is still running), and only that process's
  ``release`` deletes it.

What it does not guarantee:

- Mutual exclusion in time. A build that stalls for longer than the TTL (a suspended laptop,
  a long GC pause, a network partition) can lose its lease to another build and not notice
  until it next renews. ``fence()`` around each irreversible step (cleanup, the manifest,
  moving LATEST, retention) is what catches this: its check succeeds only by a conditional
  write of the lease that is still ours. On local disk the check and the step run under
  the lock every lease write takes, so nothing falls between them; on Cloud Storage the
  window left is a stall between the check and the step that outlasts the TTL, and a loss
  found after the step is still reported.
- Clock agreement. Expiry compares the reader's clock with the ``expires`` time the holder's
  clock wrote; clocks must agree to well within the TTL (120 s by default;
  ``BEAM_TFRECORDS_LEASE_SECONDS``). The same-host process check needs no clock.
- Anything on filesystems other than local disk and gs:// (``NotImplementedError``), or on
  network filesystems where ``flock`` is unreliable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import json
import logging
import math
import os
import posixpath
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from beam_tfrecords.errors import UserError
from beam_tfrecords.sinks import conditional
from beam_tfrecords.sinks.format.layout import LEASE

__all__ = [
    "DEFAULT_TTL",
    "HISTORY_SIZE",
    "MAX_TTL",
    "TTL_ENV",
    "Former",
    "JobLease",
    "Lease",
    "LeaseHeld",
    "LeaseInfo",
    "LeaseLost",
    "current",
    "default_ttl",
    "former_holders",
    "is_live",
    "lease_path",
    "pid_running",
    "run_held",
]

_LOG = logging.getLogger(__name__)
DEFAULT_TTL = 120.0  # seconds
# The longest time to live a lease may have; an expiry further ahead of the reader's clock
# was not written by a build (a corrupt or hand-made lease) and counts as expired.
MAX_TTL = 7 * 24 * 3600.0
HISTORY_SIZE = 16  # builds that lost the lease while they may still run, newest first
TTL_ENV = "BEAM_TFRECORDS_LEASE_SECONDS"
_RENEW_ATTEMPTS = 10  # same-build writers racing the renewal; each loss means one of them won


def default_ttl() -> float:
    """The lease's time to live: ``BEAM_TFRECORDS_LEASE_SECONDS`` or 120 s.

    Returns:
        Seconds.

    Raises:
        ValueError: the variable is not a positive number of seconds up to ``MAX_TTL``.
    """
    raw = os.environ.get(TTL_ENV, "")
    if not raw.strip():
        return DEFAULT_TTL
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{TTL_ENV}={raw!r}: expected a number of seconds") from None
    if not 0 < value <= MAX_TTL:
        raise ValueError(f"{TTL_ENV}={raw!r}: expected a positive number of seconds, at "
                         f"most {MAX_TTL:g}")
    return value


def lease_path(root: str) -> str:
    """``<root>/.lease``, joined as sinks/layout.Layout joins its paths.

    Args:
        root: the output root (local path or URL).

    Returns:
        The lease object's path.
    """
    root = root.rstrip("/") or "/"
    return "/".join((root, LEASE)) if "://" in root else posixpath.join(root, LEASE)


# --- who holds it -----------------------------------------------------------------------------


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


def _utc(epoch: float) -> str:
    try:
        moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{epoch!r} (epoch seconds)"
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of a Linux process, None if absent."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rpartition(")")[2].split()  # the name (field 2) may hold spaces and ')'
    return fields[0], fields[19]  # fields 3 and 22


def _has_proc() -> bool:
    return os.path.isdir("/proc/self")


def _pid_start(pid: int) -> str:
    """The process's start time (``/proc/<pid>/stat`` field 22), "" where unavailable."""
    if not _has_proc():
        return ""
    try:
        stat = _proc_stat(pid)
    except (OSError, IndexError):
        return ""
    return stat[1] if stat else ""


@functools.lru_cache(maxsize=1)
def _machine() -> str:
    """This boot of this machine and pid namespace: pids compare only within one of these.

    Two hosts may share a hostname (CI runners, containers), and two containers on one
    kernel share it with separate pid namespaces; a different value means "not here", and
    the lease then frees only by expiring. "" where ``/proc`` does not say.
    """
    parts = []
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            parts.append(handle.read().strip())
        parts.append(os.readlink("/proc/self/ns/pid"))
    except OSError:
        return ""
    return "/".join(parts)


def pid_running(pid: int, pid_start: str = "") -> bool:
    """Whether ``pid`` on this host is still the process that wrote ``pid_start`` (empty:
    any process with that pid); a zombie, dead but not yet reaped, is not running.

    Args:
        pid: a process id on this host; 0 or less means unknown (taken as running).
        pid_start: the process's start time as the lease recorded it.

    Returns:
        False only when the process is known to be gone.
    """
    if pid <= 0:
        return True  # unknown: never call a process dead without evidence
    if pid == os.getpid():
        return not pid_start or pid_start == _pid_start(pid)
    if _has_proc():
        try:
            stat = _proc_stat(pid)
        except (OSError, IndexError):
            return True
        if stat is None:
            return False
        state, start = stat
        if state in ("Z", "X"):  # killed, not yet reaped by its parent
            return False
        return not pid_start or start == pid_start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclasses.dataclass(frozen=True)
class Former:
    """A build that lost the lease to ``taken_by`` while it may still have been running, and
    the version folder it had claimed ("" if none yet): what that folder holds without a
    marker is that build's (sinks/ownership.py), and it learns whom it lost the lease to."""

    build_id: str
    version: str
    taken_by: str


@dataclasses.dataclass(frozen=True)
class LeaseInfo:
    """The content of a lease object: who holds it, since when, until when (epoch seconds).

    ``machine`` identifies the holder's boot and pid namespace (see ``_machine``); pids are
    compared only when it and ``host`` equal ours. ``version`` is the folder the holder
    claimed; ``history`` the builds that lost the lease while possibly alive (newest first,
    at most ``HISTORY_SIZE``). A ``released`` lease holds only that history: a build that
    ended left it so the next builds still know whose leftovers a stalled build writes.
    """

    build_id: str
    host: str
    pid: int
    pid_start: str
    acquired: float
    expires: float
    machine: str = ""
    version: str = ""
    history: tuple[Former, ...] = ()
    released: bool = False

    def to_json(self) -> str:
        """The lease object's text.

        Returns:
            JSON, keys sorted.
        """
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> LeaseInfo:
        """Parse a lease object; ValueError when it is not one.

        Args:
            text: the lease object's content.

        Returns:
            The parsed lease.

        Raises:
            ValueError: the text is not a lease.
        """
        try:
            raw = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"not a lease: {error}") from None
        if not isinstance(raw, dict):
            raise ValueError("not a lease: expected a JSON object")
        try:
            info = cls(build_id=raw["build_id"], host=raw["host"], pid=raw["pid"],
                       pid_start=raw.get("pid_start", ""), acquired=raw["acquired"],
                       expires=raw["expires"], machine=raw.get("machine", ""),
                       version=raw.get("version", ""), history=raw.get("history", ()),
                       released=raw.get("released", False))
        except KeyError as error:
            raise ValueError(f"not a lease: no {error.args[0]!r}") from None
        types = {"build_id": str, "host": str, "pid": int, "pid_start": str,
                 "acquired": (int, float), "expires": (int, float), "machine": str,
                 "version": str, "history": (list, tuple)}
        for name, kind in types.items():
            value = getattr(info, name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"not a lease: {name} is {_shown(value)}")
        if not isinstance(info.released, bool):
            raise ValueError(f"not a lease: released is {_shown(info.released)}")
        times = {}
        for name in ("acquired", "expires"):
            try:
                times[name] = float(getattr(info, name))
            except OverflowError:
                times[name] = math.inf
            if not math.isfinite(times[name]):
                raise ValueError(f"not a lease: {name} is {_shown(getattr(info, name))}, "
                                 "not a finite time")
        return dataclasses.replace(info, **times, history=_formers(info.history))

    def describe(self) -> str:
        """``build 1a2b3c4d (host:pid) until 2026-11-23 19:30:05 UTC``, on one line.

        Returns:
            The description.
        """
        if self.released:
            return "no build (released)"
        if not self.build_id:
            return "an unreadable lease"
        return _one_line(f"build {self.build_id[:8]} ({self.host}:{self.pid}) "
                         f"until {_utc(self.expires)}")

    def on_this_host(self) -> bool:
        """Whether the lease was taken on this machine, where its process can be looked up.

        Returns:
            True when host name and machine id both match.
        """
        return self.host == socket.gethostname() and self.machine == _machine()


def _shown(value: object, limit: int = 40) -> str:
    """A value for a one-line message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _formers(raw: object) -> tuple[Former, ...]:
    """The history of a lease object; ValueError when it is not one."""
    formers = []
    for item in raw if isinstance(raw, (list, tuple)) else ():
        if isinstance(item, Former):
            formers.append(item)
            continue
        fields = item if isinstance(item, dict) else {}
        values = [fields.get(k) for k in ("build_id", "version", "taken_by")]
        if not all(isinstance(v, str) for v in values) or not values[0]:
            raise ValueError(f"not a lease: a history entry is {_shown(item)}")
        formers.append(Former(*values))
    return tuple(formers)


_UNREADABLE = LeaseInfo(build_id="", host="", pid=0, pid_start="", acquired=0.0, expires=0.0)


def _parse(path: str, data: bytes, now: float | None = None) -> LeaseInfo:
    """The lease in ``data``. One a build did not write -- ours are written whole, with
    finite times, expiring at most ``MAX_TTL`` after ``now`` (the taker's clock) -- counts
    as expired (one warning line naming the file and why), with an empty build id: the next
    build replaces it."""
    try:
        info = LeaseInfo.from_json(data)
    except ValueError as error:
        why = str(error).removeprefix("not a lease: ")
        _LOG.warning("%s is not a lease (%s); treating it as expired", path, why)
        return _UNREADABLE
    if now is not None and info.expires > now + MAX_TTL:
        _LOG.warning("%s is not a lease (it expires at %s, more than %g days ahead, which no "
                     "build writes); treating it as expired", path, _utc(info.expires),
                     MAX_TTL / 86400)
        return _UNREADABLE
    return info


def is_live(info: LeaseInfo, now: float | None = None) -> bool:
    """Whether the build holding ``info`` may still be writing: not expired at ``now``, and
    (when it ran on this host) its process still running.

    Args:
        info: the stored lease.
        now: the time in seconds since the epoch; None for now.

    Returns:
        Whether the holder may still be writing.
    """
    if (time.time() if now is None else now) > info.expires:
        return False
    if not info.build_id or info.released:
        return False
    if info.on_this_host() and not pid_running(info.pid, info.pid_start):
        return False
    return True


def _stored(root: str) -> LeaseInfo | None:
    path = lease_path(root)
    found = conditional.read(path)
    return None if found is None else _parse(path, found[0])


def current(root: str) -> LeaseInfo | None:
    """The lease stored at ``root``, or None when there is none (or it was released).

    Args:
        root: the output root.

    Returns:
        The live or expired lease, or None.
    """
    info = _stored(root)
    return None if info is None or info.released else info


def former_holders(root: str) -> tuple[Former, ...]:
    """The builds that lost the lease on ``root`` while they may still have been running,
    newest first (see ``LeaseInfo.history``).

    Args:
        root: the output root.

    Returns:
        The former holders, newest first.
    """
    info = _stored(root)
    return () if info is None else info.history


# --- errors -----------------------------------------------------------------------------------


class LeaseHeld(UserError, RuntimeError):
    """Another live build holds the output's lease. One line: who, until when, what to do.

    Args:
        root: the output root.
        holder: the live lease that blocks this build.
        waited: how long this build waited, in seconds.
    """

    def __init__(self, root: str, holder: LeaseInfo, waited: float = 0.0) -> None:
        self.root = root
        self.holder = holder
        self.waited = waited
        if waited > 0:
            message = (f"output {root} is still leased after waiting {waited:g} s, by "
                       f"{holder.describe()}; a longer --wait-for-lease waits longer")
        else:
            message = (f"output {root} is leased by {holder.describe()}; "
                       "--wait-for-lease waits for it")
        super().__init__(_one_line(message))


class LeaseLost(UserError, RuntimeError):
    """Our lease was taken over (it expired and another build took it) or removed.

    One line that starts ``lost the lease to build <id>`` when the winner is known (the
    holder now, or the taker the lease's history names).

    Args:
        root: the output root.
        holder: the lease stored now, or None when there is none.
        why: what happened, when no winner is known.
        winner: the build id that took the lease over, when known.
    """

    def __init__(self, root: str, holder: LeaseInfo | None, why: str = "",
                 winner: str = "") -> None:
        self.root = root
        self.holder = holder
        self.after_step = ""  # set when the loss was seen only after a fenced step ran
        live = holder is not None and holder.build_id and not holder.released
        self.winner = winner or (holder.build_id if live else "")
        if self.winner:
            message = f"lost the lease to build {self.winner[:8]} on output {root}"
            if live:
                message += f": it is now held by {holder.describe()}"
            elif why:
                message += f": {why}"
        else:
            message = f"lost the lease on output {root}: {why or 'it was removed'}"
        super().__init__(_one_line(message))


# --- the lease --------------------------------------------------------------------------------

# Called with (lease, step) as a fenced step begins, before its check: a seam where tests
# stall a build exactly there (tests/sinks/test_lease_fence.py). None in normal use.
before_fence: Callable[[Lease, str], object] | None = None


class Lease:
    """The lease on one output root for one build; see the module docstring.

    ``clock`` and ``sleep`` are injectable so tests can expire leases without waiting.
    Thread-safe: ``keep_alive``'s thread renews while the build calls ``check``.

    ``job``: the lease is taken for a running job rather than for this process, so it names
    no process (pid 0) and frees only when released or expired -- a job's steps run in
    worker processes that come and go while the job lives on (``JobLease``).

    Args:
        root: the output root.
        build_id: this build's id.
        ttl: the time to live in seconds; None for :func:`default_ttl`.
        clock: seconds since the epoch.
        sleep: waits between polls.
        job: hold it for a running job rather than this process.

    Raises:
        ValueError: no build id, or a ttl that is not a positive number.
        NotImplementedError: the root's filesystem has no conditional writes.
    """

    def __init__(self, root: str, build_id: str, ttl: float | None = None,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], object] = time.sleep, job: bool = False) -> None:
        if not build_id or not isinstance(build_id, str):
            raise ValueError(f"a lease needs a build id, not {build_id!r}")
        self.root = root.rstrip("/") or "/"
        self.path = lease_path(root)
        conditional.check_supported(self.path)
        self.build_id = build_id
        self.ttl = default_ttl() if ttl is None else float(ttl)
        if not 0 < self.ttl < float("inf"):
            raise ValueError(f"lease ttl must be a positive number of seconds, not {ttl!r}")
        self._clock = clock
        self._sleep = sleep
        self.job = bool(job)
        self._lock = threading.RLock()
        self._generation: conditional.Generation | None = None
        self._info: LeaseInfo | None = None
        self.lost: LeaseLost | None = None  # set by keep_alive's thread

    @property
    def info(self) -> LeaseInfo | None:
        """The lease as we last wrote or saw it, None when not held."""
        return self._info

    # -- helpers --

    def _me(self, now: float) -> LeaseInfo:
        pid = 0 if self.job else os.getpid()
        return LeaseInfo(build_id=self.build_id, host=socket.gethostname(), pid=pid,
                         pid_start=_pid_start(pid) if pid else "", acquired=now,
                         expires=now + self.ttl, machine=_machine())

    @staticmethod
    def _is_this_process(info: LeaseInfo) -> bool:
        return info.on_this_host() and info.pid == os.getpid() and (
            info.pid_start == _pid_start(os.getpid()))

    def _extended(self, holder: LeaseInfo, now: float) -> LeaseInfo:
        """Our build's lease, extended: in the name of the process that holds it while that
        one runs (a re-entrant acquire from another process), else in ours."""
        if self._is_this_process(holder) or (
                now <= holder.expires
                and not (holder.on_this_host() and not pid_running(holder.pid,
                                                                    holder.pid_start))):
            return dataclasses.replace(holder, expires=max(holder.expires, now + self.ttl))
        return dataclasses.replace(self._me(now), acquired=holder.acquired,
                                   version=holder.version, history=holder.history)

    def _successor(self, holder: LeaseInfo, now: float) -> LeaseInfo:
        """Our lease in place of ``holder``'s, which is free: its history goes on, and a
        holder that may still be running (its lease expired; it is not a process on this
        host known to be gone) joins it -- it may write after this, and must learn whom it
        lost the lease to."""
        history = holder.history
        if holder.build_id and not holder.released and not (
                holder.on_this_host() and not pid_running(holder.pid, holder.pid_start)):
            history = (Former(holder.build_id, holder.version, self.build_id), *history)
        seen: set[str] = set()
        kept = [f for f in history if f.build_id != self.build_id
                and not (f.build_id in seen or seen.add(f.build_id))]
        return dataclasses.replace(self._me(now), history=tuple(kept[:HISTORY_SIZE]))

    def _hold(self, info: LeaseInfo, generation: conditional.Generation) -> None:
        self._info, self._generation = info, generation
        self.lost = None

    # -- the protocol --

    def acquire(self, wait: float = 0.0, poll: float = 2.0) -> LeaseInfo | None:
        """Take the lease; see the module docstring.

        Returns the previous holder when an expired or abandoned lease was taken over (its
        leftovers may be cleaned), else None. Raises LeaseHeld when another live build
        still holds it after ``wait`` seconds (polling every ``poll`` seconds).

        Args:
            wait: seconds to wait for another build's live lease.
            poll: seconds between looks while waiting.

        Returns:
            The taken-over holder, or None.

        Raises:
            LeaseHeld: another live build still holds it.
        """
        with self._lock:
            deadline = self._clock() + max(float(wait), 0.0)
            announced = False
            while True:
                now = self._clock()
                found = conditional.read(self.path)
                if found is None:
                    info = self._me(now)
                    generation = conditional.create(self.path, info.to_json().encode())
                    if generation is not None:
                        self._hold(info, generation)
                        return None
                    continue  # another taker won the create: look at what it wrote
                data, generation = found
                holder = _parse(self.path, data, now)
                if holder.build_id == self.build_id:
                    info = self._extended(holder, now)
                    new = conditional.replace(self.path, info.to_json().encode(), generation)
                    if new is not None:
                        self._hold(info, new)
                        return None
                    continue
                if not is_live(holder, now):  # expired, gone, unreadable or released
                    info = self._successor(holder, now)
                    new = conditional.replace(self.path, info.to_json().encode(), generation)
                    if new is not None:
                        self._hold(info, new)
                        if holder.released:  # free, its history kept: nobody taken over
                            return None
                        why = "expired" if now > holder.expires else "its process is gone"
                        if holder.build_id:  # an unreadable one was reported as read
                            _LOG.warning("took over the lease on %s from %s (%s)", self.root,
                                         holder.describe(), why)
                        return holder
                    continue
                remaining = deadline - self._clock()
                if remaining <= 0:
                    raise LeaseHeld(self.root, holder, waited=float(wait))
                if not announced:
                    _LOG.warning("output %s is leased by %s; waiting up to %g s", self.root,
                                 holder.describe(), wait)
                    announced = True
                self._sleep(min(max(poll, 0.01), remaining))

    def renew(self, version: str | None = None, *, in_no_process: bool = False) -> LeaseInfo:
        """Extend our lease to now + ttl; LeaseLost when it is no longer ours. ``version``:
        record the version folder the build claimed, too. ``in_no_process``: rewrite it in
        no process's name (see :meth:`hand_over`).

        Args:
            version: the version folder to record, or None.
            in_no_process: clear the pid.

        Returns:
            The lease as stored now.

        Raises:
            LeaseLost: the lease is no longer ours.
        """
        with self._lock:
            if self._generation is None:
                self._adopt()
            for _ in range(_RENEW_ATTEMPTS):
                assert self._info is not None and self._generation is not None
                info = self._extended(self._info, self._clock())
                if version is not None:
                    info = dataclasses.replace(info, version=version)
                if in_no_process:
                    info = dataclasses.replace(info, pid=0, pid_start="")
                new = conditional.replace(self.path, info.to_json().encode(),
                                          self._generation)
                if new is not None:
                    self._hold(info, new)
                    return info
                self._adopt()  # changed: another process of our build, or lost
            raise OSError(f"could not renew the lease {self.path}: it kept changing")

    def _adopt(self) -> None:
        """Take the stored lease as our last known state if it is our build's, else lose."""
        found = conditional.read(self.path)
        if found is None:
            self._info = self._generation = None
            raise LeaseLost(self.root, None, "it was released or deleted by someone else")
        holder = _parse(self.path, found[0], self._clock())
        if holder.build_id != self.build_id:
            self._info = self._generation = None
            winner = next((f.taken_by for f in holder.history
                           if f.build_id == self.build_id), "")
            why = ("that build has ended since" if holder.released and winner
                   else "it was released by another build" if holder.released
                   else "it was overwritten by something that is not a lease")
            raise LeaseLost(self.root, holder, why, winner)
        self._info, self._generation = holder, found[1]

    def hand_over(self) -> LeaseInfo:
        """Leave the lease to the job this process launched and will not wait for: it is
        rewritten in no process's name (as ``job`` leases are) and extended, so this
        process's exit does not free it; the job's bundles renew it and its commit
        releases it. LeaseLost when it is no longer ours.

        Returns:
            The lease as stored now.

        Raises:
            LeaseLost: the lease is no longer ours.
        """
        return self.renew(in_no_process=True)

    def check(self, take_if_absent: bool = False) -> LeaseInfo:
        """Fencing before an irreversible step: LeaseLost unless the stored lease is ours.

        Proven by a conditional write that extends it (``renew``), so after this returns
        the lease stays ours for a full TTL unless the clocks disagree. It never takes
        another build's lease, nor a released one (whose history may name us): a build that
        lost it stays lost. ``take_if_absent``: where no lease object exists at all (a job
        that outlived the process that took it), take it as ``acquire`` would.

        Args:
            take_if_absent: take the lease where none exists.

        Returns:
            The lease as stored now.

        Raises:
            LeaseLost: the lease is not ours.
        """
        with self._lock:
            try:
                return self.renew()
            except LeaseLost as lost:
                if not take_if_absent or lost.holder is not None:
                    raise
            try:
                self.acquire()
            except LeaseHeld as held:
                raise LeaseLost(self.root, held.holder) from None
            return self.renew()

    def record_version(self, version: str) -> LeaseInfo:
        """Note in the lease the version folder this build claimed (see ``Former``).

        Args:
            version: the claimed version's name.

        Returns:
            The lease as stored now.
        """
        return self.renew(version=version)

    @contextlib.contextmanager
    def fence(self, step: str = "", take_if_absent: bool = False) -> Iterator[LeaseInfo]:
        """Run an irreversible step (``step`` names it) only while the lease is ours.

        Local disk: the check (``check``) and the whole block run under the lock every
        write of the lease takes (``conditional.hold``), so no takeover can fall between
        them: a build stalled before the block finds the lease lost when it resumes, and
        raises LeaseLost having done nothing. Another build's lease writes wait while the
        block runs; a killed holder's lock is dropped by the kernel.

        Cloud Storage has no such lock: the check is a write of the lease conditional on the
        generation we hold (``ifGenerationMatch``) that extends it by a full TTL, and the
        lease is read again after the block, so a loss is reported (LeaseLost) though the
        step was done; only a stall longer than the TTL between that write and the step's
        own request gets there. ``take_if_absent``: as for ``check``.

        Args:
            step: the step's name, for the error.
            take_if_absent: as for :meth:`check`.

        Yields:
            The lease as checked.

        Raises:
            LeaseLost: the lease is not ours, before the step or (Cloud Storage) after it.
        """
        if before_fence is not None:
            before_fence(self, step)
        with self._lock, conditional.hold(self.path):
            info = self.check(take_if_absent)
            yield info
            if "://" in self.path:
                try:
                    self._adopt()
                except LeaseLost as lost:
                    lost.after_step = step or "the step"
                    raise

    def release(self, build_done: bool = False) -> None:
        """Delete the lease if it is ours and in this process's name; never anyone else's.

        A process that re-entered the lease of another still-running process of its build
        leaves it to that process -- unless ``build_done``: the build's last step (its
        commit, on whichever worker) ends the build, so the lease goes whoever holds it for
        the build.

        Args:
            build_done: the build is over: release it whichever process of the build holds it.
        """
        with self._lock:
            try:
                for _ in range(_RENEW_ATTEMPTS):
                    found = conditional.read(self.path)
                    if found is None:
                        return
                    holder = _parse(self.path, found[0], self._clock())
                    if holder.build_id != self.build_id or not (
                            build_done or self._is_this_process(holder)):
                        return
                    if not holder.history:
                        if conditional.delete(self.path, found[1]):
                            return
                        continue
                    free = dataclasses.replace(_UNREADABLE, history=holder.history,
                                               released=True)
                    if conditional.replace(self.path, free.to_json().encode(),
                                           found[1]) is not None:
                        return
            finally:
                self._info = self._generation = None

    @contextlib.contextmanager
    def keep_alive(self, interval: float | None = None) -> Iterator[Lease]:
        """Renew every ``ttl / 4`` seconds in a daemon thread while the block runs.

        A lost lease stops the thread and is recorded in ``self.lost``, for the build to
        act on at its next ``check()`` (which says so in one line); other errors (an outage
        outlasting the retries) are logged and the renewal tried again next time.

        Args:
            interval: seconds between renewals; None for ``ttl / 4``.

        Yields:
            This lease.
        """
        every = self.ttl / 4 if interval is None else float(interval)
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(every):
                try:
                    self.renew()
                except LeaseLost as error:
                    if not stop.is_set():
                        self.lost = error  # the build's next fenced step reports it, once
                        _LOG.info("%s", error)
                    return
                except Exception as error:  # noqa: BLE001 -- keep renewing until expiry
                    _LOG.warning("could not renew the lease on %s (retrying in %g s): %s",
                                 self.root, every, error)

        thread = threading.Thread(target=run, name=f"lease-{self.build_id[:8]}", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=max(5.0, every))


# --- a running job's hold on the lease ----------------------------------------------------------


class _Hold:
    """This process's renewals of one job lease while any of its bundles runs."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        # The steps whose bundle runs now; weak, so that a bundle that failed, and whose
        # step the runner dropped, stops holding the lease.
        self.owners: weakref.WeakSet = weakref.WeakSet()
        self.renewed = -math.inf  # time.monotonic() of the last renewal
        self.lost: LeaseLost | None = None
        self.thread: threading.Thread | None = None

    def renew(self, min_gap: float) -> None:
        """Renew unless this process did less than ``min_gap`` seconds ago."""
        with self.lease._lock:
            if time.monotonic() - self.renewed < min_gap:
                return
            try:
                self.lease.renew()
            except LeaseLost as error:
                self.lost = error
                raise
            self.renewed = time.monotonic()

    def run(self) -> None:
        every = self.lease.ttl / 4
        while True:
            time.sleep(every)
            with _HOLDS_LOCK:
                if not self.owners:
                    self.thread = None
                    return
            try:
                self.renew(every / 2)
            except LeaseLost:
                with _HOLDS_LOCK:
                    self.thread = None
                return  # the bundles that end next fail with it
            except Exception as error:  # noqa: BLE001 -- keep renewing until expiry
                _LOG.warning("could not renew the lease on %s (retrying in %g s): %s",
                             self.lease.root, every, error)


_HOLDS: dict[tuple[str, str], _Hold] = {}
_HOLDS_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class JobLease:
    """A running job's hold on its build's lease, kept from the bundles that write.

    Beam has no process that lives as long as a job: the launcher may submit it and exit,
    and workers come and go. So every writing step calls :meth:`begin` as its bundle starts
    and :meth:`end` as it finishes: ``begin`` renews the lease (at most every ``ttl / 8``
    per process) and, while any bundle of the build runs in this process, one thread
    renews it every ``ttl / 4``. The TTL must outlast the longest stretch of the job in
    which no such bundle runs. A lost lease fails the bundle (``LeaseLost``); the commit is
    fenced on the lease anyway.

    Small and picklable: it travels inside the DoFns.
    """

    root: str
    build_id: str
    ttl: float

    def begin(self, owner: object) -> None:
        """``owner``'s bundle starts: renew (LeaseLost when the lease is no longer this
        build's) and keep renewing while it runs.

        Args:
            owner: the bundle's DoFn (any object; compared by identity).

        Raises:
            LeaseLost: the lease is no longer this build's.
        """
        key = (self.root, self.build_id)
        with _HOLDS_LOCK:
            hold = _HOLDS.get(key)
            if hold is None:
                hold = _HOLDS[key] = _Hold(Lease(self.root, self.build_id, self.ttl, job=True))
            hold.owners.add(owner)
            if hold.thread is None:
                hold.thread = threading.Thread(target=hold.run, daemon=True,
                                               name=f"job-lease-{self.build_id[:8]}")
                hold.thread.start()
        try:
            hold.renew(self.ttl / 8)
        except BaseException:
            self.end(owner, check=False)
            raise

    def end(self, owner: object, check: bool = True) -> None:
        """``owner``'s bundle ends; with ``check``, LeaseLost when the lease was lost while
        it ran.

        Args:
            owner: the object passed to :meth:`begin`.
            check: raise when the lease was lost.

        Raises:
            LeaseLost: the lease was lost while the bundle ran.
        """
        with _HOLDS_LOCK:
            hold = _HOLDS.get((self.root, self.build_id))
            if hold is None:
                return
            hold.owners.discard(owner)
            lost = hold.lost
        if check and lost is not None:
            raise lost

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """``begin`` ... ``end`` around a block (a step that is not a DoFn)."""
        owner = threading.Event()  # any object that can be weakly referenced
        self.begin(owner)
        try:
            yield
        except BaseException:
            self.end(owner, check=False)
            raise
        self.end(owner)


def run_held(lease: JobLease | None, step: Callable[..., Any], *args: Any) -> Any:
    """``step(*args)`` with the job's lease kept alive while it runs (``lease`` None: no
    lease, the step alone) -- for the steps of the sink that are not DoFns.

    Args:
        lease: the job's lease, or None.
        step: the step to run.
        args: its arguments.

    Returns:
        What ``step`` returns.
    """
    if lease is None:
        return step(*args)
    with lease.held():
        return step(*args)
