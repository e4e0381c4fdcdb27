"""CEL, as Kubernetes evaluates it, on `common-expression-language` (the `cel` module, cel-rust): shared by the
emulator's ValidatingAdmissionPolicies and the plan policies' CEL rules. Compiled programs are cached."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

__all__ = ["CelError", "evaluate_cel"]


class CelError(Exception):
    """A CEL expression did not compile or failed at run time; the message is kube-apiserver's wording."""


@functools.lru_cache(maxsize=1024)
def _compile(expression: str) -> Any:
    import cel

    try:
        return cel.compile(expression)
    except ValueError as exc:
        return CelError(f"compilation error: compilation failed: {exc}")


def evaluate_cel(expression: str, variables: Mapping[str, Any]) -> Any:
    """The value of `expression` over `variables`; CelError when it fails."""
    program = _compile(expression)
    if isinstance(program, CelError):
        raise program
    try:
        return program.execute(dict(variables))
    except KeyError as exc:  # cel-rust reports a missing map key or field as a KeyError
        raise CelError(f"expression '{expression}' resulted in error: no such key: {exc.args[0]}") from None
    except Exception as exc:  # any run-time failure of the expression is the expression's error
        raise CelError(f"expression '{expression}' resulted in error: {exc}") from None
