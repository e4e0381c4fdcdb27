"""Leader election's decisions (kube/leader/decide.py): unit cases, and a simulation of several
candidates over one linearizable Lease store with arbitrary clock offsets, request delays, lost answers,
crashes, restarts under the same identity and releases (hypothesis)."""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from burrito_py.kube.leader.decide import (
    Action,
    LeaseRecord,
    Observation,
    Timing,
    accept_write,
    decide,
    lease_body,
    observe,
    release_body,
)

T = Timing(lease_duration=15, renew_deadline=10, retry_period=2)
NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def rec(holder: str = "other", rv: str = "1", duration: float = 15, transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder, duration, transitions, rv)


# -- unit cases ---------------------------------------------------------------------------------------------
def test_timing_must_leave_the_leader_time_to_stop() -> None:
    with pytest.raises(ValueError, match="retry_period < renew_deadline < lease_duration"):
        Timing(lease_duration=10, renew_deadline=10, retry_period=2)
    with pytest.raises(ValueError, match="retry_period=3"):
        Timing(lease_duration=15, renew_deadline=3, retry_period=3)


def test_a_candidate_reads_first_then_creates_a_missing_lease() -> None:
    assert decide("me", None, None, T, 0).action is Action.WAIT
    assert decide("me", Observation(None, 0), None, T, 0).action is Action.CREATE


def test_expiry_is_judged_on_when_we_saw_the_record_change_not_on_its_timestamps() -> None:
    # A record whose renewTime is hours old (another machine's clock) but which we just saw change is valid.
    seen = observe(None, rec(rv="7"), now=100.0)
    assert decide("me", seen, None, T, 114.9).action is Action.WAIT
    assert decide("me", seen, None, T, 115.0).action is Action.ACQUIRE
    # Read again unchanged: the clock does not restart; changed (a renewal): it does.
    assert observe(seen, rec(rv="7"), 110.0).observed_at == 100.0
    assert observe(seen, rec(rv="8"), 110.0).observed_at == 110.0
    assert observe(seen, None, 110.0) == Observation(None, 110.0)


def test_the_records_own_duration_counts_and_a_released_lease_is_taken_at_once() -> None:
    short = observe(None, rec(duration=1), now=0.0)
    assert decide("me", short, None, T, 1.0).action is Action.ACQUIRE
    assert decide("me", observe(None, rec(holder=""), 0.0), None, T, 0.0).action is Action.ACQUIRE


def test_a_waiting_candidate_looks_again_every_retry_period_or_at_expiry() -> None:
    seen = observe(None, rec(), now=0.0)
    assert decide("me", seen, None, T, 1.0).wake_at == 3.0
    assert decide("me", seen, None, T, 14.0).wake_at == 15.0


def test_our_name_written_by_an_earlier_process_is_not_ours() -> None:
    """A restarted container keeps its pod name; it waits for expiry like anyone (client-go would take it)."""
    seen = observe(None, rec(holder="me"), now=0.0)
    assert decide("me", seen, None, T, 5.0).action is Action.WAIT
    assert decide("me", seen, None, T, 15.0).action is Action.ACQUIRE


def test_a_leader_renews_every_retry_period_and_steps_down_at_its_deadline() -> None:
    mine = observe(None, rec(holder="me"), now=0.0)
    assert decide("me", mine, 0.0, T, 1.0) == decide("me", mine, 0.0, T, 1.0)
    assert decide("me", mine, 0.0, T, 1.0).action is Action.WAIT
    assert decide("me", mine, 0.0, T, 1.0).wake_at == 2.0
    assert decide("me", mine, 0.0, T, 2.0).action is Action.RENEW
    assert decide("me", mine, 0.0, T, 9.99).action is Action.RENEW
    assert decide("me", mine, 0.0, T, 10.0).action is Action.STEP_DOWN


def test_a_leader_that_reads_another_holder_steps_down() -> None:
    assert decide("me", observe(None, rec(holder="other"), 0.0), 0.0, T, 1.0).action is Action.STEP_DOWN
    assert decide("me", observe(None, None, 0.0), 0.0, T, 1.0).action is Action.STEP_DOWN


