"""TerraformPullRequest: one pull/merge request of a repository, planned on its head (docs/architecture.md §11.3).

The server writes `spec` from the provider's webhooks; the pull request controller writes `status`: the layers the
head affects, each with its plan-only run and how far it has come, the sticky comment it published and the commit
statuses it sent.
"""

from __future__ import annotations

import hashlib
from typing import ClassVar, Literal, get_args

from pydantic import Field

from burrito_py.api.common import AGE_COLUMN, ApiModel, Condition, PrinterColumn, Resource

__all__ = [
    "PULL_REQUEST_LAYER_STATES",
    "ApprovalCheck",
    "HandledCommand",
    "MergedLayer",
    "MergedReview",
    "PullRequestApproval",
    "PullRequestCommand",
    "PullRequestComment",
    "PullRequestLayer",
    "PullRequestLayerState",
    "PullRequestProvider",
    "PullRequestState",
    "SentStatus",
    "TerraformPullRequest",
    "TerraformPullRequestSpec",
    "TerraformPullRequestStatus",
    "pull_request_name",
]

# The git providers, the one list: each name is a module of burrito_py/gitproviders/ (its registry loads them by
# these names; docs/CONTRIBUTING.md "A git provider"). Its order is the order webhook detection reverses.
PullRequestProvider = Literal["github", "gitlab", "gitea", "bitbucket", "bitbucket-datacenter", "azure-devops"]
_PROVIDERS: tuple[str, ...] = get_args(PullRequestProvider)
PullRequestState = Literal["open", "closed", "merged"]
PullRequestLayerState = Literal["pending", "planning", "planned", "failed"]
PULL_REQUEST_LAYER_STATES: tuple[PullRequestLayerState, ...] = ("pending", "planning", "planned", "failed")
SHA_PATTERN = r"^[0-9a-f]{7,64}$"


class PullRequestApproval(ApiModel):
    """Who approved which head of a fork's pull request, by adding the repository's approval label."""

    by: str = Field(min_length=1, description="The login that added the label (the delivery's sender).")
    head_sha: str = Field(pattern=SHA_PATTERN, description="The head it approves: a later push needs a new approval.")
    label: str = Field(min_length=1, description="The label added, or `comment` for `/burrito-py approve`.")
    comment: str | None = Field(
        default=None, description="The provider's id of the approving `/burrito-py approve` comment (unset: a label)."
    )
    by_id: int | None = Field(
        default=None, description="The commenter's numeric id, for a comment (GitLab asks members by it)."
    )
    at: str | None = Field(default=None, description="When (the event's updated_at, RFC 3339).")


class ApprovalCheck(ApiModel):
    """What the provider said of the author of a fork's approval by comment (anyone may comment, and a login can
    change hands: the approval counts only from an approver who may write to the repository)."""

    comment: str = Field(min_length=1, description="The approving comment's id (spec.approval.comment).")
    by: str = Field(description="Its author's login.")
    may_write: bool = Field(description="Whether the provider says that login may write to the repository.")
    at: str | None = Field(default=None, description="When it was asked (RFC 3339).")


class PullRequestCommand(ApiModel):
    """A `/burrito-py …` comment, as the server read it from the signed delivery (one entry per comment id: a
    redelivered comment finds its entry and adds nothing)."""

    id: str = Field(min_length=1, max_length=64, description="The provider's id of the comment.")
    by: str = Field(description="The commenter's login.")
    by_id: int | None = Field(default=None, description="The commenter's numeric id (GitLab asks members by it).")
    text: str = Field(max_length=1000, description="The command line as written (`/burrito-py plan app`).")
    at: str | None = Field(default=None, description="When it was written (RFC 3339).")
    head_sha: str | None = Field(
        default=None, description="The head the comment was written at: the provider's word when its comment event "
        "says (GitLab, Bitbucket, Azure DevOps), else spec.headSha when the server recorded it, empty when the pull "
        "request changed after the comment was written (an apply then refuses)."
    )
    note: str = Field(default="", max_length=500, description="What the server made of it (an approve: approved, "
                      "or why not).")


class HandledCommand(ApiModel):
    """A command the controller answered: never answered or acted on again."""

    id: str = Field(description="The comment's id.")
    outcome: Literal["done", "refused"] = Field(description="done or refused.")
    reply: str | None = Field(default=None, description="The provider's id of the reply.")
    message: str = Field(default="", max_length=1000, description="What the reply said, first line.")


