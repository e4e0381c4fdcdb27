"""Day-2 operation requests (api/operations.py, docs/architecture.md §5.12): what reaches terraform's command line is
checked strictly, each refusal naming the field."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api.operations import (
    ADDRESS_PATTERN,
    BadOperation,
    RunOperation,
    check_address,
    check_import_id,
    check_lock_id,
    describe,
    operation_digest,
    parse_request,
)
from burrito_py.api.run import TerraformRun
from burrito_py.runner.terraform import operation_args, plan_args

GOOD_ADDRESSES = [
    "terraform_data.a",
    "aws_s3_bucket.logs",
    "data.aws_ami.ubuntu",
    'module.net["eu-west-1"].aws_subnet.private[2]',
    "module.a.module.b[0].null_resource.x",
    "module.old",
    'aws_instance.web["with space"]',
    "google_compute_instance.vm-1",
]
BAD_ADDRESSES = [
    ("", "a resource address is required"),
    ("-lock=false", "starts with '-'"),
    ("--help", "starts with '-'"),
    ("terraform_data.a\nterraform_data.b", "newline"),
    ("terraform_data.a\r", "newline"),
    ("terraform_data", "is not a Terraform resource address"),
    ("terraform_data.a; rm -rf /", "is not a Terraform resource address"),
    ("$(id).x", "is not a Terraform resource address"),
    ('aws_instance.web["a"b"]', "is not a Terraform resource address"),
    ("aws_instance.web[-1]", "is not a Terraform resource address"),
    ("x" * 2000, "longer than 1024"),
]


@pytest.mark.parametrize("address", GOOD_ADDRESSES)
def test_terraform_addresses_are_accepted(address: str) -> None:
    assert check_address(address, "address") == address


@pytest.mark.parametrize(("address", "reason"), BAD_ADDRESSES)
def test_bad_addresses_are_refused_naming_the_field(address: str, reason: str) -> None:
    with pytest.raises(BadOperation) as caught:
        check_address(address, "replace[1]")
    assert str(caught.value).startswith("replace[1]: ")
    assert reason in str(caught.value)


@pytest.mark.parametrize(("value", "reason"), [
    ("-input=true", "starts with '-'"), ("a\nb", "newline"), ("a\x00", "control"), (" padded", "white space"),
    ("", "required"),
])
def test_bad_import_ids_are_refused(value: str, reason: str) -> None:
    with pytest.raises(BadOperation, match=f"^id: .*{reason}"):
        check_import_id(value)


def test_import_ids_keep_what_providers_use() -> None:
    for value in ("arn:aws:s3:::my-bucket", "/subscriptions/x/resourceGroups/rg", "projects/p/zones/z/instances/i",
                  "i-0123456789abcdef0", "a b c", '{"id": 1}'):
        assert check_import_id(value) == value


@pytest.mark.parametrize("value", ["-force", "a b", "a\nb", "", "x" * 300])
def test_bad_lock_ids_are_refused(value: str) -> None:
    with pytest.raises(BadOperation, match=r"^lockId: "):
        check_lock_id(value)


# Anything at all: what is accepted never reaches terraform as an option, a second line or a second argument.
@given(st.text(max_size=80))
def test_an_accepted_address_is_one_harmless_argument(value: str) -> None:
    try:
        check_address(value, "address")
    except BadOperation as exc:
        assert str(exc).startswith("address: ")
        return
    assert not value.startswith("-")
    assert "\n" not in value and "\r" not in value and "\x00" not in value
    assert ADDRESS_PATTERN.fullmatch(value) is not None


@given(st.text(max_size=80))
def test_an_accepted_import_id_is_one_printable_line_and_not_an_option(value: str) -> None:
    try:
        check_import_id(value)
    except BadOperation as exc:
        assert str(exc).startswith("id: ")
        return
    assert value and not value.startswith("-")
    assert all(ord(c) >= 0x20 and ord(c) != 0x7F for c in value)


idents = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,10}", fullmatch=True)
keys = st.one_of(st.none(), st.integers(0, 99).map(lambda i: f"[{i}]"),
                 st.from_regex(r'[a-z0-9 ._/-]{0,8}', fullmatch=True).map(lambda k: f'["{k}"]'))


@st.composite
def addresses(draw: st.DrawFn) -> str:
    modules = draw(st.lists(st.tuples(idents, keys), max_size=2))
    prefix = "".join(f"module.{n}{k or ''}." for n, k in modules)
    data = "data." if draw(st.booleans()) else ""
    return f"{prefix}{data}{draw(idents)}.{draw(idents)}{draw(keys) or ''}"


@given(addresses())
def test_generated_terraform_addresses_are_accepted(address: str) -> None:
    assert check_address(address, "address") == address


def request(**fields: object) -> str:
    return json.dumps(fields)


def test_requests_of_each_kind_parse() -> None:
    assert parse_request(request(operation="import", address="terraform_data.a", id="x-1"), "alice") == (
        "import", RunOperation(requested_by="alice", address="terraform_data.a", id="x-1"))
    kind, op = parse_request(request(operation="state-mv", source="a.b", destination="a.c"), "bob")
    assert (kind, op.source, op.destination, op.requested_by) == ("state-mv", "a.b", "a.c", "bob")
    kind, op = parse_request(request(operation="plan", replace=["a.b"], target=["module.m"]), "bob")
    assert (kind, op.replace, op.target) == ("plan", ["a.b"], ["module.m"])
    kind, op = parse_request(request(operation="force-unlock", lockId="6f1c-22"), "bob")
    assert (kind, op.lock_id) == ("force-unlock", "6f1c-22")


@pytest.mark.parametrize(("value", "by", "message"), [
    (request(operation="state-rm", address="a.b"), None, "api.burrito-py.io/operation-by: missing"),
    ("state rm a.b", "u", "api.burrito-py.io/operation: not JSON"),
    ("[]", "u", "api.burrito-py.io/operation: must be a JSON object"),
    (request(operation="destroy"), "u", "api.burrito-py.io/operation: operation: Input should be"),
    (request(operation="state-rm", adress="a.b"), "u", "api.burrito-py.io/operation: adress: Extra inputs"),
    (request(operation="state-rm"), "u", "api.burrito-py.io/operation: address: required by state-rm"),
    (request(operation="state-rm", address="-a.b"), "u", "api.burrito-py.io/operation: address: '-a.b' starts"),
    (request(operation="import", address="a.b"), "u", "api.burrito-py.io/operation: id: required by import"),
    (request(operation="import", address="a.b", id="-x"), "u", "api.burrito-py.io/operation: id: '-x' starts"),
    (request(operation="state-rm", address="a.b", id="x"), "u", "api.burrito-py.io/operation: id: not a field of"),
    (request(operation="plan"), "u", "api.burrito-py.io/operation: replace: a plan operation names at least one"),
    (request(operation="plan", target=["a.b", "a.c\nx"]), "u", "api.burrito-py.io/operation: target[1]: holds a"),
    (request(operation="state-rm", address="a.b", replace=["a.b"]), "u", "replace: not a field of state-rm"),
    (request(operation="force-unlock"), "u", "api.burrito-py.io/operation: lockId: required by force-unlock"),
])
def test_bad_requests_name_the_field(value: str, by: str | None, message: str) -> None:
    with pytest.raises(BadOperation) as caught:
        parse_request(value, by)
    assert message in str(caught.value)


def test_the_digest_tells_requests_apart() -> None:
    a = request(operation="state-rm", address="a.b")
    assert operation_digest(a, "u") == operation_digest(a, "u")
    assert operation_digest(a, "u") != operation_digest(a, "v")
    assert operation_digest(a, "u") != operation_digest(request(operation="state-rm", address="a.b",
                                                                requestedAt="t2"), "u")


def test_runner_argv_puts_values_after_every_option() -> None:
    op = RunOperation(requested_by="u", address="terraform_data.a", id="abc")
    assert operation_args("import", op) == ("import", ["import", "-input=false", "-no-color", "terraform_data.a",
                                                       "abc"])
    assert operation_args("state-rm", RunOperation(requested_by="u", address="a.b"))[1] == [
        "state", "rm", "-no-color", "a.b"]
    assert operation_args("state-mv", RunOperation(requested_by="u", source="a.b", destination="a.c"))[1] == [
        "state", "mv", "-no-color", "a.b", "a.c"]
    assert operation_args("force-unlock", RunOperation(requested_by="u", lock_id="L1"))[1] == [
        "force-unlock", "-no-color", "-force", "L1"]
    assert plan_args("/p", ["-parallelism=2"], replace=["a.b"], target=["module.m"]) == [
        "plan", "-input=false", "-no-color", "-out=/p", "-replace=a.b", "-target=module.m", "-parallelism=2"]


def test_the_runner_checks_again_a_run_written_around_the_model() -> None:
    # A run read from the API whose operation was never validated (model_construct skips it): refused all the same.
    forged = RunOperation.model_construct(requested_by="u", address="-state=/tmp/x", id="1")
    with pytest.raises(BadOperation, match=r"^address: "):
        operation_args("import", forged)


def test_the_run_model_ties_the_operation_to_the_action() -> None:
    def run(spec: dict[str, object]) -> TerraformRun:
        return TerraformRun.model_validate({"metadata": {"name": "r", "namespace": "n"},
                                            "spec": {"layer": {"name": "l"}, **spec}})

    assert run({"action": "state-rm", "operation": {"requestedBy": "u", "address": "a.b"}}).spec.operation
    for spec, message in [
        ({"action": "state-rm"}, "spec.operation: required by action state-rm"),
        ({"action": "import", "operation": {"requestedBy": "u", "address": "a.b"}}, "spec.operation.id: required"),
        ({"action": "apply", "operation": {"requestedBy": "u", "replace": ["a.b"]}}, "not allowed on an apply"),
        ({"action": "plan", "pullRequest": "pr", "operation": {"requestedBy": "u", "replace": ["a.b"]}},
         "pull request"),
        ({"action": "state-rm", "operation": {"requestedBy": "u", "address": "--help"}}, "starts with '-'"),
    ]:
        with pytest.raises(ValueError) as caught:
            run(spec)
        assert message in str(caught.value)


def test_describe_says_what_runs() -> None:
    assert describe("state-mv", RunOperation(requested_by="u", source="a.b", destination="a.c")) == \
        "state mv a.b -> a.c"
    assert describe("plan", RunOperation(requested_by="u", replace=["a.b"], target=["c.d"])) == \
        "plan -replace=a.b -target=c.d"


def test_the_runner_knows_every_run_action() -> None:
    from typing import get_args

    from burrito_py.api.common import RunKind
    from burrito_py.api.operations import OPERATION_ACTIONS
    from burrito_py.runner.main import ACTIONS

    assert set(ACTIONS) == set(get_args(RunKind)) == {"plan", "apply", *OPERATION_ACTIONS}
