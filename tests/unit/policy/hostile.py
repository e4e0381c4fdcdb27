"""Rules a hostile tenant user writes into a TerraformPlanPolicy of their namespace (finding 5 of issue 24): each
is valid CEL or Rego that the engines accept, and each would hold the controllers' evaluation for minutes, or
take gigabytes, or read what the controllers' process holds."""

from __future__ import annotations

from typing import Any

_TEN = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
# Eight nested `.all` over ten elements: 10^8 steps, about 400 s of cel-rust, holding the GIL all along.
WORST_CEL = "".join(f"{_TEN}.all(v{i}, " for i in range(8)) + "v0 + v7 >= 0" + ")" * 8

# Three nested iterations over 2,000 numbers: 8·10^9 steps of rego-cpp.
LOOPING_REGO = """package hostile.loop
import rego.v1
n := numbers.range(1, 2000)
deny contains "never" if {
  some a in n
  some b in n
  some c in n
  a + b + c < 0
}
"""

# A 16-character string doubled 30 times: 16 GiB, reached in a fraction of a second.
CEL_MEMORY_BOMB = "['xxxxxxxxxxxxxxxx']" + ".map(s, s + s)" * 30 + ".size() > 0"
REGO_MEMORY_BOMB = "package hostile.bomb\nimport rego.v1\na0 := \"xxxxxxxxxxxxxxxx\"\n" + "".join(
    f'a{i + 1} := concat("", [a{i}, a{i}])\n' for i in range(30)) + 'deny contains "big" if { count(a30) > 0 }\n'

# Rego's opa.runtime() is the environment of the process evaluating it; a denial's message carries it out
# (into the review stored beside the plan, which the layer's readers may read).
ENV_PROBE = "BURRITO_PY_TEST_PROBE_SECRET"
ENV_PROBE_REGO = f"""package hostile.env
import rego.v1
deny contains msg if {{
  value := opa.runtime().env["{ENV_PROBE}"]
  msg := concat(" ", ["found", value])
}}
"""


def worst_rules() -> list[dict[str, Any]]:
    """The worst rules a tenant may write today: the CEL comprehension and the Rego loop."""
    return [{"name": "worst-cel", "cel": {"expression": WORST_CEL, "scope": "plan"}},
            {"name": "worst-rego", "rego": {"module": LOOPING_REGO}}]