def test_a_write_counts_from_when_it_was_sent_and_only_if_answered_in_time() -> None:
    assert accept_write(None, sent_at=5.0, received_at=6.0, timing=T) == 5.0
    assert accept_write(None, sent_at=5.0, received_at=15.0, timing=T) is None
    assert accept_write(0.0, sent_at=8.0, received_at=10.0, timing=T) is None  # we had stepped down at 10


def test_lease_bodies() -> None:
    created = lease_body(name="l", namespace="ns", identity="me", timing=T, previous=None, wall_now=NOW, renew=False)
    assert created["spec"] == {"holderIdentity": "me", "leaseDurationSeconds": 15,
                               "acquireTime": "2026-01-02T03:04:05.678901Z",
                               "renewTime": "2026-01-02T03:04:05.678901Z", "leaseTransitions": 0}
    assert "resourceVersion" not in created["metadata"]
    taken = lease_body(name="l", namespace="ns", identity="me", timing=T, previous=rec(rv="9", transitions=3),
                       wall_now=NOW, renew=False)
    assert taken["metadata"]["resourceVersion"] == "9" and taken["spec"]["leaseTransitions"] == 4
    ours = LeaseRecord("me", 15, 4, "10", acquire_time="2026-01-01T00:00:00.000000Z")
    renewed = lease_body(name="l", namespace="ns", identity="me", timing=T, previous=ours, wall_now=NOW, renew=True)
    assert renewed["spec"]["leaseTransitions"] == 4
    assert renewed["spec"]["acquireTime"] == "2026-01-01T00:00:00.000000Z"
    released = release_body(name="l", namespace="ns", previous=ours, wall_now=NOW)
    assert released["spec"]["holderIdentity"] is None and released["spec"]["leaseDurationSeconds"] == 1
    assert released["metadata"]["resourceVersion"] == "10"
    fractional = Timing(lease_duration=4.5, renew_deadline=3, retry_period=0.5)
    assert lease_body(name="l", namespace="ns", identity="me", timing=fractional, previous=None, wall_now=NOW,
                      renew=False)["spec"]["leaseDurationSeconds"] == 5
    assert LeaseRecord.from_body(released, 15) == LeaseRecord("", 1.0, 4, "10", "2026-01-02T03:04:05.678901Z")


# -- simulation ---------------------------------------------------------------------------------------------
@dataclass
class Store:
    """A linearizable Lease store: writes carry the resourceVersion they were based on."""

    record: LeaseRecord | None = None
    versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def write(self, expected: str | None, holder: str, duration: float, transitions: int) -> LeaseRecord | None:
        current = self.record.resource_version if self.record is not None else None
        if current != expected:
            return None  # 409 (or 404 on a replace of a missing Lease)
        self.record = LeaseRecord(holder, duration, transitions, str(next(self.versions)))
        return self.record


@dataclass
class Term:
    process: int
    start: float
    end: float


class Sim:
    """Candidates driven by `decide`, as leader_election.Elector drives it: a candidate reads, waits, writes; a
    leader renews; every request has a delay to the store and back (or is lost), bounded by the deadline."""

    def __init__(self, rnd: random.Random, timing: Timing, max_delay: float, loss: float) -> None:
        self.rnd, self.timing, self.max_delay, self.loss = rnd, timing, max_delay, loss
        self.store = Store()
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = itertools.count()
        self.now = 0.0
        self.terms: list[Term] = []
        self.acquired_at: list[tuple[int, float]] = []

    def at(self, when: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self.events, (when, next(self.seq), fn))

    def delay(self) -> float:
        return self.rnd.uniform(0, self.max_delay)

    def run(self, until: float, max_steps: int = 200_000) -> bool:
        """Play the events up to `until`; False when simulated time stopped advancing (see the test)."""
        steps = 0
        while self.events and self.events[0][0] <= until:
            self.now, _, fn = heapq.heappop(self.events)
            fn()
            steps += 1
            if steps > max_steps:
                return False
        return True


