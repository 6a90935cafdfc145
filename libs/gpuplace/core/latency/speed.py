"""How fast each GPU product runs a frame, relative to the reference GPU (an H100 = 1.0).

The latency model keeps every time on the reference GPU and divides by this factor to predict on
another product. A product not listed is taken to be as slow as the slowest one listed: guessing
fast would admit pods that then miss their deadlines; guessing slow only packs less.
Names are NVIDIA GPU Feature Discovery's `nvidia.com/gpu.product` (spaces read as dashes, so
nvidia-smi's "NVIDIA H200" matches too). sim/robotics_fleet.py draws its fleets from the same numbers.
"""

from __future__ import annotations

RELATIVE_SPEED: dict[str, float] = {
    "Tesla-V100-SXM2-16GB": 0.35,
    "NVIDIA-A100-SXM4-40GB": 0.65,
    "NVIDIA-H100-80GB-HBM3": 1.0,
    "NVIDIA-H200": 1.15,
}

UNKNOWN_SPEED = min(RELATIVE_SPEED.values())


def relative_speed(product: str) -> float:
    """Speed factor of a GPU product (see the module docstring for unknown products)."""
    return RELATIVE_SPEED.get(product.strip().replace(" ", "-"), UNKNOWN_SPEED)


__all__ = ["RELATIVE_SPEED", "UNKNOWN_SPEED", "relative_speed"]
