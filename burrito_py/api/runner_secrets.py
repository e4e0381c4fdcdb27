"""Which Secrets and ServiceAccounts of a namespace its runners may be given: only those whose writers opened them
to runners (docs/architecture.md §6.3, §9, §24). Pure; no Kubernetes client here.

A tenant who may edit layers, repositories or pull request settings, but may not read the namespace's Secrets,
chooses what a runner pod gets (`spec.varsFrom`, `overrideRunnerSpec` env, envFrom and volumes) and, through the
code it points the layer at, what that runner does with it. Naming a Secret there used to hand its values to code
of the tenant's choosing: the git credentials whose `allowedHosts` says where they may go, a notifier's webhook
URL, another application's password. As with `allowedHosts`, only whoever may write the Secret decides: the
annotation `api.burrito-py.io/runner-secret: "true"` on the Secret opens it to the runners of its namespace. The
controllers write it on the outputs Secrets they make (any layer of the namespace reads those outputs through
`dependsOn` anyway).

The same holds for the account a runner runs as: `overrideRunnerSpec.serviceAccountName` named any ServiceAccount
of the namespace, and the pod got its token and whatever cloud role its annotations bind (IRSA, Workload
Identity), for code of the editor's choosing. Only the platform's runner account, or one annotated
`api.burrito-py.io/runner-service-account: "true"`, runs a runner now.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["RUNNER_SECRET", "RUNNER_SERVICE_ACCOUNT", "account_refusal", "is_open_to_runners", "refusal",
           "secret_env_variables", "secret_references"]

RUNNER_SECRET = "api.burrito-py.io/runner-secret"  # noqa: S105 - an annotation key, not a secret
RUNNER_SERVICE_ACCOUNT = "api.burrito-py.io/runner-service-account"
TF_VAR = "TF_VAR_"  # Terraform and OpenTofu read a variable `x` from the environment as TF_VAR_x


def is_open_to_runners(obj: Mapping[str, Any], annotation: str = RUNNER_SECRET) -> bool:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return annotations.get(annotation) == "true"


def refusal(namespace: str, name: str, where: str, secret: Mapping[str, Any] | None) -> str | None:
    """Why the Secret `name` that `where` names may not be given to a runner (None: it may). A missing one is
    refused too: created later by anyone, it would reach a pod that waits for it without this check."""
    if secret is None:
        return (f"Secret {namespace}/{name} ({where}) does not exist; a runner is given only a Secret annotated "
                f'{RUNNER_SECRET}: "true"')
    if is_open_to_runners(secret):
        return None
    return (f"Secret {namespace}/{name} ({where}) is not open to runners: only a Secret annotated "
            f'{RUNNER_SECRET}: "true" is given to a runner (whoever may edit layers may not read every Secret); '
            "whoever may write the Secret adds the annotation if its values are meant for Terraform")


def account_refusal(namespace: str, name: str, where: str, account: Mapping[str, Any] | None) -> str | None:
    """Why a runner may not run as the ServiceAccount `name` that `where` names (None: it may)."""
    if account is None:
        return (f"ServiceAccount {namespace}/{name} ({where}) does not exist; a runner runs only as the platform's "
                f'runner account or one annotated {RUNNER_SERVICE_ACCOUNT}: "true"')
    if is_open_to_runners(account, RUNNER_SERVICE_ACCOUNT):
        return None
    return (f"ServiceAccount {namespace}/{name} ({where}) is not open to runners: a runner runs only as the "
            f'platform\'s runner account or one annotated {RUNNER_SERVICE_ACCOUNT}: "true" (whoever may edit layers '
            "may not act as every account of the namespace, with its token and cloud role); whoever may write the "
            "ServiceAccount adds the annotation if runners are to run as it")


def _name(ref: Any, key: str) -> str | None:
    value = ref.get(key) if isinstance(ref, Mapping) else None
    return value if isinstance(value, str) and value else None


def secret_references(override: Mapping[str, Any], field: str = "overrideRunnerSpec") -> list[tuple[str, str]]:
    """(field, Secret name) of every Secret an overrideRunnerSpec (camelCase, as in the CRD) puts into the pod:
    env `secretKeyRef`, envFrom `secretRef`, volumes `secret`, projected `secret` sources and a `csi` volume's
    `nodePublishSecretRef` (the kubelet hands that Secret to the driver, e.g. a secrets store's credentials to its
    vault, and the pod gets what the driver fetches with it), in order. The other sources that name a Secret
    (`cephfs`, `rbd`, `iscsi`, `flexVolume`, `azureFile`, …) are outside the restricted profile: refused by
    api/runner_contract.py and never in a pod."""
    found: list[tuple[str, str]] = []
    for index, item in enumerate(override.get("env") or ()):
        name = _name(((item or {}).get("valueFrom") or {}).get("secretKeyRef"), "name")
        if name:
            found.append((f"{field}.env[{index}]", name))
    for index, item in enumerate(override.get("envFrom") or ()):
        name = _name((item or {}).get("secretRef"), "name")
        if name:
            found.append((f"{field}.envFrom[{index}]", name))
    for index, item in enumerate(override.get("volumes") or ()):
        item = item or {}
        name = _name(item.get("secret"), "secretName")
        if name:
            found.append((f"{field}.volumes[{index}]", name))
        csi = item.get("csi")
        name = _name(csi.get("nodePublishSecretRef") if isinstance(csi, Mapping) else None, "name")
        if name:
            found.append((f"{field}.volumes[{index}]", name))
        for source in (item.get("projected") or {}).get("sources") or ():
            name = _name((source or {}).get("secret"), "name")
            if name:
                found.append((f"{field}.volumes[{index}]", name))
    return found


def secret_env_variables(override: Mapping[str, Any], secrets: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """The Terraform variables an overrideRunnerSpec (camelCase) feeds from a Secret through the environment,
    sorted: an env `TF_VAR_<x>` from a `secretKeyRef`, and each key of an `envFrom` Secret (after its `prefix`)
    that makes a `TF_VAR_<x>`. `secrets`: each name's Secret as read (its keys; a missing one gives none). Their
    values are masked in every view, as those of `varsFrom` Secrets are."""
    found: set[str] = set()
    for item in override.get("env") or ():
        name = (item or {}).get("name") if isinstance(item, Mapping) else None
        if (isinstance(name, str) and name.startswith(TF_VAR) and len(name) > len(TF_VAR)
                and _name(((item.get("valueFrom") or {}).get("secretKeyRef")), "name")):
            found.add(name[len(TF_VAR):])
    for item in override.get("envFrom") or ():
        ref = _name((item or {}).get("secretRef"), "name") if isinstance(item, Mapping) else None
        secret = secrets.get(ref) if ref else None
        if secret is None:
            continue
        prefix = str(item.get("prefix") or "")
        keys = [*(secret.get("data") or {}), *(secret.get("stringData") or {})]
        found.update(env[len(TF_VAR):] for key in keys if (env := prefix + str(key)).startswith(TF_VAR)
                     and len(env) > len(TF_VAR))
    return sorted(found)
