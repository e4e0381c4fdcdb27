"""The runner's side of the datastore's provider mirror (runner/mirror.py): settings, the CLI configuration
text, the CA bundle, the probe and what each outcome writes."""

from __future__ import annotations

import ssl
import stat
from pathlib import Path

import pytest

from burrito_py.runner.mirror import (
    CA_BUNDLE_NAME,
    CLI_CONFIG_NAME,
    FALLBACK_PREFIX,
    MirrorConfig,
    MirrorError,
    MirrorSetup,
    base_ca_file,
    cli_config,
    count_fallbacks,
    credentials_host,
    fallback_lines,
    prepare,
    probe,
    write_ca_bundle,
)
from tests.support.fakes.mirrors import FakeCa, FakeMirror, closed_port_url, make_ca, running_mirror

URL = "https://burrito-py-datastore.burrito-py.svc.cluster.local:8443/providers/v1/"
TOKEN = "eyJhbGciOi.token.sig"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> FakeCa:
    return make_ca(tmp_path_factory.mktemp("ca"))


# -- settings -------------------------------------------------------------------------------------
def test_config_from_the_environment() -> None:
    config = MirrorConfig.from_environ({
        "BURRITO_PROVIDER_MIRROR_URL": "https://ds:8443/providers/v1",
        "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED": "true",
        "BURRITO_TOOL_MIRROR_URL": "http://ds:8080/tools/v1/",
        "BURRITO_MIRROR_CA_PEM": "  pem\n",
    })
    assert config == MirrorConfig("https://ds:8443/providers/v1/", True, "http://ds:8080/tools/v1/", "pem")
    assert MirrorConfig.from_environ({}) == MirrorConfig()
    assert not MirrorConfig.from_environ({"BURRITO_PROVIDER_MIRROR_FAIL_CLOSED": "false"}).fail_closed


@pytest.mark.parametrize(("environ", "message"), [
    ({"BURRITO_PROVIDER_MIRROR_URL": "http://ds:8080/providers/v1/"}, "BURRITO_PROVIDER_MIRROR_URL: .* https://"),
    ({"BURRITO_TOOL_MIRROR_URL": "ftp://ds/"}, "BURRITO_TOOL_MIRROR_URL"),
    ({"BURRITO_PROVIDER_MIRROR_URL": "https://u:p@ds/"}, "no credentials"),
    ({"BURRITO_PROVIDER_MIRROR_FAIL_CLOSED": "maybe"}, "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED: 'maybe'"),
])
def test_bad_settings_name_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(MirrorError, match=message):
        MirrorConfig.from_environ(environ)


# -- pure parts -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("url", "host"), [
    (URL, "burrito-py-datastore.burrito-py.svc.cluster.local:8443"),
    ("https://127.0.0.1:40001/providers/v1/", "127.0.0.1:40001"),
    ("https://Mirror.Example.com/providers/v1/", "mirror.example.com"),
    ("https://mirror.example.com:443/p/", "mirror.example.com"),  # the default port is no part of the host
    ("https://[::1]:8443/p/", "[::1]:8443"),
])
def test_credentials_host(url: str, host: str) -> None:
    assert credentials_host(url) == host


def test_cli_config_with_the_mirror_and_the_token() -> None:
    assert cli_config(URL, "ds:8443", TOKEN) == (
        "provider_installation {\n"
        "  network_mirror {\n"
        f'    url = "{URL}"\n'
        "  }\n"
        "}\n"
        "\n"
        'credentials "ds:8443" {\n'
        f'  token = "{TOKEN}"\n'
        "}\n"
    )


def test_cli_config_without_the_mirror_keeps_the_pods_own_configuration() -> None:
    text = cli_config(None, "ds:8443", TOKEN, existing='plugin_cache_may_break_dependency_lock_file = true\n')
    assert "provider_installation" not in text
    assert text.startswith("plugin_cache_may_break_dependency_lock_file = true\n")
    assert 'credentials "ds:8443"' in text
    assert "credentials" not in cli_config(None, "ds:8443", None)


def test_cli_config_escapes_what_hcl_would_read() -> None:
    text = cli_config("https://ds/${x}/", "ds", 'a"b\\c%{d}')
    assert 'url = "https://ds/$${x}/"' in text
    assert 'token = "a\\"b\\\\c%%{d}"' in text


def test_fallback_lines_are_counted() -> None:
    log = (
        "burrito-py: plan of layer default/app\n"
        f"{FALLBACK_PREFIX} https://ds:8443/providers/v1/: ConnectError: refused; terraform installs providers "
        "directly\r\n"
        f"  {FALLBACK_PREFIX} quoted, not at the start\n"
        "Terraform has been successfully initialized!\n"
    )
    assert count_fallbacks(log) == 1
    assert fallback_lines(log) == [f"{FALLBACK_PREFIX} https://ds:8443/providers/v1/: ConnectError: refused; "
                                   "terraform installs providers directly"]
    assert count_fallbacks("") == 0
    assert count_fallbacks(f"{FALLBACK_PREFIX} a\n{FALLBACK_PREFIX} b") == 2


