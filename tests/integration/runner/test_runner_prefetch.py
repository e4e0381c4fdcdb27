"""The runner's prefetch of its locked providers (docs/architecture.md §10.5) with the real terraform 1.11.4 and
the real datastore (its provider mirror over HTTPS with a test CA, reading through a fake registry): a layer with
a lock file installs its providers from the pod's filesystem mirror, fetched from the datastore's token route
(unpacked, as the lock file lists their h1), and terraform's network mirror never asks for their archive;
without a lock file, or with `-upgrade`, the network mirror as before. An archive tampered with in the datastore's
storage fails `init` on the lock file's checksum: the run fails, nothing installs it."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from burrito_py.api import annotations as ann
from burrito_py.datastore.in_process import free_port
from burrito_py.datastore.providercache.hashes import zip_h1
from burrito_py.runner.mirror import CLI_CONFIG_NAME, PREFETCH_DIR_NAME
from tests.integration.runner.runner_world import NS, World, running_world
from tests.support.engines import OPENTOFU, engines_root
from tests.support.fakes.registry import FakeUpstream, provider_zip, python_provider, running_upstream
from tests.support.fakes.tls import TlsFiles, make_tls

REGISTRY = "registry.example.test"  # a name without a port: terraform reads `localhost:1234/…` as a URL scheme
TINY = f"{REGISTRY}/test/tiny"
CODE = f"""
terraform {{
  backend "local" {{}}
  required_providers {{
    tiny = {{ source = "{TINY}", version = "1.0.0" }}
  }}
}}

provider "tiny" {{}}

resource "terraform_data" "this" {{
  input = "%s"
}}
"""
LOCK = "layers/app/.terraform.lock.hcl"
pytestmark = pytest.mark.skipif(shutil.which("terraform") is None, reason="needs terraform on PATH")


@dataclass
class Prefetching:
    world: World
    upstream: FakeUpstream
    tls: TlsFiles
    mirror_url: str  # the datastore's HTTPS provider mirror
    registry: str = REGISTRY
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {"BURRITO_PROVIDER_MIRROR_URL": self.mirror_url, "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED": "true",
                "BURRITO_PROVIDER_MIRROR_REGISTRIES": self.registry, "BURRITO_MIRROR_CA_PEM": self.tls.ca.read_text(),
                **self.extra_env}

    def archive_routes(self) -> dict[str, float]:
        """The datastore's count of archives asked for, by route (its /metrics)."""
        text = httpx.get(f"{self.world.datastore_url}/metrics").text
        found = dict(re.findall(r'^burrito_py_provider_cache_archive_routes_total\{route="(\w+)"\} (\S+)$', text,
                                re.MULTILINE))
        return {route: float(found.get(route, 0)) for route in ("signed", "prefetch")}

    def plan(self, run: str, revision: str) -> tuple[str, dict[str, float]]:
        """The runner's output of a plan run, and what it asked of the archive routes."""
        before = self.archive_routes()
        self.world.run(run, "plan", revision)
        result = self.world.runner(run, "plan", **self.env())
        after = self.archive_routes()
        out = result.stdout + result.stderr
        assert (result.code == 0) == ("error:" not in result.stderr), out
        return (f"exit {result.code}\n{out}",
                {route: after[route] - before[route] for route in after})

    def lock(self, *more: bytes) -> str:
        """The lock file terraform writes after installing tiny through a mirror (the h1 of the package it
        installed, nothing else), listing the h1 of `more` archives too."""
        archives = [self.upstream.providers[("test", "tiny")]["1.0.0"]["linux_amd64"], *more]
        hashes = "".join(f'    "{h1_of(archive, self.world.tmp)}",\n' for archive in archives)
        return (f'provider "{self.registry}/test/tiny" {{\n  version     = "1.0.0"\n  constraints = "1.0.0"\n'
                f"  hashes = [\n{hashes}  ]\n}}\n")


def h1_of(archive: bytes, scratch: Path) -> str:
    path = scratch / "h1.zip"
    path.write_bytes(archive)
    return zip_h1(path)


