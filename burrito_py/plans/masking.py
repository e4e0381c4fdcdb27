"""Masked views of a plan (pure): nothing that came from a Secret, nothing Terraform marks sensitive.

Terraform masks only what is *marked* sensitive (a variable declared `sensitive`, a provider's sensitive
attribute, what derives from them). A value read from a Secret into an ordinary variable is not marked: it shows
in `variables`, in every resource attribute it flows into, in the prior state and in outputs, in the JSON and in
the text. So a masked view takes the names of the variables whose value came from a Secret (the run inputs
record's `secretVariables`, written by the controllers), the upstream outputs passed in as sensitive
(`sensitive`), and the variables the configuration declares sensitive, gathers their values (from the inputs
record and from the plan's own `variables`), and replaces every occurrence of them by `MASK`:

- the masked JSON document is built from what the plan model keeps (an allow-list: format and Terraform
  versions, resource changes and drift with Terraform's sensitive markers applied, output changes without
  values, errored, applyable) plus `variables` (a Secret-fed or sensitive one: `MASK`); the prior state, planned
  values and configuration (which holds variable defaults) are never part of it. Then every string (and map key)
  that contains one of the values has it replaced;
- text (the pretty plan, the one-line summary, logs) has every occurrence replaced.

A value of fewer than `MIN_SUBSTRING` characters is replaced only where it is a whole JSON value or a quoted
string in the text (`"on"`): replacing every "1" or "on" of a plan would make it unreadable for a value that
keeps no secret (a few characters are guessed at once).

Each value to hide costs a scan of every text a view masks, and the plan JSON, which names what the sensitive
variables hold, is written by the runner, i.e. by tenant code. Past `MAX_HIDDEN_VALUES` values (or
`MAX_HIDDEN_CHARS` characters of them) a view would cost minutes of the shared server's or controllers' CPU, so
it hides everything instead (`SecretValues.overflow`): every string and number of a document is `MASK`, every
text `OVERFLOW_TEXT`. Nothing leaks, nothing is slow; such a run's views are not readable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from burrito_py.plans.attributes import AttributeChange
from burrito_py.plans.model import MASK, PlanFormatError, PlanModel, parse_plan

MIN_SUBSTRING = 4
# Far above what a layer's secrets make (a PEM key is some 30 forms), far below what would stall a view: each value
# is a scan of up to 32 MiB of log, about 20 ms.
MAX_HIDDEN_VALUES = 256
MAX_HIDDEN_CHARS = 1024 * 1024
OVERFLOW_TEXT = f"{MASK} (not shown: more than {MAX_HIDDEN_VALUES} secret or sensitive values to mask)"
_MAX_PASSES = 4  # a replacement next to other text can form another value; a few passes settle it


@dataclass(frozen=True, slots=True)
class SecretValues:
    """The values to hide: `long` are replaced wherever they occur, `short` only as whole values."""

    long: tuple[str, ...] = ()
    short: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()  # the variables they came from
    # More values than a view masks in bounded time (MAX_HIDDEN_VALUES): `long` and `short` are then empty, and a
    # view hides everything.
    overflow: bool = False

    @property
    def empty(self) -> bool:
        return not self.long and not self.short and not self.names and not self.overflow

    def merge(self, other: SecretValues) -> SecretValues:
        if self.overflow or other.overflow:
            return SecretValues(names=self.names | other.names, overflow=True)
        return secret_values([*self.long, *self.short, *other.long, *other.short], self.names | other.names)


def _leaves(value: Any) -> Iterable[str]:
    """The scalar values inside a variable's value, as text (a number as JSON writes it)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return  # true/false/null hide nothing
    elif isinstance(value, int | float):
        yield json.dumps(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)


def secret_values(values: Iterable[Any], names: Iterable[str] = ()) -> SecretValues:
    """Normalise: non-empty texts, longest first (so a value containing another is replaced whole). Texts that
    are part of `MASK` itself cannot be told apart from it once masked and are only masked as whole values."""
    texts = {text for value in values for text in _leaves(value) if text}
    escaped = {json.dumps(t)[1:-1] for t in texts} - texts  # as JSON strings and Terraform's text quote them
    lines = {line.strip() for t in texts if "\n" in t for line in t.splitlines()}  # heredocs show line by line
    candidates = texts | escaped | {line for line in lines if line}
    if len(candidates) > MAX_HIDDEN_VALUES or sum(map(len, candidates)) > MAX_HIDDEN_CHARS:
        return SecretValues(names=frozenset(names), overflow=True)
    long = sorted((t for t in candidates if len(t) >= MIN_SUBSTRING and t not in MASK), key=lambda t: (-len(t), t))
    short = frozenset(t for t in candidates if len(t) < MIN_SUBSTRING or t in MASK)
    return SecretValues(tuple(long), short, frozenset(names))


def _declared_sensitive(plan: Mapping[str, Any]) -> set[str]:
    configuration = plan.get("configuration")
    root = configuration.get("root_module") if isinstance(configuration, Mapping) else None
    variables = root.get("variables") if isinstance(root, Mapping) else None
    if not isinstance(variables, Mapping):
        return set()
    return {str(name) for name, v in variables.items() if isinstance(v, Mapping) and v.get("sensitive") is True}


