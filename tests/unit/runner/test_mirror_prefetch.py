"""The runner's prefetch of its locked providers into a filesystem mirror (runner/mirror.py, docs/architecture.md
§10.5): which providers, the CLI configuration that routes exactly those to it, and every way it falls back to
the network mirror as before."""

from __future__ import annotations

import hashlib
import io
import threading
import warnings
import zipfile
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from burrito_py.datastore.providercache.hashes import zip_h1
from burrito_py.runner.mirror import (
    CLI_CONFIG_NAME,
    PREFETCH_DEADLINE,
    PREFETCH_DIR_NAME,
    LockedProvider,
    MirrorConfig,
    MirrorSetup,
    cli_config,
    finish_prefetch,
    locked_providers,
    prefetch,
    prefetch_candidates,
    start_prefetch,
    unpack,
)


def prefetch_providers(
    config: MirrorConfig,
    setup: MirrorSetup,
    token: str | None,
    datastore_url: str,
    providers: Sequence[LockedProvider],
    platform: str,
    home: Path,
    say: Callable[[str], None] = print,
    fetch: Callable[..., str | None] = prefetch,
    deadline: float = PREFETCH_DEADLINE,
) -> MirrorSetup:
    """`start_prefetch` then `finish_prefetch`, with nothing in between (the runner does its other work there)."""
    pending = start_prefetch(config, setup, token, datastore_url, providers, platform, home, fetch)
    return finish_prefetch(pending, config, setup, token, home, say, deadline)


URL = "https://ds:8443/providers/v1/"
TOKEN = "eyJhbGciOi.token.sig"
NULL_H1 = "h1:HMMA2ncvrIlkSO5N8AOmmEQaxgZNjsqfuoRlKmsL2Rs="
NULL_ZH = "zh:" + "a" * 64
# As terraform 1.11 writes it (a registry install: h1 and every platform's zh), then one from a mirror install.
LOCK = f'''# This file is maintained automatically by "terraform init".
# Manual edits may be lost in future updates.

provider "registry.terraform.io/hashicorp/null" {{
  version     = "3.2.1"
  constraints = "~> 3.0"
  hashes = [
    "{NULL_H1}",
    "{NULL_ZH}",
  ]
}}

provider "registry.opentofu.org/hashicorp/random" {{
  version = "3.6.2"
  hashes = [
    "h1:R5qdQjKzOU16TziCN1vR3Exr/B+8WGK80glLTT4ZCPk=",
  ]
}}
'''


def test_the_lock_files_providers_versions_and_hashes() -> None:
    assert locked_providers(LOCK) == (
        LockedProvider("registry.terraform.io/hashicorp/null", "3.2.1", frozenset({NULL_H1, NULL_ZH})),
        LockedProvider("registry.opentofu.org/hashicorp/random", "3.6.2",
                       frozenset({"h1:R5qdQjKzOU16TziCN1vR3Exr/B+8WGK80glLTT4ZCPk="})),
    )
    assert locked_providers(LOCK)[0].type == "null"


@pytest.mark.parametrize("block", [
    'provider "registry.terraform.io/../null" {\n  version = "1.0.0"\n  hashes = ["h1:x="]\n}\n',
    'provider "registry.terraform.io/hashicorp/../../etc" {\n  version = "1.0.0"\n  hashes = ["h1:x="]\n}\n',
    'provider "Registry.terraform.io/hashicorp/null" {\n  version = "1.0.0"\n  hashes = ["h1:x="]\n}\n',
    'provider "hashicorp/null" {\n  version = "1.0.0"\n  hashes = ["h1:x="]\n}\n',
    'provider "registry.terraform.io/hashicorp/null" {\n  version = "../1.0.0"\n  hashes = ["h1:x="]\n}\n',
    'provider "registry.terraform.io/hashicorp/null" {\n  version = "~> 1.0"\n  hashes = ["h1:x="]\n}\n',
    'provider "registry.terraform.io/hashicorp/null" {\n  hashes = ["h1:x="]\n}\n',
    'provider "registry.terraform.io/hashicorp/null" {\n  version = "1.0.0"\n}\n',
    'provider "registry.terraform.io/hashicorp/null" {\n  version = "1.0.0"\n  hashes = []\n}\n',
])
def test_a_block_that_cannot_name_a_path_or_has_no_hash_is_left_to_the_network_mirror(block: str) -> None:
    assert locked_providers(block) == ()


@pytest.mark.parametrize("args", [["-upgrade"], ["-upgrade=true"], ["-upgrade=false"], ["--upgrade"],
                                  ["-plugin-dir=/x"], ["-plugin-dir", "/x"], ["-reconfigure", "-upgrade"]])
