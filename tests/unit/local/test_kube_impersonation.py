"""The emulator's impersonation filter against kube-apiserver's (`kubectl --as`): the acting identity, the
`impersonate` checks on each part, and the errors."""

from __future__ import annotations

from typing import Any

import pytest
from burrito_local.kube_authn import UserInfo
from burrito_local.kube_errors import ApiError
from burrito_local.kube_impersonation import impersonate
from burrito_local.kube_rbac import RbacIndex

RBAC = "rbac.authorization.k8s.io"
ADMIN = UserInfo("admin", groups=("system:masters", "system:authenticated"))
ALICE = UserInfo("alice", groups=("system:authenticated",))


def index(*rules: dict[str, Any]) -> RbacIndex:
    role = {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": {"name": "imp"}, "rules": list(rules)}
    binding = {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "imp"},
               "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "imp"},
               "subjects": [{"kind": "User", "apiGroup": RBAC, "name": "alice"}]}
    return RbacIndex.build([], [role], [], [binding])


def test_no_headers_is_the_caller() -> None:
    assert impersonate(index(), ALICE, {"Authorization": "Bearer x"}) is ALICE


def test_a_service_account_gets_its_groups_and_authenticated() -> None:
    acting = impersonate(index(), ADMIN, {"Impersonate-User": "system:serviceaccount:team:viewer"})
    assert acting == UserInfo("system:serviceaccount:team:viewer", "",
                              ("system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"), {})


def test_requested_groups_replace_the_defaults_and_extras_and_uid_are_carried() -> None:
    acting = impersonate(index(), ADMIN, [("Impersonate-User", "bob"), ("Impersonate-Group", "devs"),
                                          ("Impersonate-Group", "ops"), ("Impersonate-Uid", "u-1"),
                                          ("Impersonate-Extra-Scopes", "a"), ("Impersonate-Extra-Scopes", "b")])
    assert acting == UserInfo("bob", "u-1", ("devs", "ops", "system:authenticated"), {"scopes": ("a", "b")})


def test_anonymous_is_unauthenticated() -> None:
    assert impersonate(index(), ADMIN, {"Impersonate-User": "system:anonymous"}).groups == ("system:unauthenticated",)


def test_a_caller_without_the_impersonate_verb_is_refused_in_kubes_words() -> None:
    with pytest.raises(ApiError) as refused:
        impersonate(index(), ALICE, {"Impersonate-User": "system:serviceaccount:team:viewer"})
    assert refused.value.code == 403
    assert refused.value.message == (
        'serviceaccounts "viewer" is forbidden: User "alice" cannot impersonate resource "serviceaccounts" in API '
        'group "" in the namespace "team"')


def test_each_part_is_checked_users_then_groups() -> None:
    allowed = index({"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["bob"]})
    assert impersonate(allowed, ALICE, {"Impersonate-User": "bob"}).username == "bob"
    with pytest.raises(ApiError) as refused:
        impersonate(allowed, ALICE, [("Impersonate-User", "bob"), ("Impersonate-Group", "system:masters")])
    assert refused.value.code == 403 and 'cannot impersonate resource "groups"' in refused.value.message
    with pytest.raises(ApiError):
        impersonate(allowed, ALICE, {"Impersonate-User": "carol"})


def test_groups_without_a_user_is_an_error() -> None:
    with pytest.raises(ApiError) as refused:
        impersonate(index(), ADMIN, {"Impersonate-Group": "system:masters"})
    assert refused.value.code == 400 and "without impersonating a user" in refused.value.message
