"""The state backend's pure decisions (docs/architecture.md §10.6): what a posted state is, whether it may be
the layer's next version, and who holds the lock."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.datastore.auth import Action, LayerArtifacts, LayerState, Principal, RunnerScope, authorize
from burrito_py.datastore.state import (
    BadState,
    LockRecord,
    StateFacts,
    check_md5,
    decide_lock,
    decide_unlock,
    decide_write,
    parse_lock_request,
    parse_state,
    rollback_body,
    version_key,
    version_serial,
    versions_to_drop,
)
from burrito_py.datastore.state_diff import state_diff


def state(serial: int = 1, lineage: str = "abc", resources: int = 0) -> bytes:
    return json.dumps({"version": 4, "terraform_version": "1.11.4", "serial": serial, "lineage": lineage,
                       "outputs": {}, "resources": [{"mode": "managed", "type": "terraform_data", "name": f"r{i}",
                                                     "instances": [{"attributes": {}}]} for i in range(resources)]
                       }).encode()


def facts(serial: int, lineage: str = "abc", sha: str = "s") -> StateFacts:
    return StateFacts(serial, lineage, 0, 10, sha)


LOCK = LockRecord("lock-1", {"ID": "lock-1", "Operation": "OperationTypeApply", "Who": "runner@pod"},
                  "system:serviceaccount:team:burrito-py-runner", "app-apply-1", 1, "app-apply-1-1", "uid-1")


def test_a_state_gives_its_serial_lineage_and_resource_instances() -> None:
    body = state(7, "lineage-x", resources=3)
    parsed = parse_state(body)
    assert (parsed.serial, parsed.lineage, parsed.resources, parsed.size) == (7, "lineage-x", 3, len(body))
    assert parsed.sha256 == hashlib.sha256(body).hexdigest()


def test_a_state_holding_thousands_of_digits_in_a_string_is_a_state() -> None:
    """A file's content or an HTTP body in a state can be a run of digits longer than Python converts: it was
    refused (the apply's state lost); only a real integer that long is (ijson's C backend crashed on one)."""
    body = (b'{"serial": 3, "lineage": "a", "resources": [{"instances": [{"attributes": {"content": "'
            + b"7" * 10_000 + b'"}}]}]}')
    parsed = parse_state(body)
    assert (parsed.serial, parsed.lineage, parsed.resources) == (3, "a", 1)


@pytest.mark.parametrize(("body", "reason"), [
    (b"", "the state is empty"),
    (b'{"serial": 1, "lineage": "a"', "not valid JSON: premature EOF (corrupt or truncated)"),
    (b'{"serial": 1, "lineage": "a"} x', "not valid JSON: trailing garbage (corrupt or truncated)"),
    (b'{"serial": 1, "lineage": NaN}', "not valid JSON"),
    (b'{"serial": 1, "lineage": "a", "resources": [{"instances": [' + b"9" * 5000 + b']}]}',
     "holds an integer of more than 4300 digits"),  # ijson's C backend crashed the process on one (state.py)
    (b'{"serial": 1, "lineage": "a", "x": 1e' + b"9" * 30 + b"}", "not valid JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"lineage": "a"}', "serial: missing or not an integer"),
    (b'{"serial": "1", "lineage": "a"}', "serial: missing or not an integer"),
    (b'{"serial": true, "lineage": "a"}', "serial: missing or not an integer"),
    (b'{"serial": -1, "lineage": "a"}', "serial: -1 is out of range"),
    (b'{"serial": 1}', "lineage: missing"),
    (b'{"serial": 1, "lineage": "  "}', "lineage: missing"),
    (b'{"serial": 1, "lineage": "a", "resources": {}}', "resources: not a list"),
])
def test_a_body_that_is_no_state_is_refused_naming_why(body: bytes, reason: str) -> None:
    with pytest.raises(BadState, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_state(body)


def test_a_refusal_never_quotes_the_state() -> None:
    for body in (b'{"serial": 1, "lineage": "a", "password": "hunter2-secret"', b'{"password": "hunter2-secret\\x"}',
                 b'{"password": "hunter2-secret" "x": 1}', b'{"password": "hunter2-secret", ]'):
        with pytest.raises(BadState) as caught:
            parse_state(body)
        assert "hunter2" not in str(caught.value) and "\n" not in str(caught.value), caught.value


def _parsed_whole(body: bytes) -> StateFacts:
    """What parse_state answered when it built the whole document (`json.loads`): the reference its streaming
    parse must agree with."""
    parsed = json.loads(body.decode("utf-8"))
    if not isinstance(parsed, dict):
        raise BadState("the state is not a JSON object")
    serial, lineage, resources = parsed.get("serial"), parsed.get("lineage"), parsed.get("resources", [])
    if isinstance(serial, bool) or not isinstance(serial, int):
        raise BadState("serial: missing or not an integer")
    if serial < 0 or serial >= 10**20:
        raise BadState(f"serial: {serial} is out of range (0 to 10^20 - 1)")
    if not isinstance(lineage, str) or not lineage.strip():
        raise BadState("lineage: missing or not a non-empty string")
    if len(lineage) > 256:
        raise BadState("lineage: longer than 256 characters")
    if not isinstance(resources, list):
        raise BadState("resources: not a list")
    count = sum(len(r["instances"]) if isinstance(r, dict) and isinstance(r.get("instances"), list) else 1
                for r in resources)
    return StateFacts(serial, lineage, count, len(body), hashlib.sha256(body).hexdigest())


_scalar = (st.none() | st.booleans() | st.integers(-5, 10**21) | st.floats(allow_nan=False, allow_infinity=False)
           | st.sampled_from(["", " ", "a", "instances", "resources", "serial", "x.y"]))
_json = st.recursive(_scalar,
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                         st.sampled_from(["instances", "resources", "serial", "lineage", "a", "x.y"]), inner,
                         max_size=4), max_leaves=20)
_resource = st.dictionaries(st.sampled_from(["instances", "mode", "name", "x"]), _json, max_size=3) | _json
_member = st.sampled_from(["serial", "lineage", "resources", "version", "outputs"])


@given(members=st.lists(st.tuples(_member, st.one_of(
    _json, st.integers(-1, 10**20 + 1), st.text(max_size=3), st.text(min_size=255, max_size=258),
    st.lists(_resource, max_size=5))), max_size=6), top=st.booleans())
def test_the_streaming_parse_agrees_with_the_whole_documents(members: list[tuple[str, object]], top: bool) -> None:
    """Duplicate keys included (written as they come: the last one counts, as in `json.loads`)."""
    text = "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in members) + "}"
    body = (text if top else json.dumps([dict(members)])).encode()
    try:
        expected: StateFacts | str = _parsed_whole(body)
    except BadState as exc:
        expected = str(exc)
    try:
        got: StateFacts | str = parse_state(body)
    except BadState as exc:
        got = str(exc)
    assert got == expected


def test_content_md5_catches_a_body_cut_short() -> None:
    body = state(3)
    check_md5(body, base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode())
    check_md5(body, None)
    with pytest.raises(BadState, match="Content-MD5: does not match"):
        check_md5(body[:-5], base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode())
    with pytest.raises(BadState, match="Content-MD5: not base64"):
        check_md5(body, "%%%")


def test_writes_follow_lineage_and_serial() -> None:
    assert decide_write(None, facts(0), None, None).created
    assert decide_write(facts(3), facts(4), None, None).created
    same = decide_write(facts(3, sha="x"), facts(3, sha="x"), None, None)
    assert same.allow and not same.created  # a retried POST
    other = decide_write(facts(3, sha="x"), facts(3, sha="y"), None, None)
    assert (other.allow, other.status) == (False, 409) and "already stored with other content" in other.message
    lower = decide_write(facts(3), facts(2), None, None)
    assert (lower.allow, lower.status) == (False, 409) and "serial: 2 is lower than" in lower.message
    lineage = decide_write(facts(3), facts(9, lineage="zzz"), None, None)
    assert (lineage.allow, lineage.status) == (False, 409) and "lineage: 'zzz'" in lineage.message


def test_while_locked_only_the_holder_writes() -> None:
    assert decide_write(facts(1), facts(2), LOCK, "lock-1", "uid-1").allow
    for lock_id, uid in ((None, "uid-1"), ("lock-2", "uid-1"), ("lock-1", "uid-2"), ("lock-1", "")):
        verdict = decide_write(facts(1), facts(2), LOCK, lock_id, uid)
        assert (verdict.allow, verdict.status, verdict.lock) == (False, 409, LOCK)
        assert "run app-apply-1 attempt 1 (pod app-apply-1-1)" in verdict.message


ADMIN_LOCK = LockRecord("L", {}, "alice-admin")  # taken without a runner pod: no pod, no pod uid
RUNNER = "system:serviceaccount:team:burrito-py-runner"


def test_a_lock_no_pod_took_is_its_holders_or_an_admins() -> None:
    """Tenant code in the layer's runner reads the lock ID of an admin's lock (GET …/state/lock) and sends it: a lock
    no pod took is its holder's, or an admin's, never a runner pod's."""
    write = decide_write(facts(1), facts(2), ADMIN_LOCK, "L", "uid-runner", RUNNER)
    assert (write.allow, write.status, write.lock) == (False, 409, ADMIN_LOCK), write
    keep = decide_lock(ADMIN_LOCK, "L", "uid-runner", RUNNER)
    assert (keep.action, keep.status, keep.lock) == ("refuse", 423, ADMIN_LOCK), keep
    unlock = decide_unlock(ADMIN_LOCK, "L", False, "uid-runner", username=RUNNER)
    assert (unlock.action, unlock.status, unlock.lock) == ("refuse", 409, ADMIN_LOCK), unlock
    # Another identity without a pod, not an admin: not the holder either.
    assert not decide_write(facts(1), facts(2), ADMIN_LOCK, "L", "", "bob").allow
    assert decide_lock(ADMIN_LOCK, "L", "", "bob").status == 423
    # The holder itself, and any admin, still use it.
    assert decide_write(facts(1), facts(2), ADMIN_LOCK, "L", "", "alice-admin").allow
    assert decide_lock(ADMIN_LOCK, "L", "", "alice-admin").action == "keep"
    assert decide_unlock(ADMIN_LOCK, "L", False, "", username="alice-admin").action == "release"
    assert decide_write(facts(1), facts(2), ADMIN_LOCK, "L", "", "the-server", admin=True).allow
    assert decide_unlock(ADMIN_LOCK, "L", True, username="the-server").action == "release"