class Candidate:
    def __init__(self, sim: Sim, process: int, identity: str, offset: float) -> None:
        self.sim, self.process, self.identity, self.offset = sim, process, identity, offset
        self.observation: Observation | None = None
        self.renewed_at: float | None = None
        self.term: Term | None = None
        self.alive = True
        self.partitioned_until = 0.0  # real time until which its requests never reach the store
        self.epoch = 0  # bumped on crash: pending callbacks of a dead process do nothing

    def local(self) -> float:
        return self.sim.now + self.offset

    def real(self, local: float) -> float:
        return local - self.offset

    def later(self, real_when: float, fn: Callable[[], None]) -> None:
        epoch = self.epoch

        def guarded() -> None:
            if self.alive and self.epoch == epoch:
                fn()
        self.sim.at(max(real_when, self.sim.now), guarded)

    def start(self) -> None:
        self.read()

    def step(self) -> None:
        timing = self.sim.timing
        d = decide(self.identity, self.observation, self.renewed_at, timing, self.local())
        if d.action is Action.STEP_DOWN:
            self.step_down(self.sim.now)
            self.later(self.sim.now, self.step)
        elif d.action is Action.WAIT:
            # A real clock moves on between two looks; the rounding of a large clock offset must not make the
            # simulation look again at the very same instant forever.
            wake = max(self.real(d.wake_at), self.sim.now + 1e-6)
            if self.renewed_at is None:
                self.later(wake, self.read)
            else:
                self.later(wake, self.step)
        else:
            self.write(d.action)

    def read(self) -> None:
        there, back = self.sim.delay(), self.sim.delay()
        if self.sim.now < self.partitioned_until:
            self.later(self.sim.now + self.sim.timing.retry_period, self.read)  # a failed read: try again later
            return

        def served() -> None:
            record = self.sim.store.record

            def answered() -> None:
                self.observation = observe(self.observation, record, self.local())
                self.step()
            self.later(self.sim.now + back, answered)
        self.sim.at(self.sim.now + there, served)  # the store serves it even if we die meanwhile

    def write(self, action: Action) -> None:
        timing = self.sim.timing
        sent_at = self.local()
        deadline = (self.renewed_at + timing.renew_deadline) if self.renewed_at is not None \
            else sent_at + timing.renew_deadline
        previous = self.observation.record if self.observation is not None else None
        expected = None if action is Action.CREATE else (previous.resource_version if previous else "")
        transitions = 0 if previous is None else previous.transitions + (previous.holder != self.identity)
        there, back = self.sim.delay(), self.sim.delay()
        cut_off = self.sim.now < self.partitioned_until
        lost = cut_off or self.sim.rnd.random() < self.sim.loss
        reaches_store = not cut_off and (not lost or self.sim.rnd.random() < 0.5)  # lost on the way, or back
        outcome: list[LeaseRecord | None] = []

        def served() -> None:
            outcome.append(self.sim.store.write(expected, self.identity, timing.lease_duration, transitions))

        def answered() -> None:
            record = outcome[0]
            received_at = self.local()
            if record is None:  # conflict: read again
                self.read()
                return
            renewed = accept_write(self.renewed_at, sent_at, received_at, timing)
            self.observation = observe(self.observation, record, received_at)
            if renewed is None:
                if self.renewed_at is not None:
                    self.step_down(self.sim.now)
                self.step()
                return
            if self.renewed_at is None:
                self.term = Term(self.process, self.sim.now, self.real(renewed + timing.renew_deadline))
                self.sim.terms.append(self.term)
                self.sim.acquired_at.append((self.process, self.sim.now))
            else:
                assert self.term is not None
                self.term.end = self.real(renewed + timing.renew_deadline)
            self.renewed_at = renewed
            self.step()

        def timed_out() -> None:
            if self.renewed_at is not None and self.local() >= self.renewed_at + timing.renew_deadline:
                self.step_down(self.sim.now)
            pause = min(self.local() + timing.retry_period, deadline)
            self.later(self.real(pause), self.step)

        if reaches_store:
            self.sim.at(self.sim.now + there, served)
        answer_at = self.sim.now + there + back
        if lost or answer_at >= self.real(deadline):
            self.later(self.real(deadline), timed_out)
        else:
            self.later(answer_at, answered)

    def step_down(self, when: float) -> None:
        if self.term is not None:
            self.term.end = min(self.term.end, when)
        self.term, self.renewed_at = None, None

    def crash(self) -> None:
        self.step_down(self.sim.now)
        self.alive = False
        self.epoch += 1

    def release(self) -> None:
        """A graceful stop: stop acting, then clear the holder (read, then write with its resourceVersion)."""
        if self.renewed_at is None:
            self.crash()
            return
        self.step_down(self.sim.now)
        self.alive = False
        store = self.sim.store

        def served() -> None:
            if store.record is not None and store.record.holder == self.identity:
                store.write(store.record.resource_version, "", 1, store.record.transitions)
        self.sim.at(self.sim.now + self.sim.delay(), served)