# -- the CA bundle --------------------------------------------------------------------------------
def test_bundle_is_the_trusted_cas_then_the_mirrors(tmp_path: Path, ca: FakeCa) -> None:
    system = tmp_path / "system.pem"
    system.write_text("-----BEGIN CERTIFICATE-----\nsystem\n-----END CERTIFICATE-----\n")
    bundle = write_ca_bundle(tmp_path / "home" / CA_BUNDLE_NAME, ca.ca_pem, system)
    text = bundle.read_text()
    assert text.startswith(system.read_text()) and text.rstrip().endswith(ca.ca_pem.strip())


def test_bundle_from_certifi_verifies_the_mirror(tmp_path: Path, ca: FakeCa) -> None:
    base = base_ca_file({})
    assert base is not None and base.is_file()  # certifi is installed with httpx
    bundle = write_ca_bundle(tmp_path / CA_BUNDLE_NAME, ca.ca_pem, base)
    context = ssl.create_default_context(cafile=str(bundle))
    assert len(context.get_ca_certs()) > 100  # the public CAs stay trusted (fallback to the registries)


def test_the_pods_own_ssl_cert_file_is_the_base(tmp_path: Path) -> None:
    assert base_ca_file({"SSL_CERT_FILE": "/etc/pki/own.pem"}) == Path("/etc/pki/own.pem")


def test_a_ca_that_is_no_certificate_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MirrorError, match="BURRITO_MIRROR_CA_PEM holds no usable PEM certificate"):
        write_ca_bundle(tmp_path / CA_BUNDLE_NAME, "not a pem", None)


# -- the probe ------------------------------------------------------------------------------------
def test_probe_up_down_and_unreachable(tmp_path: Path, ca: FakeCa) -> None:
    bundle = write_ca_bundle(tmp_path / CA_BUNDLE_NAME, ca.ca_pem, base_ca_file({}))
    context = ssl.create_default_context(cafile=str(bundle))
    with running_mirror(FakeMirror(token=TOKEN), ca) as mirror:
        assert probe(mirror.provider_url, context) is None
        assert mirror.authorizations("healthz") == [None]  # no token needed, none sent
        mirror.healthy = False
        assert probe(mirror.provider_url, context, pause=0) == f"GET {mirror.provider_url}healthz answered 503"
        assert len(mirror.authorizations("healthz")) == 3  # two tries
        # Without the mirror's CA the certificate is not trusted.
        reason = probe(mirror.provider_url, ssl.create_default_context(), tries=1)
        assert reason is not None and "CERTIFICATE_VERIFY_FAILED" in reason
    assert "ConnectError" in (probe(closed_port_url(), context, tries=1) or "")


# -- what each outcome writes ---------------------------------------------------------------------
def _prepare(tmp_path: Path, ca: FakeCa, reason: str | None, fail_closed: bool = False,
             environ: dict[str, str] | None = None) -> tuple[MirrorSetup, list[str], list[str]]:
    said: list[str] = []
    probed: list[str] = []

    def check(url: str, context: ssl.SSLContext) -> str | None:
        probed.append(url)
        return reason

    setup = prepare(MirrorConfig(URL, fail_closed, "", ca.ca_pem), TOKEN, tmp_path / "home", environ or {},
                    say=said.append, check=check)
    return setup, said, probed


def test_mirror_up(tmp_path: Path, ca: FakeCa) -> None:
    setup, said, probed = _prepare(tmp_path, ca, None)
    home = tmp_path / "home"
    assert probed == [URL]
    assert setup == MirrorSetup(
        {"SSL_CERT_FILE": str(home / CA_BUNDLE_NAME), "TF_CLI_CONFIG_FILE": str(home / CLI_CONFIG_NAME)},
        home / CA_BUNDLE_NAME, True,
    )
    config = home / CLI_CONFIG_NAME
    assert config.read_text() == cli_config(URL, "burrito-py-datastore.burrito-py.svc.cluster.local:8443", TOKEN)
    assert stat.S_IMODE(config.stat().st_mode) == 0o600  # it holds the token
    assert said == [f"burrito-py: providers from the mirror {URL}"]
    assert "TF_PLUGIN_CACHE_DIR" not in setup.env


