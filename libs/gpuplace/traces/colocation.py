"""Reads GPU colocation measurements (colocation_frames.csv) into core.latency.FrameTable.

The one place gpuplace touches these files; the latency model never does I/O. The format is the one
../shared/data/h200-colocation/README.md describes: one row per frame with config, streams, worker,
model, fps, frame, latency_ms, service_ms. The model column becomes the workload class.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gpuplace.core.latency.frames import FrameTable

FRAMES_FILE = "colocation_frames.csv"
NVML_FILE = "colocation_nvml.csv"
DATA_DIR_ENV = "GPUPLACE_COLOCATION_DIR"
DEFAULT_DATA_DIR = Path("../shared/data/h200-colocation")
"""Relative to the repository root (the shared folder sits beside the checkout)."""
DEFAULT_GPU = "NVIDIA-H200"
"""The GPU the shared data were measured on (its README)."""

_REQUIRED = ("config", "worker", "model", "fps", "frame", "latency_ms")


class ColocationDataError(ValueError):
    """The directory or its frames file is missing or malformed; the message names the path."""


def data_dir() -> Path:
    """$GPUPLACE_COLOCATION_DIR, else ../shared/data/h200-colocation from the repository root."""
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured)
    return (Path(__file__).resolve().parents[3] / DEFAULT_DATA_DIR).resolve()


def read_frames(directory: Path) -> FrameTable:
    """The frames of `directory`/colocation_frames.csv (ColocationDataError if missing or malformed)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ColocationDataError(f"{directory}: not a directory")
    path = directory / FRAMES_FILE
    if not path.is_file():
        raise ColocationDataError(f"{path}: no such file (expected {FRAMES_FILE} in {directory})")
    columns: dict[str, list[str]] = {name: [] for name in _REQUIRED}
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in _REQUIRED if c not in (reader.fieldnames or ())]
        if missing:
            raise ColocationDataError(f"{path}: missing column(s) {', '.join(missing)}")
        for line, row in enumerate(reader, start=2):
            for name in _REQUIRED:
                value = row[name]
                if value is None or value == "":
                    raise ColocationDataError(f"{path}:{line}: empty {name}")
                columns[name].append(value)
    if not columns["config"]:
        raise ColocationDataError(f"{path}: no frames")
    try:
        return FrameTable(
            config=np.array(columns["config"], dtype=object),
            workload_class=np.array(columns["model"], dtype=object),
            worker=np.array(columns["worker"], dtype=np.int64),
            frame_rate_hz=np.array(columns["fps"], dtype=np.float64),
            frame=np.array(columns["frame"], dtype=np.int64),
            latency_ms=np.array(columns["latency_ms"], dtype=np.float64),
        )
    except ValueError as error:
        raise ColocationDataError(f"{path}: {error}") from None


def read_sessions(directories: Sequence[Path]) -> FrameTable:
    """The frames of several directories (measurement sessions on one GPU product) as one table;
    ColocationDataError if any is missing or malformed, or if two hold a config of the same name."""
    tables = [read_frames(d) for d in directories]
    try:
        return FrameTable.concat(tables)
    except ValueError as error:
        raise ColocationDataError(f"{', '.join(map(str, directories))}: {error}") from None


def read_utilisation(directories: Sequence[Path]) -> dict[str, float]:
    """Mean GPU utilisation (a fraction) of each config in the directories' colocation_nvml.csv, where there is
    one (it is optional: the fit then reads latency alone); ColocationDataError if one is malformed."""
    samples: dict[str, list[float]] = {}
    for directory in directories:
        path = Path(directory) / NVML_FILE
        if not path.is_file():
            continue
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            if not {"config", "gpu_util_pct"} <= set(reader.fieldnames or ()):
                raise ColocationDataError(f"{path}: missing column(s) config and/or gpu_util_pct")
            for line, row in enumerate(reader, start=2):
                try:
                    pct = float(row["gpu_util_pct"])
                except (TypeError, ValueError):
                    raise ColocationDataError(f"{path}:{line}: gpu_util_pct is not a number") from None
                if not 0 <= pct <= 100:
                    raise ColocationDataError(f"{path}:{line}: gpu_util_pct {pct} is not in [0, 100]")
                samples.setdefault(row["config"], []).append(pct / 100.0)
    return {config: sum(v) / len(v) for config, v in samples.items()}


__all__ = ["ColocationDataError", "DEFAULT_GPU", "FRAMES_FILE", "NVML_FILE", "data_dir", "read_frames", "read_sessions",
           "read_utilisation"]
