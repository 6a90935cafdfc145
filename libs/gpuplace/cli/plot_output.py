"""Where a command's `--plot` goes: checked before the run, written exactly there after it.

A simulation can run for minutes; a plot path in a directory that does not exist, or with an extension matplotlib
cannot write, used to fail only then, after the results were printed, with matplotlib's traceback. And a path
without an extension (`--plot F`) made matplotlib append `.png`, so the file asked for never appeared.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _formats() -> list[str]:
    from matplotlib.backend_bases import FigureCanvasBase  # imported here: only a command with --plot needs it

    return sorted(FigureCanvasBase.get_supported_filetypes())


def check_plot_path(path: Path) -> None:
    """ValueError saying why `path` cannot take an image: a directory, a parent directory that does not exist
    or is not writable, a file that is not writable, an extension matplotlib does not write."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ValueError(f"{path} is a directory; give a file name (curves.png)")
    if not parent.is_dir():
        raise ValueError(f"directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"{path if path.exists() else parent} is not writable")
    suffix = path.suffix.lower().removeprefix(".")
    if suffix and suffix not in _formats():
        raise ValueError(f"cannot write .{suffix} images; use one of {', '.join(_formats())} (no extension: png)")


def save_figure(figure: Any, path: Path) -> None:
    """Save a matplotlib figure at `path` itself: its extension's format, png without one."""
    figure.savefig(path, format=path.suffix.lower().removeprefix(".") or "png", bbox_inches="tight")


__all__ = ["check_plot_path", "save_figure"]
