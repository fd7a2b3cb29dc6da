"""JSON Schema to GBNF with bounds: integer ranges, string lengths and item counts as bounded repetitions.

llama-cpp-python's converter nests `maxLength: n` as n parentheses deep (llama.cpp's grammar parser recurses on each:
a SIGSEGV at 100,000) and has no integer bounds. This one subclasses it for those cases: a repetition is `x{m,n}`
(llama.cpp expands one rule per repetition and refuses a count over 2,000, so a longer one is built from blocks of
about sqrt(n)), an integer range is digit-range alternatives (llama.cpp's `build_min_max_int`), a number range
is decimal digit-string comparisons, and an integer multipleOf a remainder automaton (schema_multiple.py). The size
of every bound is checked before the grammar is built (`check_bounds`), so llama.cpp never sees a grammar beyond
GRAMMAR_UNITS.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from hypnos.errors import invalid_request

from hypnos_llama.schema_multiple import multiple_empty, multiple_of, multiple_rule, multiple_units

# llama.cpp's MAX_REPETITION_THRESHOLD: one `x{m,n}` may count at most this many (a larger max is read as no max)
REPEAT_LIMIT = 2000
# The largest length or item count a schema may bound (blocks of sqrt: 1000 x 1000)
MAX_BOUND = 1_000_000
# Rules and elements llama.cpp expands from all the repetitions of one grammar, at most
GRAMMAR_UNITS = 60_000
# A regex `pattern` quantifier is nested by the converter: bounded tighter
PATTERN_REPEAT_LIMIT = 100
BOUND_KEYS = ("minLength", "maxLength", "minItems", "maxItems")
NUMBER_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# Keywords that describe a value without constraining it ({} itself stays an object: json_object mode's schema)
ANNOTATIONS = frozenset({"description", "title", "examples", "default", "$comment", "deprecated", "readOnly"})
# A character of a JSON string (llama-cpp-python's converter lets raw control characters through)
CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'
QUANTIFIER = re.compile(r"\{(\d+)(?:,(\d*))?\}")


def repeat_units(low: int, high: int | None) -> int:
    """Rules and elements llama.cpp expands for `x{low,high}` written by `Repeater.repeat` (an estimate that never
    undercounts)."""
    top = max(low, high or 0)
    if top <= REPEAT_LIMIT:
        return top + 1
    return 4 * (math.isqrt(top) + 1) + 2


def check_bounds(schema: Any, path: str, spent: int = 0) -> int:
    """400 naming the first bound of `schema` that is malformed, beyond MAX_BOUND, or pushes the request's grammar
    past GRAMMAR_UNITS with the `spent` units of its other schemas (walked before any grammar is built); the units
    spent with this schema's."""
    total = [spent]

    def walk(node: Any, where: str) -> None:
        if isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, f"{where}[{index}]")
            return
        if not isinstance(node, dict):
            return
        for low_key, high_key in (("minLength", "maxLength"), ("minItems", "maxItems")):
            low, high = node.get(low_key, 0), node.get(high_key)
            for key, value in ((low_key, low), (high_key, high)):
                if value is None or key not in node:
                    continue
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise invalid_request(f"`{where}.{key}` must be a non-negative integer")
                if value > MAX_BOUND:
                    raise invalid_request(f"`{where}.{key}` is {value}; a grammar enforces at most {MAX_BOUND:,}")
            if high is not None and low > high:
                raise invalid_request(f"`{where}.{low_key}` is above `{where}.{high_key}`")
            if low_key in node or high_key in node:
                total[0] += repeat_units(low, high)
                if total[0] > GRAMMAR_UNITS:
                    key = high_key if high_key in node else low_key
                    raise invalid_request(
                        f"`{where}.{key}` makes the schema's grammar too large (over {GRAMMAR_UNITS:,} rules in all)"
                    )
        for key in NUMBER_KEYS:
            value = node.get(key)
            if key in node and (
                isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            ):
                raise invalid_request(f"`{where}.{key}` must be a finite number")
        if any(key in node for key in NUMBER_KEYS) and node.get("type") in ("integer", "number"):
            _check_range(node, where)
        if multiple_of(node) is not None:
            bounds = integer_bounds(node)
            if multiple_empty(node, bounds):
                raise invalid_request(f"`{where}`: no multiple of its multipleOf lies within its minimum and maximum")
            total[0] += multiple_units(node, bounds) or 0
            if total[0] > GRAMMAR_UNITS:
                raise invalid_request(f"`{where}.multipleOf` makes the schema's grammar too large")
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            for match in QUANTIFIER.finditer(pattern):
                counts = [int(group) for group in match.groups() if group]
                if max(counts, default=0) > PATTERN_REPEAT_LIMIT:
                    raise invalid_request(
                        f"`{where}.pattern` repeats {match.group(0)}; a grammar enforces at most "
                        f"{{{PATTERN_REPEAT_LIMIT}}} in a pattern (use minLength/maxLength)"
                    )
        for key, value in node.items():
            if key in ("enum", "const", "default", "examples", *BOUND_KEYS, *NUMBER_KEYS):
                continue
            if isinstance(value, dict | list):
                walk(value, f"{where}.{key}")

    walk(schema, path)
    return total[0]


