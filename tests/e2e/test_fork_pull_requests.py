"""Issue 24, finding 1a, mounted as an outsider and as a pull request's code would: untrusted code never meets
trusted credentials.

- An outsider's fork pull request (a signed `pull_request` delivery whose head repository is not the base one) is
  never planned by default: no TerraformRun, and the pull request says so (its state, the `Planned` condition, the
  comment and a pending commit status).
- With `forks.policy: RequireApproval` it is planned only once an approver adds the approval label, at the head
  it was added at: the author's own label approves nothing, and a push after the approval waits for a new one.
- A pull request's plan (not a fork's) runs as the pull requests' own ServiceAccount, with none of the layer's
  `varsFrom` values nor its Secret-fed runner env; with `inheritSecrets` it gets them, and the comment still never
  shows a Secret-fed value.

Real git, real terraform, the real server receiving signed webhooks, a fake GitHub API on loopback.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.datastore.client import DatastoreClient
from burrito_py.pullrequests.comment import marker
from tests.support.git_repos import TestRepo
from tests.support.real_cluster import RealCluster

from .conftest import layer_code, wait_for
from .test_git_credentials import put_secret
from .test_pull_requests import World, pr_runs, pull_request_world

LABEL = "plan-it"
SECRET_VALUE = "s3cr3t-from-the-layers-Secret"  # a test value: what must not leak
SHORT_SECRET = "k9Z"


def ours(world: World, number: int) -> list[str]:
    """Our comment on pull request `number` (World.ours is #1's)."""
    return [body for body in world.fake.comments.values()
            if body.startswith(marker(f"{world.platform.namespace}/infra", number))]


def condition(body: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (body.get("status") or {}).get("conditions") or () if c["type"] == type_), {})


def wait_state(world: World, number: int, state: str, timeout: float = 60) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        body = world.pull_request(number)
        return body if (body.get("status") or {}).get("state") == state else None

    return wait_for(reached, timeout, interval=0.2, what=f"pull request #{number} {state}")


