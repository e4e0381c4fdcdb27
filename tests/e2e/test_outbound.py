"""Issue 24, findings 7 and 8 (security): credentials go only where their Secret allows, and tenants' outbound calls
reach nothing internal.

The attacks are mounted the way a tenant user would: with a Kubernetes identity that may edit TerraformRepositories
(and create them, and TerraformNotifiers) but may not read the namespace's Secrets, against the real controllers,
real git, real sshd and HTTP listeners on loopback that record every byte they receive. The legitimate servers
listen on 127.0.0.1; the attacker's on 127.0.0.2, another host as far as a Secret's `allowedHosts` is concerned
(the harness allows loopback to the address guard, so what is tested first is the binding of credentials)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.identity import ensure_service_account, request_token
from burrito_local.kube_tokens import API_AUDIENCES
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from burrito_py.api import annotations as ann
from burrito_py.api.pullrequest import pull_request_name
from burrito_py.git.credentials import TOKEN_USERNAME
from burrito_py.kube import pod_dns as dns
from tests.support.git_repos import TestRepo, make_bare
from tests.support.git_servers import HttpGitServer, SshGitServer, running_http_git_server, running_ssh_git_server
from tests.support.real_cluster import RealCluster

from ..support.fakes.providers import Fake, running_fake_provider
from .conftest import Platform, running_platform, wait_for
from .test_git_credentials import everything_people_can_read, put_secret

TOKEN = "glpat-outbound-Token-0123456789"
API_TOKEN = "provider-api-token-outbound"


# -- what the attacker runs ---------------------------------------------------------------------------------------


@dataclass
class Listener:
    """Everything that reached one of the attacker's listeners: raw bytes per connection."""

    port: int = 0
    received: list[bytes] = field(default_factory=list)

    @property
    def connections(self) -> int:
        return len(self.received)


@contextlib.contextmanager
def listening(host: str, first: bytes = b"") -> Iterator[Listener]:
    """A TCP listener recording what each connection sends. `first` is said on connecting (an SSH banner); an HTTP
    request is answered `401` asking for basic auth, as a git server asks for the credentials."""
    listener, record = socket.socket(), Listener()
    listener.bind((host, 0))
    listener.listen()
    listener.settimeout(0.05)
    record.port = listener.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                connection, _ = listener.accept()
                with connection:
                    connection.settimeout(2)
                    if first:
                        connection.sendall(first)
                    data = b""
                    with contextlib.suppress(OSError):
                        data = connection.recv(65536)
                    record.received.append(data)
                    if data.startswith((b"GET ", b"POST ")):
                        connection.sendall(b'HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm="git"\r\n'
                                           b"Content-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield record
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def assert_nothing_arrived(*listeners: Listener | Fake) -> None:
    for listener in listeners:
        if isinstance(listener, Fake):
            assert listener.calls == [] and listener.auth == [], f"the attacker's API received {listener.calls}"
        else:
            assert listener.connections == 0, f"the attacker received {listener.received}"


# -- the tenant -----------------------------------------------------------------------------------------------------


def tenant_client(platform: Platform) -> httpx.Client:
    """`mallory`: may read, create and patch TerraformRepositories, TerraformPullRequests and TerraformNotifiers of
    the test's namespace (the client's base URL); may not read its Secrets."""
    ns = platform.namespace
    with platform.api_http() as admin:
        ensure_service_account(admin, ns, "mallory")
        admin.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", json={
            "metadata": {"name": "repository-editor"}, "rules": [{"apiGroups": [ann.GROUP], "resources": [
                "terraformrepositories", "terraformnotifiers"], "verbs": ["get", "list", "create", "patch"]}],
        }).raise_for_status()
        admin.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", json={
            "metadata": {"name": "mallory-edits-repositories"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "repository-editor"},
            "subjects": [{"kind": "ServiceAccount", "name": "mallory", "namespace": ns}]}).raise_for_status()
        token = request_token(admin, ns, "mallory", list(API_AUDIENCES))
    client = platform.api_http(token)
    assert client.get(f"/api/v1/namespaces/{ns}/secrets/token-creds").status_code == 403  # never reads them
    client.base_url = client.base_url.join(f"/apis/{ann.API_VERSION}/namespaces/{ns}/")  # patch, create: relative
    return client


