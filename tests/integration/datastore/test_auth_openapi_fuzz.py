"""schemathesis over the datastore's own OpenAPI, over real HTTP with auth on: no input yields a 5xx, as an
admin (every handler reached) or as a runner (the authorization paths)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.integration.datastore.auth_platform import AuthPlatform, running_auth_platform


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthPlatform]:
    with running_auth_platform(tmp_path_factory.mktemp("fuzz")) as p:
        yield p


@pytest.fixture
def datastore_schema(platform: AuthPlatform) -> Any:
    return schemathesis.openapi.from_url(f"{platform.url}/openapi.json")


schema = schemathesis.pytest.from_fixture("datastore_schema")


def _call(case: Any, platform: AuthPlatform, identity: str) -> None:
    response = case.call(headers={"Authorization": f"Bearer {platform.tokens[identity]}"}, timeout=30)
    assert response.status_code < 500, (case.method, case.formatted_path, response.status_code, response.text)


# Two functions rather than a parametrized fixture: schemathesis' lazy schemas do not combine with those.
# Each operation gets schemathesis' coverage phase (deterministic: every parameter's boundaries, missing and
# wrongly typed values, about 24 cases an operation here) and then max_examples random cases.
@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_is_a_server_error_for_an_admin(case: Any, platform: AuthPlatform) -> None:
    _call(case, platform, "controller")


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_is_a_server_error_for_a_runner(case: Any, platform: AuthPlatform) -> None:
    _call(case, platform, "own-runner")
