"""kube-apiserver's impersonation filter, as a pure function (used by the API emulator).

`Impersonate-User`, `Impersonate-Uid`, `Impersonate-Group` (repeatable) and `Impersonate-Extra-<key>` make a
request act as another identity, once the caller is allowed the `impersonate` verb on each part: `users`
(core group) by name, or `serviceaccounts` in the account's namespace for a `system:serviceaccount:` name;
`groups` by name; `userextras/<key>` and `uids` in `authentication.k8s.io`. The acting identity's groups are
the requested ones (a service account with none requested gets its two `system:serviceaccounts` groups), plus
`system:authenticated` (`system:unauthenticated` for `system:anonymous`). `kubectl --as/--as-group` sends
these headers, so `kubectl auth can-i --as …` answers for the impersonated user, as on a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote

from burrito_local.kube_authn import ANONYMOUS_USERNAME, AUTHENTICATED, UNAUTHENTICATED, UserInfo
from burrito_local.kube_errors import ApiError
from burrito_local.kube_rbac import SA_PREFIX, RbacIndex, RequestAttributes, authorize, forbidden

USER = "impersonate-user"
UID = "impersonate-uid"
GROUP = "impersonate-group"
EXTRA_PREFIX = "impersonate-extra-"
AUTHENTICATION_GROUP = "authentication.k8s.io"


def _headers(headers: Mapping[str, str] | list[tuple[str, str]]) -> list[tuple[str, str]]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(k.lower(), v) for k, v in items]


def wants_impersonation(headers: Mapping[str, str] | list[tuple[str, str]]) -> bool:
    return any(k in (USER, UID, GROUP) or k.startswith(EXTRA_PREFIX) for k, _ in _headers(headers))


def _check(index: RbacIndex, caller: UserInfo, attrs: RequestAttributes) -> None:
    decision = authorize(index, caller, attrs)
    if not decision.allowed:
        raise forbidden(caller.username, attrs, decision.reason)


def _attrs(resource: str, name: str, group: str = "", namespace: str = "", subresource: str = "") -> RequestAttributes:
    return RequestAttributes(verb="impersonate", path="", resource_request=True, api_group=group,
                             namespace=namespace, resource=resource, subresource=subresource, name=name)


def impersonate(index: RbacIndex, caller: UserInfo, headers: Mapping[str, str] | list[tuple[str, str]]) -> UserInfo:
    """The identity a request acts as: `caller` without impersonation headers, else the impersonated user once
    every part is allowed. ApiError: 403 naming the first part refused (kube's wording), 400 for groups, extras
    or a UID without a user."""
    pairs = _headers(headers)
    if not wants_impersonation(pairs):
        return caller
    users = [v for k, v in pairs if k == USER]
    uids = [v for k, v in pairs if k == UID]
    groups = tuple(v for k, v in pairs if k == GROUP)
    extra: dict[str, tuple[str, ...]] = {}
    for k, v in pairs:
        if k.startswith(EXTRA_PREFIX):
            key = unquote(k[len(EXTRA_PREFIX):])
            extra[key] = (*extra.get(key, ()), v)
    if not users or not users[0]:
        requested = [*(f"group {g}" for g in groups), *(f"extra {k}" for k in extra), *(f"uid {u}" for u in uids)]
        raise ApiError(400, "BadRequest", f"requested {requested} without impersonating a user")
    username = users[0]
    service_account = username.removeprefix(SA_PREFIX).split(":") if username.startswith(SA_PREFIX) else None
    if service_account is not None and len(service_account) == 2 and all(service_account):
        namespace, name = service_account
        _check(index, caller, _attrs("serviceaccounts", name, namespace=namespace))
        default_groups: tuple[str, ...] = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")
    else:
        _check(index, caller, _attrs("users", username))
        default_groups = ()
    for group in groups:
        _check(index, caller, _attrs("groups", group))
    for key, values in extra.items():
        for value in values:
            _check(index, caller, _attrs("userextras", value, AUTHENTICATION_GROUP, subresource=key))
    uid = uids[0] if uids else ""
    if uid:
        _check(index, caller, _attrs("uids", uid, AUTHENTICATION_GROUP))
    acting = groups if groups else default_groups
    implicit = UNAUTHENTICATED if username == ANONYMOUS_USERNAME else AUTHENTICATED
    if implicit not in acting:
        acting = (*acting, implicit)
    return UserInfo(username, uid, acting, extra)
