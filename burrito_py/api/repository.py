"""TerraformRepository: where Terraform code lives, and the defaults its layers inherit (docs/architecture.md §3)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Self

from pydantic import Field, StringConstraints, model_validator

from burrito_py.api.common import (
    AGE_COLUMN,
    ApiModel,
    Condition,
    GoDuration,
    ObjectName,
    OverrideRunnerSpec,
    PrinterColumn,
    RemediationStrategy,
    Resource,
    RunHistoryPolicy,
    StateSettings,
    SyncWindow,
    ToolSpec,
    check_single_tool,
)
from burrito_py.api.errors import PATTERN_EXPLANATIONS
from burrito_py.api.layer import RelativePath
from burrito_py.api.pullrequest import PullRequestProvider
from burrito_py.api.sharing import SHARED_WITH_PATTERN

__all__ = [
    "REPOSITORY_URL_PATTERN",
    "ApplyRequirement",
    "BranchStatus",
    "CommandIdentity",
    "CommandSettings",
    "ForkSettings",
    "PullRequestPolling",
    "PullRequestSettings",
    "RepositorySource",
    "RepositoryState",
    "TerraformRepository",
    "TerraformRepositorySpec",
    "TerraformRepositoryStatus",
]

# https://, http://, ssh://, file:// (local use) or scp-style `user@host:org/repo(.git)`.
REPOSITORY_URL_PATTERN = r"^((https?|ssh)://[^\s/@]+(@[^\s/]+)?(/\S*)?|file://\S+|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:\S+)$"
PATTERN_EXPLANATIONS[REPOSITORY_URL_PATTERN] = (
    "must be a git URL: https://, http://, ssh://, file:// or scp-style user@host:org/repo"
)

RepositoryState = Literal["SyncNeeded", "Synced"]


class RepositorySource(ApiModel):
    """The git repository and the credentials to read it."""

    url: Annotated[str, StringConstraints(pattern=REPOSITORY_URL_PATTERN)] = Field(
        description="Git URL: https://, http://, ssh://, scp-style git@host:org/repo, or file:// for local use."
    )
    secret_name: ObjectName | None = Field(
        default=None,
        description="Secret in the repository's namespace with git credentials (username/password, token, or "
        "sshPrivateKey with optional knownHosts) and webhookSecret.",
    )


ForkPolicy = Literal["Ignore", "RequireApproval"]


class ForkSettings(ApiModel):
    """Pull requests whose head lives in another repository (a fork): their code is an outsider's (§11.3)."""

    policy: ForkPolicy | None = Field(
        default=None, description="Ignore (unset): a fork's pull request is never planned. RequireApproval: planned "
        "only once one of `approvers` adds `approvalLabel`, and only at the head it was added at (a new push needs "
        "the label again)."
    )
    approval_label: str | None = Field(
        default=None, min_length=1, max_length=100,
        description="The label that approves the head of a fork's pull request (RequireApproval; unset: "
        "burrito-py/plan).",
    )
    approvers: list[Annotated[str, StringConstraints(min_length=1, max_length=255)]] = Field(
        default_factory=list, max_length=256,
        description="Provider logins (GitHub/Gitea login, GitLab username) whose label approves; the label added by "
        "anyone else approves nothing. RequireApproval needs at least one.",
    )
    inherit_secrets: bool | None = Field(
        default=None, description="Give a fork's plans the layer's varsFrom and Secret-fed runner env (unset: "
        "false; spec.pullRequests.inheritSecrets does not apply to forks)."
    )

    @model_validator(mode="after")
    def _approvers_for_approval(self) -> Self:
        if self.policy == "RequireApproval" and not self.approvers:
            raise ValueError("approvers: RequireApproval needs at least one login whose label approves")
        return self


ApplyRequirement = Literal["approved", "mergeable", "undiverged"]


class CommandIdentity(ApiModel):
    """A provider login and the Kubernetes identity it stands for (comment commands)."""

    login: str = Field(min_length=1, max_length=255, description="The provider login (GitLab username).")
    user: str = Field(min_length=1, max_length=255, description="The Kubernetes user name it acts as.")
    groups: list[Annotated[str, StringConstraints(min_length=1, max_length=255)]] = Field(
        default_factory=list, max_length=32, description="The Kubernetes groups it acts with."
    )


