"""ObjectMeta validation of the API emulator: label keys and values, annotation keys and their total
size, worded as kube-apiserver v1.32 words them (apimachinery's ValidateLabels / ValidateAnnotations),
so a label value a controller writes too long is a 422 here before it is one on a cluster."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from burrito_local.kube_errors import field_cause

Obj = dict[str, Any]
LABEL_VALUE_MAX = 63
LABEL_NAME_MAX = 63
SUBDOMAIN_MAX = 253
TOTAL_ANNOTATION_SIZE = 256 * 1024  # bytes of all keys and values together

_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_VALUE_FMT = f"({_NAME_FMT})?"
_SUBDOMAIN_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = f"{_SUBDOMAIN_LABEL}(\\.{_SUBDOMAIN_LABEL})*"
_NAME = re.compile(f"^{_NAME_FMT}$")
_VALUE = re.compile(f"^{_VALUE_FMT}$")
_SUBDOMAIN = re.compile(f"^{_SUBDOMAIN_FMT}$")
_NAME_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
             "alphanumeric character")
_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
              "and must start and end with an alphanumeric character")
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character")


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    """apimachinery's RegexError wording (its examples end with "', " before each " or ")."""
    listed = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {listed}regex used for validation is '{fmt}')"


def _max_len(length: int) -> str:
    return f"must be no more than {length} characters"


def _empty() -> str:
    return "must be non-empty"


def _subdomain_errors(value: str) -> list[str]:
    errors = []
    if len(value) > SUBDOMAIN_MAX:
        errors.append(_max_len(SUBDOMAIN_MAX))
    if not _SUBDOMAIN.match(value):
        errors.append(_regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN_FMT, "example.com"))
    return errors


def qualified_name_errors(value: str) -> list[str]:
    """IsQualifiedName: an optional DNS subdomain prefix and '/', then a name of at most 63 characters."""
    parts = value.split("/")
    errors: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part " + _empty())
        else:
            errors += ["prefix part " + e for e in _subdomain_errors(prefix)]
    else:
        return ["a qualified name " + _regex_error(_NAME_MSG, _NAME_FMT, "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errors.append("name part " + _empty())
    elif len(name) > LABEL_NAME_MAX:
        errors.append("name part " + _max_len(LABEL_NAME_MAX))
    if not _NAME.match(name):
        errors.append("name part " + _regex_error(_NAME_MSG, _NAME_FMT, "MyName", "my.name", "123-abc"))
    return errors


def label_value_errors(value: str) -> list[str]:
    errors = []
    if len(value) > LABEL_VALUE_MAX:
        errors.append(_max_len(LABEL_VALUE_MAX))
    if not _VALUE.match(value):
        errors.append(_regex_error(_VALUE_MSG, _VALUE_FMT, "MyValue", "my_value", "12345"))
    return errors


def _invalid(field: str, value: str, message: str) -> Obj:
    return field_cause(field, f"Invalid value: {json.dumps(value, ensure_ascii=False)}: {message}")


def metadata_causes(meta: Mapping[str, Any]) -> list[Obj]:
    """422 causes for the labels and annotations of `meta` (keys in sorted order: Go's map order is random)."""
    causes: list[Obj] = []
    labels: Mapping[str, str] = meta.get("labels") or {}
    for key in sorted(labels):
        causes += [_invalid("metadata.labels", key, e) for e in qualified_name_errors(key)]
        causes += [_invalid("metadata.labels", labels[key], e) for e in label_value_errors(labels[key])]
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    for key in sorted(annotations):
        # Annotation keys follow the same rule, except that case does not matter.
        causes += [_invalid("metadata.annotations", key, e) for e in qualified_name_errors(key.lower())]
    if sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items()) > TOTAL_ANNOTATION_SIZE:
        causes.append(field_cause("metadata.annotations", f"Too long: must have at most {TOTAL_ANNOTATION_SIZE} "
                                  "bytes", "FieldValueTooLong"))
    return causes
