"""Which evaluator options a tenant may send through the gateway.

Options reach an evaluator's factory as keyword arguments, and some factories take local paths
(``clip``'s ``pretrained``, ``hf-clip``'s ``path``, ``aesthetic``'s ``head``): trusted code may
name them, a tenant may not (its spec is data, never a path). So the gateway admits options only
for evaluators whose options are plain data, listed here, and follows ``composite`` and
``ensemble`` into their parts, whose names must be evaluators the tenant may use.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from genloop.sdk.errors import Permanent

from .weights import check_weights, finite_number

#: Evaluator name -> the options a tenant may give it (every one is data, never a path). A name
#: not listed takes none from a tenant: ``vlm-judge``'s server and key stay the operator's.
TENANT_OPTIONS: dict[str, frozenset[str]] = {
    "brand-palette": frozenset({"palette", "max_distance"}),
    "composite": frozenset({"weights", "options"}),
    "ensemble": frozenset({"weights", "bias", "options"}),
}
#: Evaluators made of other evaluators named in ``weights``, each with its own ``options``.
_COMBINERS = ("composite", "ensemble")
#: Most colours a tenant's brand palette may hold: a palette's cost grows with its length (every
#: dominant colour of every image is compared with each), and real brand palettes hold a handful.
MAX_PALETTE = 32


#: A problem: the path of the option at fault (from the spec's root) and what is wrong there.
Problem = tuple[str, str]


def tenant_option_problems(name: str | None, options: Mapping[str, Any] | None,
                           allowed: Collection[str], where: str = "options") -> list[Problem]:
    """What is wrong with a tenant giving ``options`` (at path ``where``) to evaluator
    ``name``; ``allowed`` are the evaluators the tenant may name."""
    if not options:
        return []
    if name is None:
        return [(where, "name the evaluator these options are for")]
    takes = TENANT_OPTIONS.get(name)
    if takes is None:
        return [(where, f"evaluator {name!r} takes no options from a tenant (those that do: "
                 f"{', '.join(sorted(TENANT_OPTIONS))})")]
    problems = [(f"{where}.{key}", f"{name!r} takes no such option (it takes "
                 f"{', '.join(sorted(takes))})") for key in sorted(set(options) - takes)]
    if name in _COMBINERS:
        problems += _parts_problems(name, options, allowed, where)
    if name == "brand-palette":
        palette = options.get("palette")
        if not isinstance(palette, list) or not all(isinstance(c, str) for c in palette):
            problems.append((f"{where}.palette", "give the brand's colours as a list of "
                             "strings ('#e4002b', 'rgb(10, 20, 30)', a CSS name)"))
        elif not 1 <= len(palette) <= MAX_PALETTE:
            problems.append((f"{where}.palette", f"{len(palette)} colours; 1 to {MAX_PALETTE} "
                             "allowed"))
    return problems


def _parts_problems(name: str, options: Mapping[str, Any], allowed: Collection[str],
                    where: str) -> list[Problem]:
    weights, parts = options.get("weights"), options.get("options") or {}
    if not isinstance(weights, Mapping) or not isinstance(parts, Mapping):
        return [(where, f"{name} takes weights={{name: weight}} and options={{name: {{...}}}}")]
    problems = [(f"{where}.weights.{part}", f"unknown evaluator {part!r}; allowed: "
                 f"{', '.join(sorted(allowed))}")
                for part in weights if part not in allowed or part in _COMBINERS]
    bias = options.get("bias", 0.0) if name == "ensemble" else 0.0  # a composite has none
    try:
        check_weights(name, weights, count=len(weights), bias=bias)
    except Permanent as exc:
        problems.append((f"{where}.{'weights' if finite_number(bias) else 'bias'}", str(exc)))
    for part, part_options in parts.items():
        if not isinstance(part_options, Mapping):
            problems.append((f"{where}.options.{part}", "give the options as a mapping"))
        else:
            problems += tenant_option_problems(str(part), part_options, allowed,
                                               f"{where}.options.{part}")
    return problems
