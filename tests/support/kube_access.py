"""An HTTP client to any API server a kubeconfig names (the emulator or kube-apiserver): its server URL, its CA
and its user, a bearer token or a client certificate, as kubectl would use them."""

from __future__ import annotations

import base64
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml


@dataclass(frozen=True)
class KubeAccess:
    url: str
    verify: ssl.SSLContext
    token: str | None

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Path) -> KubeAccess:
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        context = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        if "token" not in user:  # a client certificate: the files exist only while it is loaded
            with tempfile.TemporaryDirectory(prefix="kube-access-") as tmp:
                cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
                cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
                key.write_bytes(base64.b64decode(user["client-key-data"]))
                context.load_cert_chain(cert, key)
        return cls(cluster["server"], context, user.get("token"))

    def client(self, token: str | None = None, timeout: float = 30.0) -> httpx.Client:
        """As the kubeconfig's user, or as the bearer of `token`."""
        bearer = token or self.token
        headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
        return httpx.Client(base_url=self.url, verify=self.verify, headers=headers, timeout=timeout)
