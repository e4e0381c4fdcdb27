"""Comment commands on pull requests (docs/architecture.md §11.3, "Comment commands"): pure.

`/burrito-py plan [layer…]`, `/burrito-py apply [layer…]`, `/burrito-py unlock`, `/burrito-py approve` (a fork's head,
issue 30 item 8) and `/burrito-py help`, written as a comment on the pull request. The server records each from
the signed delivery on the TerraformPullRequest (`spec.commands`, one entry per comment id: a redelivery adds
nothing); the pull request controller answers each once (`status.commands`), with a reply on the pull request.

This module reads a comment (`parse`), says who may give commands (`authorization`), what an approve comment
does to a fork's approval (`comment_approval`), and what each command does (`decide_command`): every answer is
a reply naming the reason, and only `plan` acts (it re-plans layers, under a run name that includes the
comment's id, so a second answer to one comment never makes a second run).

Apply: burrito-py applies a pull request's changes after it is merged (the layers follow their branch). A layer
may opt in to apply before merge (Atlantis' workflow, `spec.pullRequests.applyBeforeMerge`, `pullrequests/apply.py`):
then `apply`, after every check (who, the pull request is open and not a fork's, the layers, the plan is current,
the apply requirements of the repository and of each layer, no other pull request holds the layer, this plan was
not applied already), orders the apply of exactly the plan the comment shows (its run, attempt and sum) and the
layer's lock; without the opt-in it answers that apply-before-merge is not enabled for the layer. `unlock`
releases the locks the pull request holds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from burrito_py.gitproviders.client import ReviewFacts
from burrito_py.pullrequests.apply import APPLY_REQUIREMENTS, apply_run_name, requirements_for
from burrito_py.pullrequests.forks import comment_approval_refused, fork_settings

__all__ = [
    "APPLY_REQUIREMENTS",
    "PREFIX",
    "VERBS",
    "ApplyOrder",
    "ApprovalVerdict",
    "Command",
    "CommandDecision",
    "CommandFacts",
    "LayerApply",
    "Parsed",
    "authorization",
    "command_settings",
    "comment_approval",
    "decide_command",
    "help_text",
    "identity_of",
    "is_command",
    "needs_permission",
    "parse",
    "pending_commands",
    "reply_body",
    "seen_head",
]

PREFIX = "/burrito-py"
VERBS = ("plan", "apply", "unlock", "approve", "help")
MAX_LAYERS = 50
_LAYER = re.compile(r"^[A-Za-z0-9._/-]{1,253}$")
Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Command:
    verb: str
    layers: tuple[str, ...] = ()  # as written: a layer's name, `namespace/name`, or its path


@dataclass(frozen=True, slots=True)
class Parsed:
    """A comment read: its command, or the error that its reply names."""

    command: Command | None
    error: str = ""


def is_command(body: str) -> bool:
    """Whether a comment is addressed to us: its first non-blank line starts with `/burrito-py` (a word)."""
    line = next((ln.strip() for ln in body.splitlines() if ln.strip()), "")
    return line == PREFIX or line.startswith(PREFIX + " ") or line.startswith(PREFIX + "\t")


def command_line(body: str) -> str:
    """The command's line, as recorded (at most 1,000 characters)."""
    return next((ln.strip() for ln in body.splitlines() if ln.strip()), "")[:1000]


def _echo(text: str) -> str:
    """What a comment wrote, as a reply repeats it: a code span (anyone may comment, and the reply is the bot's:
    their links, HTML and @-mentions must not become its words). The text is one line already (`command_line`)."""
    return "`" + text.replace("`", "'") + "`"