def patch(client: httpx.Client, plural: str, name: str, body: dict[str, Any]) -> None:
    client.patch(f"{plural}/{name}", json=body,
                 headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()


def create(client: httpx.Client, plural: str, kind: str, name: str, spec: dict[str, Any]) -> None:
    client.post(plural, json={"apiVersion": ann.API_VERSION, "kind": kind, "metadata": {"name": name},
                              "spec": spec}).raise_for_status()


# -- reading what the controllers say ------------------------------------------------------------------------------


def get(platform: Platform, plural: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = platform.custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                                        plural,
                                                                       name)
    return body


def condition(platform: Platform, plural: str, name: str, kind: str) -> dict[str, Any] | None:
    conditions = (get(platform, plural, name).get("status") or {}).get("conditions") or ()
    return next((dict(c) for c in conditions if c["type"] == kind), None)


def wait_condition(platform: Platform, plural: str, name: str, kind: str, status: str, reason: str | None = None,
                   timeout: float = 60) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        found = condition(platform, plural, name, kind)
        return found if found and found["status"] == status and reason in (None, found["reason"]) else None

    try:
        result: dict[str, Any] = wait_for(reached, timeout, 0.2, f"{plural}/{name} {kind}={status} {reason or ''}")
    except AssertionError:
        raise AssertionError(f"{plural}/{name}: {get(platform, plural, name).get('status')}") from None
    return result


def received(*traps: Listener | Fake) -> bool:
    return any(trap.calls if isinstance(trap, Fake) else trap.received for trap in traps)


def refused_or_robbed(platform: Platform, plural: str, name: str, kind: str, reason: str,
                      *traps: Listener | Fake) -> dict[str, Any]:
    """Wait for the refusal (`kind` False with `reason`), or for the attack to work: the moment anything reaches a
    trap, what it received is the failure (so on code without the defence the test shows what leaked)."""
    def outcome() -> bool:
        if received(*traps):
            return True
        found = condition(platform, plural, name, kind)
        return bool(found and found["status"] == "False" and found["reason"] == reason)

    wait_for(outcome, 60, 0.1, f"{plural}/{name} {kind}=False {reason}")
    assert_nothing_arrived(*traps)
    found = condition(platform, plural, name, kind)
    assert found is not None
    return found


def warnings(platform: Platform, name: str) -> list[str]:
    items = platform.core.list_namespaced_event(platform.namespace).items
    return [f"{e.reason}: {e.message}" for e in items if e.involved_object.name == name and e.type == "Warning"]


# -- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshGitServer]:
    with running_ssh_git_server(tmp_path / "sshd") as server:
        yield server


@pytest.fixture
def token_server(tmp_path: Path, repo: TestRepo) -> Iterator[HttpGitServer]:
    repo.push(make_bare(tmp_path / "http" / "infra.git"))
    with running_http_git_server(tmp_path / "http", TOKEN_USERNAME, TOKEN) as server:
        yield server


# -- finding 7: credentials go only where their Secret allows ------------------------------------------------------


def test_a_changed_url_does_not_carry_the_credentials_to_the_tenants_host(
        tmp_path: Path, platform: Platform, repo: TestRepo, sshd: SshGitServer, token_server: HttpGitServer,
        caplog: pytest.LogCaptureFixture) -> None:
    bare = tmp_path / "ssh" / "infra.git"
    repo.push(make_bare(bare))
    put_secret(platform, "token-creds", {"token": TOKEN, "allowedHosts": "http://127.0.0.1"})
    put_secret(platform, "ssh-creds", {"sshPrivateKey": sshd.client_key, "knownHosts": sshd.known_hosts,
                                       "allowedHosts": "127.0.0.1"})
    https_url, ssh_url = token_server.url_for("infra.git"), sshd.url_for(bare)
    platform.create_repository("over-https", https_url, repository={"url": https_url, "secretName": "token-creds"})
    platform.create_repository("over-ssh", ssh_url, repository={"url": ssh_url, "secretName": "ssh-creds"})
    for name in ("over-https", "over-ssh"):
        wait_condition(platform, "terraformrepositories", name, "Synced", "True")  # the Secrets work where allowed
    mallory = tenant_client(platform)

    with listening("127.0.0.2") as http_trap, listening("127.0.0.2", b"SSH-2.0-OpenSSH_9.2p1\r\n") as ssh_trap:
        patch(mallory, "terraformrepositories", "over-https", {"spec": {"repository": {
            "url": f"http://127.0.0.2:{http_trap.port}/infra.git"}}})
        patch(mallory, "terraformrepositories", "over-ssh", {"spec": {"repository": {
            "url": f"ssh://git@127.0.0.2:{ssh_trap.port}{bare}"}}})
        https = refused_or_robbed(platform, "terraformrepositories", "over-https", "Synced", "HostNotAllowed",
                                  http_trap, ssh_trap)
        ssh = refused_or_robbed(platform, "terraformrepositories", "over-ssh", "Synced", "HostNotAllowed", http_trap,
                                ssh_trap)
        assert https["message"] == (
            f"Secret {platform.namespace}/token-creds does not allow its credentials to go to "
            f"http://127.0.0.2:{http_trap.port} "
            '(spec.repository.url): its "allowedHosts" key has no entry for it (add "http://127.0.0.2" if they '
            'should)')
        assert ssh["message"] == (
            f"Secret {platform.namespace}/ssh-creds does not allow its credentials to go to 127.0.0.2:{ssh_trap.port} "
            '(spec.repository.url): its "allowedHosts" key has no entry for it (add "127.0.0.2" if they should)')
        for name in ("over-https", "over-ssh"):
            refusal = f"HostNotAllowed: Secret {platform.namespace}/"
            wait_for(lambda n=name, r=refusal: any(w.startswith(r) for w in warnings(platform, n)),
                     30, what=f"a Warning event on {name}")
        time.sleep(3)  # three more polls of both repositories (every second here): still nothing sent
    assert_nothing_arrived(http_trap, ssh_trap)
    assert TOKEN not in everything_people_can_read(platform, caplog)


def test_a_changed_api_url_gets_neither_the_token_nor_a_github_app_jwt(platform: Platform, repo: TestRepo) -> None:
    app_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = app_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption()).decode()
    put_secret(platform, "api-creds", {"apiToken": API_TOKEN, "allowedHosts": "http://127.0.0.1"})
    put_secret(platform, "app-creds", {"githubAppId": "4242", "githubAppInstallationId": "99",
                                       "githubAppPrivateKey": pem, "allowedHosts": "http://127.0.0.1"})
    with running_fake_provider("github") as (provider, api_url), \
            running_fake_provider("github", "127.0.0.2") as (trap, trap_url):
        for name, secret in (("infra", "api-creds"), ("app", "app-creds")):
            platform.create_repository(name, repo.url, repository={"url": repo.url, "secretName": secret},
                                       pullRequests={"enabled": True, "apiUrl": api_url})
        open_pull_request(platform, repo, "infra", 1)
        wait_condition(platform, "terraformpullrequests", pull_request_name("infra", 1), "Published", "True")
        assert provider.auth and all(auth == f"Bearer {API_TOKEN}" for auth in provider.auth)

        mallory = tenant_client(platform)
        for name in ("infra", "app"):
            patch(mallory, "terraformrepositories", name, {"spec": {"pullRequests": {"apiUrl": trap_url}}})
        open_pull_request(platform, repo, "infra", 2)
        open_pull_request(platform, repo, "app", 1)
        for name, secret in ((pull_request_name("infra", 2), "api-creds"), (pull_request_name("app", 1), "app-creds")):
            refused = refused_or_robbed(platform, "terraformpullrequests", name, "Published", "HostNotAllowed", trap)
            assert refused["message"] == (
                f"Secret {platform.namespace}/{secret} does not allow its credentials to go to {trap_url} "
                '(spec.pullRequests.apiUrl): its "allowedHosts" key has no entry for it (add "http://127.0.0.2" if '
                'they should)')
            refusal = f"PublishFailed: Secret {platform.namespace}/"
            wait_for(lambda n=name, r=refusal: any(w.startswith(r) for w in warnings(platform, n)),
                     30, what=f"a Warning event on {name}")
        time.sleep(2)
    assert_nothing_arrived(trap)  # no token, no JWT, no exchange, no call at all