def _check_range(node: dict[str, Any], where: str) -> None:
    """400 when a number's bounds leave nothing, or have too many digits to write as a grammar."""
    if not fraction_digits_ok(node):
        raise invalid_request(f"`{where}` has a bound with more than 20 digits after the point")
    if node["type"] == "integer":
        low, high = integer_bounds(node)
        empty = low is not None and high is not None and low > high
    else:
        empty = number_range(node) is None
    if empty:
        raise invalid_request(f"`{where}`: no {node['type']} lies within its minimum and maximum")


def _repeat_text(item: str, low: int, high: int | None) -> str:
    """`item` low to high times in GBNF (both within REPEAT_LIMIT); "" for zero times."""
    if high == 0:
        return ""
    if high is None:
        return f"{item}*" if low == 0 else f"{item}+" if low == 1 else f"{item}{{{low},}}"
    if low == high:
        return item if low == 1 else f"{item}{{{low}}}"
    if (low, high) == (0, 1):
        return f"{item}?"
    return f"{item}{{{low},{high}}}"


def integer_range(low: int | None, high: int | None) -> str:
    """GBNF for the decimal integers within [low, high] (None: unbounded on that side), no leading zeros."""
    if low is None and high is None:
        return '"-"? ([0] | [1-9] [0-9]{0,15})'
    if low is not None and high is not None:
        if high < 0:
            return f'"-" ({integer_range(-high, -low)})'
        if low < 0:
            return f'"-" ({_natural_range(1, -low)}) | {_natural_range(0, high)}'
        return _natural_range(low, high)
    if low is not None:
        if low < 0:
            return f'"-" ({_natural_range(1, -low)}) | [0] | [1-9] [0-9]{{0,15}}'
        return _natural_at_least(low)
    assert high is not None
    if high < 0:
        return f'"-" ({_natural_at_least(-high)})'
    return f'"-" [1-9] [0-9]{{0,15}} | {_natural_range(0, high)}'


def _natural_at_least(low: int) -> str:
    """Naturals >= low: the same number of digits and at least low, or more digits (up to 16)."""
    digits = str(low)
    alternatives = [_same_length_range(digits, "9" * len(digits))]
    if len(digits) < 16:
        alternatives.append(f"[1-9] [0-9]{{{len(digits)},15}}")
    return " | ".join(alternatives)


def _natural_range(low: int, high: int) -> str:
    """Naturals in [low, high] (0 <= low <= high)."""
    alternatives = []
    start = str(low)
    for length in range(len(start), len(str(high)) + 1):
        top = str(high) if length == len(str(high)) else "9" * length
        alternatives.append(_same_length_range(start, top))
        start = "1" + "0" * length
    return " | ".join(alternatives)