@contextmanager
def prefetching_world(tmp_path: Path, registry: str = REGISTRY, **layer: Any) -> Iterator[Prefetching]:
    tls = make_tls(tmp_path / "tls")
    with running_upstream(tls) as (upstream, served_at):
        upstream.publish("test", "tiny", "1.0.0", content=python_provider(f"{registry}/test/tiny"))
        port = free_port()
        with running_world(tmp_path / "w", tls_port=port, tls_cert_file=tls.cert, tls_key_file=tls.key,
                           provider_cache_enabled=True, provider_cache_registries=[],
                           provider_cache_registry_urls={registry: f"https://{served_at}"},
                           upstream_ca_file=tls.ca) as world:
            world.layer(**layer)
            yield Prefetching(world, upstream, tls, f"https://127.0.0.1:{port}/providers/v1/", registry)


@pytest.fixture
def prefetching(tmp_path: Path) -> Iterator[Prefetching]:
    with prefetching_world(tmp_path) as world:
        yield world


def test_a_locked_layer_installs_from_the_prefetched_mirror_and_plans(prefetching: Prefetching) -> None:
    world = prefetching.world
    # No lock file: terraform installs through the network mirror (a signed archive URL), as before.
    first = world.commit({"layers/app/main.tf": CODE % "one"})
    out, asked = prefetching.plan("app-plan-1", first)
    assert "exit 0" in out and "Plan: 1 to add" in out, out
    assert "prefetched" not in out and asked == {"signed": 1, "prefetch": 0}
    lock = prefetching.lock()

    # With a lock file: the runner fetched the archive over the datastore's plain listener
    # into the pod's filesystem mirror, terraform installed it from there (verified against the lock file) and
    # never asked the network mirror for it; the provider runs, so the plan works.
    locked = world.commit({"layers/app/main.tf": CODE % "two", LOCK: lock})
    out, asked = prefetching.plan("app-plan-2", locked)
    assert "exit 0" in out and "Plan: 1 to add" in out, out
    assert "burrito-py: 1 locked provider(s) prefetched from the datastore in" in out
    assert f"Installing {TINY} v1.0.0" in out and "Using previously-installed" not in out
    assert asked == {"signed": 0, "prefetch": 1}
    config = (world.tmp / "home" / CLI_CONFIG_NAME).read_text()
    assert f'include = ["{TINY}"]' in config and f'exclude = ["{TINY}"]' in config
    # The lock file lists the archive's h1: the runner unpacked it (terraform linked it into .terraform from there
    # after checking the directory's h1), and no packed archive is left beside it.
    prefetched = world.tmp / "home" / PREFETCH_DIR_NAME / TINY
    assert (prefetched / "1.0.0" / "linux_amd64" / "terraform-provider-tiny_v1.0.0").is_file()
    assert not list(prefetched.glob("*.zip"))
    assert prefetching.upstream.requests.count("/files/test/terraform-provider-tiny_1.0.0_linux_amd64.zip") == 1

    # `-upgrade` may choose versions the lock file does not pin: the network mirror, as before.
    upgrade = {"overrideRunnerSpec": {"extraInitArgs": [f"-backend-config=path={world.state()}", "-upgrade"]}}
    world.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, NS, "terraformlayers", "app",
                                                {"spec": upgrade})
    out, asked = prefetching.plan("app-plan-3", locked)
    assert "exit 0" in out and "Plan: 1 to add" in out, out
    assert "prefetched" not in out and asked == {"signed": 1, "prefetch": 0}


