"""A fake Terraform provider registry and release site over HTTPS on localhost (a test CA).

Registry (the Provider Registry Protocol): `/.well-known/terraform.json`, `/v1/providers/<ns>/<type>/versions`,
`/v1/providers/<ns>/<type>/<v>/download/<os>/<arch>`; files under `/files/` (archives, `SHA256SUMS`, and its
signature when a GnuPG key signs). Release site: `/terraform/index.json`, `/terraform/<v>/terraform_<v>_<p>.zip`
and `…_SHA256SUMS`; `/tofu/api.json`, `/opentofu/v<v>/tofu_<v>_<p>.zip`; `/terragrunt/releases` (GitHub's releases
API shape), `/terragrunt/v<v>/terragrunt_<p>` (the bare binary) and `/terragrunt/v<v>/SHA256SUMS`.

Provider archives are synthetic (a zip holding `terraform-provider-<type>_v<version>`): `terraform init` verifies
and unpacks a provider, it never runs it. Every request is recorded with the bytes sent.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import subprocess
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from .tls import TlsFiles, serving_https

PLATFORMS = ("linux_amd64", "linux_arm64", "darwin_arm64")


def provider_zip(type_: str, version: str, platform: str, size: int = 4096, content: bytes | None = None) -> bytes:
    """A provider package: `content` as its executable, else synthetic content of about `size` bytes."""
    seed = hashlib.sha256(f"{type_} {version} {platform}".encode()).digest()
    body = content if content is not None else (seed * (size // len(seed) + 1))[:size]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        info = zipfile.ZipInfo(f"terraform-provider-{type_}_v{version}", date_time=(2024, 1, 1, 0, 0, 0))
        info.external_attr = 0o755 << 16
        archive.writestr(info, body)
    return buffer.getvalue()


class GpgKey:
    """A throw-away signing key in its own GNUPGHOME (gpg --batch)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._gpg("--quick-gen-key", "Fake Registry <fake@example.test>", "rsa2048", "sign", "never")
        self.armored = self._gpg("--armor", "--export").decode()

    def _gpg(self, *args: str, data: bytes | None = None) -> bytes:
        return subprocess.run(["gpg", "--batch", "--yes", "--homedir", str(self.home), "--passphrase", "",
                               "--pinentry-mode", "loopback", *args], input=data, capture_output=True,
                              check=True).stdout

    def sign(self, data: bytes) -> bytes:
        return self._gpg("--detach-sign", "--output", "-", data=data)

    def close(self) -> None:
        subprocess.run(["gpgconf", "--homedir", str(self.home), "--kill", "gpg-agent"], capture_output=True,
                       check=False)


@dataclass
class FakeUpstream:
    providers: dict[tuple[str, str], dict[str, dict[str, bytes]]] = field(default_factory=dict)  # → v → p → zip
    tools: dict[str, dict[str, dict[str, bytes]]] = field(default_factory=dict)  # tool → version → platform → zip
    key: GpgKey | None = None
    tampered: set[str] = field(default_factory=set)  # archive file names served with other bytes
    bad_signature: bool = False
    listed_first: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (ns, type, v) → SHA256SUMS lines
    gone: set[str] = field(default_factory=set)  # request paths answered 404 (a download URL that fails)
    file_prefix: str = "terraform-provider-"  # how its archives are named (a private registry's may differ)
    requests: list[str] = field(default_factory=list)
    bytes_sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, namespace: str, type_: str, version: str, size: int = 4096, content: bytes | None = None
                ) -> None:
        self.providers.setdefault((namespace, type_), {})[version] = {
            p: provider_zip(type_, version, p, size, content) for p in PLATFORMS}

    def archive_name(self, type_: str, version: str, platform: str) -> str:
        return f"{self.file_prefix}{type_}_{version}_{platform}.zip"

    def shasums(self, namespace: str, type_: str, version: str) -> bytes:
        platforms = self.providers[(namespace, type_)][version]
        own = "".join(f"{hashlib.sha256(data).hexdigest()}  {self.archive_name(type_, version, p)}\n"
                      for p, data in sorted(platforms.items()))
        return (self.listed_first.get((namespace, type_, version), "") + own).encode()

    def distinct_bytes(self, platform: str = "linux_amd64") -> int:
        return sum(len(v[platform]) for versions in self.providers.values() for v in versions.values())