def test_a_new_repository_naming_another_teams_secret_cannot_send_it_anywhere_else(platform: Platform,
                                                                                   repo: TestRepo) -> None:
    put_secret(platform, "token-creds", {"token": TOKEN, "allowedHosts": "http://127.0.0.1"})
    mallory = tenant_client(platform)
    with listening("127.0.0.2") as trap, running_fake_provider("github", "127.0.0.2") as (api_trap, api_url):
        create(mallory, "terraformrepositories", "TerraformRepository", "borrowed", {
            "repository": {"url": f"http://127.0.0.2:{trap.port}/loot.git", "secretName": "token-creds"}})
        refused = refused_or_robbed(platform, "terraformrepositories", "borrowed", "Synced", "HostNotAllowed", trap,
                                    api_trap)
        assert refused["message"].startswith(f"Secret {platform.namespace}/token-creds does not allow its credentials "
                                             "to go to "
                                             f"http://127.0.0.2:{trap.port} (spec.repository.url)")
        # The same Secret through a pull request API the tenant points at themselves.
        create(mallory, "terraformrepositories", "TerraformRepository", "borrowed-api", {
            "repository": {"url": repo.url, "secretName": "token-creds"},
            "pullRequests": {"enabled": True, "apiUrl": api_url}})
        open_pull_request(platform, repo, "borrowed-api", 1)
        refused_or_robbed(platform, "terraformpullrequests", pull_request_name("borrowed-api", 1), "Published",
                          "HostNotAllowed", trap, api_trap)
        time.sleep(2)
    assert_nothing_arrived(trap, api_trap)