class CommandSettings(ApiModel):
    """Comment commands on pull requests (`/burrito-py plan|apply|unlock|approve|help`; docs/architecture.md §11.3,
    "Comment commands"): who may give them, and what an apply must meet."""

    allowed: list[Annotated[str, StringConstraints(min_length=1, max_length=255)]] = Field(
        default_factory=list, max_length=256,
        description="Provider logins (GitHub/Gitea login, GitLab username) who may give commands; `*` allows any "
        "commenter (then requireWritePermission should be true). Empty: only with requireWritePermission.",
    )
    kubernetes: list[CommandIdentity] = Field(
        default_factory=list, max_length=256,
        description="Logins mapped to Kubernetes identities: such a login may give commands when a "
        "SubjectAccessReview says its identity may update terraformlayers in the pull request's namespace (as "
        "`kubectl annotate` of a layer would need); a login listed here needs that even when also in `allowed`.",
    )
    require_write_permission: bool | None = Field(
        default=None, description="The commenter must also have write access to the repository on the provider "
        "(asked through its API: GitHub/Gitea write, maintain or admin; GitLab Developer or above). Unset: true."
    )
    apply_requirements: list[ApplyRequirement] = Field(
        default_factory=list, max_length=3,
        description="What an `apply` command needs, as Atlantis' apply_requirements: approved (by a reviewer "
        "other than the author), mergeable, undiverged (the head contains the base). A failing one refuses the "
        "apply, naming it.",
    )


class PullRequestPolling(ApiModel):
    """Find the open pull/merge requests by asking the git host, without webhooks (docs/architecture.md §11.3,
    "Pull requests without webhooks"): the same TerraformPullRequests as its webhooks would make."""

    provider: PullRequestProvider = Field(
        description="The git host's API: github, gitlab or gitea (bitbucket, bitbucket-datacenter and azure-devops "
        "cannot be polled: the repository says so in its PullRequestsPolled condition)."
    )
    interval: GoDuration | None = Field(
        default=None, description="How often the host is asked, e.g. 1m (unset: 1m; at least 10s; a rate limit "
        "the host answers with waits longer)."
    )


class PullRequestSettings(ApiModel):
    """Plans of pull/merge requests (docs/architecture.md §11.3): off unless enabled."""

    enabled: bool | None = Field(
        default=None, description="Plan the layers a pull/merge request affects, comment and set commit statuses "
        "(unset: false)."
    )
    api_url: str | None = Field(
        default=None, pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="The provider's API (e.g. https://github.example/api/v3); unset: derived from the repository "
        "URL (api.github.com for github.com, https://<host>/api/v4 for GitLab, /api/v1 for Gitea).",
    )
    comment_limit: int | None = Field(
        default=None, ge=4096,
        description="Largest comment the provider accepts, in characters; unset: GitHub 65536, GitLab 1000000, "
        "Gitea 65536, Bitbucket Cloud and Data Center 32768, Azure DevOps 150000.",
    )
    inherit_secrets: bool | None = Field(
        default=None, description="Give pull requests' plans (not a fork's: see forks) the layer's varsFrom values "
        "and the runner env, envFrom and volumes that come from Secrets (unset: false: they get none)."
    )
    forks: ForkSettings | None = Field(
        default=None, description="Pull requests from forks (unset: never planned)."
    )
    commands: CommandSettings | None = Field(
        default=None, description="Comment commands (unset: every command is answered that commands are off)."
    )
    poll: PullRequestPolling | None = Field(
        default=None, description="Ask the git host for its open pull requests (with the token of "
        "spec.repository.secretName) instead of waiting for its webhooks (unset: webhooks only)."
    )


NAME_PREFIX_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?-?$"
PATTERN_EXPLANATIONS[NAME_PREFIX_PATTERN] = (
    "must be lower-case letters, digits and '-', starting with a letter or digit (it begins layer names)"
)


