"""Leader election on a coordination.k8s.io/v1 Lease: of several replicas of one service, exactly one leads (for
cluster-watcher: publishes), and another takes over within the lease's duration when the leader dies.

The semantics are client-go's (k8s.io/client-go/tools/leaderelection/leaderelection.go, which kube-scheduler and
kube-controller-manager run):

- `leaseDurationSeconds`: how long a candidate waits before taking a lease whose holder stopped renewing, counted on
  the candidate's own clock from the moment it *observed* the current record. `renewTime` is written for people and
  never compared across machines, so clock offsets between replicas do not matter, only clock rates.
- renew deadline: how long the leader goes on trying to renew before it stops leading.
- retry period: the pause between tries, for candidates (jittered, x1 to x2.2: client-go's JitterFactor 1.2) and for
  the leader's renewals.
- `holderIdentity` names the leader; `acquireTime` is set when a candidate takes the lease and kept by its renewals;
  `renewTime` is set by every write; `leaseTransitions` counts the changes of holder.
- Every write is a PUT carrying the resourceVersion read before it: of two candidates racing for an expired lease,
  the second gets 409 Conflict and stays a candidate.
- A leader that stops on purpose releases the lease (holder emptied, `leaseDurationSeconds: 1`), so a successor
  takes over at once instead of a lease duration later (client-go's ReleaseOnCancel). A crash releases nothing: the
  lease expires.

Why not kubernetes_asyncio.leaderelection (36.1.0): a renewal there is an API call with no timeout, and the renew
deadline is checked only between tries, so a leader whose apiserver stops answering goes on leading (publishing)
after its lease has expired and another replica has taken it. It also writes local time marked as UTC, never counts
leaseTransitions, never releases, and leads one term only (no campaign after a loss).

Stricter than client-go, because a deposed leader that goes on working is what this exists to prevent:
- A term ends `renew deadline` after the leader *sent* its last successful renewal, cut by a timer however long a
  request hangs (client-go counts from the start of the renewal round, up to a retry period later). Every other
  replica waits `leaseDurationSeconds` from a moment after that send, so lease duration - renew deadline (5 s by
  default) is the margin for the leader's work to stop. `leading` says the same by the clock, for a caller to check
  before each action (the loop may have been too busy to run the timer yet).
- A leader that reads another holder in the Lease stops at once instead of retrying until its deadline.
- A candidate wakes when the lease it watches expires, if that comes before its next jittered retry, so it takes
  over within (the last renewal it observed) + lease duration + a tenth of a retry period.

Needs `get`, `create` and `update` on leases in its namespace, which must exist: nothing but the Lease is created.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import logging
import random
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters.kube.api_health import failure_of
from gpuplace.adapters.kube.cluster_api import raw_json

log = logging.getLogger(__name__)

JITTER_FACTOR = 1.2  # client-go leaderelection.JitterFactor
WAKE_JITTER = 0.1  # a candidate wakes at the lease's expiry plus up to this share of a retry period
NAME_LIMIT = 253  # a Lease's name is a DNS-1123 subdomain


class LeaseUnusable(RuntimeError):
    """The Lease cannot be used as configured (no namespace, no permission): retrying will not help."""


class LeaseConflict(Exception):
    """Someone else wrote the Lease since it was read (409), or deleted it: try again from a fresh read."""


@dataclass(frozen=True)
class ElectionTiming:
    """client-go's LeaderElectionConfig durations, with its rules: lease > renew deadline > 1.2 x retry > 0."""

    lease_duration_s: int = 15  # whole seconds: what a Lease can say
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if not self.retry_period_s > 0:
            raise ValueError("the retry period must be greater than zero")
        if not self.lease_duration_s > self.renew_deadline_s:
            raise ValueError(f"the lease duration ({self.lease_duration_s} s) must be greater than the renew deadline "
                             f"({self.renew_deadline_s} s)")
        if not self.renew_deadline_s > JITTER_FACTOR * self.retry_period_s:
            raise ValueError(f"the renew deadline ({self.renew_deadline_s} s) must be greater than {JITTER_FACTOR} x "
                             f"the retry period ({self.retry_period_s} s)")


@dataclass(frozen=True)
class LeaseRecord:
    """A Lease's spec, as leader election reads and writes it."""

    holder: str  # "" when released
    lease_duration_s: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int = 0


@dataclass(frozen=True)
class StoredLease:
    record: LeaseRecord
    raw: Mapping[str, Any]  # the object as read: a write sends it back with its resourceVersion