def test_a_secret_that_names_no_hosts_sends_nothing_until_it_does(platform: Platform,
                                                                  token_server: HttpGitServer) -> None:
    """The secure default for a Secret written before `allowedHosts` existed: nothing is sent, and the condition
    says which key to add and what to put in it."""
    put_secret(platform, "token-creds", {"token": TOKEN})
    url = token_server.url_for("infra.git")
    platform.create_repository("infra", url, repository={"url": url, "secretName": "token-creds"})
    wait_for(lambda: condition(platform, "terraformrepositories", "infra", "Synced"), 60, what="the first sync")
    assert not any(authorized for _, _, authorized in token_server.requests)  # the token was not sent
    refused = wait_condition(platform, "terraformrepositories", "infra", "Synced", "False", "HostNotAllowed")
    assert refused["message"] == (
        f'Secret {platform.namespace}/token-creds has no "allowedHosts" key, so its credentials go nowhere: add the '
        f'hosts they may be sent to (spec.repository.url sends them to http://127.0.0.1:{token_server.port}: '
        '"http://127.0.0.1")')
    assert not any(authorized for _, _, authorized in token_server.requests)
    put_secret(platform, "token-creds", {"token": TOKEN, "allowedHosts": "http://127.0.0.1"})
    wait_condition(platform, "terraformrepositories", "infra", "Synced", "True")
    assert any(authorized for _, _, authorized in token_server.requests)


def open_pull_request(platform: Platform, repo: TestRepo, repository: str, number: int) -> None:
    """What the server makes of a pull request webhook: a TerraformPullRequest whose head the mirror can fetch (it
    changes no layer, so it is published at once, with nothing to plan)."""
    repo.git("update-ref", f"refs/pull/{number}/head", repo.head)
    with platform.api_http() as admin:
        admin.post(f"/apis/{ann.API_VERSION}/namespaces/{platform.namespace}/terraformpullrequests", json={
            "apiVersion": ann.API_VERSION, "kind": "TerraformPullRequest",
            "metadata": {"name": pull_request_name(repository, number)},
            "spec": {"provider": "github", "repository": repository, "project": "team/infra", "number": number,
                     "base": "main", "headBranch": "feature", "headSha": repo.head, "state": "open",
                     "title": "A change", "url": f"https://example/pr/{number}"}}).raise_for_status()


# -- finding 8: tenants' outbound calls reach nothing internal -----------------------------------------------------


@pytest.fixture
def strict(tmp_path: Path, kubeconfig_path: Path, real_cluster: RealCluster) -> Iterator[Platform]:
    """The controllers as the chart installs them: the outbound address guard allows nothing internal (file://
    repositories stay on: they do not leave the machine, and the layers need one)."""
    with running_platform(tmp_path, kubeconfig_path, outbound_allowed_networks=[], cluster=real_cluster) as p:
        yield p


@pytest.fixture
def attacker_dns(tmp_path: Path) -> Iterator[str]:
    """A public-looking name the attacker's DNS answers with loopback. Resolved through the local kubelet's cluster
    DNS (burrito_py/kube/pod_dns.py: `socket.getaddrinfo` answers from a hosts file), which the controllers of this
    process use as they would a cluster's resolver."""
    hosts = tmp_path / "attacker-hosts"
    hosts.write_text("127.0.0.1 hooks.attacker.test git.attacker.test\n")
    assert dns.install({dns.ENV: str(hosts)})
    yield "attacker.test"
    dns.uninstall()


