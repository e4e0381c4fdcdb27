"""ObjectMeta validation as kube-apiserver words it (apimachinery ValidateLabels / ValidateAnnotations)."""

from __future__ import annotations

from burrito_local.kube_meta import label_value_errors, metadata_causes, qualified_name_errors

VALUE_REGEX = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
               "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
               "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


def test_label_values_up_to_63_characters_of_the_label_alphabet() -> None:
    assert label_value_errors("") == [] and label_value_errors("a" * 63) == []
    assert label_value_errors("My_value-1.x") == []
    assert label_value_errors("a" * 64) == ["must be no more than 63 characters"]
    assert label_value_errors("-x") == [VALUE_REGEX]
    assert label_value_errors("has space") == [VALUE_REGEX]


def test_qualified_names_have_an_optional_subdomain_prefix() -> None:
    assert qualified_name_errors("app.kubernetes.io/name") == []
    assert qualified_name_errors("burrito-py.io/layer") == []
    assert qualified_name_errors("n" * 64) == [
        "name part must be no more than 63 characters"]
    assert qualified_name_errors("/x") == ["prefix part must be non-empty"]
    assert qualified_name_errors("Upper.Case/x")[0].startswith(
        "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters")
    assert qualified_name_errors("a/b/c")[0].startswith("a qualified name must consist of alphanumeric characters")
    assert qualified_name_errors("x/")[0] == "name part must be non-empty"


def test_metadata_causes_name_the_field_and_the_value() -> None:
    long_value = "v" * 64
    causes = metadata_causes({"labels": {"ok": "fine", "k": long_value}})
    assert causes == [{"reason": "FieldValueInvalid", "field": "metadata.labels",
                       "message": f'Invalid value: "{long_value}": must be no more than 63 characters'}]
    bad_key = metadata_causes({"labels": {"bad key": "x"}})
    assert bad_key[0]["message"].startswith('Invalid value: "bad key": name part must consist of alphanumeric')


def test_annotations_keys_ignore_case_and_their_total_is_capped_at_256_kib() -> None:
    assert metadata_causes({"annotations": {"Example.COM/Key": "x" * 1000}}) == []
    assert metadata_causes({"annotations": {"a": "x" * (256 * 1024 - 1)}}) == []
    assert metadata_causes({"annotations": {"a": "x" * (256 * 1024)}}) == [{
        "reason": "FieldValueTooLong", "field": "metadata.annotations",
        "message": "Too long: must have at most 262144 bytes"}]
    assert metadata_causes({"annotations": {"bad key": ""}})[0]["field"] == "metadata.annotations"