@dataclass(frozen=True)
class Observation:
    """A record, and when this replica first saw it (its own monotonic clock, client-go's observedTime)."""

    record: LeaseRecord
    at: float

    @property
    def expires_at(self) -> float:
        return self.at + self.record.lease_duration_s


class Attempt(enum.Enum):
    HELD = "held"  # this replica holds the lease, written just now
    HELD_BY_OTHER = "held by another"  # another holder's lease has not expired
    FAILED = "failed"  # an error or a lost race: nothing known, try again


class LeaseStore(Protocol):
    """One Lease: read it, create it, replace it (409 -> LeaseConflict; misconfiguration -> LeaseUnusable)."""

    namespace: str
    name: str

    async def get(self, *, timeout_s: float) -> StoredLease | None: ...

    async def create(self, record: LeaseRecord, *, timeout_s: float) -> None: ...

    async def replace(self, current: StoredLease, record: LeaseRecord, *, timeout_s: float) -> None: ...


# -- the decisions, pure --------------------------------------------------------------------------------------------
def observe(previous: Observation | None, record: LeaseRecord | None, now: float) -> Observation | None:
    """client-go's observedRecord/observedTime: the clock starts again only when the record changes."""
    if record is None:
        return None
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


def next_record(observed: Observation | None, *, identity: str, now: float, wall: str,
                lease_duration_s: int) -> LeaseRecord | None:
    """The record to write to take or keep the lease, or None while another holder's lease runs.

    client-go's tryAcquireOrRenew: no lease, create one; ours, renew it (acquireTime and transitions kept); another
    holder's that it has not renewed for its duration, or a released one (no holder), take it (one more transition).
    """
    if observed is None:
        return LeaseRecord(identity, lease_duration_s, wall, wall, 0)
    current = observed.record
    if current.holder == identity:
        return replace(current, lease_duration_s=lease_duration_s, renew_time=wall)
    if current.holder and now < observed.expires_at:
        return None
    return LeaseRecord(identity, lease_duration_s, wall, wall, current.transitions + 1)


def campaign_pause(now: float, expires_at: float | None, retry_period_s: float, rand: float) -> float:
    """How long a candidate waits before its next try: client-go's jittered retry period, or until the lease it
    watches expires (plus a little jitter) when that comes sooner. `rand` is uniform in [0, 1)."""
    jittered = retry_period_s * (1 + JITTER_FACTOR * rand)
    if expires_at is not None and now < expires_at < now + jittered:
        return expires_at - now + WAKE_JITTER * retry_period_s * rand
    return jittered


def lease_name(*parts: str) -> str:
    """A valid Lease name (DNS-1123 subdomain) from `parts`: lower case, every other run of characters one '-',
    cut with a hash when longer than 253 characters (so that distinct long inputs stay distinct)."""
    name = re.sub(r"[^a-z0-9]+", "-", "-".join(p for p in parts if p).lower()).strip("-")
    if not name:
        raise ValueError(f"no lease name in {parts!r}")
    if len(name) > NAME_LIMIT:
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        name = f"{name[:NAME_LIMIT - 13].rstrip('-')}-{digest}"
    return name