def parse(text: str) -> Parsed:
    """`/burrito-py <verb> [layer…]` → the command, or why it is not one we know."""
    words = command_line(text).split()
    if not words or words[0] != PREFIX:
        return Parsed(None, f"not a command: a command starts with {PREFIX}")
    if len(words) == 1:
        return Parsed(None, f"no command given: {PREFIX} help lists them")
    verb, args = words[1].lower(), tuple(words[2:])
    if verb not in VERBS:
        return Parsed(None, f"unknown command {_echo(words[1][:40])}: {PREFIX} help lists the commands")
    if verb in ("unlock", "approve", "help") and args:
        return Parsed(None, f"{PREFIX} {verb} takes no argument (given: {_echo(' '.join(args)[:80])})")
    if len(args) > MAX_LAYERS:
        return Parsed(None, f"at most {MAX_LAYERS} layers in one command ({len(args)} given)")
    bad = [a for a in args if not _LAYER.match(a) or a.startswith("-")]
    if bad:
        return Parsed(None, f"{_echo(bad[0][:60])} is not a layer name (name, namespace/name or path)")
    return Parsed(Command(verb, tuple(dict.fromkeys(args))))


def help_text() -> str:
    return "\n".join([
        "Commands (a comment whose first line is one of them):",
        "",
        f"- `{PREFIX} plan [layer…]`: plan again the named layers (default: every layer the pull request changes)",
        f"- `{PREFIX} apply [layer…]`: apply a layer's plan before merge (only for layers that opt in; "
        "checked against the repository's apply requirements)",
        f"- `{PREFIX} unlock`: release the locks the pull request holds",
        f"- `{PREFIX} approve`: approve a fork's current head for planning (its approvers only)",
        f"- `{PREFIX} help`: this list",
        "",
        "A layer is named by its name, `namespace/name`, or its path.",
    ])


