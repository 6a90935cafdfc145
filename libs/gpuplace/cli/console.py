"""The rich Console every command prints through.

Without a terminal (output piped to a file, `| less`, a CI log) rich lays out for 80 columns, so a table of nine
columns came out with its cells cut to `unall…`. Piped output has no width to respect: it gets PIPED_WIDTH, wide
enough that no table of gpuplace's is cut, and tables still take only the width their cells need. COLUMNS, when
set, wins, as it does for rich itself.
"""

from __future__ import annotations

import os

from rich.console import Console

PIPED_WIDTH = 400


def new_console(*, stderr: bool = False, min_width: int = 0) -> Console:
    """A Console on stdout (or stderr): the terminal's width (at least `min_width`), PIPED_WIDTH when piped."""
    found = Console(stderr=stderr)
    if not found.is_terminal and "COLUMNS" not in os.environ:
        width = PIPED_WIDTH
    elif found.width < min_width:
        width = min_width
    else:
        return found
    return Console(stderr=stderr, width=width)


__all__ = ["PIPED_WIDTH", "new_console"]