def test_upgrade_or_a_plugin_dir_prefetches_nothing(args: list[str]) -> None:
    assert prefetch_candidates(LOCK, args) == ()


def test_candidates() -> None:
    assert prefetch_candidates(None, ()) == ()  # no lock file
    assert [p.address for p in prefetch_candidates(LOCK, ["-reconfigure", "-lockfile=readonly"])] == [
        "registry.terraform.io/hashicorp/null", "registry.opentofu.org/hashicorp/random"]
    # Only what the mirror serves; the rest is installed as today (directly).
    assert [p.address for p in prefetch_candidates(LOCK, (), ("registry.opentofu.org",))] == [
        "registry.opentofu.org/hashicorp/random"]


def test_the_filesystem_mirror_has_exactly_the_prefetched_providers_and_the_network_mirror_not_them() -> None:
    prefetched = ["registry.terraform.io/hashicorp/null", "registry.opentofu.org/hashicorp/random"]
    text = cli_config(URL, "ds:8443", TOKEN, prefetch_dir="/home/runner/burrito-py-providers", prefetched=prefetched)
    listed = '["registry.terraform.io/hashicorp/null", "registry.opentofu.org/hashicorp/random"]'
    assert text == (
        "provider_installation {\n"
        "  filesystem_mirror {\n"
        '    path    = "/home/runner/burrito-py-providers"\n'
        f"    include = {listed}\n"
        "  }\n"
        "  network_mirror {\n"
        f'    url = "{URL}"\n'
        f"    exclude = {listed}\n"
        "  }\n"
        "}\n\n"
        f'credentials "ds:8443" {{\n  token = "{TOKEN}"\n}}\n')
    # With a registry list: the network mirror keeps its include, and `direct` excludes the mirrored registries.
    limited = cli_config(URL, "ds:8443", TOKEN, registries=("registry.terraform.io",),
                         prefetch_dir="/p", prefetched=prefetched[:1])
    assert ('    include = ["registry.terraform.io/*/*"]\n    exclude = ["registry.terraform.io/hashicorp/null"]\n'
            '  }\n  direct {\n    exclude = ["registry.terraform.io/*/*"]') in limited
    assert cli_config(URL, "ds:8443", TOKEN, prefetched=()) == cli_config(URL, "ds:8443", TOKEN)
    assert "filesystem_mirror" not in cli_config(None, "ds:8443", TOKEN, prefetch_dir="/p", prefetched=prefetched)


# -- prefetch_providers: when it acts, what it writes ---------------------------------------------------------
def _setup(home: Path, existing: str = "") -> MirrorSetup:
    home.mkdir(parents=True, exist_ok=True)
    (home / CLI_CONFIG_NAME).write_text(cli_config(URL, "ds:8443", TOKEN, existing))
    return MirrorSetup({"TF_CLI_CONFIG_FILE": str(home / CLI_CONFIG_NAME)}, None, True, existing)


def test_all_fetched_routes_them_to_the_filesystem_mirror(tmp_path: Path) -> None:
    home, said, calls = tmp_path / "home", [], []
    existing = 'credentials "app.terraform.io" {\n  token = "x"\n}\n'
    setup = _setup(home, existing)
    providers = prefetch_candidates(LOCK, ())

    def fetch(*args: Any) -> None:
        calls.append(args)

    after = prefetch_providers(MirrorConfig(URL), setup, TOKEN, "http://ds:8080", providers, "linux_amd64", home,
                               say=said.append, fetch=fetch)
    assert calls == [("http://ds:8080", TOKEN, providers, "linux_amd64", home / PREFETCH_DIR_NAME)]
    addresses = ("registry.opentofu.org/hashicorp/random", "registry.terraform.io/hashicorp/null")
    assert after == MirrorSetup(setup.env, None, True, existing, addresses)
    assert (home / CLI_CONFIG_NAME).read_text() == cli_config(
        URL, "ds:8443", TOKEN, existing, prefetch_dir=str(home / PREFETCH_DIR_NAME), prefetched=addresses)
    assert len(said) == 1 and said[0].startswith("burrito-py: 2 locked provider(s) prefetched")


def test_a_failed_prefetch_leaves_the_network_mirror_as_it_was(tmp_path: Path) -> None:
    home, said = tmp_path / "home", []
    setup = _setup(home)
    before = (home / CLI_CONFIG_NAME).read_text()
    after = prefetch_providers(MirrorConfig(URL), setup, TOKEN, "http://ds:8080", prefetch_candidates(LOCK, ()),
                               "linux_amd64", home, say=said.append, fetch=lambda *_: "x 1.0.0: 502 Bad Gateway")
    assert after is setup and (home / CLI_CONFIG_NAME).read_text() == before
    assert said == ["burrito-py: locked providers not prefetched (x 1.0.0: 502 Bad Gateway); terraform installs "
                    "them from the mirror"]