@given(stored=st.none() | st.tuples(st.integers(0, 10**6), st.sampled_from(["a", "b"]), st.sampled_from(["x", "y"])),
       posted=st.tuples(st.integers(0, 10**6), st.sampled_from(["a", "b"]), st.sampled_from(["x", "y"])),
       locked=st.booleans(), lock_id=st.sampled_from([None, "lock-1", "lock-2"]),
       uid=st.sampled_from(["", "uid-1", "uid-2"]))
def test_a_write_never_moves_a_state_back_nor_across_lineages(
    stored: tuple[int, str, str] | None, posted: tuple[int, str, str], locked: bool, lock_id: str | None, uid: str,
) -> None:
    current = facts(stored[0], stored[1], stored[2]) if stored else None
    incoming = facts(*posted)
    verdict = decide_write(current, incoming, LOCK if locked else None, lock_id, uid)
    if verdict.allow:
        assert not locked or (lock_id, uid) == ("lock-1", "uid-1")
        if current is not None:
            assert incoming.lineage == current.lineage and incoming.serial >= current.serial
            assert verdict.created == (incoming.serial > current.serial)
            assert incoming.serial > current.serial or incoming.sha256 == current.sha256
    else:
        assert verdict.status == 409 and verdict.message


def test_lock_acquire_keep_refuse() -> None:
    assert decide_lock(None, "lock-1").action == "acquire"
    assert decide_lock(LOCK, "lock-1", "uid-1").action == "keep"  # a retried LOCK
    taken = decide_lock(LOCK, "lock-2", "uid-2")
    assert (taken.action, taken.status, taken.lock) == ("refuse", 423, LOCK)
    # The same lock ID from another pod (a 423 showed it) is not the holder.
    assert decide_lock(LOCK, "lock-1", "uid-2").status == 423
    missing = decide_lock(None, None)
    assert (missing.action, missing.status) == ("refuse", 400) and "ID:" in missing.message