def _variables(plan: Mapping[str, Any]) -> Mapping[str, Any]:
    variables = plan.get("variables")
    return variables if isinstance(variables, Mapping) else {}


def inputs_secret_names(record: Mapping[str, Any] | None) -> set[str]:
    """`secretVariables` (values from Secrets) and `sensitive` (sensitive upstream outputs) of an inputs record;
    a key absent means no names."""
    if not record:
        return set()
    names: set[str] = set()
    for key in ("secretVariables", "sensitive"):
        listed = record.get(key)
        if isinstance(listed, list):
            names.update(str(n) for n in listed if isinstance(n, str))
    return names


def values_to_hide(record: Mapping[str, Any] | None, plan: Mapping[str, Any] | None,
                   env_secrets: Iterable[str] = ()) -> SecretValues:
    """What a masked view of this run hides: the values of the record's secret and sensitive variables, of those
    its pods got from a Secret through the environment (`env_secrets`, `run_secret_variables`) and of the
    variables the plan's configuration declares sensitive, taken from the record and from the plan."""
    names = inputs_secret_names(record) | {str(n) for n in env_secrets}
    if plan is not None:
        names |= _declared_sensitive(plan)
    found: list[Any] = []
    record_vars = record.get("variables") if record else None
    if isinstance(record_vars, Mapping):
        found += [record_vars[n] for n in names if n in record_vars]
    if plan is not None:
        plan_vars = _variables(plan)
        found += [v.get("value") for n in names if isinstance(v := plan_vars.get(n), Mapping)]
    return secret_values(found, names)


def run_secret_variables(run: Mapping[str, Any]) -> list[str]:
    """The variables a run's pods got from a Secret through the environment (its attempts' `secretVariables`)."""
    attempts = (run.get("status") or {}).get("attempts") or ()
    return sorted({str(n) for a in attempts if isinstance(a, Mapping) for n in a.get("secretVariables") or ()})


def scrub_text(text: str, hide: SecretValues) -> str:
    if hide.overflow:
        return OVERFLOW_TEXT if text else text
    for _ in range(_MAX_PASSES):
        before = text
        for value in hide.long:
            if value in text:
                text = text.replace(value, MASK)
        for value in hide.short:
            quoted = f'"{value}"'
            if quoted in text:
                text = text.replace(quoted, f'"{MASK}"')
        if text == before:
            break
    return text


def scrub(value: Any, hide: SecretValues) -> Any:
    """A JSON-like value with every hidden value replaced: inside strings and keys, and whole numbers equal to one.
    With `overflow`, every string and number (keys too)."""
    if hide.overflow and isinstance(value, str | int | float) and not isinstance(value, bool):
        return MASK
    if isinstance(value, str):
        return MASK if value in hide.short else scrub_text(value, hide)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        text = json.dumps(value)
        return MASK if text in hide.short or text in hide.long else value
    if isinstance(value, Mapping):
        return {scrub(str(k), hide): scrub(v, hide) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(item, hide) for item in value]
    return value


def _scrub_field(value: Any, hide: SecretValues) -> Any:
    if isinstance(value, AttributeChange):  # its path (a map key can be a value) and both values
        return replace(value, steps=tuple(scrub(step, hide) if isinstance(step, str) else step for step in value.steps),
                       before=scrub(value.before, hide), after=scrub(value.after, hide))
    if isinstance(value, tuple):
        return tuple(_scrub_field(item, hide) for item in value)
    return scrub(value, hide)


def masked_model(model: PlanModel, hide: SecretValues) -> PlanModel:
    """The model (already masked where Terraform marks values sensitive) with the hidden values replaced in every
    resource change's text: addresses (a for_each key can be a value), attributes (the values and the attribute
    diff's paths and values), reasons."""
    if hide.empty:
        return model

    def change(rc: Any) -> Any:
        return replace(rc, **{f.name: _scrub_field(getattr(rc, f.name), hide) for f in fields(rc)})

    outputs = tuple(replace(o, name=scrub_text(o.name, hide)) for o in model.output_changes)
    return replace(model, resource_changes=tuple(change(rc) for rc in model.resource_changes),
                   resource_drift=tuple(change(rc) for rc in model.resource_drift), output_changes=outputs)


def masked_document(plan: Mapping[str, Any], hide: SecretValues) -> dict[str, Any]:
    """The masked JSON view of a `show -json` document (see the module's docstring). Raises PlanFormatError, and
    with `overflow` at once (every string masked, not even its keys would be readable)."""
    if hide.overflow:
        raise PlanFormatError(f"(document): {OVERFLOW_TEXT}")
    model = parse_plan(plan)
    document = model.policy_input()
    sensitive = hide.names | _declared_sensitive(plan)
    variables: dict[str, Any] = {}
    for name, variable in _variables(plan).items():
        value = variable.get("value") if isinstance(variable, Mapping) else None
        variables[str(name)] = {"value": MASK if name in sensitive else value}
    document["variables"] = variables
    result: dict[str, Any] = scrub(document, hide)
    return result


def load_json(data: bytes) -> Mapping[str, Any] | None:
    """A plan JSON document, or None when it is not one (its masked views then cannot be built)."""
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, Mapping) else None