def _handler(fake: FakeUpstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            with fake.lock:
                fake.bytes_sent += len(body)

        def _json(self, value: Any) -> None:
            self._send(200, json.dumps(value).encode())

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            with fake.lock:
                fake.requests.append(path)
            if path in fake.gone:
                return self._send(404, b"not found", "text/plain")
            parts = path.strip("/").split("/")
            if path == "/.well-known/terraform.json":
                return self._json({"providers.v1": "/v1/providers/"})
            if parts[:2] == ["v1", "providers"] and len(parts) == 5 and parts[4] == "versions":
                versions = fake.providers.get((parts[2], parts[3]))
                if versions is None:
                    return self._send(404, b'{"errors":["not found"]}')
                return self._json({"versions": [
                    {"version": v, "protocols": ["5.0"],
                     "platforms": [{"os": p.split("_")[0], "arch": p.split("_")[1]} for p in sorted(ps)]}
                    for v, ps in versions.items()]})
            if parts[:2] == ["v1", "providers"] and len(parts) == 8 and parts[5] == "download":
                ns, type_, version, os_, arch = parts[2], parts[3], parts[4], parts[6], parts[7]
                data = fake.providers.get((ns, type_), {}).get(version, {}).get(f"{os_}_{arch}")
                if data is None:
                    return self._send(404, b'{"errors":["not found"]}')
                name = fake.archive_name(type_, version, f"{os_}_{arch}")
                sums = f"{ns}_{type_}_{version}_SHA256SUMS"
                document: dict[str, Any] = {
                    "protocols": ["5.0"], "os": os_, "arch": arch, "filename": name,
                    "download_url": f"/files/{ns}/{name}", "shasums_url": f"/files/{ns}/{sums}",
                    "shasum": hashlib.sha256(data).hexdigest()}
                if fake.key is not None:
                    document["shasums_signature_url"] = f"/files/{ns}/{sums}.sig"
                    keys = [{"key_id": "TEST", "ascii_armor": fake.key.armored}]
                    document["signing_keys"] = {"gpg_public_keys": keys}
                return self._json(document)
            if parts[0] == "files" and len(parts) == 3:
                ns, name = parts[1], parts[2]
                for (namespace, type_), versions in fake.providers.items():
                    for version, platforms in versions.items():
                        sums_name = f"{namespace}_{type_}_{version}_SHA256SUMS"
                        if namespace == ns and name == sums_name:
                            return self._send(200, fake.shasums(namespace, type_, version), "text/plain")
                        if namespace == ns and name == sums_name + ".sig" and fake.key is not None:
                            signed = fake.shasums(namespace, type_, version)
                            signature = fake.key.sign(b"tampered" + signed if fake.bad_signature else signed)
                            return self._send(200, signature, "application/octet-stream")
                        for platform, data in platforms.items():
                            if name == fake.archive_name(type_, version, platform):
                                body = b"X" + data[1:] if name in fake.tampered else data
                                return self._send(200, body, "application/zip")
                return self._send(404, b"not found", "text/plain")
            if path == "/terraform/index.json":
                return self._json({"name": "terraform", "versions": {v: {"version": v}
                                                                      for v in fake.tools.get("terraform", {})}})
            if path == "/tofu/api.json":
                return self._json({"versions": [{"id": v} for v in fake.tools.get("opentofu", {})]})
            if path == "/terragrunt/releases":
                return self._json([{"tag_name": f"v{v}"} for v in fake.tools.get("terragrunt", {})])
            if parts[0] == "terragrunt" and len(parts) == 3:
                platforms = fake.tools.get("terragrunt", {}).get(parts[1].removeprefix("v"), {})
                if parts[2] == "SHA256SUMS":
                    return self._send(200, "".join(f"{hashlib.sha256(d).hexdigest()}  terragrunt_{p}\n"
                                                   for p, d in sorted(platforms.items())).encode(), "text/plain")
                for platform, data in platforms.items():
                    if parts[2] == f"terragrunt_{platform}":
                        tampered = parts[2] in fake.tampered
                        return self._send(200, b"X" + data[1:] if tampered else data, "application/octet-stream")
            tool, stem = ("terraform", "terraform") if parts[0] == "terraform" else ("opentofu", "tofu")
            if parts[0] in ("terraform", "opentofu") and len(parts) == 3:
                version = parts[1].removeprefix("v")
                platforms = fake.tools.get(tool, {}).get(version, {})
                if parts[2] == f"{stem}_{version}_SHA256SUMS":
                    return self._send(200, "".join(
                        f"{hashlib.sha256(d).hexdigest()}  {stem}_{version}_{p}.zip\n"
                        for p, d in sorted(platforms.items())).encode(), "text/plain")
                for platform, data in platforms.items():
                    if parts[2] == f"{stem}_{version}_{platform}.zip":
                        tampered = parts[2] in fake.tampered
                        return self._send(200, b"X" + data[1:] if tampered else data, "application/zip")
            return self._send(404, b"not found", "text/plain")

    return Handler


@contextlib.contextmanager
def running_upstream(tls: TlsFiles, signed: bool = True) -> Iterator[tuple[FakeUpstream, str]]:
    """(the fake, its `localhost:<port>` host). Signing needs `gpg` (Debian's gnupg)."""
    with tempfile.TemporaryDirectory(prefix="fake-registry-gpg-") as home:
        fake = FakeUpstream(key=GpgKey(Path(home) / "gnupg") if signed else None)
        try:
            with serving_https(_handler(fake), tls) as port:
                yield fake, f"localhost:{port}"
        finally:
            if fake.key is not None:
                fake.key.close()


def python_provider(full_name: str) -> bytes:
    """A real (tiny) Terraform provider written with PyPI's `tf`: no resources, an empty schema. Terraform runs it
    during `plan`, so a plan that succeeds proves the package was installed and loads. It runs with this
    interpreter (which has `tf`): tests only."""
    import sys

    return f"""#!{sys.executable}
import tempfile

# Its gRPC socket lives in a temporary directory: a local runner pod's TMPDIR is too deep for a unix socket path.
tempfile.tempdir = "/tmp"

from tf import schema
from tf.provider import Provider
from tf.runner import run_provider


class Tiny(Provider):
    def full_name(self): return {full_name!r}
    def get_model_prefix(self): return "tiny_"
    def get_provider_schema(self, diags): return schema.Schema(attributes=[])
    def validate_config(self, diags, config): pass
    def configure_provider(self, diags, config): pass
    def get_data_sources(self): return []
    def get_resources(self): return []


run_provider(Tiny())
""".encode()
