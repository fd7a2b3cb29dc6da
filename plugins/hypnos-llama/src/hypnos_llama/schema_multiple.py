"""JSON Schema `multipleOf` on integers as GBNF: the few multiples a bounded range holds listed, else the multiples of
k written digit by digit (an automaton over (remainder, digits written): each digit moves remainder r to
(10r + d) mod k, a number ends only at remainder 0, and has at most DIGITS digits like the unbounded integer rule;
a state is only entered when remainder 0 is still within reach, so the model is never stuck).

Enforced: a whole `multipleOf` k >= 1 on an integer that is unbounded, >= 0 or >= 1 (k <= MAX_MODULUS), or bounded
on both sides with at most MAX_LISTED multiples between. Anything else (a fraction, a number, other bounds) is a 400
under `strict` and a hint otherwise (hypnos_llama.grammar).
"""

from __future__ import annotations

import math
from typing import Any

MAX_MODULUS = 100  # remainders of the automaton: up to DIGITS * k rules of up to 11 alternatives
MAX_LISTED = 256  # multiples of a bounded range written out
DIGITS = 16  # the most digits a number has (the unbounded integer rule's)


def multiple_of(schema: dict[str, Any]) -> int | None:
    """The whole k >= 1 of an integer schema's multipleOf; None when there is none or it is not a whole number."""
    value = schema.get("multipleOf")
    if schema.get("type") != "integer" or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 1 or value != int(value):
        return None
    return int(value)


def _listed(k: int, low: int | None, high: int | None) -> range | None:
    """The multiples of k in [low, high] when both bounds are set and few enough to list."""
    if low is None or high is None:
        return None
    values = range(-(-low // k) * k, high + 1, k)
    return values if len(values) <= MAX_LISTED else None


def multiple_units(schema: dict[str, Any], bounds: tuple[int | None, int | None]) -> int | None:
    """Grammar units the integer multipleOf of `schema` takes within its `bounds` (integer_bounds); None when a
    grammar cannot hold it (the keyword is then left unenforced)."""
    k = multiple_of(schema)
    if k is None:
        return None
    low, high = bounds
    listed = _listed(k, low, high)
    if listed is not None:
        return len(listed) + 1
    if high is not None or low not in (None, 0, 1) or k > MAX_MODULUS:
        return None
    return 11 * DIGITS * k


def multiple_empty(schema: dict[str, Any], bounds: tuple[int | None, int | None]) -> bool:
    """True when the bounded range holds no multiple of the schema's k."""
    k = multiple_of(schema)
    listed = None if k is None else _listed(k, *bounds)
    return listed is not None and len(listed) == 0


def multiple_rule(converter: Any, schema: dict[str, Any], bounds: tuple[int | None, int | None], name: str) -> str:
    """The GBNF body (no trailing space) of the integers of `schema` within `bounds` that are multiples of its k
    (call multiple_units first: this assumes a grammar can hold it)."""
    k = multiple_of(schema)
    assert k is not None
    low, high = bounds
    listed = _listed(k, low, high)
    if listed is not None:
        return " | ".join(f'"{value}"' for value in listed)

    reach = _digits_to_zero(k)
    made: set[tuple[int, int]] = set()

    def moves(remainder: int, written: int, digits: range) -> str:
        """Alternatives after `written` digits at `remainder`: a last digit landing on 0, or a digit and the rest."""
        targets: dict[int, list[int]] = {}
        for digit in digits:
            target = (10 * remainder + digit) % k
            if target == 0 or reach[target] <= DIGITS - written - 1:
                targets.setdefault(target, []).append(digit)
        alternatives = [f"[{''.join(map(str, targets[0]))}]"] if 0 in targets else []
        for target, ds in sorted(targets.items()):
            if written + 1 < DIGITS and reach[target] <= DIGITS - written - 1:
                alternatives.append(f"[{''.join(map(str, ds))}] {state(target, written + 1)}")
        return " | ".join(alternatives)

    def state(remainder: int, written: int) -> str:
        rule = f"{name}-m{remainder}-{written}"
        if (remainder, written) not in made:
            made.add((remainder, written))
            converter._add_rule(rule, moves(remainder, written, range(10)))
        return rule

    positive = moves(0, 0, range(1, 10))
    if low is None:
        return f'"0" | "-"? ({positive})'
    return f'"0" | {positive}' if low == 0 else positive


def _digits_to_zero(k: int) -> list[int]:
    """For each remainder, the fewest digits that take it to remainder 0 (a breadth-first search backwards)."""
    reach = [k + 1] * k
    reach[0] = 0
    frontier = [0]
    while frontier:
        following = []
        for target in frontier:
            for remainder in range(k):
                if reach[remainder] > k and any((10 * remainder + d) % k == target for d in range(10)):
                    reach[remainder] = reach[target] + 1
                    following.append(remainder)
        frontier = following
    return reach