def micro_time(moment: datetime | None = None) -> str:
    """metav1.MicroTime (RFC 3339, UTC, microseconds): acquireTime and renewTime."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- the Lease on the Kubernetes API --------------------------------------------------------------------------------
def lease_spec(record: LeaseRecord) -> dict[str, Any]:
    return {"holderIdentity": record.holder, "leaseDurationSeconds": record.lease_duration_s,
            "acquireTime": record.acquire_time, "renewTime": record.renew_time,
            "leaseTransitions": record.transitions}


def record_of(lease: Mapping[str, Any]) -> LeaseRecord:
    spec = lease.get("spec") or {}
    return LeaseRecord(spec.get("holderIdentity") or "", int(spec.get("leaseDurationSeconds") or 0),
                       spec.get("acquireTime"), spec.get("renewTime"), int(spec.get("leaseTransitions") or 0))


class KubeLeases:
    """The LeaseStore on a cluster's API: one coordination.k8s.io/v1 Lease, read and written as raw JSON."""

    def __init__(self, api_client: client.ApiClient, *, namespace: str, name: str) -> None:
        self.namespace, self.name = namespace, name
        self._api = client.CoordinationV1Api(api_client)

    def _where(self) -> str:
        return f"Lease {self.namespace}/{self.name}"

    def _forbidden(self, exc: ApiException, verb: str) -> LeaseUnusable:
        return LeaseUnusable(f"may not {verb} {self._where()} (403: {exc.reason}): grant get, create and update on "
                             f"coordination.k8s.io leases in namespace {self.namespace} (deploy/k8s/rbac.yaml's Role)")

    async def get(self, *, timeout_s: float) -> StoredLease | None:
        try:
            body = await raw_json(await self._api.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=timeout_s))
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 403:
                raise self._forbidden(exc, "get") from exc
            raise
        return StoredLease(record_of(body), body)

    async def create(self, record: LeaseRecord, *, timeout_s: float) -> None:
        body: Any = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",  # a manifest: taken like a V1Lease
                     "metadata": {"name": self.name, "namespace": self.namespace}, "spec": lease_spec(record)}
        try:
            await raw_json(await self._api.create_namespaced_lease(
                self.namespace, body, _preload_content=False, _request_timeout=timeout_s))
        except ApiException as exc:
            if exc.status == 409:
                raise LeaseConflict(f"{self._where()} was created by another replica") from exc
            if exc.status == 404:  # the Lease's own absence was a 404 on read; here it is the namespace's
                raise LeaseUnusable(f"cannot create {self._where()}: namespace {self.namespace} does not exist "
                                    f"({exc.reason}); create it, or elect in a namespace that exists") from exc
            if exc.status == 403:
                raise self._forbidden(exc, "create") from exc
            raise

    async def replace(self, current: StoredLease, record: LeaseRecord, *, timeout_s: float) -> None:
        body: Any = {**current.raw, "spec": {**(current.raw.get("spec") or {}), **lease_spec(record)}}
        try:
            await raw_json(await self._api.replace_namespaced_lease(
                self.name, self.namespace, body, _preload_content=False, _request_timeout=timeout_s))
        except ApiException as exc:
            if exc.status in (404, 409):
                raise LeaseConflict(f"{self._where()} changed since it was read ({exc.status})") from exc
            if exc.status == 403:
                raise self._forbidden(exc, "update") from exc
            raise


# -- the elector ----------------------------------------------------------------------------------------------------
_API_ERRORS = (ApiException, OSError, TimeoutError, aiohttp.ClientError)


