"""Trace readers: files in, core.model objects out (the core itself never reads files)."""

__all__ = ["alibaba", "colocation"]
