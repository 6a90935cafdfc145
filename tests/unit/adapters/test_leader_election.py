"""The Lease elector's own logic: client-go's decisions (take, renew, wait), and the terms they make, where a deposed
leader must stop working. The store here is a Lease in memory with resourceVersion checks; the same elector on a
real apiserver is in tests/integration/test_leader_election.py."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters.kube.leader_election import (
    ElectionTiming,
    LeaseConflict,
    LeaseElector,
    LeaseRecord,
    LeaseUnusable,
    Observation,
    StoredLease,
    campaign_pause,
    lease_name,
    micro_time,
    next_record,
    observe,
)
from gpuplace.settings import Settings

TIMING = ElectionTiming(lease_duration_s=1, renew_deadline_s=0.5, retry_period_s=0.1)
WALL = "2025-01-01T00:00:00.000000Z"


# -- decisions ------------------------------------------------------------------------------------------------------
def test_no_lease_is_created_with_this_replica_as_holder() -> None:
    assert next_record(None, identity="a", now=5.0, wall=WALL, lease_duration_s=15) == LeaseRecord(
        "a", 15, WALL, WALL, 0)


def test_a_renewal_keeps_acquire_time_and_transitions() -> None:
    mine = Observation(LeaseRecord("a", 15, "t0", "t1", 3), at=0.0)
    assert next_record(mine, identity="a", now=100.0, wall=WALL, lease_duration_s=15) == LeaseRecord(
        "a", 15, "t0", WALL, 3)


def test_another_holders_lease_is_waited_for_until_its_duration_from_when_it_was_observed() -> None:
    theirs = Observation(LeaseRecord("b", 15, "t0", "t1", 3), at=10.0)
    assert next_record(theirs, identity="a", now=24.9, wall=WALL, lease_duration_s=15) is None
    taken = next_record(theirs, identity="a", now=25.0, wall=WALL, lease_duration_s=15)
    assert taken == LeaseRecord("a", 15, WALL, WALL, 4)


def test_the_holders_duration_counts_not_ours() -> None:
    theirs = Observation(LeaseRecord("b", 60, "t0", "t1", 0), at=0.0)
    assert next_record(theirs, identity="a", now=30.0, wall=WALL, lease_duration_s=15) is None


def test_a_released_lease_is_taken_at_once() -> None:
    released = Observation(LeaseRecord("", 1, "t0", "t0", 2), at=100.0)
    assert next_record(released, identity="a", now=100.0, wall=WALL, lease_duration_s=15) == LeaseRecord(
        "a", 15, WALL, WALL, 3)


def test_the_observation_clock_restarts_only_when_the_record_changes() -> None:
    record = LeaseRecord("b", 15, "t0", "t1", 0)
    first = observe(None, record, 10.0)
    assert observe(first, record, 12.0) == Observation(record, 10.0)  # same renewTime: not renewed since
    renewed = replace_renew(record, "t2")
    assert observe(first, renewed, 12.0) == Observation(renewed, 12.0)
    assert observe(first, None, 12.0) is None  # deleted


def replace_renew(record: LeaseRecord, renew: str) -> LeaseRecord:
    return LeaseRecord(record.holder, record.lease_duration_s, record.acquire_time, renew, record.transitions)


def test_a_candidate_wakes_when_the_lease_expires_if_that_is_sooner_than_its_retry() -> None:
    assert campaign_pause(10.0, expires_at=None, retry_period_s=2.0, rand=0.5) == pytest.approx(3.2)  # 2 x (1+0.6)
    assert campaign_pause(10.0, expires_at=30.0, retry_period_s=2.0, rand=0.5) == pytest.approx(3.2)
    assert campaign_pause(10.0, expires_at=11.0, retry_period_s=2.0, rand=0.5) == pytest.approx(1.1)  # 1 + 0.1
    # expired already (a write failed): the ordinary pause, not a busy loop against a failing apiserver
    assert campaign_pause(10.0, expires_at=9.0, retry_period_s=2.0, rand=0.0) == pytest.approx(2.0)


def test_lease_names_are_dns_subdomains_and_distinct() -> None:
    assert lease_name("gpuplace-cluster-watcher", "east", "") == "gpuplace-cluster-watcher-east"
    assert lease_name("gpuplace-cluster-watcher", "east-ab12", ".run-ab12") == \
        "gpuplace-cluster-watcher-east-ab12-run-ab12"
    assert lease_name("x", "Tenant_A", ".Topic__Suffix.") == "x-tenant-a-topic-suffix"
    long_a, long_b = lease_name("w", "a" * 300), lease_name("w", "a" * 299 + "b")
    assert len(long_a) <= 253 and len(long_b) <= 253 and long_a != long_b


def test_micro_time_is_utc_with_microseconds() -> None:
    assert micro_time().endswith("Z") and len(micro_time()) == len(WALL)


@pytest.mark.parametrize("lease, renew, retry", [(10, 10.0, 2.0), (15, 2.4, 2.0), (15, 10.0, 0.0)])
def test_timing_follows_client_gos_rules(lease: int, renew: float, retry: float) -> None:
    with pytest.raises(ValueError):
        ElectionTiming(lease, renew, retry)


def test_settings_refuse_inconsistent_durations_naming_the_variables() -> None:
    with pytest.raises(ValueError, match="GPUPLACE_LEADER_ELECTION_RENEW_DEADLINE_S"):
        Settings(leader_election_lease_duration_s=10, leader_election_renew_deadline_s=12)
    settings = Settings()
    assert (settings.leader_election, settings.leader_election_namespace) == (True, "gpuplace")
    assert (settings.leader_election_lease_duration_s, settings.leader_election_renew_deadline_s,
            settings.leader_election_retry_period_s) == (15, 10.0, 2.0)


# -- terms, on a Lease in memory --------------------------------------------------------------------------------------
class MemoryLeases:
    """One Lease with optimistic concurrency, and switches for an apiserver that hangs or fails."""

    namespace, name = "gpuplace", "lease"

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.hang = False  # every call waits forever (an apiserver that stopped answering)
        self.failures: list[BaseException] = []  # raised by the next calls, first first
        self.writes: list[tuple[float, LeaseRecord]] = []  # (loop time sent, record)

    async def _call(self) -> None:
        if self.hang:
            await asyncio.Event().wait()
        if self.failures:
            raise self.failures.pop(0)
        await asyncio.sleep(0.005)

    async def get(self, *, timeout_s: float) -> StoredLease | None:
        await self._call()
        return StoredLease(self.record, {"version": self.version}) if self.record else None

    def _write(self, record: LeaseRecord) -> None:
        self.record, self.version = record, self.version + 1
        self.writes.append((asyncio.get_running_loop().time(), record))

    async def create(self, record: LeaseRecord, *, timeout_s: float) -> None:
        await self._call()
        if self.record is not None:
            raise LeaseConflict("exists")
        self._write(record)

    async def replace(self, current: StoredLease, record: LeaseRecord, *, timeout_s: float) -> None:
        await self._call()
        if current.raw["version"] != self.version:
            raise LeaseConflict("stale")
        self._write(record)


class Work:
    """A `lead` that runs until cancelled, noting when it started and when it stopped."""

    def __init__(self) -> None:
        self.started: list[float] = []
        self.stopped: list[float] = []
        self.on = asyncio.Event()

    async def __call__(self) -> None:
        loop = asyncio.get_running_loop()
        self.started.append(loop.time())
        self.on.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.on.clear()
            self.stopped.append(loop.time())


async def until(probe: Any, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not probe():
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running(elector: LeaseElector, work: Work, stop: asyncio.Event | None = None) -> Any:
    task = asyncio.create_task(elector.run(stop or asyncio.Event(), work))
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def elector(store: MemoryLeases, identity: str) -> LeaseElector:
    return LeaseElector(store, identity=identity, timing=TIMING, rand=lambda: 0.5)


async def test_one_leads_and_the_other_takes_over_a_lease_duration_after_the_leader_crashed() -> None:
    store, work_a, work_b = MemoryLeases(), Work(), Work()
    a, b = elector(store, "a"), elector(store, "b")
    async with running(a, work_a) as task_a:
        await until(lambda: work_a.on.is_set())
        async with running(b, work_b):
            await asyncio.sleep(0.6)
            assert not work_b.started and b.observed and b.observed.holder == "a"
            task_a.cancel()  # a crash: nothing released
            await asyncio.gather(task_a, return_exceptions=True)
            crashed = asyncio.get_running_loop().time()
            assert store.record is not None and store.record.holder == "a"
            await until(lambda: work_b.on.is_set())
            waited = work_b.started[0] - crashed
            # b saw a's last renewal at most a retry period (x2.2) after it, which was at most one before the crash
            assert TIMING.lease_duration_s - TIMING.retry_period_s - 0.05 <= waited
            assert waited <= TIMING.lease_duration_s + 2.5 * TIMING.retry_period_s + 0.1
            assert store.record.holder == "b" and store.record.transitions == 1


async def test_a_leader_whose_renewals_hang_stops_at_the_renew_deadline_before_its_lease_expires() -> None:
    store, work = MemoryLeases(), Work()
    leader = elector(store, "a")
    async with running(leader, work):
        await until(lambda: work.on.is_set())
        await asyncio.sleep(0.3)
        store.hang = True
        await until(lambda: bool(work.stopped))
        last_sent = store.writes[-1][0]
        stopped = work.stopped[0] - last_sent
        assert stopped <= TIMING.renew_deadline_s + 0.05, stopped  # cut by the timer, the request still hanging
        assert not leader.leading
        # well before any other replica could take the lease (a lease duration after it saw that write)
        assert work.stopped[0] < last_sent + TIMING.lease_duration_s - 0.4


async def test_a_leader_that_reads_another_holder_stops_at_once_and_campaigns_again() -> None:
    store, work = MemoryLeases(), Work()
    leader = elector(store, "a")
    async with running(leader, work):
        await until(lambda: work.on.is_set())
        taken = asyncio.get_running_loop().time()
        assert store.record is not None
        store._write(LeaseRecord("intruder", 1, WALL, WALL, store.record.transitions + 1))
        await until(lambda: bool(work.stopped))
        assert work.stopped[0] - taken <= 2 * TIMING.retry_period_s + 0.05  # not after the renew deadline
        # the intruder never renews: a takes the lease back once it expires, and works again
        await until(lambda: len(work.started) == 2)
        assert work.started[1] - taken >= TIMING.lease_duration_s - 0.05
        assert store.record.holder == "a" and store.record.transitions == 2


async def test_stop_ends_the_work_then_releases_and_a_successor_takes_over_at_once() -> None:
    store, work_a, work_b, stop = MemoryLeases(), Work(), Work(), asyncio.Event()
    async with running(elector(store, "a"), work_a, stop) as task_a:
        await until(lambda: work_a.on.is_set())
        async with running(elector(store, "b"), work_b):
            await asyncio.sleep(0.3)
            stop.set()
            await asyncio.wait_for(task_a, 2)
            released_at, released = store.writes[-1]
            assert released == LeaseRecord("", 1, released.acquire_time, released.renew_time, 0)
            assert work_a.stopped[0] <= released_at  # no work after the release
            await until(lambda: work_b.on.is_set())
            assert work_b.started[0] - released_at < 2.2 * TIMING.retry_period_s + 0.05  # not a lease duration
            assert store.record is not None and store.record.transitions == 1


async def test_work_that_fails_ends_the_term_releases_and_raises() -> None:
    store = MemoryLeases()

    async def failing() -> None:
        raise RuntimeError("pump broke")

    with pytest.raises(RuntimeError, match="pump broke"):
        await asyncio.wait_for(elector(store, "a").run(asyncio.Event(), failing), 2)
    assert store.record is not None and store.record.holder == ""


async def test_api_errors_while_campaigning_are_retried_and_a_misconfiguration_is_raised() -> None:
    store, work = MemoryLeases(), Work()
    store.failures = [OSError("connection refused"), TimeoutError()]
    async with running(elector(store, "a"), work):
        await until(lambda: work.on.is_set())
    broken = MemoryLeases()
    broken.failures = [LeaseUnusable("namespace gpuplace does not exist")]
    with pytest.raises(LeaseUnusable, match="does not exist"):
        await asyncio.wait_for(elector(broken, "a").run(asyncio.Event(), Work()), 2)


async def test_a_replica_restarted_under_its_identity_resumes_its_lease_at_once() -> None:
    store, work = MemoryLeases(), Work()
    store._write(LeaseRecord("a", 15, WALL, WALL, 4))  # renewed just now by a's previous process
    async with running(elector(store, "a"), work):
        await until(lambda: work.on.is_set(), timeout_s=0.5)
    assert store.record is not None and store.record.transitions == 4


async def test_a_lease_it_cannot_read_is_said_for_readiness_until_a_read_succeeds() -> None:
    store, work = MemoryLeases(), Work()
    candidate = elector(store, "a")
    store.failures = [ApiException(status=401, reason="Unauthorized")]
    seen: list[str | None] = []

    async def watch_failure() -> None:
        while not work.on.is_set():
            seen.append(candidate.failure)
            await asyncio.sleep(0.001)

    async with running(candidate, work):
        await asyncio.wait_for(watch_failure(), 5)
    assert any(f and "gpuplace/lease not read or written: credentials rejected (401)" in f for f in seen)
    assert candidate.failure is None  # read and written since: it leads
