"""Secret values are masked in everything the runner prints (issue 11, item 17)."""

from __future__ import annotations

import base64
import io
import json

from burrito_py.runner.masking import MASK, Masker, secret_forms
from burrito_py.runner.transcript import Transcript

SECRET = 'p@ss"w\\rd${x}'


def test_every_form_of_a_value_is_masked() -> None:
    masker = Masker()
    assert masker.add(SECRET)
    text = "\n".join([
        f"raw {SECRET}",
        f"terraform: var.password is {json.dumps(SECRET)}",  # JSON-escaped inside quotes
        "hcl: " + json.dumps(SECRET)[1:-1].replace("${", "$${"),
        "b64 " + base64.b64encode(SECRET.encode()).decode(),
        "b64url " + base64.urlsafe_b64encode(SECRET.encode()).decode().rstrip("="),
    ])
    masked = masker.mask(text)
    assert masked.splitlines() == ["raw ***", 'terraform: var.password is "***"', "hcl: ***", "b64 ***", "b64url ***"]


def test_each_line_of_a_multi_line_value_is_masked() -> None:
    key = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nAnotherLineOfKeyMaterial\n-----END KEY-----\n"
    masker = Masker()
    masker.add(key)
    printed = "line 2 is MIIEvQIBADANBgkqhkiG9w0BAQEFAASC, and escaped: " + json.dumps(key)
    assert "MIIEv" not in masker.mask(printed) and "AnotherLine" not in masker.mask(printed)
    assert masker.mask(printed).startswith(f"line 2 is {MASK}, and escaped: ")


def test_short_values_are_not_masked_and_say_so() -> None:
    masker = Masker()
    assert not masker.add("abc")
    assert masker.mask("abc abc") == "abc abc"
    assert all(len(form) >= 4 for form in secret_forms("ab\ncdef"))


def test_a_longer_secret_wins_over_one_it_contains() -> None:
    masker = Masker()
    masker.add("token")
    masker.add("token-and-more")
    assert masker.mask("x token-and-more y token z") == "x *** y *** z"


def test_the_transcript_tee_masks_the_stream_and_the_copy() -> None:
    masker = Masker()
    masker.add("hunter2-secret")
    transcript = Transcript(mask=masker)
    inner = io.StringIO()
    from burrito_py.runner.transcript import _Tee

    tee = _Tee(inner, transcript)  # type: ignore[arg-type]
    tee.write("Error: var.password is \"hunter2-secret\"\n")
    assert inner.getvalue() == 'Error: var.password is "***"\n'
    assert transcript.text() == 'Error: var.password is "***"\n'
