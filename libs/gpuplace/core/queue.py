"""The pending queue's order (kube's QueueSort): priority first, then deadline, then arrival.

A tighter deadline goes first among equals (earliest deadline first); a pod without a deadline goes after
every pod with one. Arrival breaks the remaining ties so the order is total and deterministic.
"""

from __future__ import annotations

import math
from typing import Any


def queue_key(*, priority: int, deadline_ms: float | None, arrival: Any) -> tuple[int, float, Any]:
    """Sort key: ascending keys are served first."""
    return (-priority, deadline_ms if deadline_ms is not None else math.inf, arrival)


__all__ = ["queue_key"]