def test_notifiers_pointed_inside_are_refused_before_any_request(strict: Platform, repo: TestRepo,
                                                                  attacker_dns: str) -> None:
    with listening("127.0.0.1") as inside:
        targets = {
            "loopback": (f"http://127.0.0.1:{inside.port}/hook", "127.0.0.1 is a loopback address"),
            "metadata": ("http://169.254.169.254/latest/meta-data/iam/", "169.254.169.254 is a link-local address"),
            "service": ("http://hooks.team-a.svc.cluster.local/hook", "it is a cluster-internal or local name"),
            "rebound": (f"http://hooks.{attacker_dns}:{inside.port}/hook", "it resolves to a loopback address"),
        }
        mallory = tenant_client(strict)
        put_secret(strict, "hooks", {**{name: url for name, (url, _) in targets.items()}, "key": "hmac-key"},
                   open_to_notifiers=True)
        for name in targets:
            create(mallory, "terraformnotifiers", "TerraformNotifier", name, {
                "events": ["PlanPendingApproval"],
                "webhook": {"urlSecretRef": {"name": "hooks", "key": name}, "hmacSecretRef": {"name": "hooks",
                                                                                            "key": "key"}}})
        strict.create_repository("infra", repo.url)
        strict.create_layer("app", "infra", "layers/app")  # planned, then waits for approval: the event
        strict.wait_state("app", "ApplyNeeded", timeout=120)
        for name, (_, why) in targets.items():
            def refused(n: str = name) -> dict[str, Any] | bool | None:
                delivery = (get(strict, "terraformnotifiers", n).get("status") or {}).get("lastDelivery") or {}
                return received(inside) or (delivery if delivery.get("result", "").startswith("not sent: ") else None)

            delivery = wait_for(refused, 30, 0.2, f"notifier {name} refused")
            assert_nothing_arrived(inside)  # before anything else: on code without the guard, what reached it
            assert why in delivery["result"] and "BURRITO_PY_OUTBOUND_ALLOWED_NETWORKS" in delivery["result"]
            assert "/hook" not in delivery["result"] and "meta-data" not in delivery["result"]
            event = "NotificationRefused: PlanPendingApproval for layer app not sent: "
            wait_for(lambda n=name, e=event: any(w.startswith(e) for w in warnings(strict, n)), 30,
                     what=f"a Warning event on notifier {name}")
    assert_nothing_arrived(inside)


def test_a_repository_status_is_no_port_scanner(strict: Platform, attacker_dns: str) -> None:
    """An open port answering HTTP 500, a closed port, the metadata service, a cluster Service and a name rebound to
    loopback: one refusal each, the same words but for the host, and no connection anywhere."""
    with listening("127.0.0.1") as open_port:
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        closed_port = closed.getsockname()[1]
        closed.close()
        urls = {"open": f"http://127.0.0.1:{open_port.port}/infra.git",
                "closed": f"http://127.0.0.1:{closed_port}/infra.git",
                "metadata": "http://169.254.169.254/computeMetadata/v1/",
                "service": "https://git.team-a.svc.cluster.local/infra.git",
                "rebound": f"ssh://git@git.{attacker_dns}:{open_port.port}/infra.git"}
        for name, url in urls.items():
            strict.create_repository(name, url)
        messages = {name: refused_or_robbed(strict, "terraformrepositories", name, "Synced", "AddressNotAllowed",
                                            open_port)["message"] for name in urls}
        time.sleep(2)  # more polls: still nothing
    assert_nothing_arrived(open_port)
    same = {messages["open"].replace(str(open_port.port), "PORT"), messages["closed"].replace(str(closed_port),
                                                                                             "PORT")}
    assert same == {"spec.repository.url: 127.0.0.1 is refused by the outbound address guard: 127.0.0.1 is a "
                    "loopback address; the controllers' outboundAllowedNetworks or outboundAllowedHosts setting "
                    "(BURRITO_PY_OUTBOUND_ALLOWED_NETWORKS, BURRITO_PY_OUTBOUND_ALLOWED_HOSTS) can allow it"}
    assert "169.254.169.254 is a link-local address" in messages["metadata"]
    assert "git.team-a.svc.cluster.local is refused by the outbound address guard: it is a cluster-internal" in (
        messages["service"])
    assert f"git.{attacker_dns} is refused by the outbound address guard: it resolves to a loopback address" in (
        messages["rebound"])
    for name in urls:
        assert any(w.startswith("AddressNotAllowed: spec.repository.url: ") for w in warnings(strict, name))
