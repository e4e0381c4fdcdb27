"""Comment commands (issue 30 items 1, 2, 8; docs/architecture.md §11.3 "Comment commands"): the comment events of
each provider, the parser, who may command, what an approve comment approves, and each command's answer."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.gitproviders.base import BadPullRequest, CommentEvent
from burrito_py.gitproviders.client import ReviewFacts
from burrito_py.gitproviders.delivery import Delivery, comment_event
from burrito_py.pullrequests.commands import (
    PREFIX,
    VERBS,
    CommandFacts,
    Parsed,
    authorization,
    command_line,
    comment_approval,
    decide_command,
    identity_of,
    is_command,
    parse,
    pending_commands,
    reply_body,
    seen_head,
)
from burrito_py.pullrequests.forks import fork_gate

HEAD = "a" * 40
OLD = "b" * 40


# --- the providers' comment events -------------------------------------------------------------------------------

def github_comment(body: str = "/burrito-py plan", action: str = "created", pull: bool = True,
                   provider: str = "github", state: str = "open") -> Delivery:
    issue: dict[str, Any] = {"number": 7, "state": state}
    if pull:
        issue["pull_request"] = {"url": "https://example/pulls/7"}
    return Delivery(provider, "issue_comment", "d", {
        "action": action, "issue": issue,
        "comment": {"id": 991, "body": body, "user": {"login": "alice", "id": 5},
                    "created_at": "2026-03-01T10:20:30Z"},
        "repository": {"full_name": "team/infra"}, "sender": {"login": "alice"}})


def gitlab_note(body: str = "/burrito-py plan", noteable: str = "MergeRequest", state: str = "opened") -> Delivery:
    return Delivery("gitlab", "Note Hook", "d", {
        "object_kind": "note", "user": {"username": "bob", "id": 42},
        "project": {"path_with_namespace": "group/infra"},
        "object_attributes": {"id": 3001, "note": body, "noteable_type": noteable,
                              "created_at": "2026-03-01 10:20:30 UTC"},
        "merge_request": {"iid": 9, "state": state, "last_commit": {"id": HEAD}}})


def test_each_provider_reads_a_new_pull_request_comment() -> None:
    assert comment_event(github_comment()) == CommentEvent(
        "github", 7, "991", "/burrito-py plan", "alice", "team/infra", "2026-03-01T10:20:30.000000Z", 5, "open")
    assert comment_event(github_comment(provider="gitea", state="closed")) == CommentEvent(
        "gitea", 7, "991", "/burrito-py plan", "alice", "team/infra", "2026-03-01T10:20:30.000000Z", 5, "closed")
    assert comment_event(gitlab_note(state="merged")) == CommentEvent(
        "gitlab", 9, "3001", "/burrito-py plan", "bob", "group/infra", "2026-03-01T10:20:30.000000Z", 42, "merged",
        HEAD)


@pytest.mark.parametrize("delivery", [
    github_comment(action="edited"), github_comment(action="deleted"), github_comment(pull=False),
    gitlab_note(noteable="Issue"), Delivery("github", "push", "d", {"ref": "refs/heads/main"}),
])
def test_edits_deletions_and_issue_comments_are_not_commands(delivery: Delivery) -> None:
    assert comment_event(delivery) is None


def test_a_comment_missing_a_field_names_it() -> None:
    broken = github_comment()
    del broken.payload["comment"]["id"]
    with pytest.raises(BadPullRequest, match=r"comment\.id"):
        comment_event(broken)


# --- parsing -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "verb", "layers"), [
    ("/burrito-py plan", "plan", ()),
    ("/burrito-py plan app db app", "plan", ("app", "db")),
    ("\n  /burrito-py APPLY team/app  \nthanks!", "apply", ("team/app",)),
    ("/burrito-py apply stacks/app/", "apply", ("stacks/app/",)),
    ("/burrito-py unlock", "unlock", ()),
    ("/burrito-py approve", "approve", ()),
    ("/burrito-py help", "help", ()),
])
def test_commands_parse(text: str, verb: str, layers: tuple[str, ...]) -> None:
    parsed = parse(text)
    assert parsed.command is not None and (parsed.command.verb, parsed.command.layers) == (verb, layers)


@pytest.mark.parametrize(("text", "error"), [
    ("/burrito-py destroy", "unknown command `destroy`"),
    ("/burrito-py", "no command given"),
    ("/burrito-py unlock now", "takes no argument"),
    ("/burrito-py plan -target=x", "is not a layer name"),
    ("/burrito-py plan a;rm", "is not a layer name"),
    ("please /burrito-py plan", "not a command"),
])
def test_bad_commands_say_why(text: str, error: str) -> None:
    parsed = parse(text)
    assert parsed.command is None and error in parsed.error


def test_only_a_first_line_starting_with_the_prefix_is_a_command() -> None:
    assert is_command("/burrito-py plan") and is_command("\n\n/burrito-py")
    assert not is_command("/burrito-pyplan") and not is_command("I ran /burrito-py plan") and not is_command("")


@given(st.text(max_size=300))
def test_any_comment_parses_to_a_command_or_an_error_never_an_exception(text: str) -> None:
    parsed = parse(text)
    assert (parsed.command is None) != (parsed.error == "")
    if parsed.command is not None:
        assert is_command(text) and parsed.command.verb in VERBS
        assert all(not layer.startswith("-") and " " not in layer for layer in parsed.command.layers)


@given(st.sampled_from(VERBS), st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True), max_size=5))
def test_a_written_command_reads_back(verb: str, layers: list[str]) -> None:
    parsed = parse(" ".join([PREFIX, verb, *([] if verb in ("unlock", "approve", "help") else layers)]))
    assert parsed.command is not None and parsed.command.verb == verb


# --- who may command -------------------------------------------------------------------------------------------------

def test_authorization() -> None:
    assert "commands are off" in str(authorization("alice", None, True))
    assert authorization("alice", {"allowed": ["alice"]}, True) is None
    assert "write permission" in str(authorization("alice", {"allowed": ["alice"]}, False))
    assert "not among" in str(authorization("mallory", {"allowed": ["alice"]}, True))
    assert authorization("mallory", {"allowed": ["*"]}, True) is None
    assert authorization("alice", {"allowed": ["alice"], "requireWritePermission": False}, None) is None
    assert authorization("anyone", {"requireWritePermission": True}, True) is None
    assert "no one may" in str(authorization("anyone", {"requireWritePermission": False}, None))


@given(st.text(min_size=1, max_size=20), st.lists(st.text(min_size=1, max_size=20), max_size=4),
       st.sampled_from([None, True, False]), st.sampled_from([None, True, False]))
def test_no_one_outside_the_rule_is_authorized(login: str, allowed: list[str], require: bool | None,
                                               may_write: bool | None) -> None:
    settings: dict[str, Any] = {"allowed": allowed, **({} if require is None else {"requireWritePermission": require})}
    ok = authorization(login, settings, may_write) is None
    listed = "*" in allowed or login in allowed
    write_needed = require is not False
    assert ok == ((listed or (not allowed and write_needed)) and (may_write is True or not write_needed)
                  and (bool(allowed) or write_needed))


# --- decisions -------------------------------------------------------------------------------------------------------

SETTINGS: dict[str, Any] = {"enabled": True, "commands": {"allowed": ["alice"]}}
SPEC: dict[str, Any] = {"provider": "github", "number": 7, "headSha": HEAD, "state": "open", "base": "main",
                        "repository": "infra", "fromFork": False}
ROWS = [{"namespace": "team", "name": "app", "path": "stacks/app", "run": "pr7-app-1", "state": "planned",
         "planSum": "sha256:" + "1" * 64, "planAttempt": 1},
        {"namespace": "team", "name": "db", "path": "stacks/db", "run": "pr7-db-1", "state": "planning"},
        {"namespace": "team", "name": "web", "path": "stacks/web", "downstream": True, "state": "pending"}]
STATUS: dict[str, Any] = {"state": "Planning", "headSha": HEAD, "layers": ROWS}
WRITE = CommandFacts(may_write=True)


def decide(text: str, login: str = "alice", spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None,
           settings: dict[str, Any] | None = None, facts: CommandFacts = WRITE, note: str = "") -> Any:
    return decide_command(parse(text), "c1", login, spec or SPEC, STATUS if status is None else status,
                          SETTINGS if settings is None else settings, facts, note)


def test_plan_replans_the_named_layers_or_every_changed_one() -> None:
    assert decide("/burrito-py plan").replan == (("team", "app"), ("team", "db"))
    named = decide("/burrito-py plan team/db stacks/app")
    assert (named.outcome, named.replan) == ("done", (("team", "db"), ("team", "app")))


def test_bad_input_is_answered_with_the_reason_and_nothing_done() -> None:
    unknown = decide("/burrito-py destroy")
    assert unknown.outcome == "refused" and "unknown command" in unknown.reply and not unknown.replan
    untouched = decide("/burrito-py plan web other")
    assert untouched.outcome == "refused" and "does not change web, other" in untouched.reply
    closed = decide("/burrito-py plan", spec={**SPEC, "state": "closed"})
    assert closed.outcome == "refused" and "closed" in closed.reply and not closed.replan
    moved = decide("/burrito-py plan", spec={**SPEC, "headSha": OLD})
    assert moved.outcome == "refused" and "still being looked at" in moved.reply


def test_help_lists_every_command_for_anyone() -> None:
    answer = decide("/burrito-py help", login="mallory", facts=CommandFacts())
    assert answer.outcome == "done" and all(f"{PREFIX} {verb}" in answer.reply for verb in VERBS)


def test_the_permission_is_asked_only_of_an_allowed_login_and_decides() -> None:
    assert decide("/burrito-py plan", facts=CommandFacts()).ask == "permission"
    outsider = decide("/burrito-py plan", login="mallory", facts=CommandFacts())
    assert outsider.outcome == "refused" and "not among" in outsider.reply and not outsider.replan
    readonly = decide("/burrito-py apply app", facts=CommandFacts(may_write=False))
    assert readonly.outcome == "refused" and "no write permission" in readonly.reply


def test_a_forks_head_not_approved_is_not_planned_by_command() -> None:
    gated: dict[str, Any] = {"state": "AwaitingApproval", "headSha": None, "gatedSha": HEAD, "layers": []}
    answer = decide("/burrito-py plan", status=gated)
    assert answer.outcome == "refused" and "not planned" in answer.reply and not answer.replan


def test_apply_is_never_done_and_says_why() -> None:
    stale = decide("/burrito-py apply db")
    assert stale.outcome == "refused" and "stale" in stale.reply
    ready = decide("/burrito-py apply app")
    assert ready.outcome == "refused" and "apply-before-merge is not enabled for app" in ready.reply
    assert "pr7-app-1" in ready.reply


def test_an_apply_written_for_an_older_head_is_stale() -> None:
    answer = decide_command(parse("/burrito-py apply app"), "c1", "alice", SPEC, STATUS, SETTINGS, WRITE, "", OLD)
    assert answer.outcome == "refused" and "the plan you saw is stale" in answer.reply
    current = decide_command(parse("/burrito-py apply app"), "c1", "alice", SPEC, STATUS, SETTINGS, WRITE, "", HEAD)
    assert "stale" not in current.reply


def test_apply_requirements_each_named_when_failing() -> None:
    settings = {**SETTINGS, "commands": {"allowed": ["alice"],
                                         "applyRequirements": ["approved", "mergeable", "undiverged"]}}
    assert decide("/burrito-py apply app", settings=settings).ask == "review"
    by_author = ReviewFacts("carol", ("carol",), False, 3)
    refused = decide("/burrito-py apply app", settings=settings, facts=CommandFacts(True, by_author))
    assert refused.outcome == "refused"
    assert "approved: no reviewer other than the author" in refused.reply
    assert "mergeable: the provider says it cannot be merged" in refused.reply
    assert "undiverged: the head lacks 3 commit(s)" in refused.reply
    undecided = CommandFacts(True, ReviewFacts("c", (), None, None))
    unknown = decide("/burrito-py apply app", settings=settings, facts=undecided)
    assert "has not decided yet" in unknown.reply and "did not say" in unknown.reply
    good = CommandFacts(True, ReviewFacts("c", ("d",), True, 0))
    met = decide("/burrito-py apply app", settings=settings, facts=good)
    assert "requirement" not in met.reply and "apply-before-merge is not enabled" in met.reply


def test_unlock_says_a_pull_request_holds_no_lock() -> None:
    answer = decide("/burrito-py unlock")
    assert answer.outcome == "done" and "holds no lock" in answer.reply
    assert decide("/burrito-py unlock", login="mallory").outcome == "refused"


def test_the_reply_quotes_the_command_and_its_answer() -> None:
    body = reply_body("/burrito-py plan `x`", "alice", decide("/burrito-py plan"))
    assert body.startswith("burrito-py: `/burrito-py plan 'x'` by alice: done")


def test_pending_commands_are_those_not_answered() -> None:
    spec = {"commands": [{"id": "1", "by": "a", "text": "/burrito-py help"},
                         {"id": "2", "by": "b", "byId": 4, "text": "/burrito-py plan", "note": "n"}]}
    assert [p.id for p in pending_commands(spec, {"commands": [{"id": "1", "outcome": "done"}]})] == ["2"]
    assert pending_commands(spec, {})[1].by_id == 4


@given(st.text(max_size=120), st.sampled_from(["alice", "mallory", ""]), st.sampled_from(["open", "closed"]),
       st.sampled_from([None, True, False]))
def test_no_command_acts_for_someone_not_allowed_or_on_a_closed_pull_request(
        text: str, login: str, state: str, may_write: bool | None) -> None:
    answer = decide(text, login=login, spec={**SPEC, "state": state}, facts=CommandFacts(may_write=may_write))
    if answer.replan:
        assert login == "alice" and state == "open" and may_write is True
    assert not (answer.outcome == "done" and parse(text).command is not None
                and parse(text).command.verb == "apply")  # type: ignore[union-attr]


# --- approval by comment (item 8) ----------------------------------------------------------------------------------

FORKS: dict[str, Any] = {"enabled": True, "forks": {"policy": "RequireApproval", "approvers": ["maint"]}}
FORK_SPEC: dict[str, Any] = {**SPEC, "fromFork": True, "updatedAt": "2026-03-01T10:00:00Z"}


def test_an_approver_comment_approves_the_current_head_and_the_gate_opens() -> None:
    verdict = comment_approval(FORK_SPEC, FORKS, "maint", 4, "c9", "2026-03-01T10:05:00Z", "", later=False)
    assert verdict.approval == {"by": "maint", "headSha": HEAD, "label": "comment", "comment": "c9", "byId": 4,
                                "at": "2026-03-01T10:05:00Z"}
    # It counts once the provider says maint may write to the repository (anyone may comment under any login
    # that is free: a login can change hands).
    assert fork_gate({**FORK_SPEC, "approval": verdict.approval}, FORKS, {}) is not None
    confirmed = {"approvalChecked": {"comment": "c9", "by": "maint", "mayWrite": True}}
    assert fork_gate({**FORK_SPEC, "approval": verdict.approval}, FORKS, confirmed) is None
    # A push after it is a new head: it waits again.
    assert fork_gate({**FORK_SPEC, "headSha": OLD, "approval": verdict.approval}, FORKS, confirmed) is not None


@pytest.mark.parametrize(("login", "spec", "head", "later", "why"), [
    ("mallory", FORK_SPEC, "", False, "not among spec.pullRequests.forks.approvers"),
    ("maint", {**FORK_SPEC, "fromFork": False}, "", False, "not from a fork"),
    ("maint", {**FORK_SPEC, "state": "closed"}, "", False, "is closed"),
    ("maint", FORK_SPEC, OLD, False, "changed after the comment"),
    ("maint", FORK_SPEC, "", True, "changed after the comment"),
])
def test_an_approve_comment_that_approves_nothing_says_why(login: str, spec: dict[str, Any], head: str, later: bool,
                                                           why: str) -> None:
    verdict = comment_approval(spec, FORKS, login, None, "c9", "", head, later)
    assert verdict.approval is None and why in verdict.why


def test_the_gate_says_waiting_for_approval_and_names_the_comment() -> None:
    gate = fork_gate(FORK_SPEC, FORKS, {})
    assert gate is not None and "waiting for approval to plan" in gate.message and "/burrito-py approve" in gate.message


def test_the_approve_answer_follows_what_the_server_wrote_and_the_provider_said() -> None:
    approval = {"by": "maint", "headSha": HEAD, "label": "comment", "comment": "c1"}
    checked = {"comment": "c1", "by": "maint", "mayWrite": True}
    approved = decide("/burrito-py approve", spec={**FORK_SPEC, "approval": approval}, note="maint approved",
                      status={"approvalChecked": checked})
    assert (approved.outcome, approved.reply) == ("done", "maint approved")
    # Whoever holds the login now may not write: the approval the server wrote does not count.
    squatted = decide("/burrito-py approve", spec={**FORK_SPEC, "approval": approval}, note="maint approved",
                      status={"approvalChecked": {**checked, "mayWrite": False}})
    assert squatted.outcome == "refused" and "maint may not write to the repository" in squatted.reply
    refused = decide("/burrito-py approve", note="mallory is not among spec.pullRequests.forks.approvers")
    assert refused.outcome == "refused" and "nothing approved: mallory" in refused.reply


def test_parsed_is_a_value() -> None:
    assert parse("/burrito-py help") == Parsed(parse("/burrito-py help").command)


# --- git logins mapped to Kubernetes identities (a SubjectAccessReview decides) ----------------------------------

MAPPED: dict[str, Any] = {"enabled": True, "commands": {
    "allowed": ["alice"], "kubernetes": [{"login": "kate", "user": "kate@example", "groups": ["infra"]}]}}


def test_a_mapped_login_is_asked_of_the_api_then_of_the_provider() -> None:
    assert identity_of("kate", MAPPED["commands"]) == ("kate@example", ("infra",))
    assert identity_of("alice", MAPPED["commands"]) is None
    assert decide("/burrito-py plan", login="kate", settings=MAPPED, facts=CommandFacts()).ask == "access"
    denied = decide("/burrito-py plan", login="kate", settings=MAPPED, facts=CommandFacts(may_update=False))
    assert denied.outcome == "refused" and "Kubernetes user kate@example, who may not update" in denied.reply
    assert decide("/burrito-py plan", login="kate", settings=MAPPED, facts=CommandFacts(may_update=True)
                  ).ask == "permission"
    done = decide("/burrito-py plan", login="kate", settings=MAPPED, facts=CommandFacts(True, may_update=True))
    assert done.outcome == "done" and done.replan
    # Neither allowed nor mapped: refused before anything is asked.
    assert decide("/burrito-py plan", login="kurt", settings=MAPPED, facts=CommandFacts()).outcome == "refused"


@given(st.sampled_from(["alice", "kate", "kurt"]), st.sampled_from([None, True, False]),
       st.sampled_from([None, True, False]))
def test_a_mapped_login_never_acts_without_the_reviews_yes(login: str, may_write: bool | None,
                                                           may_update: bool | None) -> None:
    answer = decide("/burrito-py plan", login=login, settings=MAPPED,
                    facts=CommandFacts(may_write=may_write, may_update=may_update))
    if answer.replan:
        assert may_write is True and (login == "alice" or (login == "kate" and may_update is True))


def test_a_command_is_bound_to_the_head_its_comment_was_written_at() -> None:
    """The provider's word first (GitLab, Bitbucket, Azure DevOps name the head in the comment event), else the head
    recorded now, unless the pull request changed after the comment: unknown, and an apply is refused."""
    assert seen_head("a" * 40, "b" * 40, changed_since=True) == "a" * 40
    assert seen_head("", "b" * 40, changed_since=False) == "b" * 40
    assert seen_head("", "b" * 40, changed_since=True) == ""
    unknown = decide_command(parse("/burrito-py apply"), "c1", "alice", SPEC, STATUS, SETTINGS, WRITE, "", "")
    assert unknown.outcome == "refused" and not unknown.apply and "changed after your comment" in unknown.reply


@pytest.mark.parametrize("text", [
    "/burrito-py help [Approve here](https://evil.example/login) @org/admins <img src=x>",
    "/burrito-py [Approve](https://evil.example/x)",
    "/burrito-py plan <a href=https://evil.example>x</a>",
    "/burrito-py unlock @org/admins **urgent**: [re-login](https://evil.example)",
])
def test_attack_an_outsiders_malformed_command_is_echoed_inert_in_the_bots_reply(text: str) -> None:
    """Attack test: anyone may comment on a pull request, and a malformed command is answered (refused, saying
    why) before anything checks who wrote it. The reason echoed the comment's words as markdown: the bot posted the
    outsider's links, images and @-mentions of teams as its own words. Now what the comment wrote is code."""
    from markdown_it import MarkdownIt

    answer = decide(text, login="mallory", settings={"enabled": True})
    assert answer.outcome == "refused"
    rendered = MarkdownIt("commonmark").render(reply_body(command_line(text), "mallory", answer))
    outside = re.sub(r"<code>.*?</code>", "", rendered, flags=re.S)
    assert "<a " not in rendered and "<img" not in rendered and "<strong>" not in rendered
    assert "@org" not in outside and "evil.example" not in outside