def _same_length_range(low: str, high: str) -> str:
    """Digit strings of one length between low and high (inclusive). A tail free to take any digits is one
    `[0-9]{n}`, so the rule grows with the square of the length (Claude Code's integers up to 2^53 - 1: 16 digits)."""
    if low == high:
        return f'"{low}"'
    common = 0
    while low[common] == high[common]:
        common += 1
    prefix = f'"{low[:common]}" ' if common else ""
    rest = len(low) - common - 1
    lo_digit, hi_digit = int(low[common]), int(high[common])
    if rest == 0:
        return f"{prefix}[{lo_digit}-{hi_digit}]"
    tail_low, tail_high = low[common + 1 :], high[common + 1 :]
    low_free, high_free = tail_low == "0" * rest, tail_high == "9" * rest
    alternatives = [] if low_free else [f'"{lo_digit}" ({_same_length_range(tail_low, "9" * rest)})']
    middle = (lo_digit if low_free else lo_digit + 1, hi_digit if high_free else hi_digit - 1)
    if middle[0] <= middle[1]:
        alternatives.append(f"[{middle[0]}-{middle[1]}] [0-9]{{{rest}}}")
    if not high_free:
        alternatives.append(f'"{hi_digit}" ({_same_length_range("0" * rest, tail_high)})')
    return f"{prefix}({' | '.join(alternatives)})"


def integer_bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    """The integer range a schema's minimum / maximum / exclusive* allow (None: unbounded; a bound past 16 digits,
    which the unbounded integer rule never reaches, counts as none)."""
    far = 10**16
    lows = [math.ceil(Decimal(str(schema["minimum"])))] if "minimum" in schema else []
    if "exclusiveMinimum" in schema:
        lows.append(math.floor(Decimal(str(schema["exclusiveMinimum"]))) + 1)
    highs = [math.floor(Decimal(str(schema["maximum"])))] if "maximum" in schema else []
    if "exclusiveMaximum" in schema:
        highs.append(math.ceil(Decimal(str(schema["exclusiveMaximum"]))) - 1)
    low = max(lows) if lows and max(lows) > -far else None
    high = min(highs) if highs and min(highs) < far else None
    return low, high


def _fraction(low: str, low_strict: bool, high: str | None, high_strict: bool) -> tuple[str | None, bool]:
    """Fraction digit strings D (the digits after a point, trailing zeros stripped from the bounds) with
    0.low <(=) 0.D <(=) 0.high (high None: below 1): GBNF of the non-empty ones (None: none), and whether the empty
    one (a whole number) is allowed."""
    if high == "":
        zero_ok = low == "" and not low_strict and not high_strict
        return ("[0]+" if zero_ok else None), zero_ok
    empty_ok = low == "" and not low_strict
    if low == "" and high is None:
        return ("[0]* [1-9] [0-9]*" if low_strict else "[0-9]+"), empty_ok
    low_digit = int(low[0]) if low else 0
    high_digit = int(high[0]) if high else 10
    alternatives = []
    if low_digit + 1 <= min(high_digit - 1, 9):
        alternatives.append(f"[{low_digit + 1}-{min(high_digit - 1, 9)}] [0-9]*")
    if low_digit <= min(high_digit, 9):
        sub_high = high[1:] if high is not None and low_digit == high_digit else None
        alternatives.append(_then(str(low_digit), *_fraction(low[1:], low_strict, sub_high, high_strict)))
    if low_digit < high_digit <= 9:
        assert high is not None
        alternatives.append(_then(str(high_digit), *_fraction("", False, high[1:], high_strict)))
    found = [alternative for alternative in alternatives if alternative]
    return (" | ".join(found) if found else None), empty_ok


