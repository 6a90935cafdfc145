"""Kubernetes resource quantities ("9420Mi", "5k", "300m", "1e3") as plain numbers.

The grammar is apimachinery's (`k8s.io/apimachinery/pkg/api/resource/quantity.go`, `ParseQuantity`):
a signed decimal number, then one suffix: binary `Ki Mi Gi Ti Pi Ei`, decimal `n u m k M G T P E`, or an
exponent `e<int>` / `E<int>`. No space inside (surrounding space is tolerated, for hand-written
annotations). The API server returns quantities in canonical form, so a limit written `5000` arrives as
`5k`: whoever reads a quantity must read the suffix, never the digits alone.

Anything else, a negative value, or a value finer than the reader's unit is a `ValueError` naming the
text, so the caller reports it instead of guessing.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Context, Decimal

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
            "P": Decimal(10**15), "E": Decimal(10**18)}
_MIB = Decimal(2**20)
_INT64_MAX = 2**63 - 1
# Bounds far above any resource (2**63 < 1e19) that keep every product below exact in 100 digits:
# at most 60 characters of number, an exponent of at most three digits, magnitude below 1e40.
_EXACT = Context(prec=100)
# apimachinery quantity.go: <signedNumber><suffix>; suffix = binarySI | decimalExponent | decimalSI
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:[eE](?P<exponent>[+-]?[0-9]{1,3})|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?))"
)


def _split(text: str) -> tuple[Decimal, str]:
    """(number, suffix) of a non-negative quantity; the suffix is "" for a bare number or an exponent form."""
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    if len(match["number"]) > 60:
        raise ValueError(f"out of range: {text!r}")
    number, suffix = Decimal(match["number"]), match["suffix"] or ""
    if match["exponent"] is not None:  # "1e3" is 1000, in the base unit
        number = number.scaleb(int(match["exponent"]), _EXACT)
    if number < 0:
        raise ValueError(f"not a non-negative quantity: {text!r}")
    if number.adjusted() >= 40:
        raise ValueError(f"out of range: {text!r}")
    return number, suffix


def value(text: str) -> Decimal:
    """The exact value of a quantity, in its base unit: "5k" -> 5000, "1Gi" -> 1073741824, "300m" -> 0.3."""
    number, suffix = _split(text)
    return _EXACT.multiply(number, _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])


def count(text: str) -> int:
    """A whole, non-negative number, as apimachinery's `Quantity.AsInt64` reads it.

    "3" -> 3, "5k" -> 5000, "2000m" -> 2, "1Ki" -> 1024; "1.5" and "500m" are not whole and raise.
    """
    exact = value(text)
    if exact != exact.to_integral_value():
        raise ValueError(f"not a whole number: {text!r}")
    if exact > _INT64_MAX:
        raise ValueError(f"too large: {text!r}")
    return int(exact)


def memory_mib(text: str, *, bare_unit_mib: bool = True) -> int:
    """Memory in MiB, rounded up. Suffixes are bytes (Kubernetes' meaning); a bare number is MiB unless told bytes.

    "9420Mi" -> 9420, "9.2Gi" -> 9421, "1G" -> 954 (10^9 B), "4000" -> 4000 (or 1 when bytes).
    The sub-unit suffixes (m, u, n) are refused: no one means milli-bytes of GPU memory.
    """
    number, suffix = _split(text)
    if suffix in ("m", "u", "n"):
        raise ValueError(f"{suffix!r} is not a memory unit: {text!r}")
    if suffix:
        size_bytes = _EXACT.multiply(number, _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])
    else:
        size_bytes = _EXACT.multiply(number, _MIB) if bare_unit_mib else number
    # Ceiling: never promise less memory than was asked for.
    return int(_EXACT.divide(size_bytes, _MIB).to_integral_value(rounding=ROUND_CEILING))


def milli(text: str) -> int:
    """A quantity in thousandths: "300m" -> 300, "0.3" -> 300, "1" -> 1000; finer than a milli raises."""
    exact = _EXACT.multiply(value(text), 1000)
    if exact != exact.to_integral_value():
        raise ValueError(f"finer than a milli-unit: {text!r}")
    return int(exact)


__all__ = ["value", "count", "memory_mib", "milli"]
