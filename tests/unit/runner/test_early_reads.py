"""The run and the layer read while the runner imports (runner/early.py): taken only for the names the attempt
checked, their refusals reported as the attempt's own reads report them, and the client never left open."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from burrito_py.runner import early as early_module
from burrito_py.runner.early import Bodies, EarlyReads, read_run_and_layer
from burrito_py.runner.kube import Kube, KubeError
from burrito_py.runner.main import Runner, RunnerError, Unavailable

NAMES = {"BURRITO_RUNNER_LAYER_NAMESPACE": "team-a", "BURRITO_RUNNER_RUN": "app-plan-1",
         "BURRITO_RUNNER_LAYER_NAME": "app"}


class FakeKube:
    """Answers GETs from a table (an exception instance is raised); records what was asked and whether closed."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers, self.closed = answers, False
        self.asked: list[str] = []

    def get(self, plural: str, namespace: str, name: str, kind: str) -> dict[str, Any]:
        self.asked.append(f"{plural}/{namespace}/{name}")
        answer = self.answers[plural]
        if isinstance(answer, BaseException):
            raise answer
        return dict(answer)

    def close(self) -> None:
        self.closed = True


def test_an_environment_that_names_no_run_reads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Kube, "from_config", lambda: pytest.fail("no read without the names"))
    for missing in NAMES:
        reads = EarlyReads.start({**NAMES, missing: "  "})
        assert reads.names is None and reads.take("team-a", "app-plan-1", "app") is None
        reads.discard()


def test_the_reads_are_taken_for_the_checked_names_only_and_otherwise_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube({"terraformruns": {"kind": "TerraformRun"}, "terraformlayers": {"kind": "TerraformLayer"}})
    monkeypatch.setattr(Kube, "from_config", lambda: kube)
    reads = EarlyReads.start(NAMES)
    assert reads.take("team-b", "app-plan-1", "app") is None  # not the run the attempt checked
    reads.discard()
    assert kube.closed

    kube = FakeKube({"terraformruns": {"kind": "TerraformRun"}, "terraformlayers": {"kind": "TerraformLayer"}})
    reads = EarlyReads.start(NAMES)
    taken = reads.take("team-a", "app-plan-1", "app")
    assert taken is not None and taken[0] is kube  # type: ignore[comparison-overlap]
    assert taken[1] == Bodies({"kind": "TerraformRun"}, {"kind": "TerraformLayer"})
    assert reads.take("team-a", "app-plan-1", "app") is None  # once
    reads.discard()
    assert not kube.closed  # the attempt's to close
    assert kube.asked == ["terraformruns/team-a/app-plan-1", "terraformlayers/team-a/app"]


def test_no_client_is_handed_over_as_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise KubeError("no Kubernetes API configuration")

    monkeypatch.setattr(Kube, "from_config", refuse)
    reads = EarlyReads.start(NAMES)
    taken = reads.take("team-a", "app-plan-1", "app")
    assert taken is not None and isinstance(taken[0], KubeError) and taken[1] is None


def test_a_run_that_cannot_be_read_leaves_the_layer_unread() -> None:
    kube = FakeKube({"terraformruns": KubeError("not found", 404), "terraformlayers": {}})
    bodies = read_run_and_layer(kube, "team-a", "app-plan-1", "app")  # type: ignore[arg-type]
    assert isinstance(bodies.run, KubeError) and bodies.layer is None and len(kube.asked) == 1


@pytest.mark.parametrize(
    ("outcome", "refusal", "text"),
    [
        (KubeError("not found", 404), RunnerError, "TerraformRun team-a/app-plan-1 not found"),
        (KubeError("cannot read TerraformRun team-a/app-plan-1: 503 Service Unavailable", 503), Unavailable,
         "503 Service Unavailable"),
    ],
)
def test_a_refusal_read_early_is_reported_as_the_attempts_own(outcome: KubeError, refusal: type[Exception],
                                                               text: str) -> None:
    with pytest.raises(refusal, match=text):
        Runner._body("TerraformRun", "team-a", "app-plan-1", outcome)
    assert Runner._body("TerraformRun", "team-a", "app-plan-1", {"kind": "TerraformRun"}) == {"kind": "TerraformRun"}


def test_an_unused_clients_private_key_material_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kubeconfig with inline key material writes it to a private directory, removed on close: an early client
    the attempt never takes (its environment was refused) must not leave it behind."""
    import base64

    pem = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
              "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
              "users": [{"name": "u", "user": {"client-certificate-data": pem, "client-key-data": pem}}],
              "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
    (tmp_path / "kubeconfig").write_text(json.dumps(config))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.setattr(early_module, "read_run_and_layer", lambda *names: Bodies(KubeError("refused"), None))
    reads = EarlyReads.start(NAMES)
    reads._thread.join()  # type: ignore[union-attr]
    client = reads._kube
    assert client is not None and not isinstance(client, KubeError)
    private = client._private_dir
    assert private is not None and Path(private).exists()
    reads.discard()
    assert not Path(private).exists()
