"""The API emulator's serving certificate: a throw-away CA and a server certificate it signs.

Why TLS at all: kubectl (client-go's clientcmd) sends a kubeconfig's credentials only to an `https://`
server, so without TLS every kubectl call would be `system:anonymous` under RBAC. The kubeconfig the
emulator writes carries the CA as `certificate-authority-data`, as a real cluster's kubeconfig does.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class ServingCertificate:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # no client certificates: no CA store to load
        with tempfile.TemporaryDirectory(prefix="burrito-py-tls-") as tmp:  # ssl loads chains from files only
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert.write_bytes(self.cert_pem)
            key.write_bytes(self.key_pem)
            context.load_cert_chain(cert, key)
        return context

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem.decode())


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    return x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


PEM = serialization.Encoding.PEM


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA that signs serving and client certificates (EC P-256, SHA-256), as a cluster's PKI does:
    kube-apiserver trusts it for client certificates (`--client-ca-file`), whose CN is the user name and
    whose O entries are the groups."""

    cert_pem: bytes
    key_pem: bytes

    @classmethod
    def create(cls, common_name: str = "burrito-py-local-ca", days: int = 365) -> CertificateAuthority:
        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(common_name)
        cert = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert.public_bytes(PEM), _key_pem(key))

    def _sign(self, subject: x509.Name, usage: x509.ObjectIdentifier, days: int,
              names: list[x509.GeneralName] | None = None) -> tuple[bytes, bytes]:
        ca = x509.load_pem_x509_certificate(self.cert_pem)
        ca_key = serialization.load_pem_private_key(self.key_pem, password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        ca_ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(dict.fromkeys(names))), critical=False)
        return builder.sign(ca_key, hashes.SHA256()).public_bytes(PEM), _key_pem(key)

    def issue_server(self, common_name: str, hosts: list[str], days: int = 365) -> tuple[bytes, bytes]:
        """(certificate, key) PEMs for a TLS server answering at each of `hosts` (IP addresses or names)."""
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        return self._sign(_name(common_name), ExtendedKeyUsageOID.SERVER_AUTH, days, names)

    def issue_client(self, user: str, groups: tuple[str, ...] = (), days: int = 365) -> tuple[bytes, bytes]:
        """(certificate, key) PEMs that kube-apiserver authenticates as `user` in `groups`."""
        return self._sign(_name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH, days)


def signing_key_pem() -> tuple[bytes, bytes]:
    """(private, public) PEMs of a service-account token signing key (EC P-256: tokens are ES256 JWTs)."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return _key_pem(key), public


API_SERVER_NAMES = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local", "127.0.0.1"]


@functools.cache
def issue(host: str) -> ServingCertificate:
    """A CA and a certificate for `host`, 127.0.0.1, localhost and the in-cluster service names (one per
    process and host: key generation and signing would otherwise dominate an emulator's start-up)."""
    ca = CertificateAuthority.create()
    cert, key = ca.issue_server("kube-apiserver", [*API_SERVER_NAMES, host])
    return ServingCertificate(ca.cert_pem, cert, key)