@pytest.mark.parametrize("case", ["mirror down", "nothing locked", "no mirror"])
def test_nothing_to_do_fetches_nothing(tmp_path: Path, case: str) -> None:
    home = tmp_path / "home"
    setup = _setup(home)
    if case == "mirror down":
        setup = MirrorSetup(setup.env, None, False)
    providers = () if case == "nothing locked" else prefetch_candidates(LOCK, ())
    config = MirrorConfig("" if case == "no mirror" else URL)

    def fetch(*_: Any) -> str:
        raise AssertionError("fetched")

    assert prefetch_providers(config, setup, TOKEN, "http://ds:8080", providers, "linux_amd64", home,
                              fetch=fetch) is setup


def test_a_prefetch_past_its_deadline_or_raising_leaves_the_network_mirror(tmp_path: Path) -> None:
    home, said = tmp_path / "home", []
    setup = _setup(home)
    before = (home / CLI_CONFIG_NAME).read_text()
    release = threading.Event()
    stuck = prefetch_providers(MirrorConfig(URL), setup, TOKEN, "http://ds:8080", prefetch_candidates(LOCK, ()),
                               "linux_amd64", home, say=said.append, fetch=lambda *_: release.wait(30) and None,
                               deadline=0.2)
    release.set()

    def broken(*_: Any) -> str | None:
        raise RuntimeError("a bug")

    raised = prefetch_providers(MirrorConfig(URL), setup, TOKEN, "http://ds:8080", prefetch_candidates(LOCK, ()),
                                "linux_amd64", home, say=said.append, fetch=broken)
    assert stuck is setup and raised is setup and (home / CLI_CONFIG_NAME).read_text() == before
    assert said == ["burrito-py: locked providers not prefetched (not done after 0 s); terraform installs them "
                    "from the mirror",
                    "burrito-py: locked providers not prefetched (RuntimeError: a bug); terraform installs them from "
                    "the mirror"]


def test_the_prefetch_runs_while_the_runner_does_other_work(tmp_path: Path) -> None:
    home, said = tmp_path / "home", []
    setup = _setup(home)
    running, release = threading.Event(), threading.Event()

    def fetch(*_: Any) -> None:
        running.set()
        release.wait(30)

    pending = start_prefetch(MirrorConfig(URL), setup, TOKEN, "http://ds:8080", prefetch_candidates(LOCK, ()),
                             "linux_amd64", home, fetch=fetch)
    assert pending is not None and running.wait(10)  # started, and start_prefetch returned meanwhile
    release.set()
    after = finish_prefetch(pending, MirrorConfig(URL), setup, TOKEN, home, say=said.append)
    assert after.prefetched == ("registry.opentofu.org/hashicorp/random", "registry.terraform.io/hashicorp/null")
    assert finish_prefetch(None, MirrorConfig(URL), setup, TOKEN, home, say=said.append) is setup
    assert len(said) == 1


def test_tofu_layers_registry_opentofu_org_providers_come_from_the_filesystem_mirror(tmp_path: Path) -> None:
    """A mirror serving only registry.opentofu.org (tofu's default registry): its locked providers are
    prefetched, the others left as before (installed directly); the configuration is tofu's too (same syntax)."""
    home = tmp_path / "home"
    config = MirrorConfig(URL, registries=("registry.opentofu.org",))
    home.mkdir()
    (home / CLI_CONFIG_NAME).write_text(cli_config(URL, "ds:8443", TOKEN, registries=config.registries))
    setup = MirrorSetup({"TF_CLI_CONFIG_FILE": str(home / CLI_CONFIG_NAME)}, None, True)
    providers = prefetch_candidates(LOCK, (), config.registries)
    after = prefetch_providers(config, setup, TOKEN, "http://ds:8080", providers, "linux_arm64", home,
                               say=lambda _: None, fetch=lambda *_: None)
    assert after.prefetched == ("registry.opentofu.org/hashicorp/random",)
    assert (home / CLI_CONFIG_NAME).read_text() == (
        "provider_installation {\n"
        "  filesystem_mirror {\n"
        f'    path    = "{home / PREFETCH_DIR_NAME}"\n'
        '    include = ["registry.opentofu.org/hashicorp/random"]\n'
        "  }\n"
        "  network_mirror {\n"
        f'    url = "{URL}"\n'
        '    include = ["registry.opentofu.org/*/*"]\n'
        '    exclude = ["registry.opentofu.org/hashicorp/random"]\n'
        "  }\n"
        "  direct {\n"
        '    exclude = ["registry.opentofu.org/*/*"]\n'
        "  }\n"
        "}\n\n"
        f'credentials "ds:8443" {{\n  token = "{TOKEN}"\n}}\n')