def no_run_for(world: World, seconds: float = 4.0) -> None:
    """No pull request run appears for `seconds` (the controllers act within a second of a spec change)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not pr_runs(world.platform), [r["metadata"]["name"] for r in pr_runs(world.platform)]
        time.sleep(0.2)


def allow_forks(world: World) -> None:
    world.platform.custom.patch_namespaced_custom_object(
        ann.GROUP, ann.VERSION, world.platform.namespace, "terraformrepositories", "infra",
        {"spec": {"pullRequests": {"forks": {"policy": "RequireApproval", "approvers": ["maintainer"],
                                             "approvalLabel": LABEL}}}})


def test_a_forks_pull_request_is_not_planned_by_default_nor_before_an_approvers_label_of_its_head(
    tmp_path: Path, repo: TestRepo, real_cluster: RealCluster
) -> None:
    with pull_request_world(tmp_path, repo, "github", real_cluster) as world:
        # The outsider's code: any change would do (a provider shipped in the pull request, an external data source).
        head = world.push(5, {"layers/app/main.tf": layer_code("from a fork")}, "a fork's change")
        world.hook("opened", 5, head, fork=True, sender="outsider")
        ignored = wait_state(world, 5, "NotPlanned")
        assert ignored["spec"]["fromFork"] is True and ignored["spec"]["author"] == "author"
        assert condition(ignored, "Planned")["reason"] == "ForkNotPlanned"
        no_run_for(world)
        wait_for(lambda: world.statuses(head).get("burrito-py", {}).get("state") == "pending", 30,
                 what="the pending status saying why")
        assert "does not plan" in world.statuses(head)["burrito-py"]["description"]
        assert len(ours(world, 5)) == 1 and "not planned" in ours(world, 5)[0]

        # The repository plans forks once approved: the author labelling their own pull request approves nothing.
        allow_forks(world)
        world.hook("labeled", 5, head, fork=True, sender="outsider", label=LABEL)
        waiting = wait_state(world, 5, "AwaitingApproval")
        assert condition(waiting, "Planned")["reason"] == "AwaitingApproval"
        assert "approval" not in waiting["spec"]
        no_run_for(world)
        wait_for(lambda: "awaiting approval" in world.statuses(head).get("burrito-py", {}).get("description", ""),
                 30, what="the status asking for an approval")
        assert "maintainer" in ours(world, 5)[0] and LABEL in ours(world, 5)[0]

        # An approver's label approves this head: planned.
        world.hook("labeled", 5, head, fork=True, sender="maintainer", label=LABEL)
        planned = world.wait_pr(5, head, "Planned", timeout=150)
        assert planned["spec"]["approval"]["by"] == "maintainer" and planned["spec"]["approval"]["headSha"] == head
        assert condition(planned, "Planned")["reason"] == "Approved"
        assert len(pr_runs(world.platform)) == 1

        # A push after the approval: a new head, which waits for its own approval; the old head's run is gone.
        pushed = world.push(5, {"layers/app/main.tf": layer_code("pushed after the approval")}, "sneaky push")
        world.hook("synchronize", 5, pushed, fork=True, sender="outsider")
        again = wait_state(world, 5, "AwaitingApproval")
        assert "new push needs a new approval" in condition(again, "Planned")["message"]
        wait_for(lambda: not pr_runs(world.platform), 60, what="the approved head's run discarded")
        no_run_for(world)

        # The approver labels again (GitHub: remove and add), at the new head: planned.
        world.hook("unlabeled", 5, pushed, fork=True, sender="maintainer", label=LABEL)
        wait_for(lambda: "approval" not in world.pull_request(5)["spec"], 30, what="the approval withdrawn")
        world.hook("labeled", 5, pushed, fork=True, sender="maintainer", label=LABEL)
        wait_for(lambda: (world.pull_request(5)["spec"].get("approval") or {}).get("headSha") == pushed, 30,
                 what=f"the approval of the new head ({world.answers[-2:]})")
        world.wait_pr(5, pushed, "Planned", timeout=150)
        assert all(r["spec"]["action"] == "plan" for r in world.platform.runs())  # nothing applied anywhere


def test_a_pull_requests_plan_gets_no_secret_of_the_layer_runs_as_its_own_account_and_its_comment_masks(
    tmp_path: Path, repo: TestRepo, real_cluster: RealCluster
) -> None:
    with pull_request_world(tmp_path, repo, "github", real_cluster) as world:
        platform = world.platform
        put_secret(platform, "app-vars", {"message": SECRET_VALUE}, open_to_runners=True)
        platform.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                       "terraformlayers", "app",
                                                       {"spec": {"varsFrom": [{"kind": "Secret", "name": "app-vars"}]}})
        platform.custom.patch_namespaced_custom_object(
            ann.GROUP, ann.VERSION, platform.namespace,
                "terraformrepositories", "infra", {"spec": {"overrideRunnerSpec": {
                "env": [{"name": "CLOUD_TOKEN", "valueFrom": {"secretKeyRef": {"name": "app-vars", "key": "message"}}},
                        {"name": "PLAIN", "value": "kept"}]}}})

        # A pull request of the repository itself (no fork): planned, but with nothing of the layer's secrets.
        head = world.push(6, {"layers/app/main.tf": layer_code("the default")}, "change app")
        world.hook("opened", 6, head)
        done = world.wait_pr(6, head, "Planned", timeout=150)
        run = done["status"]["layers"][0]["run"]
        pods = platform.core.list_namespaced_pod(platform.namespace, label_selector=f"{ann.LABEL_RUN}={run}").items
        assert pods, "the pull request run's pod"
        pod = platform.core.api_client.sanitize_for_serialization(pods[0])
        assert pod["spec"]["serviceAccountName"] == "burrito-py-runner-pr"
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert "CLOUD_TOKEN" not in env and env["PLAIN"]["value"] == "kept"
        token = (platform.kubeconfig.read_text().split("token: ", 1)[1].split()[0]).strip("'\"")
        with DatastoreClient(platform.datastore_url, token=token) as store:
            record = json.loads(store.get_inputs(platform.namespace, "app", run))
            plan = store.get_plan(platform.namespace, "app", run, 1, "pretty").decode()
        assert SECRET_VALUE not in json.dumps(record) and record["variables"] == {}
        assert SECRET_VALUE not in plan and "the default" in plan
        assert SECRET_VALUE not in ours(world, 6)[0]

        # The repository lets its pull requests inherit the layer's secrets: the plan gets the Secret's value (an
        # ordinary variable: Terraform does not mark it sensitive). One too short for the runner to mask in its
        # text (< 4 characters) shows in the stored plan; the comment still masks it (the inputs record names it).
        put_secret(platform, "app-vars", {"message": SHORT_SECRET}, open_to_runners=True)
        platform.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                       "terraformrepositories",
                                                       "infra", {"spec": {"pullRequests": {"inheritSecrets": True}}})
        head = world.push(6, {"layers/app/main.tf": layer_code("the default, again")}, "push")
        world.hook("synchronize", 6, head)
        done = world.wait_pr(6, head, "Planned", timeout=150)
        run = done["status"]["layers"][0]["run"]
        with DatastoreClient(platform.datastore_url, token=token) as store:
            record = json.loads(store.get_inputs(platform.namespace, "app", run))
            plan = store.get_plan(platform.namespace, "app", run, 1, "pretty").decode()
        assert record["variables"] == {"message": SHORT_SECRET} and record["secretVariables"] == ["message"]
        assert f'"{SHORT_SECRET}"' in plan  # the inherited value reached the plan…
        body = ours(world, 6)[0]
        assert f'"{SHORT_SECRET}"' not in body and "(sensitive value)" in body  # …and never the comment
        assert all(SHORT_SECRET not in s.get("description", "") for s in world.fake.statuses)


def test_attack_a_variable_fed_from_a_secret_through_the_environment_never_reaches_the_comment_or_the_log(
    tmp_path: Path, repo: TestRepo, real_cluster: RealCluster
) -> None:
    """`overrideRunnerSpec.env` sets `TF_VAR_message` from a Secret opened to runners; the pull request (of the
    repository itself, inheriting the layer's secrets) plans with it. Terraform does not mark the variable sensitive,
    so its value is in the plan's output change: the comment (which anyone who can read the pull request reads) and
    the runner's log showed it, since only varsFrom Secrets were known to the masker."""
    with pull_request_world(tmp_path, repo, "github", real_cluster) as world:
        platform = world.platform
        put_secret(platform, "app-env", {"message": SECRET_VALUE}, open_to_runners=True)
        platform.custom.patch_namespaced_custom_object(
            ann.GROUP, ann.VERSION, platform.namespace, "terraformrepositories", "infra", {"spec": {
                "pullRequests": {"inheritSecrets": True},
                "overrideRunnerSpec": {"env": [{"name": "TF_VAR_message", "valueFrom": {"secretKeyRef": {
                    "name": "app-env", "key": "message"}}}]}}})
        head = world.push(8, {"layers/app/main.tf": layer_code("the default")}, "change app")
        world.hook("opened", 8, head)
        done = world.wait_pr(8, head, "Planned", timeout=150)
        run_name = done["status"]["layers"][0]["run"]
        token = (platform.kubeconfig.read_text().split("token: ", 1)[1].split()[0]).strip("'\"")
        with DatastoreClient(platform.datastore_url, token=token) as store:
            log = store.get_logs(platform.namespace, "app", run_name, 1).decode()
            plan = store.get_plan(platform.namespace, "app", run_name, 1, "pretty").decode()
        assert "the default" not in plan  # the variable's value came from the Secret…
        assert SECRET_VALUE not in plan and SECRET_VALUE not in log  # …and the runner masked it
        body = ours(world, 8)[0]
        assert SECRET_VALUE not in body and "(sensitive value)" in body, body  # never in the comment
        run = next(r for r in pr_runs(platform) if r["metadata"]["name"] == run_name)
        assert run["status"]["attempts"][-1]["secretVariables"] == ["message"]  # the names the views mask


def test_an_apply_run_a_tenant_user_makes_of_a_pull_requests_plan_cannot_read_it(
    tmp_path: Path, repo: TestRepo, real_cluster: RealCluster
) -> None:
    """A tenant user who may create TerraformRuns writes an apply naming a pull request's plan run as its artifact,
    with the sum the controllers recorded for it (the layer controller would never choose it, §5.2; this goes
    around it). The apply's runner may not read a pull request's plan (RunnerScope.reads): the run fails, and
    nothing reaches the layer's state."""
    with pull_request_world(tmp_path, repo, "github", real_cluster) as world:
        platform = world.platform
        head = world.push(7, {"layers/app/main.tf": layer_code("the pull request's")}, "change app")
        world.hook("opened", 7, head)
        done = world.wait_pr(7, head, "Planned", timeout=150)
        pr_run = done["status"]["layers"][0]["run"]
        attempt = next(r for r in pr_runs(platform) if r["metadata"]["name"] == pr_run)["status"]["attempts"][-1]
        assert attempt["planSum"].startswith("sha256:")
        layer = platform.layer("app")
        platform.custom.create_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformruns", {
            "apiVersion": ann.API_VERSION, "kind": "TerraformRun",
            "metadata": {"name": "app-apply-forged", "namespace": platform.namespace,
                         "labels": {ann.LABEL_LAYER: ann.layer_label("app")},
                         "ownerReferences": [{"apiVersion": ann.API_VERSION, "kind": "TerraformLayer", "name": "app",
                                              "uid": layer["metadata"]["uid"]}]},
            "spec": {"action": "apply", "layer": {"name": "app", "namespace": platform.namespace, "revision": head},
                     "artifact": {"run": pr_run, "attempt": attempt["number"], "sum": attempt["planSum"]}}})

        def ended() -> dict[str, Any] | None:
            run = platform.custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                               "terraformruns",
                                                               "app-apply-forged")
            return run if (run.get("status") or {}).get("state") in ("Succeeded", "Failed") else None

        run = wait_for(ended, 240, 0.5, "the forged apply run's end")
        assert run["status"]["state"] == "Failed", run["status"]
        token = (platform.kubeconfig.read_text().split("token: ", 1)[1].split()[0]).strip("'\"")
        with DatastoreClient(platform.datastore_url, token=token) as store:
            log = store.get_logs(platform.namespace, "app", "app-apply-forged", 1).decode()
        assert "may only read its own run's artifacts" in log, log[-2000:]
        assert not platform.state_file("app").exists()  # the pull request's plan was never applied
