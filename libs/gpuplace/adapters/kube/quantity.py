"""Kubernetes resource quantities ("9420Mi", "9.2Gi", "300m", "0.3") as plain numbers.

Only what GPU requests use: binary and decimal memory suffixes and the milli suffix. Anything else is
a `ValueError` with the offending text, so the caller can report it instead of guessing.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_MIB = Decimal(2**20)


def _split(text: str) -> tuple[Decimal, str]:
    text = text.strip()
    for suffix in (*_BINARY, *_DECIMAL, "m"):
        if text.endswith(suffix):
            number, unit = text[: -len(suffix)], suffix
            break
    else:
        number, unit = text, ""
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"not a quantity: {text!r}") from None
    if not value.is_finite() or value < 0:
        raise ValueError(f"not a non-negative quantity: {text!r}")
    return value, unit


def memory_mib(text: str, *, bare_unit_mib: bool = True) -> int:
    """Memory in MiB, rounded up. A bare number is MiB (HAMi's and KAI's convention) unless told bytes."""
    value, unit = _split(text)
    if unit == "m":
        raise ValueError(f"milli is not a memory unit: {text!r}")
    if unit in _BINARY:
        size_bytes = value * _BINARY[unit]
    elif unit in _DECIMAL:
        size_bytes = value * _DECIMAL[unit]
    else:
        size_bytes = value * _MIB if bare_unit_mib else value
    # Ceiling: never promise less memory than was asked for.
    return int((size_bytes / _MIB).to_integral_value(rounding=ROUND_CEILING))


def milli(text: str) -> int:
    """A count in thousandths: "300m" -> 300, "0.3" -> 300, "1" -> 1000."""
    value, unit = _split(text)
    if unit == "m":
        result = value
    elif unit == "":
        result = value * 1000
    else:
        raise ValueError(f"not a plain or milli quantity: {text!r}")
    if result != result.to_integral_value():
        raise ValueError(f"finer than a milli-unit: {text!r}")
    return int(result)


def count(text: str) -> int:
    """A whole, non-negative count."""
    value, unit = _split(text)
    if unit or value != value.to_integral_value():
        raise ValueError(f"not a whole count: {text!r}")
    return int(value)


__all__ = ["memory_mib", "milli", "count"]