class LayersFromUnits(ApiModel):
    """One TerraformLayer per Terragrunt unit (a directory with a terragrunt.hcl) found under `path` on `branch`,
    owned by the repository and kept in step with the tree (docs/architecture.md §9.1)."""

    branch: str = Field(min_length=1, description="The branch whose tree is searched, and the layers follow.")
    path: RelativePath | None = Field(
        default=None, description="Units at or below this path (unset or '.': the whole repository)."
    )
    name_prefix: Annotated[str, StringConstraints(pattern=NAME_PREFIX_PATTERN, max_length=40)] | None = Field(
        default=None, description="Prefix of the layers' names, before the unit's path with '/' as '-'. "
        "Unset: '<repository name>-'."
    )
    auto_apply: bool | None = Field(default=None, description="The layers apply their plans without approval "
                                    "(unset: false).")
    destroy_resources_on_deletion: bool | None = Field(
        default=None, description="A layer whose unit is gone destroys its resources before it goes (unset: false: "
        "they are left as they are)."
    )


PATTERN_EXPLANATIONS[SHARED_WITH_PATTERN] = "must be a namespace name (a DNS label) or '*' (every namespace)"
SharedWith = Annotated[str, StringConstraints(pattern=SHARED_WITH_PATTERN, max_length=63)]


class TerraformRepositorySpec(ApiModel):
    """Where the code lives; every other field is a default for the repository's layers."""

    repository: RepositorySource = Field(description="The git repository.")
    terraform: ToolSpec | None = Field(default=None, description="Terraform defaults for layers.")
    opentofu: ToolSpec | None = Field(default=None, description="OpenTofu defaults for layers.")
    terragrunt: ToolSpec | None = Field(default=None, description="Terragrunt defaults for layers.")
    remediation_strategy: RemediationStrategy | None = Field(
        default=None, description="Remediation defaults for layers."
    )
    override_runner_spec: OverrideRunnerSpec | None = Field(
        default=None, description="Runner pod overrides for layers."
    )
    run_history_policy: RunHistoryPolicy | None = Field(default=None, description="Run history defaults for layers.")
    state: StateSettings | None = Field(default=None, description="State defaults for layers (managed state).")
    max_concurrent_runner_pods: int | None = Field(
        default=None, ge=1, description="At most this many runner pods of this repository's layers run at once."
    )
    pull_requests: PullRequestSettings | None = Field(
        default=None, description="Plans of pull/merge requests: one comment and commit statuses per request."
    )
    sync_windows: list[SyncWindow] = Field(
        default_factory=list, description="Windows in which runs of this repository's layers may (not) start."
    )
    layers_from_units: LayersFromUnits | None = Field(
        default=None, description="Generate one TerraformLayer per Terragrunt unit under a path (unset: none; "
        "removing it deletes the generated layers)."
    )
    allowed_namespaces: list[SharedWith] = Field(
        default_factory=list, max_length=256,
        description="Other namespaces whose layers may use this repository (`*`: every namespace), where the "
        "controllers allow repositories of other namespaces at all (allowCrossNamespaceRepositories): its owners' "
        "consent, since its git credentials fetch the code those layers plan. Empty: its own namespace only."
    )

    @model_validator(mode="after")
    def _one_tool(self) -> Self:
        check_single_tool(self.terraform, self.opentofu)
        return self


class BranchStatus(ApiModel):
    """What the repository controller last saw of one branch used by the repository's layers."""

    name: str = Field(description="Branch name.")
    latest_rev: str | None = Field(default=None, description="Latest commit of the branch.")
    last_sync_date: str | None = Field(default=None, description="When the branch was last fetched (RFC 3339 UTC).")
    last_sync_status: str | None = Field(
        default=None, description="Synced, or what went wrong on the last fetch."
    )


class TerraformRepositoryStatus(ApiModel):
    """Observed state of a TerraformRepository."""

    state: RepositoryState | None = Field(default=None, description="SyncNeeded or Synced.")
    branches: list[BranchStatus] = Field(default_factory=list, description="Branches used by layers.")
    conditions: list[Condition] = Field(default_factory=list, description="Current conditions.")


class TerraformRepository(Resource):
    """A git repository holding Terraform/OpenTofu code, and defaults for the layers that use it."""

    KIND: ClassVar[str] = "TerraformRepository"
    PLURAL: ClassVar[str] = "terraformrepositories"
    SINGULAR: ClassVar[str] = "terraformrepository"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("tfr", "tfrs")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("State", "string", ".status.state"),
        PrinterColumn("URL", "string", ".spec.repository.url"),
        AGE_COLUMN,
    )

    kind: str = Field(default="TerraformRepository", description="TerraformRepository.")
    spec: TerraformRepositorySpec
    status: TerraformRepositoryStatus = Field(default_factory=TerraformRepositoryStatus)