def overlapping(terms: list[Term]) -> list[tuple[Term, Term]]:
    ordered = sorted(terms, key=lambda t: t.start)
    return [(a, b) for a, b in itertools.combinations(ordered, 2) if a.process != b.process and b.start < a.end]


# A simulation is thousands of steps: without the explain phase's line tracing (which slows them tens of times
# over), and with fewer examples than the default, so the suite stays fast; a failure still shrinks.
QUICK = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)

timings = st.sampled_from([
    Timing(15, 10, 2), Timing(4, 3, 0.5), Timing(2, 1.5, 0.2), Timing(60, 40, 5),
])


@settings(max_examples=60, deadline=None, phases=QUICK, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    seed=st.integers(0, 2**32 - 1),
    timing=timings,
    identities=st.lists(st.sampled_from(["pod-a", "pod-b", "pod-c"]), min_size=2, max_size=4),
    offsets=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=4, max_size=4),
    delay_share=st.floats(0.0, 0.6),
    loss=st.floats(0.0, 0.5),
    disruptions=st.integers(0, 8),
)
def test_no_two_processes_ever_believe_they_lead_at_once(
    seed: int, timing: Timing, identities: list[str], offsets: list[float], delay_share: float, loss: float,
    disruptions: int,
) -> None:
    """Whatever the clocks' offsets, the delays (up to 60 % of the renew deadline each way), lost requests and
    answers, partitions from the API, crashes, restarts under the same pod name and releases: two processes never
    lead over overlapping intervals of real time."""
    rnd = random.Random(seed)
    sim = Sim(rnd, timing, max_delay=delay_share * timing.renew_deadline, loss=loss)
    process_ids = itertools.count()
    candidates = [Candidate(sim, next(process_ids), identity, offsets[i]) for i, identity in enumerate(identities)]
    for c in candidates:
        sim.at(rnd.uniform(0, timing.retry_period), c.start)
    horizon = timing.lease_duration * 12
    for _ in range(disruptions):
        when, victim = rnd.uniform(0, horizon), rnd.randrange(len(candidates))

        def disrupt(victim: int = victim) -> None:
            old = candidates[victim]
            if not old.alive:
                return
            if rnd.random() < 0.4:  # cut off from the API for a while (it keeps running)
                old.partitioned_until = sim.now + rnd.uniform(0, 2 * timing.lease_duration)
                return
            old.release() if rnd.random() < 0.5 else old.crash()
            fresh = Candidate(sim, next(process_ids), old.identity, rnd.uniform(-1e6, 1e6))
            candidates[victim] = fresh
            sim.at(sim.now + rnd.uniform(0, timing.lease_duration), fresh.start)
        sim.at(when, disrupt)
    # Some degenerate schedules (several processes under one identity, sub-microsecond steps) make the simulation
    # loop at one instant without time advancing, which a real clock cannot do: such draws are discarded, and
    # the property is checked on every draw that completes, terms included up to where it stopped.
    completed = sim.run(until=horizon)
    assert overlapping(sim.terms) == []
    assume(completed)


@settings(max_examples=60, deadline=None, phases=QUICK)
@given(seed=st.integers(0, 2**32 - 1), timing=timings, offsets=st.lists(st.floats(-1e6, 1e6), min_size=2,
                                                                         max_size=2))
def test_a_released_lease_is_taken_within_one_retry_period(seed: int, timing: Timing, offsets: list[float]) -> None:
    rnd = random.Random(seed)
    sim = Sim(rnd, timing, max_delay=0.0, loss=0.0)
    leader, standby = Candidate(sim, 0, "pod-a", offsets[0]), Candidate(sim, 1, "pod-b", offsets[1])
    sim.at(0.0, leader.start)
    sim.at(rnd.uniform(0.001, timing.retry_period), standby.start)
    stop_at = timing.lease_duration * 2 + rnd.uniform(0, timing.lease_duration)
    sim.at(stop_at, leader.release)
    sim.run(until=stop_at + timing.lease_duration * 2)
    assert [p for p, _ in sim.acquired_at] == [0, 1]
    taken = sim.acquired_at[1][1]
    assert stop_at < taken <= stop_at + timing.retry_period
