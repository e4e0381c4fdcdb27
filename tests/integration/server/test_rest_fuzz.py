"""schemathesis over the server's own OpenAPI (the REST API and the webhook), over real HTTP with auth on: no
input yields a 5xx, as a person (every handler reached, syncs included) or as a runner (the sync route, where
a runner is refused with a 403, as on every route)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.integration.server.rest_platform import RestPlatform, running_rest_platform


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestPlatform]:
    with running_rest_platform(tmp_path_factory.mktemp("rest-fuzz")) as p:
        yield p


@pytest.fixture
def server_schema(platform: RestPlatform) -> Any:
    return schemathesis.openapi.from_url(f"{platform.server_url}/openapi.json")


schema = schemathesis.pytest.from_fixture("server_schema")


def _call(case: Any, platform: RestPlatform, identity: str) -> None:
    response = case.call(headers={"Authorization": f"Bearer {platform.tokens[identity]}"}, timeout=30)
    assert response.status_code < 500, (case.method, case.formatted_path, response.status_code, response.text)
    if case.path == "/api/webhook" and case.method == "POST":
        # Random bodies are unsigned, unparsable or name no known repository.
        assert response.status_code in (202, 400, 401, 413), (case.formatted_path, response.status_code)


# Two functions rather than a parametrized fixture: schemathesis' lazy schemas do not combine with those.
# Each operation gets schemathesis' coverage phase (deterministic: every parameter's boundaries, missing and
# wrongly typed values, about 24 cases an operation here) and then max_examples random cases.
@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_is_a_server_error_for_a_person(case: Any, platform: RestPlatform) -> None:
    _call(case, platform, "person")


@schema.include(path_regex="/sync$").parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_is_a_server_error_for_a_runner(case: Any, platform: RestPlatform) -> None:
    _call(case, platform, "runner")
    assert not platform.layers_marked_for_sync(), "a runner's sync request was acted on"