def _then(digit: str, rest: str | None, rest_empty: bool) -> str:
    """`digit` followed by the rest's digit strings ("" when there are none)."""
    if rest is None:
        return f'"{digit}"' if rest_empty else ""
    return f'"{digit}" ({rest})?' if rest_empty else f'"{digit}" ({rest})'


def _split(value: Decimal) -> tuple[int, str]:
    """A non-negative decimal's integer part and fraction digits (trailing zeros stripped)."""
    whole, _, fraction = format(value, "f").partition(".")
    return int(whole), fraction.rstrip("0")


def _magnitude(low: Decimal, low_strict: bool, high: Decimal | None, high_strict: bool) -> list[str]:
    """GBNF alternatives for unsigned decimals (no exponent) within the bounds (0 <= low)."""
    low_int, low_fraction = _split(low)
    high_int, high_fraction = _split(high) if high is not None else (None, None)

    def tail(lo: str, lo_strict: bool, hi: str | None, hi_strict: bool) -> str | None:
        rest, empty_ok = _fraction(lo, lo_strict, hi, hi_strict)
        if rest is None:
            return "" if empty_ok else None
        return f'("." ({rest}))?' if empty_ok else f'"." ({rest})'

    alternatives = []
    if high_int is not None and low_int == high_int:
        part = tail(low_fraction, low_strict, high_fraction, high_strict)
        return [] if part is None else [f'"{low_int}" {part}'.strip()]
    part = tail(low_fraction, low_strict, None, False)
    if part is not None:
        alternatives.append(f'"{low_int}" {part}'.strip())
    if high_int is None:
        alternatives.append(f'({_natural_at_least(low_int + 1)}) ("." [0-9]+)?')
        return alternatives
    if high_int - low_int >= 2:
        alternatives.append(f'({_natural_range(low_int + 1, high_int - 1)}) ("." [0-9]+)?')
    part = tail("", False, high_fraction, high_strict)
    if part is not None:
        alternatives.append(f'"{high_int}" {part}'.strip())
    return alternatives


def number_range(schema: dict[str, Any]) -> str | None:
    """GBNF for the JSON numbers (no exponent) a schema's minimum / maximum / exclusive* allow; None when the range
    is empty."""
    far = Decimal(10) ** 16  # beyond what the unbounded number rule writes (16 integer digits): no bound
    low = high = None
    low_strict = high_strict = False
    for key, strict in (("minimum", False), ("exclusiveMinimum", True)):
        if key in schema and abs(value := Decimal(str(schema[key]))) < far and (low is None or value >= low):
            low, low_strict = value, strict or (low == value and low_strict)
    for key, strict in (("maximum", False), ("exclusiveMaximum", True)):
        if key in schema and abs(value := Decimal(str(schema[key]))) < far and (high is None or value <= high):
            high, high_strict = value, strict or (high == value and high_strict)
    alternatives = []
    if low is None or low < 0:  # negatives: "-" and a magnitude above 0
        top = None if low is None else -low
        if high is not None and high < 0:
            alternatives += [f'"-" ({m})' for m in _magnitude(-high, high_strict, top, low_strict)]
        else:
            alternatives += [f'"-" ({m})' for m in _magnitude(Decimal(0), True, top, low_strict)]
    if high is None or high > 0 or (high == 0 and not high_strict):
        bottom, strict = (Decimal(0), False) if low is None or low < 0 else (low, low_strict)
        alternatives += _magnitude(bottom, strict, high, high_strict)
    return " | ".join(f"({alternative})" for alternative in alternatives) or None


def fraction_digits_ok(schema: dict[str, Any]) -> bool:
    """True when every number bound has at most 20 digits after the point (a grammar of its digits stays small)."""
    for key in NUMBER_KEYS:
        if key in schema:
            try:
                _, fraction = _split(abs(Decimal(str(schema[key]))))
            except (InvalidOperation, ValueError):
                return False
            if len(fraction) > 20:
                return False
    return True


