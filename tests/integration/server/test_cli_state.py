"""`burrito-py state …` and `burrito-py operation …` (docs/architecture.md §11.2, "The command line") run as
processes against a real server and datastore with auth on, before the emulator (RBAC enforced): the token is the
kubeconfig user's, and the server is reached with `--server-url` or, with only the kubeconfig, through the API
server's service proxy (the emulator's, which drops `Authorization` as kube-apiserver does).

Identities: `cli-restorer` reads team-a, patches its layers and reads its Secrets; `cli-reader` reads team-a's kinds
only; both may use the server Service's proxy in burrito-py-system."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from burrito_local.identity import ensure_namespace, ensure_service_account, request_token, write_token_kubeconfig
from burrito_local.kube_tokens import API_AUDIENCES

from burrito_py.api import annotations as ann
from tests.integration.server.rest_platform import (
    AUDIENCE,
    NS_A,
    PATCH_LAYERS,
    READ_KINDS,
    READ_SECRETS,
    STATE_SECRET,
    SYSTEM,
    RestPlatform,
    account,
    grant,
    post_state_versions,
    running_rest_platform,
    tfstate,
)

SECRET = STATE_SECRET
PROXY_RULES = [{"apiGroups": [""], "resources": ["services"], "verbs": ["list"]},
               {"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get", "create"],
                "resourceNames": ["burrito-py-server:8081", "burrito-py-server:http"]}]



@dataclass
class Cli:
    platform: RestPlatform
    kubeconfigs: dict[str, Path]

    def run(self, identity: str, *args: str, direct: bool = True) -> subprocess.CompletedProcess[str]:
        server = ["--server-url", self.platform.server_url] if direct else []
        command = [sys.executable, "-m", "burrito_py.cli", *args]
        # Options belong to the subcommand (state) or to the group (operation NS/LAYER …).
        where = 4 if args[0] == "operation" else len(command)
        command[where:where] = [*server, "--kubeconfig", str(self.kubeconfigs[identity])]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    workdir = tmp_path_factory.mktemp("cli-state")
    with running_rest_platform(workdir) as p:
        post_state_versions(p)
        # The server published as the chart does (Service burrito-py-server:8081 "http" with its labels), its
        # Endpoints the server this test started.
        ensure_namespace(p.kube, SYSTEM)
        port = int(p.server_url.rsplit(":", 1)[1])
        p.kube.post(f"/api/v1/namespaces/{SYSTEM}/services", json={
            "metadata": {"name": "burrito-py-server", "labels": {"app.kubernetes.io/name": "burrito-py",
                                                                 "app.kubernetes.io/component": "server"}},
            "spec": {"ports": [{"name": "http", "port": 8081, "targetPort": port}]}}).raise_for_status()
        p.kube.post(f"/api/v1/namespaces/{SYSTEM}/endpoints", json={
            "metadata": {"name": "burrito-py-server"},
            "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "http", "port": port}]}]
        }).raise_for_status()
        kubeconfigs = {}
        for name, rules in (("cli-restorer", [READ_KINDS, PATCH_LAYERS, READ_SECRETS]), ("cli-reader", [READ_KINDS])):
            ensure_service_account(p.kube, NS_A, name)
            grant(p.kube, name, rules, account(NS_A, name), NS_A)
            grant(p.kube, f"{name}-proxy", PROXY_RULES, account(NS_A, name), SYSTEM)
            # A token for the API server and the server alike, as the chart's users hold (issue 29: kubeconfig only).
            token = request_token(p.kube, NS_A, name, [*API_AUDIENCES, AUDIENCE])
            kubeconfigs[name] = write_token_kubeconfig(workdir / f"{name}.kubeconfig", p.api.tls_url,
                                                       p.api.certificate.ca_pem, token)
        yield Cli(p, kubeconfigs)


def test_versions_through_the_service_proxy_and_directly(cli: Cli) -> None:
    proxied = cli.run("cli-reader", "state", "versions", f"{NS_A}/app", direct=False)
    assert proxied.returncode == 0, proxied.stderr
    lines = proxied.stdout.splitlines()
    assert lines[0].split() == ["SERIAL", "CREATED", "WRITER", "RUN/ATTEMPT", "RESOURCES", "SIZE", "NOTE"]
    assert [line.split()[0] for line in lines[1:4]] == ["3", "2", "1"]
    direct = cli.run("cli-reader", "state", "versions", f"{NS_A}/app", "--json")
    assert direct.returncode == 0, direct.stderr
    assert [v["serial"] for v in json.loads(direct.stdout)][:3] == [1, 2, 3]
    assert SECRET not in proxied.stdout + direct.stdout


def test_diff_names_what_changed_never_a_value(cli: Cli) -> None:
    latest = cli.run("cli-reader", "state", "diff", f"{NS_A}/app", "--from", "2", "--to", "3", direct=False)
    assert latest.returncode == 0, latest.stderr
    assert latest.stdout == ("state version 2 -> 3\n+ terraform_data.c\n- terraform_data.a\n"
                             "~ terraform_data.b: input\n")
    chosen = cli.run("cli-reader", "state", "diff", f"{NS_A}/app", "--from", "1", "--to", "3", "--json")
    assert json.loads(chosen.stdout)["added"] == ["terraform_data.b", "terraform_data.c"]
    missing = cli.run("cli-reader", "state", "diff", f"{NS_A}/app", "--from", "1", "--to", "9")
    assert missing.returncode == 1 and "HTTP 404: layer team-a/app has no state version 9" in missing.stderr
    assert SECRET not in latest.stdout + chosen.stdout


def test_download_needs_get_secrets(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "app-2.tfstate"
    done = cli.run("cli-restorer", "state", "download", f"{NS_A}/app", "2", "-o", str(target), direct=False)
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == tfstate(2, ["a", "b"]) and target.stat().st_mode & 0o077 == 0
    refused = cli.run("cli-reader", "state", "download", f"{NS_A}/app", "2", "-o", str(tmp_path / "no"))
    assert refused.returncode == 1 and "HTTP 403" in refused.stderr
    assert "get secrets in the namespace team-a" in refused.stderr and not (tmp_path / "no").exists()


def test_rollback_is_refused_without_rights_and_recorded_with_the_user(cli: Cli) -> None:
    refused = cli.run("cli-reader", "state", "rollback", f"{NS_A}/app", "1")
    assert refused.returncode == 1 and "HTTP 403" in refused.stderr and "patch terraformlayers" in refused.stderr
    done = cli.run("cli-restorer", "state", "rollback", f"{NS_A}/app", "1", direct=False)
    assert done.returncode == 0, done.stderr
    who = f"system:serviceaccount:{NS_A}:cli-restorer"
    assert done.stdout == f"state of {NS_A}/app rolled back to version 1 by {who}: new version 4\n"
    listed = cli.run("cli-reader", "state", "versions", f"{NS_A}/app")
    assert f"rollback of 1 by {who}" in listed.stdout.splitlines()[1]
    again = cli.run("cli-restorer", "state", "rollback", f"{NS_A}/app", "4")
    assert again.returncode == 1 and "HTTP 409" in again.stderr and "already the current state" in again.stderr


def test_operations_are_asked_as_the_kubeconfig_user(cli: Cli) -> None:
    who = f"system:serviceaccount:{NS_A}:cli-restorer"
    refused = cli.run("cli-reader", "operation", f"{NS_A}/app", "state-rm", "terraform_data.a")
    assert refused.returncode == 1 and "HTTP 403" in refused.stderr
    option = cli.run("cli-restorer", "operation", f"{NS_A}/app", "state-rm", "--", "-lock=false")
    assert option.returncode == 1 and "HTTP 400" in option.stderr and "'-lock=false' starts with '-'" in option.stderr
    asked = cli.run("cli-restorer", "operation", f"{NS_A}/app", "plan", "--replace", "terraform_data.a",
                    "--target", "terraform_data.b", direct=False)
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.startswith(f"asked for plan -replace=terraform_data.a -target=terraform_data.b on {NS_A}/app "
                                   f"(as {who}, at ")
    annotations = cli.platform.layer(NS_A, "app")["metadata"]["annotations"]
    assert annotations[ann.OPERATION_BY] == who
    request = json.loads(annotations[ann.OPERATION])
    assert (request["operation"], request["replace"], request["target"]) == (
        "plan", ["terraform_data.a"], ["terraform_data.b"])
    waiting = cli.run("cli-restorer", "operation", f"{NS_A}/app", "force-unlock", "6f1c")
    assert waiting.returncode == 1 and "HTTP 409" in waiting.stderr and "already has an operation request" in \
        waiting.stderr
    # migrate-state names only where the state goes: managed or code, never a backend of the asker's choosing.
    foreign = cli.run("cli-restorer", "operation", f"{NS_A}/app", "migrate-state", "s3://attacker/bucket")
    assert foreign.returncode == 2 and "'managed', 'code'" in foreign.stderr, foreign.stderr
    # A well-formed migration reaches the server's checks: it waits behind the request already there.
    migrating = cli.run("cli-restorer", "operation", f"{NS_A}/app", "migrate-state", "managed")
    assert migrating.returncode == 1 and "HTTP 409" in migrating.stderr, migrating.stderr


def test_bad_input_is_refused_before_asking(cli: Cli) -> None:
    for args in (("state", "versions", "app"), ("state", "rollback", "team-a/", "1"),
                 ("operation", "team-a", "state-rm", "x.y")):
        answer = cli.run("cli-reader", *args)
        assert answer.returncode == 2 and "layer: expected NAMESPACE/LAYER" in answer.stderr, (args, answer.stderr)
    negative = cli.run("cli-reader", "state", "diff", f"{NS_A}/app", "--from", "-1")
    assert negative.returncode == 2 and "--from" in negative.stderr


@pytest.mark.parametrize(("identity", "status"), [("garbage", 401), ("forged", 401), ("expired", 401),
                                                  ("runner", 403), ("nobody", 403), ("tenant-a", 200)])
def test_the_proxied_header_is_reviewed_as_a_bearer_token(cli: Cli, identity: str, status: int) -> None:
    """What the service proxy forwards, sent straight to the server: a made-up, forged or expired token is a 401, a
    runner's token and an identity without a grant a 403, as with `Authorization`."""
    token = cli.platform.tokens[identity]
    answer = httpx.get(f"{cli.platform.server_url}/api/layers/{NS_A}/app/state/versions",
                       headers={"X-Burrito-Py-Authorization": f"Bearer {token}"})
    assert answer.status_code == status, answer.text
    assert (SECRET not in answer.text) and (status == 200 or "lineage" not in answer.text)
