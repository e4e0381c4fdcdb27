"""Secret values never reach the logs (issue 11, item 17): every value the runner read from a Secret is
replaced by `***` in all it prints (terraform's output included), hence in the pod log, the log the
controller copies to the datastore, the log the runner uploads itself, the human-readable plan and the
termination message — as CI systems mask secrets.

Masked forms of each value: the value itself, each of its lines (a multi-line value: a PEM key, a kubeconfig),
its JSON/HCL-escaped form (what Terraform prints inside quotes: `var.password is "…"`, with `\\n`, `\\"`,
`$${`), and its base64 forms (standard and URL-safe, with and without padding).

Values shorter than `MIN_LENGTH` (4) characters are not masked: replacing every `a` or `no` in a log would
make it unreadable while protecting nothing that guessing would not reveal; the runner says which variable
names are too short to mask (names only). Lines of a multi-line value are masked only from that length too.
"""

from __future__ import annotations

import base64
import json
import re
import threading

__all__ = ["MASK", "MIN_LENGTH", "Masker", "masker", "reset", "secret_forms"]

MASK = "***"
MIN_LENGTH = 4


def _escaped(text: str) -> str:
    """How Terraform writes a string inside quotes (JSON escapes, plus HCL's template escapes)."""
    return json.dumps(text, ensure_ascii=False)[1:-1].replace("${", "$${").replace("%{", "%%{")


def secret_forms(value: str) -> set[str]:
    """Every form of `value` that must not appear in a log (those of at least MIN_LENGTH characters)."""
    candidates = {value, *(line.strip("\r") for line in value.split("\n"))}
    forms: set[str] = set()
    for text in candidates:
        forms.update({text, _escaped(text), json.dumps(text, ensure_ascii=True)[1:-1]})
    raw = value.encode()
    for encoded in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()):
        forms.update({encoded, encoded.rstrip("=")})
    return {form for form in forms if len(form) >= MIN_LENGTH}


class Masker:
    """The secret values of one attempt and the one pattern that finds any of their forms."""

    def __init__(self) -> None:
        self._forms: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._lock = threading.Lock()

    def add(self, value: str) -> bool:
        """Mask `value` from now on; False when it is too short to be masked."""
        if len(value) < MIN_LENGTH:
            return False
        with self._lock:
            self._forms |= secret_forms(value)
            # Longest first: a value that contains another is replaced whole.
            alternatives = sorted(self._forms, key=lambda form: (-len(form), form))
            self._pattern = re.compile("|".join(map(re.escape, alternatives)))
        return True

    def mask(self, text: str) -> str:
        pattern = self._pattern
        return text if pattern is None or not text else pattern.sub(MASK, text)


_current = Masker()


def masker() -> Masker:
    """The process's one Masker: every stream of the attempt masks with it."""
    return _current


def reset() -> Masker:
    global _current
    _current = Masker()
    return _current
