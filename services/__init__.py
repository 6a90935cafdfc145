"""Thin FastStream apps, one per service; no business logic."""
