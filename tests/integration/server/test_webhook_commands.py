"""Comment commands through POST /api/webhook against the emulator (issue 30; docs/architecture.md §11.3,
"Comment commands"): a signed comment is recorded once on its TerraformPullRequest, whatever replica receives it
and however often; a forged one writes nothing; `/burrito-py approve` approves a fork's head only for an approver
and only the head the comment saw."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier

from burrito_py.api import annotations as ann
from burrito_py.pullrequests.commands import CommandFacts, LayerApply, decide_command, parse, pending_commands
from burrito_py.server.serving import running_server

from .test_webhook_endpoint import github, pull_request, server_settings, world  # noqa: F401 (world: a fixture)

HEAD = "a" * 40
PR = "default/infra-pr-3"


def comment(body: str, comment_id: int, login: str = "alice", created: str = "2026-03-01T10:10:00Z",
            number: int = 3) -> bytes:
    return json.dumps({"action": "created",
                       "issue": {"number": number, "state": "open", "pull_request": {"url": "https://x/pulls/3"}},
                       "comment": {"id": comment_id, "body": body, "user": {"login": login, "id": 9},
                                   "created_at": created},
                       "repository": {"clone_url": "https://github.com/org/infra.git", "full_name": "org/infra"},
                       "sender": {"login": login}}).encode()


def spec_of(api: ApiServer) -> dict[str, Any]:
    found = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["spec"]
             for o in api.list_objects(ann.API_VERSION, "terraformpullrequests")}
    return dict(found[PR])


def open_pull_request(http: httpx.Client) -> None:
    body = pull_request("opened", 3, HEAD)
    assert http.post("/api/webhook", content=body, headers=github(body, "right", "open-3", event="pull_request")
                     ).status_code == 202


def send(http: httpx.Client, body: bytes, delivery: str, secret: str = "right") -> httpx.Response:  # noqa: S107
    return http.post("/api/webhook", content=body, headers=github(body, secret, delivery, event="issue_comment"))


def test_a_command_is_recorded_once_whatever_replica_receives_it(world: tuple[ApiServer, httpx.Client]) -> None:  # noqa: F811
    api, http = world
    open_pull_request(http)
    body = comment("/burrito-py plan app\n\nplease", 501)
    answer = send(http, body, "c-1")
    assert answer.status_code == 202, answer.text
    assert answer.json() == {"command": "/burrito-py plan app", "comment": "501", "pullRequests": [PR]}
    assert spec_of(api)["commands"] == [{"id": "501", "by": "alice", "byId": 9, "text": "/burrito-py plan app",
                                         "at": "2026-03-01T10:10:00.000000Z", "headSha": HEAD, "note": ""}]
    # The provider redelivers it: this replica remembers the delivery...
    assert send(http, body, "c-1").json()["duplicate"] is True
    # ...and another replica (its own memory: nothing) finds the comment's id on the pull request. This is the
    # check that counts: without it the command would be recorded, and answered, twice.
    with running_server(server_settings()) as url, httpx.Client(base_url=url, timeout=10) as other:
        deadline = time.monotonic() + 10
        while (again := send(other, body, "c-1-redelivered")).status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert again.status_code == 200 and again.json() == {"duplicate": True, "comment": "501",
                                                             "pullRequests": [PR]}
    assert len(spec_of(api)["commands"]) == 1


def test_a_forged_comment_writes_nothing(world: tuple[ApiServer, httpx.Client]) -> None:  # noqa: F811
    api, http = world
    open_pull_request(http)
    api.clear_requests()
    body = comment("/burrito-py apply", 502, login="mallory")
    forged = send(http, body, "c-2", secret="guessed")
    assert forged.status_code == 401
    unsigned = http.post("/api/webhook", content=body, headers={"X-GitHub-Event": "issue_comment"})
    assert unsigned.status_code == 401
    assert not [r for r in api.requests if r.method in ("PATCH", "PUT", "POST")]
    assert "commands" not in spec_of(api)


def test_comments_that_are_not_commands_and_commands_on_unknown_pull_requests_change_nothing(
    world: tuple[ApiServer, httpx.Client],  # noqa: F811
) -> None:
    api, http = world
    open_pull_request(http)
    chat = send(http, comment("LGTM, but /burrito-py plan later", 503), "c-3")
    assert chat.status_code == 202 and "changes no plan" in chat.json()["ignored"]
    unknown = send(http, comment("/burrito-py plan", 504, number=99), "c-4")
    assert unknown.status_code == 202 and "no TerraformPullRequest" in unknown.json()["ignored"]
    edited = json.loads(comment("/burrito-py plan", 505))
    edited["action"] = "edited"
    raw = json.dumps(edited).encode()
    assert "changes no plan" in send(http, raw, "c-5").json()["ignored"]
    assert "commands" not in spec_of(api)
    # A command is recorded even when it will be refused (unknown, closed): the controller answers why.
    assert send(http, comment("/burrito-py destroy everything", 506), "c-6").status_code == 202
    assert [c["text"] for c in spec_of(api)["commands"]] == ["/burrito-py destroy everything"]


def set_forks(api: ApiServer, http: httpx.Client) -> None:
    applier = Applier(api.url)
    found = next(r for r in api.list_objects(ann.API_VERSION, "terraformrepositories")
                 if r["metadata"]["namespace"] == "default" and r["metadata"]["name"] == "infra")
    spec = {**found["spec"], "pullRequests": {"enabled": True, "forks": {"policy": "RequireApproval",
                                                                         "approvers": ["maint"]}}}
    applier.apply({"apiVersion": ann.API_VERSION, "kind": "TerraformRepository",
                   "metadata": {"name": "infra", "namespace": "default"}, "spec": spec})
    applier.close()
    time.sleep(1.0)  # the server's index follows repositories by a watch


def test_an_approve_comment_approves_a_forks_head_only_from_an_approver(
    world: tuple[ApiServer, httpx.Client],  # noqa: F811
) -> None:
    api, http = world
    set_forks(api, http)
    open_pull_request(http)  # its payload names no head repository: a fork (§11.3)
    assert spec_of(api)["fromFork"] is True
    # An outsider (the fork's author, say) approves their own pull request: nothing approved.
    assert send(http, comment("/burrito-py approve", 601, login="mallory"), "a-1").status_code == 202
    held = spec_of(api)
    assert held.get("approval") is None
    assert "mallory is not among spec.pullRequests.forks.approvers" in held["commands"][-1]["note"]
    # An approver's comment written before the pull request last changed (10:00) approves nothing: they may not
    # have seen the head it would approve.
    assert send(http, comment("/burrito-py approve", 602, login="maint", created="2026-03-01T09:59:00Z"),
                "a-2").status_code == 202
    assert spec_of(api).get("approval") is None and "changed after the comment" in spec_of(api)["commands"][-1]["note"]
    # An approver's comment after it approves the head recorded now, bound to it.
    assert send(http, comment("/burrito-py approve", 603, login="maint"), "a-3").status_code == 202
    assert spec_of(api)["approval"] == {"by": "maint", "headSha": HEAD, "label": "comment", "comment": "603",
                                        "byId": 9, "at": "2026-03-01T10:10:00.000000Z"}
    # A push is a new head: the approval names the old one (fork_gate waits again), and a redelivered approve
    # comment is a duplicate that approves nothing new.
    body = pull_request("synchronize", 3, "b" * 40, updated="2026-03-01T10:20:00Z")
    assert http.post("/api/webhook", content=body, headers=github(body, "right", "push-3", event="pull_request")
                     ).status_code == 202
    redelivered = send(http, comment("/burrito-py approve", 603, login="maint"), "a-3-again")
    assert redelivered.status_code == 200
    assert spec_of(api)["approval"]["headSha"] == HEAD and spec_of(api)["headSha"] == "b" * 40


def in_the_repository(body: bytes) -> bytes:
    """The pull request event `body` with its head in the base repository itself (not a fork)."""
    data = json.loads(body)
    for end in ("head", "base"):
        data["pull_request"][end]["repo"] = {"id": 42, "full_name": "org/infra"}
    return json.dumps(data).encode()


def apply_decision(api: ApiServer, status_head: str) -> Any:
    """What the pull request controller decides of the last recorded command once `status_head` is planned (the
    layer `app` changed, opted in to apply before merge, its plan done with its recorded sum; the commenter
    allowed, with write permission)."""
    spec = spec_of(api)
    pending = next(p for p in pending_commands(spec, {}) if p.id == str(spec["commands"][-1]["id"]))
    row = {"namespace": "default", "name": "app", "path": "app", "run": "pr3-app-1", "state": "planned",
           "planSum": "sha256:" + "1" * 64, "planAttempt": 1}
    status = {"state": "Planned", "headSha": status_head, "layers": [row]}
    settings = {"enabled": True, "commands": {"allowed": ["maint"]}}
    return decide_command(parse(pending.text), pending.id, pending.by, spec, status, settings,
                          CommandFacts(may_write=True), pending.note, pending.head_sha, "infra-pr-3",
                          {("default", "app"): LayerApply(opted_in=True)})


def test_attack_an_apply_comment_delivered_after_a_push_never_applies_the_pushed_head(
    world: tuple[ApiServer, httpx.Client],  # noqa: F811
) -> None:
    """Attack test: a maintainer comments `/burrito-py apply` at 10:10, on the plan of head A; the author pushes B
    at 10:20, and the comment's delivery reaches the server after the push's (deliveries are not ordered, and a
    failed one is redelivered later). The server bound the command to the head it held when the delivery came, B,
    so once B was planned the command applied B's plan, which the maintainer never saw. Now a comment is bound to
    the head it was written at: a GitHub comment written before the pull request last changed has none, and its
    apply is refused; one written after the push applies B."""
    api, http = world
    opened = in_the_repository(pull_request("opened", 3, HEAD))
    assert http.post("/api/webhook", content=opened, headers=github(opened, "right", "o-3", event="pull_request")
                     ).status_code == 202
    pushed = in_the_repository(pull_request("synchronize", 3, "b" * 40, updated="2026-03-01T10:20:00Z"))
    assert http.post("/api/webhook", content=pushed, headers=github(pushed, "right", "s-3", event="pull_request")
                     ).status_code == 202
    assert spec_of(api)["fromFork"] is False and spec_of(api)["headSha"] == "b" * 40
    late = comment("/burrito-py apply", 701, login="maint", created="2026-03-01T10:10:00Z")
    assert send(http, late, "late-apply").status_code == 202
    assert spec_of(api)["commands"][-1]["headSha"] != "b" * 40
    answer = apply_decision(api, "b" * 40)
    assert answer.outcome == "refused" and not answer.apply, answer.reply
    assert "changed after your comment" in answer.reply
    # A comment written after the push saw B: it applies B's plan.
    assert send(http, comment("/burrito-py apply", 702, login="maint", created="2026-03-01T10:25:00Z"),
                "fresh-apply").status_code == 202
    assert spec_of(api)["commands"][-1]["headSha"] == "b" * 40
    fresh = apply_decision(api, "b" * 40)
    assert fresh.outcome == "done" and [o.run for o in fresh.apply], fresh.reply


def gitlab(body: bytes, event: str) -> dict[str, str]:
    return {"X-Gitlab-Event": event, "X-Gitlab-Token": "right"}


def test_attack_a_gitlab_apply_note_is_bound_to_the_head_the_note_names(
    world: tuple[ApiServer, httpx.Client],  # noqa: F811
) -> None:
    """Attack test: GitLab's note event names the head the merge request had when the note was written. A note
    `/burrito-py apply` written at head A whose delivery comes after the push of B was bound to B (the head the
    server held), and applied B's plan once it was planned. Now it is bound to A, the head the note names: stale."""
    api, http = world
    project = {"path_with_namespace": "org/infra", "git_http_url": "https://github.com/org/infra.git"}

    def merge_request(action: str, sha: str, updated: str, **extra: Any) -> bytes:
        return json.dumps({"object_kind": "merge_request", "user": {"username": "author"}, "project": project,
                           "object_attributes": {"action": action, "iid": 3, "target_branch": "main",
                                                 "source_branch": "feature", "last_commit": {"id": sha},
                                                 "title": "t", "url": "https://x/mr", "updated_at": updated,
                                                 "source_project_id": 7, "target_project_id": 7, **extra}}
                          ).encode()

    opened = merge_request("open", HEAD, "2026-03-01 10:00:00 UTC")
    assert http.post("/api/webhook", content=opened, headers=gitlab(opened, "Merge Request Hook")).status_code == 202
    pushed = merge_request("update", "b" * 40, "2026-03-01 10:20:00 UTC", oldrev=HEAD)
    assert http.post("/api/webhook", content=pushed, headers=gitlab(pushed, "Merge Request Hook")).status_code == 202
    assert spec_of(api)["headSha"] == "b" * 40 and spec_of(api)["fromFork"] is False
    note = json.dumps({"object_kind": "note", "user": {"username": "maint", "id": 9}, "project": project,
                       "object_attributes": {"id": 801, "note": "/burrito-py apply", "noteable_type": "MergeRequest",
                                             "action": "create", "created_at": "2026-03-01 10:10:00 UTC"},
                       "merge_request": {"iid": 3, "state": "opened", "last_commit": {"id": HEAD}}}).encode()
    assert http.post("/api/webhook", content=note, headers=gitlab(note, "Note Hook")).status_code == 202
    assert spec_of(api)["commands"][-1]["headSha"] == HEAD
    answer = apply_decision(api, "b" * 40)
    assert answer.outcome == "refused" and not answer.apply and "stale" in answer.reply, answer.reply
