"""The datastore's provider network mirror with the real `terraform init` (issue 16): read through from a fake
registry over HTTPS (a test CA), every archive verified against `SHA256SUMS` and its GnuPG signature, each
archive downloaded from upstream once however many inits share it, a version published after the index was cached
served on the first request, tampered archives and signatures never stored nor served."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import re
import ssl
import struct
import subprocess
import tarfile
import time
import zipfile
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from burrito_py.datastore.in_process import free_port, running_datastore
from burrito_py.datastore.providercache.cache import ProviderAddress, ProviderCache
from burrito_py.datastore.providercache.hashes import zip_h1
from burrito_py.datastore.providercache.pins import LockPins
from burrito_py.datastore.providercache.upstream import Upstream, ssl_context
from burrito_py.datastore.storage import FilesystemStorage

from ...support.fakes.registry import PLATFORMS, FakeUpstream, running_upstream
from ...support.fakes.tls import TlsFiles, make_tls
from ..datastore.conftest import S3Bucket

# Terraform cannot use a mirror for a registry host name with a port (it reads `localhost:1234/…` as a URL
# scheme), so the layers name this registry and the mirror is told where it is really served.
REGISTRY = "registry.example.test"


@dataclass
class Mirror:
    upstream: FakeUpstream
    host: str  # the registry's name in provider addresses; the mirror reads it from the fake
    url: str  # https://127.0.0.1:<port>/providers/v1/
    data_dir: Path
    tls: TlsFiles
    workdir: Path

    def layer(self, name: str, providers: dict[str, str]) -> Path:
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        required = "\n".join(f'    {t} = {{ source = "{self.host}/test/{t}", version = "{v}" }}'
                             for t, v in providers.items())
        (path / "main.tf").write_text(f"terraform {{\n  required_providers {{\n{required}\n  }}\n}}\n")
        return path

    def init(self, directory: Path) -> subprocess.CompletedProcess[str]:
        config = self.workdir / "mirror.tfrc"
        if not config.exists():
            config.write_text(f'provider_installation {{\n  network_mirror {{\n    url = "{self.url}"\n  }}\n}}\n')
        env = {**os.environ, "TF_CLI_CONFIG_FILE": str(config), "SSL_CERT_FILE": str(self.tls.ca),
               "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1", "TF_PLUGIN_CACHE_DIR": ""}
        env.pop("TF_PLUGIN_CACHE_DIR")
        return subprocess.run(["terraform", "init", "-input=false", "-no-color"], cwd=directory, env=env,
                              capture_output=True, text=True, timeout=300, check=False)

    def trust(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.tls.ca))

    def stored_archives(self) -> set[str]:
        root = self.data_dir / "providers" / "archives"
        return {p.stem for p in root.glob("*.zip")} if root.exists() else set()


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[Mirror]:
    tls = make_tls(tmp_path / "tls")
    with running_upstream(tls) as (upstream, served_at):
        port = free_port()
        with running_datastore(tmp_path / "datastore", tls_port=port, tls_cert_file=tls.cert, tls_key_file=tls.key,
                               provider_cache_enabled=True, provider_cache_registries=[],
                               provider_cache_registry_urls={REGISTRY: f"https://{served_at}"},
                               provider_cache_index_ttl_seconds=3600, upstream_ca_file=tls.ca):
            yield Mirror(upstream, REGISTRY, f"https://127.0.0.1:{port}/providers/v1/", tmp_path / "datastore", tls,
                         tmp_path / "layers")


def test_init_through_the_mirror_gets_complete_lock_entries_and_reads_upstream_once(mirror: Mirror) -> None:
    mirror.upstream.publish("test", "alpha", "1.0.0")
    first = mirror.init(mirror.layer("one", {"alpha": "1.0.0"}))
    assert first.returncode == 0, first.stderr
    lock = (mirror.workdir / "one" / ".terraform.lock.hcl").read_text()
    zips = mirror.upstream.providers[("test", "alpha")]["1.0.0"]
    linux = mirror.workdir / "linux.zip"
    linux.write_bytes(zips["linux_amd64"])
    assert zip_h1(linux) in lock  # our h1: is Terraform's own
    # The mirror lists every platform's zh: (from the signed SHA256SUMS) and the h1: of what it stored. Terraform
    # records only the hash of the package it installed from a mirror (a mirror's hashes are not signed).
    document = httpx.get(f"{mirror.url}{REGISTRY}/test/alpha/1.0.0.json", verify=mirror.trust()).json()
    assert {p: sorted(a["hashes"]) for p, a in document["archives"].items()} == {
        p: sorted([f"zh:{hashlib.sha256(d).hexdigest()}", *([zip_h1(linux)] if p == "linux_amd64" else [])])
        for p, d in zips.items()}
    archive_requests = [r for r in mirror.upstream.requests if r.endswith(".zip")]
    assert archive_requests == ["/files/test/terraform-provider-alpha_1.0.0_linux_amd64.zip"]

    before = len(mirror.upstream.requests)
    again = mirror.init(mirror.layer("two", {"alpha": "1.0.0"}))
    assert again.returncode == 0, again.stderr
    assert mirror.upstream.requests[before:] == []  # index, version and archive: all from the cache


def test_fifty_concurrent_inits_over_three_providers_read_each_archive_once(mirror: Mirror) -> None:
    """50 layers x 3 providers, then two more cycles: no checksum or "text file busy" error, and upstream bytes
    within 1.01 x the distinct archives (2 MiB each, so the JSON documents count for little)."""
    for type_ in ("alpha", "beta", "gamma"):
        mirror.upstream.publish("test", type_, "2.0.0", size=2 * 1024 * 1024)
    providers = {"alpha": "2.0.0", "beta": "2.0.0", "gamma": "2.0.0"}
    layers = [mirror.layer(f"layer-{i}", providers) for i in range(50)]
    started = time.monotonic()
    for cycle in range(3):
        batch = layers if cycle == 0 else layers[:10]
        for directory in batch:
            for leftover in (directory / ".terraform", directory / ".terraform.lock.hcl"):
                subprocess.run(["rm", "-rf", str(leftover)], check=True)
        with ThreadPoolExecutor(max_workers=25) as pool:
            results = list(pool.map(mirror.init, batch))
        failed = [r.stderr[-500:] for r in results if r.returncode != 0]
        assert not failed, failed[0]
        assert not any("text file busy" in r.stderr or "checksum" in r.stderr.lower() for r in results)
    distinct = mirror.upstream.distinct_bytes()
    print(f"\n{len(layers)} layers x 3 providers, 3 cycles ({time.monotonic() - started:.1f} s): upstream "
          f"{mirror.upstream.bytes_sent} bytes for {distinct} bytes of distinct archives "
          f"(ratio {mirror.upstream.bytes_sent / distinct:.4f})")
    assert mirror.upstream.bytes_sent <= 1.01 * distinct
    assert len(mirror.stored_archives()) == 3


def test_a_version_published_after_the_index_was_cached_is_served_at_once(mirror: Mirror) -> None:
    """burrito #642: the cached index (TTL one hour here) lacks a version published since. Terraform chooses from
    index.json, so the mirror reads the index again at once when a lock file in the stored sources pins a version
    it lacks (the repository controller stores a commit's source before any run of it)."""
    mirror.upstream.publish("test", "alpha", "1.0.0")
    assert mirror.init(mirror.layer("old", {"alpha": "1.0.0"})).returncode == 0
    mirror.upstream.publish("test", "alpha", "1.1.0")
    new = mirror.layer("new", {"alpha": "1.1.0"})
    zip_path = mirror.workdir / "new.zip"
    zip_path.write_bytes(mirror.upstream.providers[("test", "alpha")]["1.1.0"]["linux_amd64"])
    lock = (f'provider "{REGISTRY}/test/alpha" {{\n  version     = "1.1.0"\n  constraints = "1.1.0"\n'
            f'  hashes = [\n    "{zip_h1(zip_path)}",\n  ]\n}}\n')
    (new / ".terraform.lock.hcl").write_text(lock)
    source = mirror.data_dir / "sources" / "team" / "infra" / ("b" * 40 + ".tar.gz")
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(_source_with_lock(lock))
    fresh = mirror.init(new)
    assert fresh.returncode == 0, fresh.stderr
    # Asked for directly, a version missing from the index reads it again too.
    mirror.upstream.publish("test", "alpha", "1.2.0")
    direct = httpx.get(f"{mirror.url}{REGISTRY}/test/alpha/1.2.0.json", verify=mirror.trust())
    assert direct.status_code == 200 and "linux_amd64" in direct.json()["archives"]


def test_a_tampered_archive_or_signature_is_never_stored_nor_served(mirror: Mirror) -> None:
    mirror.upstream.publish("test", "alpha", "1.0.0")
    mirror.upstream.tampered.add("terraform-provider-alpha_1.0.0_linux_amd64.zip")
    for attempt in range(2):
        refused = mirror.init(mirror.layer(f"tampered-{attempt}", {"alpha": "1.0.0"}))
        assert refused.returncode != 0
    assert mirror.stored_archives() == set()
    archive = signed_archive_url(mirror, "alpha", "1.0.0")
    answer = httpx.get(archive, verify=mirror.trust())
    assert answer.status_code == 502 and "SHA256SUMS" in answer.json()["error"]

    mirror.upstream.publish("test", "beta", "1.0.0")
    mirror.upstream.bad_signature = True
    version = httpx.get(f"{mirror.url}{mirror.host}/test/beta/1.0.0.json", verify=mirror.trust())
    assert version.status_code == 502 and "signature" in version.json()["error"]
    assert not list((mirror.data_dir / "providers" / "meta").rglob("beta/1.0.0.json"))
    unknown = httpx.get(f"{mirror.url}archives/{'0' * 64}/x.zip", verify=mirror.trust())
    assert unknown.status_code == 404
    other = httpx.get(f"{mirror.url}registry.example.com/test/alpha/index.json", verify=mirror.trust())
    assert other.status_code == 404 and "not one this mirror reads through" in other.json()["error"]


def signed_archive_url(mirror: Mirror, type_: str, version: str, platform: str = "linux_amd64") -> str:
    """The archive URL the version document hands out (signed), resolved as Terraform resolves it."""
    document_url = f"{mirror.url}{mirror.host}/test/{type_}/{version}.json"
    document = httpx.get(document_url, verify=mirror.trust()).json()
    return str(httpx.URL(document_url).join(document["archives"][platform]["url"]))


def test_an_archive_is_served_only_through_the_signed_url_a_version_document_handed_out(mirror: Mirror) -> None:
    """Issue 24 finding 12 (attack: the archive route needs no token, Terraform sends none). An outsider who knows
    or guesses a digest asked `archives/<sha>/<file>`: a 404 or 200/502 told whether the mirror knew it, and a
    listed digest not yet stored was read through from upstream on their request. Now the route serves only URLs
    the (token-protected) version document signed, not expired; unsigned, forged and expired URLs get the one 404
    of an archive never listed, before any storage read or upstream request. Terraform itself follows the signed
    relative URL, query string kept (the init below, real terraform)."""
    mirror.upstream.publish("test", "alpha", "1.0.0")
    mirror.upstream.publish("test", "beta", "1.0.0")
    signed = signed_archive_url(mirror, "alpha", "1.0.0")  # a runner's view: listed, not read through yet
    base = signed.split("?", 1)[0]
    query = dict(httpx.URL(signed).params)
    never_listed = f"{mirror.url}archives/{'0' * 64}/terraform-provider-alpha_1.0.0_linux_amd64.zip"
    before = list(mirror.upstream.requests)
    forged = base64url_of(hashlib.sha256(b"guess").digest())
    expiry = query.get("exp", str(int(time.time()) + 3600))
    attempts = {
        "unsigned": base,
        "forged": f"{base}?exp={expiry}&sig={forged}",
        "expired": f"{base}?exp={int(time.time()) - 1}&sig={query.get('sig', forged)}",
        "extended": f"{base}?exp={int(expiry) + 86400}&sig={query.get('sig', forged)}",
        "other file": signed.replace("_linux_amd64.zip", "_darwin_arm64.zip"),
        "never listed, unsigned": never_listed,
        "never listed, another's signature": f"{never_listed}?{httpx.URL(signed).query.decode()}",
    }
    answers = {what: httpx.get(url, verify=mirror.trust()) for what, url in attempts.items()}
    assert {what: (a.status_code, a.json() if a.status_code != 200 else "archive") for what, a in answers.items()} \
        == {what: (404, {"error": "no such archive"}) for what in attempts}
    assert mirror.upstream.requests == before  # nothing read through
    assert mirror.stored_archives() == set()
    assert set(query) == {"exp", "sig"} and int(query["exp"]) > time.time() + 3000

    served = httpx.get(signed, verify=mirror.trust())
    assert served.status_code == 200
    assert hashlib.sha256(served.content).hexdigest() == base.split("/archives/")[1].split("/")[0]
    # Real terraform installs through the signed URLs (relative to the document, query string kept).
    installed = mirror.init(mirror.layer("signed", {"beta": "1.0.0"}))
    assert installed.returncode == 0, installed.stderr


def base64url_of(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _source_with_lock(lock: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        data = lock.encode()
        info = tarfile.TarInfo("layers/app/.terraform.lock.hcl")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_eviction_drops_the_least_recently_served_a_pinned_version_last(tmp_path: Path) -> None:
    tls = make_tls(tmp_path / "tls")
    storage = FilesystemStorage(tmp_path / "data")
    with running_upstream(tls, signed=False) as (upstream, served_at):
        host = REGISTRY
        for version in ("1.0.0", "2.0.0", "3.0.0"):
            upstream.publish("test", "alpha", version, size=100_000)
        lock = f'provider "{host}/test/alpha" {{\n  version = "1.0.0"\n  hashes = ["zh:00"]\n}}\n'
        source = (tmp_path / "data" / "sources" / "team" / "infra" / ("a" * 40 + ".tar.gz"))
        source.parent.mkdir(parents=True)
        source.write_bytes(_source_with_lock(lock))
        clock = [1000.0]

        async def scenario() -> list[str]:
            upstream_client = Upstream(ssl_context(tls.ca), registry_urls={host: f"https://{served_at}"})
            cache = ProviderCache(storage, upstream_client, [host], 3600, max_bytes=250_000,
                                  pinned=LockPins(storage), now=lambda: clock[0])
            address = ProviderAddress.parse(host, "test", "alpha")
            served = []
            for version in ("1.0.0", "2.0.0", "3.0.0"):
                clock[0] += 10
                document = await cache.version(address, version)
                entry = document["platforms"]["linux_amd64"]
                async for _ in await cache.archive(entry["sha256"], entry["filename"]):
                    pass
                served.append(entry["sha256"])
            return served

        shas = asyncio.run(scenario())
    stored = {p.stem for p in (tmp_path / "data" / "providers" / "archives").glob("*.zip")}
    # 3 x 100 KB over a 250 KB budget: 2.0.0, the least recently served that no lock file pins, went.
    assert stored == {shas[0], shas[2]}


def test_attack_lock_files_pinning_many_versions_cannot_hold_the_cache_above_its_bound(tmp_path: Path) -> None:
    """A tenant commits lock files pinning every version (one per directory) and has them read through: pinned
    archives were never evicted, so the cache grew past its bound on the volume all tenants share. Now they go
    last, least recently served first, and the bound holds."""
    tls = make_tls(tmp_path / "tls")
    storage = FilesystemStorage(tmp_path / "data")
    versions = ("1.0.0", "2.0.0", "3.0.0", "4.0.0")
    with running_upstream(tls, signed=False) as (upstream, served_at):
        host = REGISTRY
        for version in versions:
            upstream.publish("test", "alpha", version, size=100_000)
        for version in versions:
            lock = f'provider "{host}/test/alpha" {{\n  version = "{version}"\n  hashes = ["zh:00"]\n}}\n'
            source = tmp_path / "data" / "sources" / "team" / "infra" / (version.replace(".", "") * 8 + ".tar.gz")
            source.parent.mkdir(parents=True, exist_ok=True)
            source.write_bytes(_source_with_lock(lock))
        clock = [1000.0]

        async def scenario() -> list[str]:
            upstream_client = Upstream(ssl_context(tls.ca), registry_urls={host: f"https://{served_at}"})
            cache = ProviderCache(storage, upstream_client, [host], 3600, max_bytes=250_000,
                                  pinned=LockPins(storage), now=lambda: clock[0])
            address = ProviderAddress.parse(host, "test", "alpha")
            served = []
            for version in versions:
                clock[0] += 10
                entry = (await cache.version(address, version))["platforms"]["linux_amd64"]
                async for _ in await cache.archive(entry["sha256"], entry["filename"]):
                    pass
                served.append(entry["sha256"])
            return served

        shas = asyncio.run(scenario())
    stored = {p.stem for p in (tmp_path / "data" / "providers" / "archives").glob("*.zip")}
    assert sum(p.stat().st_size for p in (tmp_path / "data" / "providers" / "archives").glob("*.zip")) <= 250_000
    assert stored == set(shas[2:])  # every version pinned: the two least recently served went


async def _served(cache: ProviderCache, sha256: str, filename: str) -> bytes:
    return b"".join([bytes(chunk) async for chunk in await cache.archive(sha256, filename)])


def test_a_registry_naming_its_archives_otherwise_lists_every_platform(tmp_path: Path) -> None:
    """A private registry may name its archives without `terraform-provider-`: a version lists every platform by
    the name the registry gives the one it was asked about (only that one's name was kept, the others dropped)."""
    tls = make_tls(tmp_path / "tls")
    with running_upstream(tls) as (upstream, served_at):
        upstream.file_prefix = "tp-"
        upstream.publish("corp", "net", "1.0.0")

        async def scenario() -> None:
            registry = Upstream(ssl_context(tls.ca), registry_urls={REGISTRY: f"https://{served_at}"})
            cache = ProviderCache(FilesystemStorage(tmp_path / "data"), registry, [REGISTRY], 3600)
            document = await cache.version(ProviderAddress.parse(REGISTRY, "corp", "net"), "1.0.0")
            assert {p: e["filename"] for p, e in document["platforms"].items()} == {
                p: f"tp-net_1.0.0_{p}.zip" for p in PLATFORMS}

        asyncio.run(scenario())


def test_attack_another_providers_sha256sums_cannot_take_over_an_archive(tmp_path: Path) -> None:
    """Anyone who publishes a provider lists the real aws archive's line first in their own SHA256SUMS (signed with
    their own key, which the registry names) and has the mirror read that version: the aws archive's pointer then
    named their provider as its origin, so every tenant's first download of aws got a 502 for good. A provider's
    SHA256SUMS now lists only its own archives."""
    tls = make_tls(tmp_path / "tls")
    storage = FilesystemStorage(tmp_path / "data")
    with running_upstream(tls) as (upstream, served_at):
        host = REGISTRY
        upstream.publish("hashicorp", "aws", "5.0.0")
        upstream.publish("evil", "x", "5.0.0")
        aws_zip = upstream.providers[("hashicorp", "aws")]["5.0.0"]["linux_amd64"]
        aws_file = upstream.archive_name("aws", "5.0.0", "linux_amd64")
        aws_sha = hashlib.sha256(aws_zip).hexdigest()
        upstream.listed_first[("evil", "x", "5.0.0")] = f"{aws_sha}  {aws_file}\n"

        async def scenario() -> None:
            registry = Upstream(ssl_context(tls.ca), registry_urls={host: f"https://{served_at}"})
            lister = ProviderCache(storage, registry, [host], 3600)
            aws = await lister.version(ProviderAddress.parse(host, "hashicorp", "aws"), "5.0.0")
            assert aws["platforms"]["linux_amd64"] == {"filename": aws_file, "sha256": aws_sha}
            evil = await lister.version(ProviderAddress.parse(host, "evil", "x"), "5.0.0")
            fresh = ProviderCache(storage, registry, [host], 3600)
            assert await _served(fresh, aws_sha, aws_file) == aws_zip
            pointer = await fresh.stored_pointer(aws_sha, aws_file)
            assert pointer["h1"] and pointer["size"] == len(aws_zip), pointer
            assert {e["filename"] for e in evil["platforms"].values()} == {
                upstream.archive_name("x", "5.0.0", platform) for platform in PLATFORMS}
            # A version read through again (another replica's race, a crash before its document was stored) finds
            # its origin records and pointers written, and is served all the same.
            await storage.delete(f"providers/meta/{host}/hashicorp/aws/5.0.0.json")
            again = ProviderCache(storage, registry, [host], 3600)
            assert (await again.version(ProviderAddress.parse(host, "hashicorp", "aws"), "5.0.0")) == aws

        asyncio.run(scenario())


def test_attack_a_same_named_provider_elsewhere_cannot_break_an_archive_nor_drop_its_h1_or_its_pin(
        tmp_path: Path) -> None:
    """`evil/aws` lists the very archive of `hashicorp/aws` (same file name, real SHA-256) and has its registry
    answer a download URL that fails. Listed after aws, it overwrote the archive's pointer (its `h1` and `size`
    gone: version documents lost `h1:` and eviction skipped the archive) and became its only origin (a 502 for
    every tenant). Now a pointer is written once, every listing is an origin record, and a read through tries each
    origin until one's bytes verify; a lock file's pin holds under any origin that listed the archive."""
    tls = make_tls(tmp_path / "tls")
    storage = FilesystemStorage(tmp_path / "data")
    with running_upstream(tls, signed=False) as (upstream, served_at):
        host = REGISTRY
        for namespace in ("hashicorp", "evil"):  # the fake's archives are made of type, version and platform alone
            for version in ("5.0.0", "5.1.0"):
                upstream.publish(namespace, "aws", version)
        for version in ("5.0.0", "5.1.0"):
            upstream.gone.add(f"/files/evil/{upstream.archive_name('aws', version, 'linux_amd64')}")
        aws = ProviderAddress.parse(host, "hashicorp", "aws")
        evil = ProviderAddress.parse(host, "evil", "aws")
        clock = [1000.0]

        async def scenario() -> tuple[str, str]:
            registry = Upstream(ssl_context(tls.ca), registry_urls={host: f"https://{served_at}"})
            cache = ProviderCache(storage, registry, [host], 3600, now=lambda: clock[0])
            # 5.1.0: evil/aws lists it first, so its pointer names evil/aws; the read through still gets aws's bytes.
            newer = (await cache.version(evil, "5.1.0"))["platforms"]["linux_amd64"]
            assert (await cache.version(aws, "5.1.0"))["platforms"]["linux_amd64"] == newer
            fresh = ProviderCache(storage, registry, [host], 3600, now=lambda: clock[0])
            assert await _served(fresh, newer["sha256"], newer["filename"]) == \
                upstream.providers[("hashicorp", "aws")]["5.1.0"]["linux_amd64"]

            # 5.0.0: read through from aws, then listed by evil/aws: its pointer keeps its h1 and size.
            clock[0] += 10
            older = (await cache.version(aws, "5.0.0"))["platforms"]["linux_amd64"]
            await _served(cache, older["sha256"], older["filename"])
            await cache.version(evil, "5.0.0")
            fresh = ProviderCache(storage, registry, [host], 3600, now=lambda: clock[0])
            pointer = await fresh.stored_pointer(older["sha256"], older["filename"])
            assert pointer.get("h1") and pointer.get("size"), f"the pointer lost its h1 or size: {pointer}"
            assert older["sha256"] in await fresh.known_h1(await fresh.version(aws, "5.0.0"))
            return newer["sha256"], older["sha256"]

        newer, older = asyncio.run(scenario())

        async def pinned() -> set[tuple[str, str]]:
            return {(str(aws), "5.1.0")}

        async def evict() -> list[str]:
            registry = Upstream(ssl_context(tls.ca), registry_urls={host: f"https://{served_at}"})
            bound = int((await ProviderCache(storage, registry, [host], 3600).stored_pointer(
                older, upstream.archive_name("aws", "5.0.0", "linux_amd64")))["size"])
            return await ProviderCache(storage, registry, [host], 3600, max_bytes=bound, pinned=pinned).evict()

        # aws 5.1.0 is pinned, and least recently served: the pin holds although its pointer names evil/aws.
        assert asyncio.run(evict()) == [older]
        assert newer in {p.stem for p in (tmp_path / "data" / "providers" / "archives").glob("*.zip")}


def test_lock_file_pins_are_read_from_provider_blocks() -> None:
    text = ('provider "registry.terraform.io/hashicorp/aws" {\n  version     = "5.31.0"\n  constraints = "~> 5.0"\n'
            '  hashes = [\n    "h1:abc=",\n  ]\n}\n\nprovider "registry.terraform.io/hashicorp/random" {\n'
            '  version = "3.6.0"\n}\n')
    from burrito_py.datastore.providercache.pins import lock_file_pins

    assert lock_file_pins(text) == {("registry.terraform.io/hashicorp/aws", "5.31.0"),
                                    ("registry.terraform.io/hashicorp/random", "3.6.0")}
    assert re.fullmatch(r"h1:[A-Za-z0-9+/=]{44}", "h1:" + "A" * 43 + "=")


class _Spaces(io.RawIOBase):
    """`size` bytes of spaces, read in pieces: a member far larger than the test ever holds."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self.left)
        buffer[:n] = b" " * n
        self.left -= n
        return n


def test_attack_a_gigantic_lock_file_in_a_tenants_source_is_never_read_into_the_datastores_memory() -> None:
    """A tenant commits a `.terraform.lock.hcl` of 256 MiB of spaces (a few hundred KB compressed, as git and the
    source archive store it). The datastore's pins reader read every such member whole (and decoded it): 256 MiB
    and more for one archive, gigabytes for a larger one, in the component every tenant shares. Now a lock file
    over 1 MiB is not read, and the real lock file beside it still pins its version."""
    import tracemalloc

    from burrito_py.datastore.providercache.pins import _archive_pins

    size = 256 * 1024 * 1024
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
        real = b'provider "registry.terraform.io/hashicorp/random" {\n  version = "3.6.0"\n}\n'
        info = tarfile.TarInfo("layers/ok/.terraform.lock.hcl")
        info.size = len(real)
        archive.addfile(info, io.BytesIO(real))
        huge = tarfile.TarInfo("layers/bomb/.terraform.lock.hcl")
        huge.size = size
        archive.addfile(huge, io.BufferedReader(_Spaces(size), 1024 * 1024))
    data = buffer.getvalue()
    assert len(data) < 4 * 1024 * 1024
    tracemalloc.start()
    try:
        pins = _archive_pins(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert pins == {("registry.terraform.io/hashicorp/random", "3.6.0")}
    assert peak < 32 * 1024 * 1024, f"the pins reader held {peak} bytes at its peak"


def test_tool_archives_are_read_through_once_and_verified(tmp_path: Path) -> None:
    """Terraform and OpenTofu release archives: versions newest first, the zip with its SHA-256, upstream once; a
    tampered one refused and never stored. OpenTofu's versions come from get.opentofu.org's api.json (here the
    fake's), never GitHub's API."""
    tls = make_tls(tmp_path / "tls")
    with running_upstream(tls, signed=False) as (upstream, served_at):
        for tool, versions in (("terraform", ("1.9.8", "1.11.4", "1.10.0")), ("opentofu", ("1.8.5",))):
            upstream.tools[tool] = {v: {"linux_amd64": f"{tool} {v} binary".encode() * 100} for v in versions}
        base = f"https://{served_at}"
        with running_datastore(tmp_path / "datastore", tool_cache_enabled=True, tool_cache_terraform_url=base,
                               tool_cache_opentofu_url=f"{base}/opentofu",
                               tool_cache_opentofu_index_url=f"{base}/tofu/api.json", upstream_ca_file=tls.ca) as url:
            versions = httpx.get(f"{url}/tools/v1/terraform/versions").json()["versions"]
            assert versions == ["1.11.4", "1.10.0", "1.9.8"]
            for _ in range(3):
                answer = httpx.get(f"{url}/tools/v1/terraform/1.11.4/linux/amd64")
                assert answer.status_code == 200
                assert answer.headers["X-Burrito-Sha256"] == hashlib.sha256(answer.content).hexdigest()
            assert upstream.requests.count("/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip") == 1
            tofu = httpx.get(f"{url}/tools/v1/opentofu/1.8.5/linux/amd64")
            assert tofu.status_code == 200 and tofu.content.startswith(b"opentofu 1.8.5")
            assert httpx.get(f"{url}/tools/v1/opentofu/versions").json()["versions"] == ["1.8.5"]
            assert "/tofu/api.json" in upstream.requests
            upstream.tampered.add("terraform_1.10.0_linux_amd64.zip")
            refused = httpx.get(f"{url}/tools/v1/terraform/1.10.0/linux/amd64")
            assert refused.status_code == 502 and "SHA256SUMS" in refused.json()["error"]
            assert not (tmp_path / "datastore" / "tools" / "terraform" / "1.10.0").exists()
            assert httpx.get(f"{url}/tools/v1/terraform/9.9.9/linux/amd64").status_code == 502
            assert httpx.get(f"{url}/tools/v1/vault/1.0.0/linux/amd64").status_code == 404
            metrics = httpx.get(f"{url}/metrics").text
            assert 'burrito_py_provider_cache_requests_total{kind="tool",result="hit"}' in metrics
            assert "burrito_py_provider_cache_upstream_bytes_total" in metrics


def test_terragrunt_binaries_are_read_through_once_and_verified(tmp_path: Path) -> None:
    """Terragrunt's releases: versions from its releases list (GitHub's API shape, read by the datastore, never a
    runner), the bare binary with its SHA-256 from the release's SHA256SUMS, upstream once; a tampered one refused
    and never stored."""
    tls = make_tls(tmp_path / "tls")
    with running_upstream(tls, signed=False) as (upstream, served_at):
        upstream.tools["terragrunt"] = {v: {"linux_amd64": f"terragrunt {v} binary".encode() * 100}
                                        for v in ("0.99.1", "1.1.3", "1.0.0")}
        base = f"https://{served_at}"
        with running_datastore(tmp_path / "datastore", tool_cache_enabled=True,
                               tool_cache_terragrunt_url=f"{base}/terragrunt",
                               tool_cache_terragrunt_index_url=f"{base}/terragrunt/releases",
                               upstream_ca_file=tls.ca) as url:
            assert httpx.get(f"{url}/tools/v1/terragrunt/versions").json()["versions"] == ["1.1.3", "1.0.0",
                                                                                           "0.99.1"]
            for _ in range(2):
                answer = httpx.get(f"{url}/tools/v1/terragrunt/1.1.3/linux/amd64")
                assert answer.status_code == 200 and answer.content.startswith(b"terragrunt 1.1.3 binary")
                assert answer.headers["content-type"] == "application/octet-stream"
                assert answer.headers["X-Burrito-Sha256"] == hashlib.sha256(answer.content).hexdigest()
            assert upstream.requests.count("/terragrunt/v1.1.3/terragrunt_linux_amd64") == 1
            upstream.tampered.add("terragrunt_linux_amd64")
            refused = httpx.get(f"{url}/tools/v1/terragrunt/1.0.0/linux/amd64")
            assert refused.status_code == 502 and "checksum did not match" in refused.json()["error"]
            assert not (tmp_path / "datastore" / "tools" / "terragrunt" / "1.0.0").exists()


def test_only_runners_and_admins_read_through_the_mirror(tmp_path: Path) -> None:
    """Another authenticated caller gets a 403 from the JSON routes; archives and healthz need no token (Terraform
    sends none for archive downloads)."""
    from burrito_py.datastore.auth import Principal, RunnerScope

    class Tokens:
        async def authenticate(self, token: str) -> Principal:
            if token == "runner":
                return Principal("system:serviceaccount:team:burrito-py-runner",
                                 runner=RunnerScope("team", "app", "run-1", "team", "infra", 1))
            return Principal("alice")

    with running_datastore(tmp_path, auth_enabled=True, authenticator=Tokens(), provider_cache_enabled=True,
                           tool_cache_enabled=True, provider_cache_registries=["registry.example.test"]) as url:
        for route in ("/providers/v1/registry.example.test/test/alpha/index.json", "/tools/v1/terraform/versions",
                      "/providers/v1/packages/registry.example.test/test/alpha/1.0.0/linux_amd64"):
            assert httpx.get(url + route).status_code == 401
            denied = httpx.get(url + route, headers={"Authorization": "Bearer alice"})
            assert denied.status_code == 403 and "only runners and the controllers" in denied.json()["error"]
        assert httpx.get(f"{url}/providers/v1/healthz").status_code == 200
        assert httpx.get(f"{url}/providers/v1/archives/{'a' * 64}/x.zip").status_code == 404
        unknown = httpx.get(f"{url}/providers/v1/elsewhere.example/test/alpha/index.json",
                            headers={"Authorization": "Bearer runner"})
        assert unknown.status_code == 404


def test_a_renewed_https_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    """cert-manager renews into the same Secret and the kubelet swaps the files: new connections get the new
    certificate (checked here every 0.2 s; 10 s in the datastore)."""
    from cryptography import x509

    tls = make_tls(tmp_path / "tls")
    port = free_port()

    def serial() -> int:
        import socket

        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", port)) as raw, context.wrap_socket(raw) as wrapped:
            der = wrapped.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).serial_number

    with running_datastore(tmp_path / "datastore", tls_port=port, tls_cert_file=tls.cert, tls_key_file=tls.key,
                           provider_cache_enabled=True, tls_check_every=0.2):
        first = serial()
        renewed = make_tls(tmp_path / "renewed")
        for source, target in ((renewed.key, tls.key), (renewed.cert, tls.cert)):
            staged = target.with_suffix(".new")
            staged.write_bytes(source.read_bytes())
            staged.replace(target)
        time.sleep(0.3)
        assert serial() != first
        assert httpx.get(f"https://127.0.0.1:{port}/providers/v1/healthz",
                         verify=ssl.create_default_context(cafile=str(renewed.ca))).status_code == 200


def test_the_mirror_keeps_its_archives_in_s3_like_every_datastore_object(tmp_path: Path, s3_bucket: S3Bucket) -> None:
    """The S3 backend (moto over HTTP): terraform init through the mirror, the archive stored under the bucket's
    prefix, a second init from the cache."""
    tls = make_tls(tmp_path / "tls")
    with running_upstream(tls) as (upstream, served_at):
        upstream.publish("test", "alpha", "1.0.0")
        port = free_port()
        with running_datastore(tmp_path / "unused", storage=s3_bucket.storage(), tls_port=port,
                               tls_cert_file=tls.cert, tls_key_file=tls.key, provider_cache_enabled=True,
                               provider_cache_registries=[],
                               provider_cache_registry_urls={REGISTRY: f"https://{served_at}"},
                               upstream_ca_file=tls.ca):
            mirror = Mirror(upstream, REGISTRY, f"https://127.0.0.1:{port}/providers/v1/", tmp_path / "unused", tls,
                            tmp_path / "layers")
            for name in ("one", "two"):
                done = mirror.init(mirror.layer(name, {"alpha": "1.0.0"}))
                assert done.returncode == 0, done.stderr
    sha = hashlib.sha256(upstream.providers[("test", "alpha")]["1.0.0"]["linux_amd64"]).hexdigest()
    stored = s3_bucket.keys()
    assert f"burrito/providers/archives/{sha}.zip" in stored
    assert sum(1 for r in upstream.requests if r.endswith(".zip")) == 1


class _CountingStorage(FilesystemStorage):
    """Counts the objects read, to see which requests the mirror answers from memory."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[str] = []

    async def read(self, key: str):  # type: ignore[no-untyped-def]
        self.reads.append(key)
        return await super().read(key)


def test_warm_documents_come_from_memory_and_an_index_another_replica_refreshed_is_read_from_storage(
        tmp_path: Path) -> None:
    """A warm init's documents (the index within its TTL, the version document, the archive's pointer and h1) are
    answered without a storage read; an index past its TTL is read from storage again, where another replica may
    have refreshed it, before anyone asks upstream."""
    tls = make_tls(tmp_path / "tls")
    with running_upstream(tls, signed=False) as (upstream, served_at):
        host = REGISTRY
        upstream.publish("test", "alpha", "1.0.0", size=100_000)
        clock = [1000.0]

        async def scenario() -> None:
            storage = _CountingStorage(tmp_path / "data")
            registry = Upstream(ssl_context(tls.ca), registry_urls={host: f"https://{served_at}"})
            ours = ProviderCache(storage, registry, [host], 600, now=lambda: clock[0])
            theirs = ProviderCache(FilesystemStorage(tmp_path / "data"), registry, [host], 600, now=lambda: clock[0])
            address = ProviderAddress.parse(host, "test", "alpha")
            document = await ours.version(address, "1.0.0")  # a first init: the route lists the known h1 too
            await ours.known_h1(document)
            entry = document["platforms"]["linux_amd64"]
            async for _ in await ours.archive(entry["sha256"], entry["filename"]):
                pass
            storage.reads.clear()
            assert "1.0.0" in (await ours.index(address))["versions"]
            assert await ours.version(address, "1.0.0") == document
            assert entry["sha256"] in await ours.known_h1(document)
            assert storage.reads == []  # all from memory
            served = b"".join([bytes(chunk) async for chunk in await ours.archive(entry["sha256"], entry["filename"])])
            assert hashlib.sha256(served).hexdigest() == entry["sha256"]
            assert storage.reads == [f"providers/archives/{entry['sha256']}.zip"]  # the bytes only

            clock[0] += 61  # the platforms nobody fetched: their pointers are looked at again, for an h1
            storage.reads.clear()
            await ours.known_h1(document)
            assert len(storage.reads) == len(document["platforms"]) - 1

            clock[0] += 601  # past the TTL: the other replica reads the index again first
            await theirs.index(address)
            upstream_reads = len(upstream.requests)
            storage.reads.clear()
            await ours.index(address)
            assert storage.reads == [f"providers/meta/{address}/index.json"]
            assert len(upstream.requests) == upstream_reads  # its fresh copy, not another upstream read

        asyncio.run(scenario())


def _stored_tool_archives(data_dir: Path) -> dict[str, int]:
    root = data_dir / "tools"
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")
            if p.is_file() and p.suffix not in (".sha256", ".served", ".json")} if root.exists() else {}


def test_a_runner_cannot_fill_the_volume_through_the_tool_mirror(tmp_path: Path) -> None:
    """Attack: tenant code in a runner pod holds the runner's token and asks the tool mirror for release after
    release, platform after platform. The cache stays under its byte bound (least recently served evicted), and a
    platform no runner pod runs is refused before anything is downloaded."""
    from burrito_py.datastore.auth import Principal, RunnerScope

    class Tokens:
        async def authenticate(self, token: str) -> Principal:
            assert token == "runner"
            return Principal("system:serviceaccount:team:burrito-py-runner",
                             runner=RunnerScope("team", "app", "run-1", "team", "infra", 1))

    tls = make_tls(tmp_path / "tls")
    versions = [f"1.{minor}.0" for minor in range(10)]
    with running_upstream(tls, signed=False) as (upstream, served_at):
        upstream.tools["terraform"] = {v: {p: f"terraform {v} {p} ".encode() * 4_000
                                           for p in ("linux_amd64", "darwin_arm64", "windows_386")}
                                       for v in versions}
        with running_datastore(tmp_path / "datastore", auth_enabled=True, authenticator=Tokens(),
                               tool_cache_enabled=True, tool_cache_terraform_url=f"https://{served_at}",
                               tool_cache_max_bytes=350_000, upstream_ca_file=tls.ca) as url:
            runner = {"Authorization": "Bearer runner"}
            for version in versions:
                answer = httpx.get(f"{url}/tools/v1/terraform/{version}/linux/amd64", headers=runner)
                assert answer.status_code == 200
                assert answer.content.startswith(f"terraform {version} linux_amd64".encode())
                stored = _stored_tool_archives(tmp_path / "datastore")
                assert sum(stored.values()) <= 350_000, stored
            for os_, arch in (("darwin", "arm64"), ("windows", "386")):
                refused = httpx.get(f"{url}/tools/v1/terraform/1.0.0/{os_}/{arch}", headers=runner)
                assert refused.status_code == 404
    assert not [r for r in upstream.requests if "darwin" in r or "windows" in r]
    assert len(_stored_tool_archives(tmp_path / "datastore")) == 3  # 112 KB each: the newest three fit


def test_tool_eviction_drops_the_least_recently_served_and_an_evicted_tool_is_read_through_again(
        tmp_path: Path) -> None:
    from burrito_py.datastore.providercache.tools import ToolCache

    tls = make_tls(tmp_path / "tls")
    storage = FilesystemStorage(tmp_path / "data")
    with running_upstream(tls, signed=False) as (upstream, served_at):
        upstream.tools["terraform"] = {v: {"linux_amd64": f"terraform {v} ".encode() * 10_000}
                                       for v in ("1.0.0", "2.0.0", "3.0.0", "4.0.0")}
        clock = [1000.0]

        async def scenario() -> list[bytes]:
            cache = ToolCache(storage, Upstream(ssl_context(tls.ca)), f"https://{served_at}", "https://unused",
                              "https://unused", 3600, terragrunt_url="https://unused",
                              terragrunt_index_url="https://unused", max_bytes=400_000, now=lambda: clock[0])
            bodies = []
            for version in ("1.0.0", "2.0.0", "1.0.0", "3.0.0", "2.0.0"):
                clock[0] += 4000  # past LAST_USED_EVERY: each serving is recorded
                sha, stream = await cache.archive("terraform", version, "linux_amd64")
                body = b"".join([bytes(chunk) async for chunk in stream])
                assert hashlib.sha256(body).hexdigest() == sha
                bodies.append(body)
            # A bound below one archive: the archive being stored stays, every other goes.
            cache.max_bytes = 1
            clock[0] += 4000
            sha, stream = await cache.archive("terraform", "4.0.0", "linux_amd64")
            bodies.append(b"".join([bytes(chunk) async for chunk in stream]))
            return bodies

        bodies = asyncio.run(scenario())
    # 1.0.0, 2.0.0, 1.0.0 (a hit, recorded), 3.0.0: 2.0.0, least recently served, went; asked again, it is read
    # through once more (and 1.0.0, now the least recently served, goes); then 4.0.0 alone under a 1-byte bound.
    assert [b[:16] for b in bodies] == [f"terraform {v} ".encode() for v in
                                        ("1.0.0", "2.0.0", "1.0.0", "3.0.0", "2.0.0", "4.0.0")]
    assert upstream.requests.count("/terraform/2.0.0/terraform_2.0.0_linux_amd64.zip") == 2
    assert upstream.requests.count("/terraform/1.0.0/terraform_1.0.0_linux_amd64.zip") == 1
    assert set(_stored_tool_archives(tmp_path / "data")) == {"terraform/4.0.0/terraform_4.0.0_linux_amd64.zip"}
    assert not list((tmp_path / "data" / "tools" / "terraform" / "2.0.0").glob("*.sha256"))


def _overlapping_zip(name: str, member_bytes: int, entries: int) -> bytes:
    """One deflated member of `member_bytes` zeros that the central directory lists `entries` times, each entry
    naming the same local header: a few hundred KiB that a reader hashing every listed member expands to
    `entries * member_bytes`."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    zeros, crc, parts = bytes(1 << 20), 0, []
    for _ in range(member_bytes >> 20):
        parts.append(compressor.compress(zeros))
        crc = zlib.crc32(zeros, crc)
    parts.append(compressor.flush())
    data, raw = b"".join(parts), name.encode()
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, len(data), member_bytes, len(raw), 0)
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, 0, 8, 0, 0, crc, len(data), member_bytes,
                          len(raw), 0, 0, 0, 0, 0o100755 << 16, 0) + raw
    directory = central * entries
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, entries, entries, len(directory), len(local) + len(raw)
                      + len(data), 0)
    return local + raw + data + directory + end


def _many_members_zip(count: int) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for number in range(count):
            archive.writestr(f"f{number}", b"")
    return buffer.getvalue()


def test_attack_a_provider_archive_bomb_is_refused_before_the_datastore_expands_it(mirror: Mirror) -> None:
    """Anyone may publish a provider on the public registries the mirror reads through, and any runner (tenant code)
    may ask the mirror for it. The datastore read every member the archive's directory lists to compute its h1:
    here 80 listings of one 64 MiB member (5 GiB to inflate and hash from a 64 KiB download), or a directory of
    more members than any provider has (its ZipInfo objects are the datastore's memory: a 2 GiB archive lists tens
    of millions). Both are refused before a member is read, and nothing is stored."""
    upstream = mirror.upstream
    for type_, archive in (("bomb", _overlapping_zip("terraform-provider-bomb", 64 << 20, 80)),
                           ("many", _many_members_zip(5000))):
        upstream.providers[("test", type_)] = {"1.0.0": {p: archive for p in PLATFORMS}}
        started = time.monotonic()
        answer = httpx.get(signed_archive_url(mirror, type_, "1.0.0"), verify=mirror.trust(), timeout=60)
        assert answer.status_code == 502, (type_, answer.status_code)
        assert "refused" in answer.json()["error"], answer.json()
        assert time.monotonic() - started < 5, type_
    assert mirror.stored_archives() == set()
    # A genuine provider is served as before.
    upstream.publish("test", "alpha", "1.0.0")
    assert httpx.get(signed_archive_url(mirror, "alpha", "1.0.0"), verify=mirror.trust()).status_code == 200