class LeaseElector:
    """Campaigns for one Lease and runs `lead` while it holds it (`run`)."""

    def __init__(self, leases: LeaseStore, *, identity: str, timing: ElectionTiming,
                 rand: Callable[[], float] = random.random) -> None:
        if not identity:
            raise ValueError("a leader election identity must not be empty")
        self.leases, self.identity, self.timing = leases, identity, timing
        self._rand = rand
        self._observed: Observation | None = None
        self._valid_until: float | None = None  # loop time: this replica leads until then, unless it renews
        self._told_holder: str | None = None  # the other holder last logged, to log each change once
        self.failure: str | None = None  # why the last read or write of the Lease failed; None once one succeeds

    @property
    def leading(self) -> bool:
        """True while this replica's term runs, by the clock (renew deadline after its last renewal's send)."""
        return self._valid_until is not None and asyncio.get_running_loop().time() < self._valid_until

    @property
    def observed(self) -> LeaseRecord | None:
        return self._observed.record if self._observed else None

    async def run(self, stop: asyncio.Event, lead: Callable[[], Awaitable[None]]) -> None:
        """Campaign until `stop`; while this replica holds the lease, run `lead()`.

        A lost lease (renewals failing past the renew deadline, or another holder) cancels `lead` and waits for it
        to end before campaigning again: a deposed leader does no more work. `stop`, or `lead` returning or raising,
        ends the term the same way, then releases the lease so a successor need not wait for it to expire, and
        returns (or raises what `lead` raised). Cancelling `run` is a crash: `lead` is cancelled, nothing released.
        """
        where = f"{self.leases.namespace}/{self.leases.name}"
        while not stop.is_set():
            if not await self._campaign(stop):
                return
            held = self.observed
            log.info("%s leads: lease %s acquired (transitions %s)", self.identity, where,
                     held.transitions if held else "?")
            lost = await self._term(stop, lead)
            if not lost:
                await self._release()
                return
            log.warning("%s lost lease %s: stopped leading; campaigning again", self.identity, where)

    async def _term(self, stop: asyncio.Event, lead: Callable[[], Awaitable[None]]) -> bool:
        """One term; True when it ended by losing the lease."""
        leading = asyncio.ensure_future(lead())
        keeping = asyncio.ensure_future(self._keep())
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({leading, keeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._valid_until = None
            for task in (leading, keeping, stopping):
                task.cancel()
            await asyncio.gather(leading, keeping, stopping, return_exceptions=True)
        if keeping.done() and not keeping.cancelled():
            keeping.result()  # LeaseUnusable: say why rather than campaign forever
            return True
        failure = leading.exception() if leading.done() and not leading.cancelled() else None
        if failure is not None:
            await self._release()
            raise failure
        return False

    async def _campaign(self, stop: asyncio.Event) -> bool:
        """Try until this replica holds the lease (True) or `stop` is set (False)."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            if await self._try() is Attempt.HELD:
                return True
            observed = self._observed
            expires_at = observed.expires_at if observed and observed.record.holder else None
            pause = campaign_pause(loop.time(), expires_at, self.timing.retry_period_s, self._rand())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)
        return False

    async def _keep(self) -> None:
        """Renew every retry period; return when the lease is lost: not renewed by the deadline, or taken."""
        retry = self.timing.retry_period_s
        while True:
            assert self._valid_until is not None
            try:
                async with asyncio.timeout_at(self._valid_until):
                    await asyncio.sleep(retry)
                    while (attempt := await self._try()) is not Attempt.HELD:
                        if attempt is Attempt.HELD_BY_OTHER:
                            return
                        await asyncio.sleep(retry)
            except TimeoutError:
                log.warning("%s could not renew lease %s/%s within %.1f s", self.identity, self.leases.namespace,
                            self.leases.name, self.timing.renew_deadline_s)
                return

    async def _try(self) -> Attempt:
        """client-go's tryAcquireOrRenew: read the Lease, then take or renew it if it is ours to."""
        loop = asyncio.get_running_loop()
        timeout_s = self.timing.renew_deadline_s
        try:
            current = await self.leases.get(timeout_s=timeout_s)
            now = loop.time()
            self._observed = observe(self._observed, current.record if current else None, now)
            wanted = next_record(self._observed, identity=self.identity, now=now, wall=micro_time(),
                                 lease_duration_s=self.timing.lease_duration_s)
            if wanted is None:
                self._tell_holder()
                self.failure = None
                return Attempt.HELD_BY_OTHER
            sent = loop.time()
            if current is None:
                await self.leases.create(wanted, timeout_s=timeout_s)
            else:
                await self.leases.replace(current, wanted, timeout_s=timeout_s)
        except LeaseConflict as exc:
            log.debug("%s: %s", self.identity, exc)
            return Attempt.FAILED
        except _API_ERRORS as exc:
            log.warning("%s: lease %s/%s not read or written (%s: %s)", self.identity, self.leases.namespace,
                        self.leases.name, type(exc).__name__, exc)
            self.failure = f"{self.leases.namespace}/{self.leases.name} not read or written: {failure_of(exc)[1]}"
            return Attempt.FAILED
        self.failure = None
        self._observed = Observation(wanted, loop.time())
        self._valid_until = sent + self.timing.renew_deadline_s
        self._told_holder = None
        return Attempt.HELD

    def _tell_holder(self) -> None:
        holder = self.observed.holder if self.observed else ""
        if holder != self._told_holder:
            log.info("%s: lease %s/%s is held by %s; standing by", self.identity, self.leases.namespace,
                     self.leases.name, holder)
            self._told_holder = holder

    async def _release(self) -> None:
        """Give the lease up (client-go's release): no holder, one second's duration. Only when this replica is the
        holder; a failure is logged (the lease then expires as after a crash)."""
        try:
            current = await self.leases.get(timeout_s=self.timing.renew_deadline_s)
            if current is None or current.record.holder != self.identity:
                return
            now = micro_time()
            released = LeaseRecord("", 1, now, now, current.record.transitions)
            await self.leases.replace(current, released, timeout_s=self.timing.renew_deadline_s)
        except (*_API_ERRORS, LeaseConflict, LeaseUnusable) as exc:
            log.warning("%s: lease %s/%s not released (%s: %s); it expires in %s s", self.identity,
                        self.leases.namespace, self.leases.name, type(exc).__name__, exc,
                        self.timing.lease_duration_s)
            return
        log.info("%s released lease %s/%s", self.identity, self.leases.namespace, self.leases.name)


__all__ = ["Attempt", "ElectionTiming", "KubeLeases", "LeaseConflict", "LeaseElector", "LeaseRecord", "LeaseStore",
           "LeaseUnusable", "Observation", "StoredLease", "campaign_pause", "lease_name", "micro_time",
           "next_record", "observe"]
