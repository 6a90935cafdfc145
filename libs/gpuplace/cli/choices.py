"""The `--seeds` and `--policy` lists the simulation commands share, parsed with the reason when they are wrong."""

from __future__ import annotations

from gpuplace.core.policies import registry


def parse_seeds(text: str) -> list[int]:
    """'42-51', '42', '1,5,7-9' -> sorted unique seeds; ValueError with the reason otherwise."""
    seeds: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"bad seed range {text!r}: use N, N-M or a comma-separated list of those")
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise ValueError(f"bad seed range {part!r}: {high} < {low}")
        seeds.update(range(low, high + 1))
    return sorted(seeds)


def parse_policies(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in registry.POLICIES]
    if not names or unknown:
        given = ", ".join(unknown) if unknown else repr(text)
        raise ValueError(f"unknown policy {given}; known: {', '.join(registry.names())}")
    return names


__all__ = ["parse_policies", "parse_seeds"]
