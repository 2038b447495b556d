"""Numeric bounds as GBNF: integer ranges written as digit strings without leading zeros.

Bounds are exact for integers; for numbers they are rounded inward to integers (and exponents
are dropped), which loses some valid values but never admits an invalid one.
"""

from __future__ import annotations

import math

from .gbnf import MAX_INT_DIGITS, SchemaError, group


def _same_length(a: str, b: str) -> str:
    """Decimal strings of as many digits as a and b, between a and b (inclusive)."""
    if a == b:
        return f'"{a}"'
    if a[0] == b[0]:
        return f'"{a[0]}" ' + group(_same_length(a[1:], b[1:]))
    rest = len(a) - 1
    zeros, nines, tail = "0" * rest, "9" * rest, f" [0-9]{{{rest}}}" if rest else ""
    if a[1:] == zeros and b[1:] == nines:
        return f"[{a[0]}-{b[0]}]{tail}"
    alts, first, last = [], int(a[0]), int(b[0])
    if a[1:] != zeros:
        alts.append(f'"{a[0]}" ' + group(_same_length(a[1:], nines)))
        first += 1
    if b[1:] != nines:
        last -= 1
    if first <= last:
        alts.append((f'"{first}"' if first == last else f"[{first}-{last}]") + tail)
    if b[1:] != nines:
        alts.append(f'"{b[0]}" ' + group(_same_length(zeros, b[1:])))
    return " | ".join(alts)


def _uint_range(lo: int, hi: int | None) -> str:
    """Decimal naturals in [lo, hi] without leading zeros; hi None: up to MAX_INT_DIGITS digits."""
    hi = max(lo, 10 ** MAX_INT_DIGITS - 1) if hi is None else hi
    alts, full = [], []
    for n in range(len(str(lo)), len(str(hi)) + 1):
        a, b = max(lo, 10 ** (n - 1) if n > 1 else 0), min(hi, 10 ** n - 1)
        if n > 1 and a == 10 ** (n - 1) and b == 10 ** n - 1:
            full.append(n - 1)  # every n-digit number: merged into one alternative below
        else:
            alts.append(_same_length(str(a), str(b)))
    if full:
        alts.append(f"[1-9] [0-9]{{{full[0]},{full[-1]}}}")
    return " | ".join(alts)


def signed_range(lo: int | None, hi: int | None, fraction: bool) -> str:
    """Integers (or, with fraction, decimals without exponent) in [lo, hi]; None = unbounded."""
    frac = ' ( "." [0-9]{1,15} )?' if fraction else ""
    alts = []

    def part(sign: str, a: int, b: int | None) -> None:  # magnitudes in [a, b]
        if not fraction or b is None:
            alts.append(sign + group(_uint_range(a, b)) + frac)
            return
        if a <= b - 1:  # n.fff with a <= n < b stays below b
            alts.append(sign + group(_uint_range(a, b - 1)) + frac)
        alts.append(f'{sign}"{b}" ( "." "0"{{1,15}} )?')

    if hi is None or hi >= 0:
        part("", max(lo, 0) if lo is not None else 0, hi)
    if lo is None or lo < 0:
        nearest = -hi if hi is not None and hi < 0 else (0 if fraction else 1)
        part('"-" ', nearest, None if lo is None else -lo)
    return " | ".join(alts)


def bounds(s: dict, path: str) -> tuple[int | None, int | None]:
    """A schema's minimum/maximum and their exclusive forms, rounded inward to integers."""
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        v = s.get(key)
        if v is not None and not isinstance(v, bool) and (
                not isinstance(v, (int, float)) or not math.isfinite(v)):
            raise SchemaError(f"{path}.{key}: must be a finite number")
    low, high = s.get("minimum"), s.get("maximum")
    xlow, xhigh = s.get("exclusiveMinimum"), s.get("exclusiveMaximum")
    if isinstance(xlow, bool):  # draft 4: a flag on minimum
        xlow, low = (low if xlow else None), (None if xlow else low)
    if isinstance(xhigh, bool):
        xhigh, high = (high if xhigh else None), (None if xhigh else high)
    lows = [f(x) for f, x in ((math.ceil, low), (lambda x: math.floor(x) + 1, xlow)) if x is not None]
    highs = [f(x) for f, x in ((math.floor, high), (lambda x: math.ceil(x) - 1, xhigh)) if x is not None]
    return (max(lows) if lows else None), (min(highs) if highs else None)
