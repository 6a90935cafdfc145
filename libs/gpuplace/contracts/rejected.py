"""The one error a consumer's handler raises to say "this event is well-formed, and must not be applied"."""

from __future__ import annotations


class Rejected(Exception):
    """A valid event that must not change the fleet state: a `deleted` pod the apiserver still runs (forged,
    or sent by something other than cluster-watcher), an event id reused for other content, a cluster this
    worker does not serve. Retrying cannot make it true, so the subscriber dead-letters it at once with this
    message as the reason (adapters/kafka.subscribe) and the partition moves on."""



def reused_id(event_id: str, stored_digest: str, digest: str) -> str:
    """The reason for an event whose id was processed before with other content."""
    return (f"event id {event_id!r} was processed before with other content (sha256 {stored_digest[:12]}..., "
            f"this one {digest[:12]}...): a reused id, not a redelivery")


__all__ = ["Rejected", "reused_id"]
