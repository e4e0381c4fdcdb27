"""The runner's Kubernetes configuration: kubeconfig users it supports, and clear errors for the rest."""

from __future__ import annotations

import base64
import datetime as dt
import ssl
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from burrito_py.runner.kube import Kube, KubeError, load_api_config


def _self_signed() -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "burrito-py-test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _kubeconfig(path: Path, cluster: dict[str, object], user: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    return path


def test_token_user_over_plain_http(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kc", {"server": "http://127.0.0.1:1"},
                                                       {"token": "abc"})))
    config = load_api_config()
    assert (config.server, config.token, config.verify) == ("http://127.0.0.1:1", "abc", False)


def test_token_file_and_inline_certificates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = _self_signed()
    (tmp_path / "token").write_text("from-file\n")
    data = {"certificate-authority-data": base64.b64encode(cert).decode()}
    user = {"tokenFile": "token", "client-certificate-data": base64.b64encode(cert).decode(),
            "client-key-data": base64.b64encode(key).decode()}
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kc", {"server": "https://api:6443", **data}, user)))
    config = load_api_config()
    assert config.token == "from-file"
    assert isinstance(config.verify, ssl.SSLContext)
    assert config.private_dir is not None
    assert (config.private_dir / "client-key").read_bytes() == key
    assert oct(config.private_dir.stat().st_mode & 0o777) == "0o700"
    Kube(config).close()
    assert not config.private_dir.exists()  # key material does not outlive the runner's client


def test_first_existing_kubeconfig_of_the_list_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    second = _kubeconfig(tmp_path / "second", {"server": "http://second"}, {"token": "t"})
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{second}")
    assert load_api_config().server == "http://second"


@pytest.mark.parametrize(
    ("cluster", "user", "message"),
    [
        ({"server": "http://x"}, {"exec": {"command": "aws"}}, "exec and auth-provider users are not supported"),
        ({}, {"token": "t"}, "has no server"),
    ],
)
def test_unsupported_or_incomplete_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: dict[str, object], user: dict[str, object], message: str
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kc", cluster, user)))
    with pytest.raises(KubeError, match=message):
        load_api_config()


def test_no_configuration_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeError, match="no Kubernetes API configuration"):
        load_api_config()


def test_json_kubeconfig_is_read_without_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local kubelet writes a pod's kubeconfig as JSON (which is YAML); the runner reads it with the json module
    and never imports PyYAML for it. A flow-style YAML document that only looks like JSON still reads as YAML."""
    import json
    import subprocess
    import sys

    path = tmp_path / "kc.json"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "abc"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert (load_api_config().server, load_api_config().token) == ("http://127.0.0.1:1", "abc")
    script = ("import sys; from burrito_py.runner.kube import load_api_config; load_api_config(); "
              "print('yaml' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"

    flow = tmp_path / "kc.flow"
    flow.write_text("{current-context: c, clusters: [{name: k, cluster: {server: 'http://127.0.0.1:2'}}], "
                    "users: [{name: u, user: {token: t}}], contexts: [{name: c, context: {cluster: k, user: u}}]}\n")
    monkeypatch.setenv("KUBECONFIG", str(flow))
    assert load_api_config().server == "http://127.0.0.1:2"


def test_kubeconfig_that_is_no_mapping_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kc"
    path.write_text("- just\n- a list\n")
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(KubeError, match="not a mapping"):
        load_api_config()