def test_unlock_only_by_the_holder_or_an_admin() -> None:
    assert decide_unlock(LOCK, "lock-1", False, "uid-1").action == "release"
    assert decide_unlock(None, "lock-1", False).action == "none"  # a retried UNLOCK
    wrong = decide_unlock(LOCK, "lock-2", False, "uid-1")
    assert (wrong.action, wrong.status, wrong.lock) == ("refuse", 409, LOCK)
    assert "locked by run app-apply-1 attempt 1 (pod app-apply-1-1)" in wrong.message
    assert decide_unlock(LOCK, "lock-1", False, "uid-2").status == 409
    assert decide_unlock(LOCK, None, False, "uid-1").status == 400
    assert decide_unlock(LOCK, None, True).action == "release"  # an admin's force-unlock (no body)
    assert decide_unlock(LOCK, "lock-1", True).action == "release"
    assert decide_unlock(LOCK, "lock-2", True).status == 409  # an admin naming another lock is mistaken


@given(held=st.booleans(), first=st.sampled_from(["lock-1", "lock-2"]), second=st.sampled_from(["lock-1", "lock-2"]),
       uid=st.sampled_from(["uid-1", "uid-2"]))
def test_at_most_one_holder(held: bool, first: str, second: str, uid: str) -> None:
    """Whatever is asked, a lock is only ever acquired when none is held, and a held lock is never released by a
    caller that is not its holder (unless forced)."""
    current = LOCK if held else None
    lock = decide_lock(current, first, uid)
    assert (lock.action == "acquire") == (current is None)
    unlock = decide_unlock(current, second, False, uid)
    if unlock.action == "release":
        assert current is not None and (second, uid) == (current.id, current.pod_uid)