def bounded_converter() -> Any:
    """llama-cpp-python's SchemaConverter with bounded repetitions and integer / number ranges."""
    from llama_cpp.llama_grammar import PRIMITIVE_RULES, RESERVED_NAMES, SchemaConverter

    class BoundedConverter(SchemaConverter):
        def __init__(self) -> None:
            super().__init__(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
            self._rules["char"] = CHAR  # JSON's: no raw control characters in a string

        def visit(self, schema: Any, name: str) -> str:
            if isinstance(schema, dict) and schema and all(key in ANNOTATIONS for key in schema):
                # only words about the value (Claude Code's Workflow `args`): any JSON value, as JSON Schema says
                rule_name = name + "-" if name in RESERVED_NAMES else name or "root"
                return self._add_rule(rule_name, self._add_primitive("value", PRIMITIVE_RULES["value"]))
            if not isinstance(schema, dict) or any(
                key in schema for key in ("$ref", "anyOf", "oneOf", "const", "enum")
            ):
                return super().visit(schema, name)
            kind = schema.get("type")
            rule_name = name + "-" if name in RESERVED_NAMES else name or "root"
            if kind == "string" and "pattern" not in schema and "format" not in schema and _has(schema, "Length"):
                body = self.repeat("char", schema.get("minLength", 0), schema.get("maxLength"))
                return self._add_rule(rule_name, rf'"\"" {body} "\"" space')
            items = schema.get("items")
            if kind in (None, "array") and isinstance(items, dict) and _has(schema, "Items"):
                item = self.visit(items, f"{name}{'-' if name else ''}item")
                body = self.separated(item, schema.get("minItems", 0), schema.get("maxItems"), rule_name)
                return self._add_rule(rule_name, f'"[" space {body} "]" space')
            if kind == "integer" and multiple_units(schema, bounds := integer_bounds(schema)) is not None:
                return self._add_rule(rule_name, f"({multiple_rule(self, schema, bounds, rule_name)}) space")
            if kind == "integer" and any(key in schema for key in NUMBER_KEYS):
                return self._add_rule(rule_name, f"({integer_range(*integer_bounds(schema))}) space")
            if kind == "number" and any(key in schema for key in NUMBER_KEYS):
                return self._add_rule(rule_name, f"({number_range(schema)}) space")
            return super().visit(schema, name)

        def repeat(self, item: str, low: int, high: int | None) -> str:
            """`item` low to high times; past REPEAT_LIMIT, blocks of about sqrt(high) items repeated."""
            top = max(low, high or 0)
            if top <= REPEAT_LIMIT:
                return _repeat_text(item, low, high)
            size = math.isqrt(top - 1) + 1
            block = self._add_rule(f"{item}-x{size}", _repeat_text(item, size, size))
            whole, rest = divmod(low, size)
            parts = [_repeat_text(block, whole, whole), _repeat_text(item, rest, rest)]
            if high is None:
                parts.append(f"{item}*")
            else:
                count, last = divmod(high - low, size)
                if count == 0:
                    parts.append(_repeat_text(item, 0, last))
                else:  # fewer than `count` more blocks and a partial one, or exactly `count` and at most `last`
                    under = _join(_repeat_text(block, 0, count - 1), _repeat_text(item, 0, size - 1))
                    full = _join(_repeat_text(block, count, count), _repeat_text(item, 0, last))
                    parts.append(f"({under} | {full})")
            return _join(*parts)

        def separated(self, item: str, low: int, high: int | None, name: str) -> str:
            """`item` low to high times with "," between (an empty string when high is 0)."""
            if high == 0:
                return ""
            more = self._add_rule(f"{name}-more", f'"," space {item}')
            body = _join(item, self.repeat(more, max(low - 1, 0), None if high is None else high - 1))
            return body if low > 0 else f"({body})?"

    return BoundedConverter()


def _has(schema: dict[str, Any], suffix: str) -> bool:
    return f"min{suffix}" in schema or f"max{suffix}" in schema


def _join(*parts: str) -> str:
    return " ".join(part for part in parts if part)