def test_an_archive_tampered_with_in_storage_fails_init_on_the_lock_files_checksum(prefetching: Prefetching
                                                                                   ) -> None:
    """Attack: the datastore's stored archive replaced by other bytes (a working provider too). The prefetch
    hands them to terraform, which checks them against the lock file as it would a download: init fails on the
    checksum, the run fails, and nothing falls back to the network mirror (which would serve the same bytes)."""
    world = prefetching.world
    out, _ = prefetching.plan("app-plan-1", world.commit({"layers/app/main.tf": CODE % "one"}))
    assert "exit 0" in out, out
    lock = prefetching.lock()
    [stored] = (world.tmp / "datastore" / "providers" / "archives").glob("*.zip")
    # As long as the original (the route sends the stored size): else the prefetch fails short and terraform
    # reads the same bytes through the network mirror, refused all the same.
    original = python_provider(TINY)
    other = provider_zip("tiny", "1.0.0", "linux_amd64", content=original.replace(b"gRPC socket", b"GRPC SOCKET"))
    assert other != prefetching.upstream.providers[("test", "tiny")]["1.0.0"]["linux_amd64"]
    assert len(other) == len(prefetching.upstream.providers[("test", "tiny")]["1.0.0"]["linux_amd64"])
    stored.write_bytes(other)

    out, asked = prefetching.plan("app-plan-2", world.commit({"layers/app/main.tf": CODE % "two", LOCK: lock}))
    assert "burrito-py: 1 locked provider(s) prefetched from the datastore in" in out
    assert "exit 1" in out and "error: terraform init failed" in out, out
    # "the local package" (terraform checked the unpacked directory; "the current package" for an archive)
    assert "package for registry.example.test/test/tiny 1.0.0 doesn't match any of the checksums " \
           "previously recorded in the dependency lock file" in " ".join(out.split()), out
    assert "error: registry.example.test/test/tiny v1.0.0 as prefetched from the datastore does not match the lock " \
           "file's checksums: not installed" in out
    assert asked == {"signed": 0, "prefetch": 1}  # no second try through the network mirror
    assert not list(world.pod_root("app-plan-2").rglob("terraform-provider-tiny_v1.0.0"))  # nothing installed

    # The control: the same bytes with a lock file that also lists their hash install and plan. What refused
    # them above is the lock file's checksum, nothing else.
    listed = prefetching.lock(other)
    out, asked = prefetching.plan("app-plan-3", world.commit({"layers/app/main.tf": CODE % "three", LOCK: listed}))
    assert "exit 0" in out and "Plan: 1 to add" in out, out
    assert asked == {"signed": 0, "prefetch": 1}


def test_a_locked_tofu_layer_installs_registry_opentofu_org_providers_from_the_prefetch(tmp_path: Path) -> None:
    """OpenTofu 1.12.6 (the engines root's build) with a provider of its default registry: the same configuration
    and packed layout serve it, checked against the lock file, and the plan runs the provider."""
    registry = "registry.opentofu.org"
    code = CODE.replace(f'source = "{TINY}"', 'source = "test/tiny"')  # tofu's short address: its registry
    with prefetching_world(tmp_path, registry, **OPENTOFU.spec()) as prefetching:
        prefetching.extra_env["BURRITO_RUNNER_TOOLS_PATH"] = str(engines_root() / "tenv")
        world = prefetching.world
        revision = world.commit({"layers/app/main.tf": code % "tofu", LOCK: prefetching.lock()})
        out, asked = prefetching.plan("app-plan-1", revision)
        assert "with opentofu 1.12.6" in out, out
        assert "exit 0" in out and "Plan: 1 to add" in out, out
        assert "burrito-py: 1 locked provider(s) prefetched from the datastore in" in out
        assert asked == {"signed": 0, "prefetch": 1}

        # Tofu refuses a tampered prefetched package on the lock file's checksum as terraform does.
        [stored] = (world.tmp / "datastore" / "providers" / "archives").glob("*.zip")
        original = python_provider(f"{registry}/test/tiny")
        stored.write_bytes(provider_zip("tiny", "1.0.0", "linux_amd64",
                                        content=original.replace(b"gRPC socket", b"GRPC SOCKET")))
        out, asked = prefetching.plan("app-plan-2", revision)
    assert "exit 1" in out and "error: tofu init failed" in out, out
    assert "doesn't match any of the checksums previously recorded in the dependency lock file" in " ".join(
        out.split()), out
    assert asked == {"signed": 0, "prefetch": 1}