def test_lock_requests() -> None:
    assert parse_lock_request(b"") == (None, {})
    assert parse_lock_request(b'{"ID": "x", "Who": "me"}') == ("x", {"ID": "x", "Who": "me"})
    assert parse_lock_request(b'{"Who": "me"}')[0] is None
    for body, reason in ((b"{", "not valid JSON"), (b"[]", "not a JSON object"), (b'{"ID": 3}', "ID: not a string")):
        with pytest.raises(BadState, match=reason):
            parse_lock_request(body)


def test_version_keys_sort_as_serials() -> None:
    keys = [version_key("states/ns/app", s) for s in (10, 9, 100, 0)]
    assert [version_serial(k) for k in sorted(keys)] == [0, 9, 10, 100]
    assert version_serial("states/ns/app/versions/00000000000000000009.json") is None
    assert version_serial("states/ns/app/lock.json") is None


SCOPE = RunnerScope("team", "app", "app-apply-1", "team", "repo", attempt=1, pod="app-apply-1-1", pod_uid="uid-1",
                    action="apply")
RUNNER = Principal("system:serviceaccount:team:burrito-py-runner", runner=SCOPE)


@pytest.mark.parametrize("action", ["state-read", "state-write", "state-lock"])
def test_only_the_layers_own_runner_and_admins_use_its_state(action: Action) -> None:
    assert authorize(RUNNER, action, LayerState("team", "app")) is None
    other = authorize(RUNNER, action, LayerState("team", "other"))
    assert other is not None and "only use its own layer's state, not the state of layer team/other" in other
    assert authorize(RUNNER, action, LayerState("elsewhere", "app")) is not None
    pull = Principal(RUNNER.username, runner=RunnerScope("team", "app", "pr-1", "team", "repo", 1, pull_request="7"))
    refused = authorize(pull, action, LayerState("team", "app"))
    assert refused is not None and "pull request 7" in refused
    assert authorize(Principal("admin", admin=True), action, LayerState("team", "app")) is None
    assert authorize(Principal("someone"), action, LayerState("team", "app")) is not None


@pytest.mark.parametrize("run_action", ["apply", "import", "state-rm", "state-mv", "migrate-state"])
def test_only_runs_that_write_state_write_it(run_action: str) -> None:
    writer = Principal(RUNNER.username, runner=replace(SCOPE, action=run_action))
    assert authorize(writer, "state-write", LayerState("team", "app")) is None


@pytest.mark.parametrize("run_action", ["plan", "force-unlock", ""])
def test_a_plan_reads_and_locks_its_state_and_never_writes_it(run_action: str) -> None:
    reader = Principal(RUNNER.username, runner=replace(SCOPE, action=run_action))
    assert authorize(reader, "state-read", LayerState("team", "app")) is None
    assert authorize(reader, "state-lock", LayerState("team", "app")) is None  # terraform plan locks; force-unlock
    refused = authorize(reader, "state-write", LayerState("team", "app"))
    assert refused is not None and "never writes a state" in refused


@pytest.mark.parametrize("action", ["state-read", "state-write", "state-lock"])
def test_an_ended_runs_token_has_no_right_to_the_state(action: Action) -> None:
    ended = Principal(RUNNER.username, runner=replace(SCOPE, ended=True))
    refused = authorize(ended, action, LayerState("team", "app"))
    assert refused is not None and "run app-apply-1, which has ended" in refused


def test_state_actions_never_reach_artifacts() -> None:
    assert authorize(RUNNER, "state-read", LayerArtifacts("team", "app", "app-apply-1")) is not None
    assert authorize(RUNNER, "read", LayerState("team", "app")) is not None


