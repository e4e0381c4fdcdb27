"""The engines built by scripts/build-engines.sh (docs/architecture.md §23) for the tests: which root holds them,
what a layer's spec says to run one, and a release site serving the root's `mirror/` (the upstream the
datastore's tool cache reads through, as releases.hashicorp.com and OpenTofu's GitHub releases would be)."""

from __future__ import annotations

import contextlib
import functools
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Literal

from tests.support.fakes.tls import TlsFiles, serving_https

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-engines.sh"


@functools.cache
def engines_root() -> Path:
    """The built root (`tenv/`, `mirror/`, `engines.json`). Missing builds fail the test naming the script:
    never a skip (scripts/test.sh builds them when Go is on PATH)."""
    result = subprocess.run(["bash", str(SCRIPT), "--cached"], capture_output=True, text=True, check=False)
    if result.returncode != 0 or not result.stdout.strip():
        raise RuntimeError("the engines are not built: run `bash scripts/build-engines.sh` (scripts/test.sh does "
                           f"when Go is on PATH); --cached said: {result.stderr.strip()[-300:]}")
    return Path(result.stdout.strip())


@dataclass(frozen=True)
class Engine:
    """One engine a layer runs on: `kind` as the spec names it, `version` as built."""

    kind: Literal["terraform", "opentofu"]
    version: str

    @property
    def binary(self) -> str:
        return "tofu" if self.kind == "opentofu" else "terraform"

    @property
    def id(self) -> str:
        return f"{self.binary}-{self.version}"

    def spec(self) -> dict[str, Any]:
        """The layer spec selecting it (the other engine switched off, so a repository cannot pick it)."""
        other = "terraform" if self.kind == "opentofu" else "opentofu"
        return {self.kind: {"enabled": True, "version": self.version}, other: {"enabled": False}}

    def baked_env(self) -> list[dict[str, str]]:
        """The runner pod's env naming the engines root's `tenv/` as tools baked into the image, as the runner
        image's /opt/burrito-py/tools is on a cluster (BURRITO_RUNNER_TOOLS_PATH, docs §9)."""
        return [{"name": "BURRITO_RUNNER_TOOLS_PATH", "value": str(engines_root() / "tenv")}]


TERRAFORM = Engine("terraform", "1.11.4")
OPENTOFU = Engine("opentofu", "1.12.6")
ENGINES = (TERRAFORM, OPENTOFU)


@dataclass
class ReleaseSite:
    """Requests seen, and archive names served with one byte changed (a tampered upstream)."""

    requests: list[str] = field(default_factory=list)
    tampered: set[str] = field(default_factory=set)


TERRAGRUNT_RELEASES = "gruntwork-io/terragrunt/releases/download"


def _versions(mirror: Path) -> tuple[list[str], list[str], list[str]]:
    terraform = sorted(p.name for p in (mirror / "terraform").iterdir() if p.is_dir())
    tags: dict[str, list[str]] = {}
    for tool, releases in (("opentofu", "opentofu/opentofu/releases/download"), ("terragrunt", TERRAGRUNT_RELEASES)):
        tags[tool] = sorted(p.name for p in (mirror / releases).iterdir() if p.is_dir())
    return terraform, [t.removeprefix("v") for t in tags["opentofu"]], tags["terragrunt"]


@contextlib.contextmanager
def running_release_site(mirror: Path, tls: TlsFiles) -> Iterator[tuple[ReleaseSite, str]]:
    """HTTPS over `mirror` (the engines root's `mirror/`) plus the three version lists the tool cache reads:
    `/terraform/index.json` (releases.hashicorp.com's), `/tofu/api.json` (get.opentofu.org's) and
    `/terragrunt/releases` (GitHub's releases API's). Yields the site and its base URL."""
    site = ReleaseSite()
    terraform, opentofu, terragrunt = _versions(mirror)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def _send(self, body: bytes, kind: str = "application/octet-stream", status: int = 200) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            site.requests.append(path)
            if path == "/terraform/index.json":
                return self._send(json.dumps({"versions": {v: {"version": v} for v in terraform}}).encode())
            if path == "/tofu/api.json":
                return self._send(json.dumps({"versions": [{"id": v} for v in opentofu]}).encode())
            if path == "/terragrunt/releases":
                return self._send(json.dumps([{"tag_name": tag} for tag in terragrunt]).encode())
            target = (mirror / path.lstrip("/")).resolve()
            if mirror.resolve() not in target.parents or not target.is_file():
                return self._send(b"not found", "text/plain", 404)
            body = target.read_bytes()
            if target.name in site.tampered:
                body = body[:-1] + bytes([body[-1] ^ 0xFF])
            return self._send(body)

    with serving_https(Handler, tls) as port:
        yield site, f"https://localhost:{port}"
