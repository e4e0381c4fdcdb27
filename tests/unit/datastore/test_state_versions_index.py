"""The state versions index (docs/architecture.md §10.6): one object holding every kept version's record, so a listing
reads one object, checked against the listed version keys so that it never loses nor invents a version, whatever
happened to it (a crash between a version and the index, two replicas' updates, a store from before it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.datastore.state import (
    StateFacts,
    VersionIndex,
    facts_record,
    index_after_listing,
    index_after_write,
    listing_of,
    plan_listing,
    versions_to_drop,
)


def full(serial: int) -> dict[str, Any]:
    return {"serial": serial, "lineage": "L", "resources": serial % 7, "size": 100 + serial, "sha256": f"s{serial}",
            "writer": "system:serviceaccount:apps:burrito-py-runner", "run": f"run-{serial}", "attempt": 1,
            "created": f"2026-11-27T10:{serial % 60:02d}:00+00:00"}


def partial(serial: int) -> dict[str, Any]:
    return facts_record(StateFacts(serial, "L", serial % 7, 100 + serial, f"s{serial}"))


def test_a_listing_answers_from_the_index_alone_when_it_is_up_to_date() -> None:
    index = VersionIndex({s: full(s) for s in (1, 2, 3)})
    plan = plan_listing([3, 1, 2], VersionIndex.from_json(index.to_json()))
    assert (plan.to_read, plan.stale) == ((), False)
    assert listing_of(plan, index) == [full(1), full(2), full(3)]


def test_what_the_index_lacks_is_read_and_what_it_names_but_is_gone_is_left_out() -> None:
    index = VersionIndex({s: full(s) for s in (1, 2, 3)})
    plan = plan_listing([2, 3, 4], index)  # 1 dropped meanwhile, 4 written by a write whose index update died
    assert (plan.to_read, plan.stale) == ((4,), True)
    repaired = index_after_listing(plan, {4: (full(4), True)})
    assert listing_of(plan, repaired) == [full(2), full(3), full(4)]
    assert sorted(repaired.records) == [2, 3, 4]
    assert plan_listing([2, 3, 4], repaired).stale is False


def test_an_index_naming_a_version_no_longer_stored_is_rewritten_without_reads() -> None:
    plan = plan_listing([2, 3], VersionIndex({s: full(s) for s in (1, 2, 3)}))
    assert (plan.to_read, plan.stale) == ((), True)
    assert listing_of(plan, index_after_listing(plan, {})) == [full(2), full(3)]


def test_a_store_from_before_the_index_is_read_once() -> None:
    plan = plan_listing([1, 2], None)
    assert (plan.to_read, plan.stale) == ((1, 2), True)
    built = index_after_listing(plan, {1: (full(1), True), 2: (full(2), True)})
    assert plan_listing([1, 2], built).to_read == ()


def test_a_version_whose_record_was_missing_is_read_again_until_it_is_complete() -> None:
    plan = plan_listing([1, 2], VersionIndex({1: full(1)}))
    index = index_after_listing(plan, {2: (partial(2), False)})
    assert listing_of(plan, index) == [full(1), partial(2)]
    again = plan_listing([1, 2], VersionIndex.from_json(index.to_json()))
    assert again.to_read == (2,)  # its retry may have completed the record since
    done = index_after_write(index, full(2), [1, 2])
    assert plan_listing([1, 2], done).to_read == () and done.records[2] == full(2)


def test_a_version_gone_between_the_listing_and_its_read_is_left_out() -> None:
    plan = plan_listing([1, 2], None)
    assert listing_of(plan, index_after_listing(plan, {1: (full(1), True), 2: None})) == [full(1)]


def test_a_write_keeps_what_retention_keeps_and_adds_its_record() -> None:
    index = VersionIndex({s: full(s) for s in (1, 2, 3)})
    after = index_after_write(index, full(4), [2, 3, 4])
    assert sorted(after.records) == [2, 3, 4]
    assert sorted(index_after_write(None, full(4), [2, 3, 4]).records) == [4]  # the next listing reads 2 and 3


def test_an_index_that_is_not_ours_counts_as_none() -> None:
    for raw in (b"", b"not json", b"[]", b'{"format": 2, "versions": []}', b'{"format": 1, "versions": [1]}',
                b'{"format": 1, "versions": [{"serial": "1"}]}', b'{"format": 1}',
                b'{"format": 1, "versions": [], "partial": ["x"]}', "é".encode("latin-1")):
        assert VersionIndex.from_json(raw) is None, raw


# -- the model: a layer's versions through any sequence of writes, crashes, races and listings ------------------------
EVENTS = st.sampled_from([
    "write",  # state, record, retention and the index, as the datastore does them
    "crash-after-state",  # the state stored, then the process died: no record, no index update
    "crash-after-record",  # the state and its record, no index update (nor retention)
    "crash-after-retention",  # state, record and retention's deletion, no index update
    "retry",  # the retried POST of the newest version: completes a missing record, updates the index
    "lost-update",  # another replica's index write, from before the last writes, lands last
    "index-lost",  # the index deleted, or an unreadable one
    "list",
])


class Layer:
    """What a layer's prefix holds: versions (record complete or not) and the index object's bytes."""

    def __init__(self, keep: int) -> None:
        self.keep, self.next = keep, 1
        self.versions: dict[int, tuple[dict[str, Any], bool]] = {}
        self.index: bytes | None = None
        self.history: list[bytes | None] = [None]

    def _store(self, record_complete: bool) -> int:
        serial, self.next = self.next, self.next + 1
        self.versions[serial] = (full(serial) if record_complete else partial(serial), record_complete)
        return serial

    def _retention(self) -> list[int]:
        for serial in versions_to_drop(list(self.versions), self.keep):
            del self.versions[serial]
        return sorted(self.versions)

    def _write_index(self, index: VersionIndex) -> None:
        self.index = index.to_json()
        self.history.append(self.index)

    def apply(self, event: str, pick: int) -> None:
        if event == "write":
            serial = self._store(True)
            kept = self._retention()
            self._write_index(index_after_write(self._current(), full(serial), kept))
        elif event == "crash-after-state":
            self._store(False)
        elif event == "crash-after-record":
            self._store(True)
        elif event == "crash-after-retention":
            self._store(True)
            self._retention()
        elif event == "retry" and self.versions:
            newest = max(self.versions)
            if not self.versions[newest][1]:
                self.versions[newest] = (full(newest), True)
                self._write_index(index_after_write(self._current(), full(newest), sorted(self.versions)))
        elif event == "lost-update":
            self.index = self.history[pick % len(self.history)]
        elif event == "index-lost":
            self.index = None if pick % 2 else b"{garbage"
        elif event == "list":
            self.check_listing()

    def _current(self) -> VersionIndex | None:
        return VersionIndex.from_json(self.index) if self.index is not None else None

    def truth(self) -> list[Mapping[str, Any]]:
        return [self.versions[s][0] for s in sorted(self.versions)]

    def check_listing(self) -> None:
        plan = plan_listing(sorted(self.versions), self._current())
        assert set(plan.to_read) <= set(self.versions)
        read = {s: self.versions[s] for s in plan.to_read}
        index = index_after_listing(plan, read)
        assert listing_of(plan, index) == self.truth()  # never a version lost, invented or shown stale
        if plan.stale:
            self._write_index(index)
        # Right after a listing, the next one reads only the records still missing (a crash's, until its retry).
        again = plan_listing(sorted(self.versions), self._current())
        assert set(again.to_read) == {s for s, (_, complete) in self.versions.items() if not complete}
        assert again.stale == bool(again.to_read)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.lists(st.tuples(EVENTS, st.integers(0, 50)), max_size=40))
def test_a_listing_always_shows_exactly_the_stored_versions(keep: int, events: list[tuple[str, int]]) -> None:
    layer = Layer(keep)
    for event, pick in events:
        layer.apply(event, pick)
    layer.check_listing()


@given(st.dictionaries(st.integers(0, 10**20 - 1), st.booleans(), max_size=30))
def test_the_index_survives_its_own_round_trip(entries: dict[int, bool]) -> None:
    index = VersionIndex({s: full(s) if done else partial(s) for s, done in entries.items()},
                         frozenset(s for s, done in entries.items() if not done))
    assert VersionIndex.from_json(index.to_json()) == index