@given(serials=st.lists(st.integers(0, 1000), max_size=40), keep=st.integers(-2, 50))
def test_retention_never_drops_the_newest_versions(serials: list[int], keep: int) -> None:
    dropped = versions_to_drop(serials, keep)
    kept = sorted(set(serials) - set(dropped))
    newest = sorted(set(serials))[-max(1, keep):] if serials else []
    assert kept == newest  # exactly the newest max(1, keep): the current version is always kept
    assert set(dropped) <= set(serials)


def test_the_diff_names_resources_and_attributes_never_values() -> None:
    def doc(serial: int, resources: list[dict[str, object]], outputs: dict[str, object]) -> dict[str, object]:
        return {"serial": serial, "lineage": "l", "resources": resources, "outputs": outputs}

    db = {"mode": "managed", "type": "db", "name": "main", "instances": [
        {"attributes": {"password": "old-secret", "size": 1}, "sensitive_attributes": [[{"value": "password"}]]}]}
    db_new = {**db, "instances": [{"attributes": {"password": "new-secret", "size": 1}}]}
    keyed = {"mode": "managed", "type": "t", "name": "each", "module": "module.m",
             "instances": [{"index_key": "a", "attributes": {}}, {"index_key": 0, "attributes": {}}]}
    data = {"mode": "data", "type": "d", "name": "x", "instances": [{"attributes": {"v": 1}}]}
    old = doc(1, [db, data], {"url": {"value": "x"}, "gone": {"value": 1}})
    new = doc(2, [db_new, keyed], {"url": {"value": "y"}, "new": {"value": 2}})
    diff = state_diff(old, new)
    assert diff == {
        "from": 1, "to": 2,
        "added": ['module.m.t.each["a"]', "module.m.t.each[0]"], "removed": ["data.d.x"],
        "changed": [{"address": "db.main", "attributes": ["password"]}],
        "outputs": {"added": ["new"], "removed": ["gone"], "changed": ["url"]},
    }
    assert "secret" not in json.dumps(diff)


def test_a_rollback_restores_the_content_under_the_next_serial() -> None:
    old = state(2, "abc", resources=1)
    restored = json.loads(rollback_body(old, facts(7, "abc")))
    assert restored == {**json.loads(old), "serial": 8}
    with pytest.raises(BadState, match="lineage: the version is not of the current lineage 'zzz'"):
        rollback_body(old, facts(7, "zzz"))


def test_a_force_unlock_run_releases_only_the_lock_it_names() -> None:
    """The runner of a force-unlock run (its `spec.operation.lockId`, §5.12) releases that lock without holding it, as
    Terraform's force-unlock asks (an UNLOCK without a body); any other runner, or another lock, is refused."""
    assert decide_unlock(LOCK, None, False, "uid-9", force_unlock="lock-1").action == "release"
    other = decide_unlock(LOCK, None, False, "uid-9", force_unlock="lock-2")
    assert (other.action, other.status) == ("refuse", 409)
    assert "lock ID lock-2" in other.message and "lock-1" in other.message
    assert decide_unlock(LOCK, None, False, "uid-9").status == 400  # no force-unlock run: no ID, no unlock
    assert decide_unlock(None, None, False, "uid-9", force_unlock="lock-1").action == "none"


def test_held_bodies_wait_for_room_per_namespace_and_in_all() -> None:
    """The replica's room for posted states (state_routes.HeldBodies): one namespace's bodies never take more than
    its share; a body beyond waits for room (then takes it), or is refused after the wait."""
    import asyncio

    from burrito_py.datastore.state_routes import HeldBodies

    async def scenario() -> None:
        held = HeldBodies(limit=3, per_namespace=2, wait_seconds=0.2)
        async with held.holding("a") as a, held.holding("b") as b:
            assert await a(2) and await b(1)
            assert not await b(1), "the replica's whole room is held: refused after the wait"
            assert held.by_namespace == {"a": 2, "b": 1}
        assert held.used == 0 and not held.by_namespace
        async with held.holding("a") as second:
            async with held.holding("a") as first:
                assert await first(2)
                later = asyncio.ensure_future(second(1))  # the namespace's share is held: it waits
                await asyncio.sleep(0.05)
                assert not later.done()
            assert await later  # the first's room given back on its exit: the second takes it
            assert held.by_namespace == {"a": 1}
        assert held.used == 0

    asyncio.run(scenario())