# -- prefetch: the requests, and each refusal -----------------------------------------------------------------
class _Datastore(BaseHTTPRequestHandler):
    answers: dict[str, tuple[int, dict[str, str], bytes]] = {}
    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        status, headers, body = self.answers.get(self.path, (404, {}, b'{"error": "no such version"}'))
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def datastore() -> Iterator[tuple[str, type[_Datastore]]]:
    handler = type("Handler", (_Datastore,), {"answers": {}, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


NULL_PATH = "/providers/v1/packages/registry.terraform.io/hashicorp/null/3.2.1/linux_amd64"
RANDOM_PATH = "/providers/v1/packages/registry.opentofu.org/hashicorp/random/3.6.2/linux_amd64"


def test_prefetch_writes_a_packed_mirror_with_the_token(tmp_path: Path, datastore: tuple[str, Any]) -> None:
    url, handler = datastore
    handler.answers[NULL_PATH] = (200, {"X-Burrito-Sha256": "a" * 64}, b"null zip")  # its zh: is locked
    handler.answers[RANDOM_PATH] = (200, {"X-Burrito-Sha256": "b" * 64,
                                          "X-Burrito-H1": "h1:R5qdQjKzOU16TziCN1vR3Exr/B+8WGK80glLTT4ZCPk="},
                                    b"random zip")  # its h1: is
    dest = tmp_path / "mirror"
    assert prefetch(url, TOKEN, prefetch_candidates(LOCK, ()), "linux_amd64", dest) is None
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*.zip")) == [
        "registry.opentofu.org/hashicorp/random/terraform-provider-random_3.6.2_linux_amd64.zip",
        "registry.terraform.io/hashicorp/null/terraform-provider-null_3.2.1_linux_amd64.zip"]
    assert (dest / "registry.terraform.io/hashicorp/null/terraform-provider-null_3.2.1_linux_amd64.zip").read_bytes() \
        == b"null zip"
    assert sorted(handler.seen) == [(RANDOM_PATH, f"Bearer {TOKEN}"), (NULL_PATH, f"Bearer {TOKEN}")]


@pytest.mark.parametrize(("null", "reason"), [
    ((404, {}, b'{"error": "no linux_amd64 archive"}'), "registry.terraform.io/hashicorp/null 3.2.1: 404"),
    ((502, {}, b'{"error": "checksum did not match"}'), "registry.terraform.io/hashicorp/null 3.2.1: 502"),
    # A platform the lock file lacks: neither the archive's SHA-256 nor its h1 is listed.
    ((200, {"X-Burrito-Sha256": "c" * 64, "X-Burrito-H1": "h1:other="}, b"zip"),
     "registry.terraform.io/hashicorp/null 3.2.1: the lock file lists no hash of its linux_amd64 archive"),
    ((200, {}, b"zip"), "registry.terraform.io/hashicorp/null 3.2.1: the lock file lists no hash"),
])
def test_any_failure_removes_everything_and_says_why(tmp_path: Path, datastore: tuple[str, Any],
                                                     null: tuple[int, dict[str, str], bytes], reason: str) -> None:
    url, handler = datastore
    handler.answers[NULL_PATH] = null
    handler.answers[RANDOM_PATH] = (200, {"X-Burrito-Sha256": "b" * 64,
                                          "X-Burrito-H1": "h1:R5qdQjKzOU16TziCN1vR3Exr/B+8WGK80glLTT4ZCPk="}, b"z")
    dest = tmp_path / "mirror"
    said = prefetch(url, TOKEN, prefetch_candidates(LOCK, ()), "linux_amd64", dest)
    assert said is not None and said.startswith(reason)
    assert not dest.exists()


def test_an_unreachable_datastore_is_a_failure(tmp_path: Path) -> None:
    from burrito_py.datastore.in_process import free_port

    said = prefetch(f"http://127.0.0.1:{free_port()}", TOKEN, prefetch_candidates(LOCK, ()), "linux_amd64",
                    tmp_path / "mirror", timeout=2.0)
    assert said is not None and "ConnectionRefusedError" in said
    assert not (tmp_path / "mirror").exists()


# -- the unpacked layout: an archive whose h1 the lock file lists -------------------------------------------------
def provider_archive(*members: tuple[str, bytes, int]) -> bytes:
    """A zip of (name, content, unix mode with the file type) members."""
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w") as archive:
        warnings.simplefilter("ignore")  # a duplicate name, on purpose below
        for name, content, mode in members:
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr = mode << 16
            archive.writestr(info, content)
    return buffer.getvalue()


def test_an_archive_locked_by_its_h1_is_unpacked_one_locked_by_its_zh_only_stays_packed(
        tmp_path: Path, datastore: tuple[str, Any]) -> None:
    url, handler = datastore
    random = provider_archive(("terraform-provider-random_v3.6.2", b"#!/bin/sh\nexit 0\n", 0o100755),
                              ("LICENSE", b"MPL-2.0", 0o100644))
    (tmp_path / "random.zip").write_bytes(random)
    random_h1 = zip_h1(tmp_path / "random.zip")
    null = provider_archive(("terraform-provider-null_v3.2.1", b"null", 0o100755))
    null_zh = hashlib.sha256(null).hexdigest()
    handler.answers[RANDOM_PATH] = (200, {"X-Burrito-Sha256": hashlib.sha256(random).hexdigest(),
                                          "X-Burrito-H1": random_h1}, random)
    handler.answers[NULL_PATH] = (200, {"X-Burrito-Sha256": null_zh, "X-Burrito-H1": "h1:another-platform="}, null)
    providers = [LockedProvider("registry.opentofu.org/hashicorp/random", "3.6.2", frozenset({random_h1})),
                 # A lock file written on another platform: this platform's zh: only, which fits the archive alone.
                 LockedProvider("registry.terraform.io/hashicorp/null", "3.2.1", frozenset({f"zh:{null_zh}"}))]
    dest = tmp_path / "mirror"
    assert prefetch(url, TOKEN, providers, "linux_amd64", dest) is None
    unpacked = dest / "registry.opentofu.org/hashicorp/random/3.6.2/linux_amd64"
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == [
        "registry.opentofu.org/hashicorp/random/3.6.2/linux_amd64/LICENSE",
        "registry.opentofu.org/hashicorp/random/3.6.2/linux_amd64/terraform-provider-random_v3.6.2",
        "registry.terraform.io/hashicorp/null/terraform-provider-null_3.2.1_linux_amd64.zip"]
    assert (unpacked / "terraform-provider-random_v3.6.2").read_bytes() == b"#!/bin/sh\nexit 0\n"
    assert (unpacked / "terraform-provider-random_v3.6.2").stat().st_mode & 0o777 == 0o755
    assert (unpacked / "LICENSE").stat().st_mode & 0o777 == 0o644
    assert (dest / "registry.terraform.io/hashicorp/null/terraform-provider-null_3.2.1_linux_amd64.zip"
            ).read_bytes() == null


@pytest.mark.parametrize("members", [
    [("../escaped", b"x", 0o100644)],
    [("bin/../../escaped", b"x", 0o100644)],
    [("/tmp/escaped", b"x", 0o100644)],
    [("terraform-provider-x", b"../../escaped", 0o120777)],  # a symbolic link
    [("fifo", b"", 0o010644)],
    [("terraform-provider-x", b"one", 0o100755), ("terraform-provider-x", b"two", 0o100755)],
    [],
], ids=["parent", "parent-inside", "absolute", "symlink", "fifo", "duplicate", "empty"])
def test_a_hostile_or_odd_archive_is_left_packed_and_nothing_is_written_outside(
        tmp_path: Path, members: list[tuple[str, bytes, int]]) -> None:
    """Attack: an archive whose members would write outside the provider's directory, through a link, or over one
    another. Nothing is unpacked from it (terraform's own unpacking refuses such names too), it stays as it came."""
    provider = tmp_path / "mirror" / "host" / "ns" / "x"
    provider.mkdir(parents=True)
    archive = provider / "terraform-provider-x_1.0.0_linux_amd64.zip"
    data = provider_archive(*members)
    archive.write_bytes(data)
    into = provider / "1.0.0" / "linux_amd64"
    assert unpack(archive, into) is False
    assert archive.read_bytes() == data
    assert not into.exists()
    assert not any(p.name == "escaped" for p in tmp_path.rglob("*"))
    assert not Path("/tmp/escaped").exists()


def test_a_damaged_archive_is_left_to_terraform(tmp_path: Path) -> None:
    archive = tmp_path / "p.zip"
    archive.write_bytes(provider_archive(("terraform-provider-x", b"x" * 1000, 0o100755))[:-30])  # truncated
    assert unpack(archive, tmp_path / "into") is False
    assert archive.exists() and not (tmp_path / "into").exists()
