"""Parse rates, times and sizes once, at the edge, into ints: bps, ns and bytes.

Strings need a unit ("100Gbps", "2.5us", "64KiB"); a bare int is taken in the base unit (bps, ns,
bytes). Floats and bools are refused because a unitless 1.5 is ambiguous. Rates and sizes must come
out whole; times are rounded to the nearest ns (ns-3's default time resolution). Signs are allowed
so that callers decide what a zero or negative value means (see `check_positive`).
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal

_RATE_UNITS = {
    "bps": 1, "b/s": 1,
    "kbps": 10**3, "Kbps": 10**3, "kb/s": 10**3, "Kb/s": 10**3,
    "Mbps": 10**6, "Mb/s": 10**6,
    "Gbps": 10**9, "Gb/s": 10**9,
    "Tbps": 10**12, "Tb/s": 10**12,
}
_TIME_UNITS = {"s": 10**9, "ms": 10**6, "us": 10**3, "µs": 10**3, "ns": 1, "ps": Decimal("0.001")}
_SIZE_UNITS = {
    "B": 1,
    "KB": 10**3, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}
_NUMBER_UNIT = re.compile(
    r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([^\d\s.+-][^\s]*)?\s*")


def _parse(value: object, units: dict, kind: str, base: str, example: str, round_ok: bool) -> int:
    """Return `value` in the base unit of `units`; raise ValueError naming the value otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{value!r} is not a {kind} (expected e.g. {example!r} or an int)")
    if isinstance(value, int):
        return value
    m = _NUMBER_UNIT.fullmatch(value)
    if m is None or m.group(2) is None:
        hint = "missing unit" if m is not None else "not understood"
        raise ValueError(f"{value!r}: {hint} (expected e.g. {example!r})")
    number, unit = m.groups()
    if unit not in units:
        raise ValueError(
            f"{value!r}: unknown {kind} unit {unit!r} (expected one of {', '.join(units)})"
        )
    try:
        exact = Decimal(number) * units[unit]
    except ArithmeticError:  # decimal signals, e.g. an exponent so large Decimal overflows
        raise ValueError(f"{value!r}: out of range") from None
    if not exact.is_finite() or abs(exact) >= 10**30:
        raise ValueError(f"{value!r}: out of range")
    whole = exact.to_integral_value(rounding=ROUND_HALF_UP)
    if whole != exact and not round_ok:
        raise ValueError(f"{value!r} is not a whole number of {base}")
    return int(whole)


def parse_rate(value: str | int) -> int:
    """Parse a link rate ("100Gbps", "400Mbps", int bps) into bps. SI prefixes (k=1000)."""
    return _parse(value, _RATE_UNITS, "rate", "bps", "100Gbps", round_ok=False)


def parse_time(value: str | int) -> int:
    """Parse a time ("1us", "0.001ms", "2.5ns", int ns) into ns, rounded to the nearest ns."""
    return _parse(value, _TIME_UNITS, "time", "ns", "10us", round_ok=True)


def parse_size(value: str | int) -> int:
    """Parse a size ("1MB", "64KB", "1GiB", "1500B", int bytes) into bytes. MB=10**6, MiB=2**20."""
    return _parse(value, _SIZE_UNITS, "size", "bytes", "1MB", round_ok=False)


def check_positive(parsed: int, original: object) -> int:
    """Return `parsed` if > 0; raise ValueError quoting `original` otherwise."""
    if parsed <= 0:
        raise ValueError(f"{original!r} must be > 0")
    return parsed


def check_non_negative(parsed: int, original: object) -> int:
    """Return `parsed` if >= 0; raise ValueError quoting `original` otherwise."""
    if parsed < 0:
        raise ValueError(f"{original!r} must be >= 0")
    return parsed