def test_mirror_down_falls_back_with_one_line(tmp_path: Path, ca: FakeCa) -> None:
    setup, said, _ = _prepare(tmp_path, ca, "ConnectError: [Errno 111] Connection refused")
    assert said == [f"{FALLBACK_PREFIX} {URL}: ConnectError: [Errno 111] Connection refused; terraform installs "
                    "providers directly"]
    assert count_fallbacks("\n".join(said)) == 1
    text = (tmp_path / "home" / CLI_CONFIG_NAME).read_text()
    assert "provider_installation" not in text and "credentials" in text
    assert not setup.provider_mirror
    assert set(setup.env) == {"SSL_CERT_FILE", "TF_CLI_CONFIG_FILE"}


def test_mirror_down_fails_closed(tmp_path: Path, ca: FakeCa) -> None:
    with pytest.raises(MirrorError) as caught:
        _prepare(tmp_path, ca, "GET …/healthz answered 503", fail_closed=True)
    assert str(caught.value) == f"provider mirror {URL} is unavailable (failClosed): GET …/healthz answered 503"
    assert not (tmp_path / "home" / CLI_CONFIG_NAME).exists()


def test_the_pods_own_provider_installation_stands(tmp_path: Path, ca: FakeCa) -> None:
    own = tmp_path / "own.tfrc"
    own.write_text('provider_installation {\n  direct {}\n}\n')
    setup, said, probed = _prepare(tmp_path, ca, None, environ={"TF_CLI_CONFIG_FILE": str(own)})
    assert probed == [] and "TF_CLI_CONFIG_FILE" not in setup.env
    assert said == [f"burrito-py: the CLI configuration {own} has its own provider_installation block; the provider "
                    f"mirror {URL} is not used"]
    with pytest.raises(MirrorError, match="cannot be used \\(failClosed\\)"):
        _prepare(tmp_path, ca, None, fail_closed=True, environ={"TF_CLI_CONFIG_FILE": str(own)})


def test_the_pods_own_terraformrc_is_carried_over(tmp_path: Path, ca: FakeCa) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".terraformrc").write_text('credentials "app.terraform.io" {\n  token = "x"\n}\n')
    _prepare(tmp_path, ca, None)
    text = (home / CLI_CONFIG_NAME).read_text()
    assert text.startswith('credentials "app.terraform.io"') and "network_mirror" in text


def test_no_mirror_writes_nothing(tmp_path: Path) -> None:
    assert prepare(MirrorConfig(), TOKEN, tmp_path, {}).env == {}
    assert list(tmp_path.iterdir()) == []


def test_tool_mirror_only_writes_the_bundle(tmp_path: Path, ca: FakeCa) -> None:
    setup = prepare(MirrorConfig(tool_url="https://ds:8443/tools/v1/", ca_pem=ca.ca_pem), TOKEN, tmp_path, {})
    assert setup.env == {} and setup.ca_bundle == tmp_path / CA_BUNDLE_NAME and setup.ca_bundle.is_file()


def test_only_the_mirrored_registries_go_through_the_mirror_the_rest_directly_unless_fail_closed() -> None:
    registries = ("registry.terraform.io", "registry.opentofu.org")
    text = cli_config(URL, "ds:8443", TOKEN, registries=registries)
    patterns = '["registry.terraform.io/*/*", "registry.opentofu.org/*/*"]'
    assert f"    include = {patterns}\n  }}\n  direct {{\n    exclude = {patterns}\n  }}\n}}" in text
    closed = cli_config(URL, "ds:8443", TOKEN, registries=registries, fail_closed=True)
    assert "include" in closed and "direct" not in closed
    assert "include" not in cli_config(URL, "ds:8443", TOKEN)  # no list: every provider through the mirror


def test_failed_installs_are_read_from_terraform_and_tofu_output() -> None:
    from burrito_py.runner.mirror import failed_installs

    output = [
        "- Installing registry.example.test/test/tiny v1.0.0...",
        "Error: Failed to install provider",
        "Error while installing registry.example.test/test/tiny v1.0.0:",
        "127.0.0.1:47349: bad response code: 502",
        "│ Error while installing registry.opentofu.org/hashicorp/random v3.6.2: some reason",
        "Error while installing registry.example.test/test/tiny v1.0.0:",
    ]
    assert failed_installs(output) == [("registry.example.test/test/tiny", "1.0.0"),
                                       ("registry.opentofu.org/hashicorp/random", "3.6.2")]
    assert failed_installs(["Error: Invalid provider configuration"]) == []


def test_the_setup_never_shows_the_pods_own_cli_configuration() -> None:
    """`existing` is the pod's CLI configuration carried into ours; a credentials block in it must not reach a
    log through a repr (a traceback's locals, a debug line)."""
    from burrito_py.runner.mirror import MirrorSetup

    secret = 'credentials "app.terraform.io" { token = "s3cr3t-token-value" }'
    setup = MirrorSetup({"TF_CLI_CONFIG_FILE": "/home/runner/burrito-py.tfrc"}, None, True, secret)
    assert "s3cr3t" not in repr(setup) and "TF_CLI_CONFIG_FILE" in repr(setup)
    assert setup.existing == secret