class TerraformPullRequestSpec(ApiModel):
    """The pull/merge request as its provider last described it."""

    provider: PullRequestProvider = Field(description=f"{', '.join(_PROVIDERS[:-1])} or {_PROVIDERS[-1]}.")
    repository: str = Field(min_length=1, description="The TerraformRepository (in this namespace).")
    project: str = Field(
        min_length=1, description="How the provider's API names the repository: owner/repo (GitHub, Gitea), "
        "group/project (GitLab), workspace/repository (Bitbucket Cloud) or PROJECT/repository (Bitbucket Data "
        "Center)."
    )
    number: int = Field(ge=1, description="The pull request's number (GitLab: the merge request's iid).")
    base: str = Field(min_length=1, description="The branch it would merge into: the layers following it are planned.")
    head_branch: str = Field(default="", description="The branch it comes from (informational: forks have their own).")
    head_sha: str = Field(pattern=SHA_PATTERN, description="The head commit to plan.")
    state: PullRequestState = Field(default="open", description="open, closed or merged.")
    title: str = Field(default="", description="Its title.")
    url: str = Field(default="", description="Its web page.")
    updated_at: str | None = Field(
        default=None, description="When the provider last changed it, from the webhook event that wrote this spec "
        "(RFC 3339): an event older than this is a replay and is ignored."
    )
    from_fork: bool = Field(
        default=False, description="Its head lives in another repository than its base (a fork), as the signed "
        "delivery says (GitHub/Gitea head.repo vs base.repo, GitLab source vs target project; unknown: a fork). "
        "Planned only as the repository's spec.pullRequests.forks allows."
    )
    author: str = Field(default="", description="Who opened it (the provider's login; informational).")
    approval: PullRequestApproval | None = Field(
        default=None, description="The approval of a fork's head: the repository's approvalLabel, added by one of "
        "its approvers, at headSha (written by the server from the signed label event)."
    )
    commands: list[PullRequestCommand] = Field(
        default_factory=list, max_length=50,
        description="The latest comment commands (`/burrito-py …`), by comment id, written by the server from "
        "signed comment events; the controller answers each once (status.commands).",
    )


class PullRequestLayer(ApiModel):
    """One affected layer and its plan at the head."""

    namespace: str = Field(description="The layer's namespace.")
    name: str = Field(description="The layer.")
    path: str = Field(default="", description="Its path in the repository.")
    downstream: bool = Field(
        default=False, description="Not changed itself: it depends on a changed layer (shown, not planned)."
    )
    run: str | None = Field(default=None, description="The plan-only TerraformRun at the head.")
    replan: str | None = Field(
        default=None, description="The `/burrito-py plan` comment that asked for this layer's current plan."
    )
    state: PullRequestLayerState = Field(default="pending", description="pending, planning, planned or failed.")
    summary: str = Field(default="", description="The plan's summary, or why it failed.")
    changes_digest: str | None = Field(
        default=None, description="What its plan at the head would change, as the controllers' digest of the plan "
        "JSON the run controller recorded (plans/changes.py): what a merge compares with the branch's plan."
    )
    plan_sum: str | None = Field(
        default=None, description="sha256:<hex> of its plan at the head (the binary plan, as the run controller "
        "recorded it from the datastore): what `/burrito-py apply` applies, exactly."
    )
    plan_attempt: int | None = Field(default=None, ge=1, description="The attempt of the run that holds that plan.")
    apply_run: str | None = Field(
        default=None, description="The TerraformRun that applies that plan before merge (`/burrito-py apply`)."
    )


class MergedLayer(ApiModel):
    """One layer the merged head changed, and the changes of its plan there (what was reviewed)."""

    namespace: str = Field(description="The layer's namespace.")
    name: str = Field(description="The layer.")
    changes_digest: str | None = Field(
        default=None, description="The digest of its reviewed plan's changes (unset: no successful plan at the merged "
        "head)."
    )
    told: str | None = Field(
        default=None, description="The layer's verdict last said on the pull request (<result>:<plan sum>)."
    )


