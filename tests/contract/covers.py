"""Which port methods a contract case checks, declared on the case, so a missing case fails a test.

`@covers("reserve", "release")` on a case of a contract suite; tests/unit/test_port_contracts.py compares
what the cases of each suite cover with the methods of the ports it is the contract of.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

Case = TypeVar("Case", bound=Callable[..., Any])


def covers(*methods: str) -> Callable[[Case], Case]:
    def mark(case: Case) -> Case:
        case.covers = methods  # type: ignore[attr-defined]
        return case
    return mark


def covered(suite: type) -> dict[str, set[str]]:
    """Port method -> the suite's cases that cover it."""
    found: dict[str, set[str]] = {}
    for name in dir(suite):
        if name.startswith("test"):
            for method in getattr(getattr(suite, name), "covers", ()):
                found.setdefault(method, set()).add(name)
    return found


def port_methods(port: type) -> set[str]:
    """The public methods and properties a Protocol declares, its base protocols' included; `__aenter__` and
    `__aexit__` are left out (every case of a unit-of-work suite runs them)."""
    names: set[str] = set()
    for klass in port.__mro__:
        if klass in (object, Protocol) or not getattr(klass, "_is_protocol", False):
            continue
        names |= {name for name, value in vars(klass).items()
                  if not name.startswith("_") and (callable(value) or isinstance(value, property))}
    return names


__all__ = ["covers", "covered", "port_methods"]
