"""The chart's run-namespace ValidatingAdmissionPolicy (issue 11, item 15) is `policy_objects`, named after the
release, and it refuses exactly the cross-namespace runs when the emulator's admission evaluates it."""

from __future__ import annotations

from burrito_py.deploy.admission_policy import MESSAGE, policy_objects
from burrito_py.deploy.chart import render_chart
from burrito_py.local.kube_admission_policy import AdmissionRequest, admit


def admission_objects(values: dict[str, object], release: str = "rel") -> list[dict[str, object]]:
    return [d for d in render_chart(values, release, "ns") if d["kind"].startswith("ValidatingAdmissionPolicy")]


def test_the_chart_renders_policy_objects_under_the_release_name():
    rendered = admission_objects({})
    for doc in rendered:
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "rel"  # type: ignore[index]
        del doc["metadata"]["labels"]  # type: ignore[attr-defined]
    assert rendered == policy_objects("rel")
    assert [d["metadata"]["name"] for d in rendered] == ["rel-run-namespace", "rel-run-namespace"]  # type: ignore[index]
    assert admission_objects({"admissionPolicy": {"enabled": False}}) == []


def test_the_policy_refuses_a_cross_namespace_run_and_admits_the_others():
    policy, binding = policy_objects("burrito-py")

    def outcome(layer: dict[str, str]) -> str | None:
        run = {"metadata": {"name": "r", "namespace": "tenant"}, "spec": {"action": "plan", "layer": layer}}
        request = AdmissionRequest("CREATE", "terraform.burrito-py.io", "v1alpha1", "terraformruns", "TerraformRun",
                                   "r", "tenant", run)
        denial = admit([policy], [binding], request).denial
        return None if denial is None else denial.message

    assert outcome({"name": "l", "namespace": "default"}) == (
        'terraformruns.terraform.burrito-py.io "r" is forbidden: ValidatingAdmissionPolicy '
        f"'burrito-py-run-namespace' with binding 'burrito-py-run-namespace' denied request: {MESSAGE}")
    assert outcome({"name": "l", "namespace": "tenant"}) is None
    assert outcome({"name": "l"}) is None