def command_settings(pull_requests: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """`spec.pullRequests.commands` of a repository; None when unset (commands are off)."""
    found = (pull_requests or {}).get("commands")
    return found if isinstance(found, Mapping) else None


def needs_permission(settings: Mapping[str, Any] | None) -> bool:
    """Whether the commenter's write permission must be asked of the provider (unset: it must)."""
    return settings is not None and settings.get("requireWritePermission") is not False


def identity_of(login: str, settings: Mapping[str, Any] | None) -> tuple[str, tuple[str, ...]] | None:
    """The Kubernetes (user, groups) `spec.pullRequests.commands.kubernetes` maps `login` to, else None."""
    for entry in (settings or {}).get("kubernetes") or ():
        if isinstance(entry, Mapping) and entry.get("login") == login and entry.get("user"):
            return str(entry["user"]), tuple(str(g) for g in entry.get("groups") or ())
    return None


def authorization(login: str, settings: Mapping[str, Any] | None, may_write: bool | None,
                  may_update: bool | None = None) -> str | None:
    """None when `login` may give plan, apply and unlock commands; else why not. `may_write`: the provider's
    answer; `may_update`: the SubjectAccessReview's for the login's Kubernetes identity (None: not asked).
    Commands are off without `spec.pullRequests.commands`; a login must be in `allowed` (`*`: anyone) or mapped
    in `kubernetes` (then its identity must pass the review) unless only write permission is required, and have
    write permission unless that is turned off; with none of them nobody may."""
    if settings is None:
        return "comment commands are off for this repository (spec.pullRequests.commands)"
    allowed = {str(a) for a in settings.get("allowed") or ()}
    mapped = bool(settings.get("kubernetes"))
    if not login:
        return "the comment names no author"
    write = needs_permission(settings)
    identity = identity_of(login, settings)
    if not allowed and not mapped and not write:
        return "no one may give commands: spec.pullRequests.commands has no allowed logins and no write permission"
    if (allowed or mapped) and "*" not in allowed and login not in allowed and identity is None:
        return f"{login} is not among spec.pullRequests.commands.allowed nor mapped in its kubernetes identities"
    if identity is not None and may_update is not True:
        return (f"{login} acts as the Kubernetes user {identity[0]}, who may not update terraformlayers in the "
                "pull request's namespace (a SubjectAccessReview)")
    if write and may_write is not True:
        return f"{login} has no write permission on the repository (spec.pullRequests.commands.requireWritePermission)"
    return None


@dataclass(frozen=True, slots=True)
class ApprovalVerdict:
    """What `/burrito-py approve` does: the approval to write in `spec.approval`, or why none."""

    approval: Mapping[str, Any] | None
    why: str


def comment_approval(spec: Mapping[str, Any], pull_requests: Mapping[str, Any] | None, login: str,
                     login_id: int | None, comment_id: str, at: str, head: str, later: bool) -> ApprovalVerdict:
    """`/burrito-py approve` on a fork's pull request by `login`, at `at`. `head`: the head the provider says the
    comment was written at (GitLab), else "" (GitHub, Gitea: the head recorded now). `later`: the pull request
    changed after the comment was written (its `spec.updatedAt` is newer): the commenter may not have seen the
    head it would approve, so nothing is approved. Bound to the head like a label's approval: a push needs a new
    one. It counts once the controllers know `login` (`login_id`: the provider's id of it) may write to the
    repository (`forks.approval_to_check`)."""
    if not spec.get("fromFork"):
        return ApprovalVerdict(None, "this pull request is not from a fork: it needs no approval to be planned")
    forks = fork_settings(pull_requests)
    if forks.get("policy") != "RequireApproval":
        return ApprovalVerdict(None, "the repository does not plan forks' pull requests "
                               "(spec.pullRequests.forks.policy)")
    if not login or login not in {str(a) for a in forks.get("approvers") or ()}:
        return ApprovalVerdict(None, f"{login or 'the commenter'} is not among spec.pullRequests.forks.approvers")
    if spec.get("state", "open") != "open":
        return ApprovalVerdict(None, f"the pull request is {spec.get('state')}")
    current = str(spec.get("headSha") or "")
    if (head and head != current) or later:
        return ApprovalVerdict(None, f"the pull request changed after the comment (its head is now {current[:12]}): "
                               "look at it and comment again")
    approval = {"by": login, "headSha": current, "label": "comment", "comment": comment_id,
                **({"byId": login_id} if login_id is not None else {}), **({"at": at} if at else {})}
    return ApprovalVerdict(approval, f"{login} approved head {current[:12]} for planning")


def seen_head(comment_head: str, recorded: str | None, changed_since: bool) -> str:
    """The head a comment was written at, recorded with its command: the provider's own word when its comment
    event says (GitLab, Bitbucket, Azure DevOps), else the head the pull request records now, unless it changed
    after the comment was written (`changed_since`: its `spec.updatedAt` is newer than the comment; a delivery that
    comes late, after a push's, or is redelivered): then "", unknown, and an apply refuses. Without this, a late
    apply comment would be bound to a head pushed after it, and apply that head's plan, which its author never saw."""
    if comment_head:
        return comment_head
    return "" if changed_since else str(recorded or "")


@dataclass(frozen=True, slots=True)
class CommandFacts:
    """What one command's decision reads besides the pull request: the provider's answers, asked only when
    needed (a decision says which it needs: `CommandDecision.ask`)."""

    may_write: bool | None = None
    review: ReviewFacts | None = None
    may_update: bool | None = None  # the login's Kubernetes identity may update the namespace's layers


@dataclass(frozen=True, slots=True)
class LayerApply:
    """What an apply or unlock command reads of one layer (gathered from the controllers' inventory)."""

    opted_in: bool = False  # spec.pullRequests.applyBeforeMerge
    requirements: tuple[str, ...] = ()  # its own apply requirements (added to the repository's)
    holder: str | None = None  # the open pull request holding it (`PULL_REQUEST_LOCK`), None: free
    applies: Mapping[str, str] = field(default_factory=dict)  # this pull request's apply runs of it → state
    # Those runs → the id of the comment that asked for them (`RUN_REQUESTED_BY`): a command answered again after
    # it was cut off partway (a restart, a failed create) finds its own runs, not someone else's apply.
    requested: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ApplyOrder:
    """Apply exactly this plan of the pull request (its plan run's attempt and recorded sum) as run `run`, after
    taking the layer's lock for the pull request."""

    layer: Key
    plan_run: str
    attempt: int
    sum: str
    run: str


@dataclass(frozen=True, slots=True)
class CommandDecision:
    outcome: Literal["done", "refused", "ask"]
    reply: str  # the reply's text (its first line is recorded in status.commands)
    replan: tuple[Key, ...] = ()  # layers to plan again, under the comment's id
    # "ask": the provider's (permission, review) or the API's (access) answer is needed first, then decide again
    ask: Literal["", "permission", "review", "access"] = ""
    apply: tuple[ApplyOrder, ...] = ()  # plans to apply before merge (each after taking its layer's lock)
    unlock: tuple[Key, ...] = ()  # layers whose lock by this pull request to release


def _refused(text: str) -> CommandDecision:
    return CommandDecision("refused", text)


def _named(names: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> tuple[list[Key], list[str]]:
    """The planned (not downstream) rows `names` name, by name, `namespace/name` or path; and the names matching
    none."""
    own = [r for r in rows if not r.get("downstream")]
    found: list[Key] = []
    missing: list[str] = []
    for wanted in names:
        hits = [(str(r["namespace"]), str(r["name"])) for r in own
                if wanted in (str(r["name"]), f"{r['namespace']}/{r['name']}", str(r.get("path") or "").strip("/"))
                or wanted.strip("/") == str(r.get("path") or "").strip("/")]
        if hits:
            found.extend(h for h in hits if h not in found)
        else:
            missing.append(wanted)
    return found, missing


def _requirements(required: Sequence[str], facts: ReviewFacts | None) -> list[str]:
    """Each apply requirement `facts` do not meet, with why."""
    if facts is None:
        return [f"{r}: the provider's answer is missing" for r in required]
    failing = []
    if "approved" in required and not [u for u in facts.approved_by if u and u != facts.author]:
        failing.append("approved: no reviewer other than the author has approved it")
    if "mergeable" in required and facts.mergeable is not True:
        failing.append("mergeable: the provider says it cannot be merged" if facts.mergeable is False
                       else "mergeable: the provider has not decided yet whether it can be merged")
    if "undiverged" in required and facts.behind != 0:
        failing.append(f"undiverged: the head lacks {facts.behind} commit(s) of the base: merge or rebase it"
                       if facts.behind else "undiverged: the provider did not say whether the head contains the base")
    return failing


def decide_command(parsed: Parsed, comment_id: str, login: str, spec: Mapping[str, Any], status: Mapping[str, Any],
                   pull_requests: Mapping[str, Any] | None, facts: CommandFacts, note: str = "",
                   seen_head: str | None = None, name: str = "",
                   layers: Mapping[Key, LayerApply] | None = None) -> CommandDecision:
    """The answer to one command. `status`: the pull request's status as decided now (its layers at the head;
    `approvalChecked`: whether an approve comment's author may write to the repository).
    `note`: what the server said of an approve comment (it writes the approval from the signed delivery).
    `seen_head`: the head the comment was written at (`seen_head()`): an apply of a plan shown for another head is
    stale, and one whose head is unknown ("") is refused; None: not checked.
    `name`: the TerraformPullRequest; `layers`: what apply and unlock read of the namespace's layers (a layer not
    in it has not opted in and is not held)."""
    layers = layers or {}
    if parsed.command is None:
        return _refused(parsed.error)
    verb = parsed.command.verb
    if verb == "help":
        return CommandDecision("done", help_text())
    if verb == "approve":
        if (spec.get("approval") or {}).get("comment") == comment_id:
            refused = comment_approval_refused(spec, status)
            return (CommandDecision("done", note or f"{login} approved the head for planning") if refused is None
                    else _refused(f"nothing approved: {refused}"))
        return _refused(f"nothing approved: {note}" if note and not note.startswith("nothing approved") else
                        note or "nothing approved")
    settings = command_settings(pull_requests)
    # The provider and the API are asked only about a login the allow-list or the mapping lets through.
    if facts.may_update is None and identity_of(login, settings) is not None and authorization(
            login, settings, True, True) is None:
        return CommandDecision("ask", "", ask="access")
    if (facts.may_write is None and needs_permission(settings)
            and authorization(login, settings, True, facts.may_update) is None):
        return CommandDecision("ask", "", ask="permission")
    refusal = authorization(login, settings, facts.may_write, facts.may_update)
    if refusal is not None:
        return _refused(f"{login or 'this commenter'} may not give commands here: {refusal}")
    state = spec.get("state", "open")
    if state != "open":
        return _refused(f"the pull request is {state}: commands act on open pull requests only")
    if verb == "unlock":
        return _unlock(name, layers)
    if verb == "apply" and spec.get("fromFork", True):
        return _refused("a fork's pull request is never applied before merge: its code would run with the layers' "
                        "credentials. It applies, if at all, after it is merged. Nothing applied")
    head = str(spec.get("headSha") or "")
    if status.get("gatedSha") == head and status.get("headSha") != head:
        return _refused(f"the head {head[:12]} is not planned: {status.get('state')} (a fork's pull request: "
                        f"`{PREFIX} approve` by an approver, or the approval label, first)")
    if status.get("headSha") != head:
        return _refused(f"the head {head[:12]} is still being looked at: comment again once it is planned")
    rows = [r for r in status.get("layers") or () if not r.get("downstream")]
    if not rows:
        return _refused("this pull request changes no layer")
    names = parsed.command.layers
    keys, missing = _named(names, rows) if names else (
        [(str(r["namespace"]), str(r["name"])) for r in rows], [])
    if missing:
        touched = ", ".join(str(r["name"]) for r in rows)
        return _refused(f"this pull request does not change {', '.join(missing)[:200]} (it changes: "
                        f"{touched[:400]}): nothing done")
    if verb == "plan":
        return CommandDecision("done", f"planning again at {head[:12]}: {', '.join(k[1] for k in keys)}",
                               tuple(keys))
    # apply
    if seen_head == "":
        return _refused(f"the pull request changed after your comment was written (its head is now {head[:12]}): "
                        "the plan you saw may not be the one shown now: look at the current plan and comment again. "
                        "Nothing applied")
    if seen_head is not None and seen_head != head:
        return _refused(f"the plan you saw is stale: the head moved from {seen_head[:12]} to {head[:12]} since "
                        "your comment: look at the new plan and comment again. Nothing applied")
    by_key = {(str(r["namespace"]), str(r["name"])): r for r in rows}
    stale = [k[1] for k in keys if by_key[k].get("state") != "planned" or not by_key[k].get("run")
             or not by_key[k].get("planSum") or not by_key[k].get("planAttempt")]
    if stale:
        return _refused(f"no current plan to apply for {', '.join(stale)}: its plan at {head[:12]} is not done "
                        "or failed (the plan shown is stale): nothing applied")
    required = requirements_for([r for r in APPLY_REQUIREMENTS if r in ((settings or {}).get("applyRequirements")
                                                                        or ())],
                                [layers.get(k, LayerApply()).requirements for k in keys])
    if required and facts.review is None:
        return CommandDecision("ask", "", ask="review")
    failing = _requirements(required, facts.review) if required else []
    if failing:
        return _refused("apply refused, requirement not met: " + "; ".join(failing) + ". Nothing applied")
    closed = [k for k in keys if not layers.get(k, LayerApply()).opted_in]
    if closed:
        return _refused(f"apply-before-merge is not enabled for {', '.join(k[1] for k in closed)} "
                        "(spec.pullRequests.applyBeforeMerge): burrito-py applies a layer's changes after the pull "
                        "request is merged into the branch it follows (the plan shown is "
                        f"{', '.join(str(by_key[k]['run']) for k in closed)}). Nothing applied")
    held = [(k, layers[k].holder) for k in keys if layers[k].holder not in (None, name)]
    if held:
        return _refused("; ".join(f"layer {k[0]}/{k[1]} is locked to pull request {h} (it applied its plan before "
                                  "merge)" for k, h in held)
                        + ": it is released when that pull request merges or closes, or by `/burrito-py unlock` "
                        "there. Nothing applied")
    number = int(spec.get("number") or 0)
    orders = [ApplyOrder(k, str(by_key[k]["run"]), int(by_key[k]["planAttempt"]), str(by_key[k]["planSum"]),
                         apply_run_name(name, number, k, str(by_key[k]["planSum"]))) for k in keys]
    # Runs this very command created before it was cut off are its own work: the rest are created now.
    again = [o for o in orders if o.run in layers[o.layer].applies
             and layers[o.layer].requested.get(o.run) != comment_id]
    if again:
        failed = [o for o in again if layers[o.layer].applies[o.run] == "Failed"]
        if failed:
            return _refused("; ".join(f"the apply of {o.layer[1]}'s plan {o.sum} (run {o.run}) failed" for o in failed)
                            + f": a plan is applied once; `{PREFIX} plan` plans again, then apply the new plan. "
                            "Nothing applied")
        return _refused("already applied: " + "; ".join(
            f"{o.layer[1]}'s plan {o.sum} is applied by run {o.run}" for o in again) + ". Nothing applied again")
    return CommandDecision("done", "applying the plans shown, exactly, with the layers' runner identity and under "
                           "their Lease: " + "; ".join(f"{o.layer[0]}/{o.layer[1]}: plan {o.sum} (run {o.plan_run} "
                                                       f"attempt {o.attempt}) as run {o.run}" for o in orders)
                           + ". The layers are locked to this pull request until it merges or closes "
                           "(`/burrito-py unlock` releases them)", apply=tuple(orders))


def _unlock(name: str, layers: Mapping[Key, LayerApply]) -> CommandDecision:
    """Release the layers this pull request holds; never while one of its applies still runs."""
    held = sorted(k for k, f in layers.items() if name and f.holder == name)
    if not held:
        return CommandDecision("done", "this pull request holds no lock (its plans take none: they run with "
                               "-lock=false under their own Lease; only an apply before merge locks a layer)")
    live = [run for k in held for run, state in layers[k].applies.items() if state not in ("Succeeded", "Failed")]
    if live:
        return _refused(f"run {', '.join(live)} is still applying: unlock once it has finished. Nothing released")
    return CommandDecision("done", f"released {', '.join(f'{k[0]}/{k[1]}' for k in held)}: the changes this pull "
                           "request applied are still live; the layers' own runs may now apply the branch's code "
                           "over them", unlock=tuple(held))


@dataclass(frozen=True, slots=True)
class Pending:
    """A recorded command the controller has not answered yet."""

    id: str
    by: str
    by_id: int | None
    text: str
    note: str = ""  # what the server said of it (an approve: approved, or why not)
    head_sha: str = ""  # the head the comment was written at (`seen_head`), "" when unknown


def pending_commands(spec: Mapping[str, Any], status: Mapping[str, Any]) -> list[Pending]:
    """`spec.commands` not yet in `status.commands`, oldest first."""
    handled = {str(c.get("id")) for c in status.get("commands") or ()}
    return [Pending(str(c["id"]), str(c.get("by") or ""), c["byId"] if isinstance(c.get("byId"), int) else None,
                    str(c.get("text") or ""), str(c.get("note") or ""), str(c.get("headSha") or ""))
            for c in spec.get("commands") or () if str(c.get("id")) not in handled]


def reply_body(text: str, login: str, decision: CommandDecision) -> str:
    """The reply to a command: what was asked, by whom, and the answer (done, or refused and why)."""
    mark = "done" if decision.outcome == "done" else "refused"
    quoted = text[:200].replace("`", "'")
    return f"burrito-py: `{quoted}` by {login or 'unknown'}: {mark}\n\n{decision.reply}"
