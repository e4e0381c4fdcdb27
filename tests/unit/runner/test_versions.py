"""Version constraints: examples from Terraform's documentation, and properties against a reference
semantics written independently (tuples and plain comparisons)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.plans.versions import InvalidVersionConstraint, parse_constraint, pick_latest


@pytest.mark.parametrize(
    ("constraint", "allowed", "refused"),
    [
        ("1.2.3", ["1.2.3", "v1.2.3"], ["1.2.4", "1.2.2", "1.2.3-beta1"]),
        ("= 1.2.3", ["1.2.3"], ["1.2.4"]),
        ("=1.2", ["1.2.0"], ["1.2.1"]),
        ("!= 1.6.0", ["1.5.7", "1.6.1"], ["1.6.0"]),
        ("> 1.5.0", ["1.5.1", "2.0.0"], ["1.5.0", "1.4.9"]),
        (">= 1.5", ["1.5.0", "1.11.4"], ["1.4.99"]),
        ("< 2.0", ["1.99.99"], ["2.0.0", "2.0.1"]),
        ("<= 1.5.7", ["1.5.7", "0.12.0"], ["1.5.8"]),
        ("~> 1.11.0", ["1.11.0", "1.11.4"], ["1.12.0", "1.10.9"]),
        ("~> 1.11", ["1.11.0", "1.99.0"], ["2.0.0", "1.10.9"]),
        ("~> 1.2.3", ["1.2.3", "1.2.99"], ["1.3.0", "1.2.2"]),
        ("~> 1", ["1.0.0", "1.9.0", "2.5.0"], ["0.15.5"]),  # go-version: one component bounds nothing above
        (">= 1.5, < 2.0, != 1.6.0", ["1.5.0", "1.11.4"], ["1.6.0", "2.0.0", "1.4.0"]),
        (">=1.5,<2.0", ["1.9.0"], ["2.1.0"]),
        ("= 1.12.0-beta1", ["1.12.0-beta1"], ["1.12.0", "1.12.0-beta2"]),
        (">= 1.0", ["1.12.0"], ["1.12.0-beta1", "1.12.0-rc1"]),
        (">= 1.0, = 1.12.0-rc1", ["1.12.0-rc1"], ["1.12.0"]),
        ("1.11.4+build.7", ["1.11.4", "1.11.4+other"], ["1.11.5"]),
    ],
)
def test_examples(constraint: str, allowed: list[str], refused: list[str]) -> None:
    parsed = parse_constraint(constraint)
    assert [v for v in allowed if not parsed.allows(v)] == []
    assert [v for v in refused if parsed.allows(v)] == []


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("", "empty version constraint"),
        ("   ", "empty version constraint"),
        (">= 1.0,", "'>= 1.0,': an empty clause"),
        ("~> one", "'one' is not a version"),
        ("1.2.3.4", "'1.2.3.4' is not a version"),
        (">> 1.0", "'>> 1.0' is not a clause"),
        (">= 1.0 < 2.0", "'>= 1.0 < 2.0' is not a clause"),
        ("^1.2", "'^1.2' is not a version"),
    ],
)
def test_invalid_constraints_name_the_bad_text(text: str, named: str) -> None:
    with pytest.raises(InvalidVersionConstraint) as error:
        parse_constraint(text)
    assert named in str(error.value)


def test_pick_latest_ignores_prereleases_and_junk_and_keeps_the_spelling() -> None:
    versions = ["1.9.8", "v1.11.4", "1.12.0-beta1", "not-a-version", "1.10.5", "2.0.0"]
    assert pick_latest(parse_constraint("< 2.0"), versions) == "v1.11.4"
    assert pick_latest(parse_constraint("~> 1.10.0"), versions) == "1.10.5"
    assert pick_latest(parse_constraint("= 1.12.0-beta1"), versions) == "1.12.0-beta1"
    assert pick_latest(parse_constraint(">= 3"), versions) is None
    assert pick_latest(parse_constraint(">= 1"), []) is None


def test_prerelease_order_follows_semver() -> None:
    # Only relevant to pick_latest among exact matches, but the order itself must be right.
    from burrito_py.plans.versions import Version

    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
               "1.0.0-rc.1", "1.0.0"]
    parsed = [Version.parse(v) for v in ordered]
    assert sorted(reversed(parsed)) == parsed


# -- properties against a reference semantics ----------------------------------------------------
Triple = tuple[int, int, int]
OPS = ["", "=", "!=", ">", ">=", "<", "<=", "~>"]
small = st.integers(min_value=0, max_value=4)
triples = st.tuples(small, small, small)
clauses = st.tuples(st.sampled_from(OPS), triples, st.integers(min_value=1, max_value=3))


def reference(op: str, written: Triple, components: int, v: Triple, prerelease: bool = False) -> bool:
    """Versions as (major, minor, patch, 1), a prerelease as (major, minor, patch, 0): just below its release."""
    c = (*written[:components], *(0,) * (3 - components), 1)
    w = (*v, 0 if prerelease else 1)
    if op in ("", "="):
        return w == c
    if op == "!=":
        return w != c
    if op == ">":
        return w > c
    if op == ">=":
        return w >= c
    if op == "<":
        return w < c
    if op == "<=":
        return w <= c
    # ~>: at least c; every written component but the last is fixed.
    return w >= c and w[: components - 1] == c[: components - 1]


def render(op: str, written: Triple, components: int, spaces: str) -> str:
    return f"{spaces}{op}{spaces}{'.'.join(str(n) for n in written[:components])}{spaces}"


@given(st.lists(clauses, min_size=1, max_size=4), triples, st.sampled_from(["", " ", "  "]))
def test_allows_matches_the_reference(parts: list[tuple[str, Triple, int]], version: Triple, spaces: str) -> None:
    text = ",".join(render(op, written, n, spaces) for op, written, n in parts)
    expected = all(reference(op, written, n, version) for op, written, n in parts)
    assert parse_constraint(text).allows(".".join(map(str, version))) is expected


@given(st.lists(clauses, min_size=1, max_size=3), st.lists(triples, max_size=8))
def test_pick_latest_is_the_maximum_of_the_allowed(
    parts: list[tuple[str, Triple, int]], versions: list[Triple]
) -> None:
    text = ", ".join(render(op, written, n, " ") for op, written, n in parts)
    allowed = [v for v in versions if all(reference(op, w, n, v) for op, w, n in parts)]
    picked = pick_latest(parse_constraint(text), [".".join(map(str, v)) for v in versions])
    assert picked == (".".join(map(str, max(allowed))) if allowed else None)


@given(st.lists(clauses, min_size=1, max_size=3), triples, st.sampled_from(["beta1", "rc.2", "alpha"]))
def test_prereleases_match_only_an_exact_clause(
    parts: list[tuple[str, Triple, int]], version: Triple, pre: str
) -> None:
    text = ", ".join(render(op, written, n, " ") for op, written, n in parts)
    prerelease = ".".join(map(str, version)) + "-" + pre
    assert not parse_constraint(text).allows(prerelease)
    expected = all(reference(op, written, n, version, prerelease=True) for op, written, n in parts)
    assert parse_constraint(f"{text}, = {prerelease}").allows(prerelease) is expected


@given(st.text(alphabet="<>=~!,. v0123456789abx-", max_size=20))
def test_parsing_either_succeeds_or_names_the_text(text: str) -> None:
    try:
        parse_constraint(text)
    except InvalidVersionConstraint as error:
        assert "empty version constraint" in str(error) or repr(text.strip()) in str(error)


prereleases = st.sampled_from(["", "alpha", "alpha.1", "beta.2", "beta.11", "rc.1"])


@given(triples, st.integers(min_value=1, max_value=3), prereleases, triples, st.integers(min_value=1, max_value=3),
       prereleases)
def test_every_comparison_is_semver_precedence_never_the_fields(
    a: Triple, a_components: int, a_pre: str, b: Triple, b_components: int, b_pre: str
) -> None:
    """A Version is a tuple underneath: each of the six comparisons (and the hash) must be SemVer's, where `1.2`
    equals `1.2.0` although their fields differ, and a prerelease sorts before its release."""
    from burrito_py.plans.versions import Version

    def parsed(triple: Triple, components: int, pre: str) -> tuple[Version, tuple[int, ...]]:
        numbers = (*triple[:components], *(0,) * (3 - components))
        text = ".".join(map(str, triple[:components])) + (f"-{pre}" if pre else "")
        # The reference: the numbers, then a release above any of its prereleases (SemVer's order of these
        # identifiers is the list's, which `prereleases` samples in order).
        rank = ["alpha", "alpha.1", "beta.2", "beta.11", "rc.1"].index(pre) if pre else 99
        return Version.parse(text), (*numbers, rank)

    (va, ka), (vb, kb) = parsed(a, a_components, a_pre), parsed(b, b_components, b_pre)
    assert (va == vb, va != vb) == (ka == kb, ka != kb)
    assert (va < vb, va <= vb, va > vb, va >= vb) == (ka < kb, ka <= kb, ka > kb, ka >= kb)
    assert max(va, vb) == max(vb, va) == (va if ka >= kb else vb)
    if ka == kb:
        assert hash(va) == hash(vb)


def test_a_version_never_equals_or_orders_against_a_plain_tuple() -> None:
    from burrito_py.plans.versions import Version

    version = Version.parse("1.2")
    assert version == Version.parse("1.2.0") and tuple(version) != tuple(Version.parse("1.2.0"))
    assert version != (1, 2, 0, "", 2)
    for plain in ((1, 3, 0, "", 3), (0, 1)):
        with pytest.raises(TypeError):
            _ = version < plain
        with pytest.raises(TypeError):
            _ = plain > version  # the reflected side is Version's too