class MergedReview(ApiModel):
    """What the merge reviewed (issue 30 item 4): written once, when the controllers first see the merge."""

    head_sha: str | None = Field(default=None, description="The merged head.")
    at: str = Field(description="When the controllers saw the merge (RFC 3339): a layer applied after it is past it.")
    reason: str = Field(
        default="", max_length=1000, description="Why the merge approves no plan (empty: it was reviewed): a fork, a "
        "head not planned (a push after the plan), an apply requirement not met."
    )
    layers: list[MergedLayer] = Field(default_factory=list, description="The layers the merged head changed.")


class PullRequestComment(ApiModel):
    """The sticky comment as last published."""

    id: str = Field(description="The provider's id of the comment.")
    digest: str = Field(description="sha256 of the body published: an unchanged body is not sent again.")


class SentStatus(ApiModel):
    """A commit status sent for the head."""

    context: str = Field(description="burrito-py/<namespace>/<layer>, or burrito-py (the aggregate).")
    state: Literal["pending", "success", "failure"] = Field(description="pending, success or failure.")
    description: str = Field(default="", description="What it said.")


class TerraformPullRequestStatus(ApiModel):
    """What the controller made of the pull request."""

    state: Literal["Planning", "Planned", "Failed", "Closed", "Merged", "AwaitingApproval", "NotPlanned"] | None = (
        Field(default=None, description="Planning, Planned (every layer), Failed (a plan failed or was denied), "
              "Closed or Merged (its runs and artifacts are gone), AwaitingApproval (a fork's head no approver has "
              "labelled) or NotPlanned (a fork, and the repository plans no fork).")
    )
    head_sha: str | None = Field(default=None, description="The head the layers below were found and planned at.")
    gated_sha: str | None = Field(
        default=None, description="The head shown as not planned (a fork's, AwaitingApproval or NotPlanned)."
    )
    progress: str | None = Field(default=None, description="Layers planned (or failed) / layers to plan.")
    layers: list[PullRequestLayer] = Field(default_factory=list, description="The affected layers, then downstream.")
    comment: PullRequestComment | None = Field(default=None, description="The sticky comment.")
    statuses: list[SentStatus] = Field(default_factory=list, description="Commit statuses sent for headSha.")
    commands: list[HandledCommand] = Field(
        default_factory=list, description="The comment commands answered (the latest 100), by comment id."
    )
    approval_checked: ApprovalCheck | None = Field(
        default=None, description="A fork's approval by comment: whether its author may write to the repository, as "
        "the provider said when the controllers asked (once per approving comment)."
    )
    merged: MergedReview | None = Field(
        default=None, description="Once merged: what was reviewed, which the layers' plans on the branch are compared "
        "with (a plan that is the reviewed one applies without a manual approval)."
    )
    release_notice: list[str] | None = Field(
        default=None, description="Closed without a merge: the layers (<namespace>/<name>) it released whose notice "
        "on the pull request (what it applied before merge is still live) is not posted yet; written before they "
        "are released, unset once the notice is posted.",
    )
    conditions: list[Condition] = Field(
        default_factory=list, description="Planned (False: AwaitingApproval or ForkNotPlanned; True: NotAFork or "
        "Approved), Ready (the head is fetched and its layers found) and Published."
    )


class TerraformPullRequest(Resource):
    """A pull/merge request whose affected layers are planned (never applied) on its head."""

    KIND: ClassVar[str] = "TerraformPullRequest"
    PLURAL: ClassVar[str] = "terraformpullrequests"
    SINGULAR: ClassVar[str] = "terraformpullrequest"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("tfpr",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Provider", "string", ".spec.provider"),
        PrinterColumn("Number", "integer", ".spec.number"),
        PrinterColumn("Base", "string", ".spec.base"),
        PrinterColumn("Head", "string", ".spec.headSha"),
        PrinterColumn("State", "string", ".status.state"),
        PrinterColumn("Layers", "string", ".status.progress"),
        AGE_COLUMN,
    )

    kind: str = Field(default="TerraformPullRequest", description="TerraformPullRequest.")
    spec: TerraformPullRequestSpec
    status: TerraformPullRequestStatus = Field(default_factory=TerraformPullRequestStatus)


def pull_request_name(repository: str, number: int) -> str:
    """`<repository>-pr-<number>`, the one TerraformPullRequest of a pull request (so webhooks find it again); a
    hash stands in for the end of a repository name too long for it."""
    name = f"{repository}-pr-{number}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(repository.encode()).hexdigest()[:12]
    return f"{repository[:200].rstrip('-.')}-{digest}-pr-{number}"
