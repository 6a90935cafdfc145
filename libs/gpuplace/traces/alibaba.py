"""Reads the Alibaba GPU cluster trace (cluster-trace-gpu-v2023, "openb") into core.model objects.

The one place gpuplace touches the trace files; the core never does I/O. Columns are described in
the trace's README. Conventions carried over from the paper's converter:
- a GPU pod asks `num_gpu` GPUs of `gpu_milli` milli-GPU each (above 1000 counts as 1000; 0 means
  it needs no GPU); `gpu_spec` lists the allowed models separated by '|' (empty: any);
- `gpu_spec` is ignored on pods that ask for no GPU.
GPU memory per model is not in the trace; the nominal sizes below serve memory-based requests only
(the trace's own requests are shares). The undisclosed models (G2, G3) get 0: memory unknown, so a
memory-only request is never placed on them.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from gpuplace.core.model import MILLI_PER_GPU, GpuRequest, Node, Pod

TRACE_DIR_ENV = "GPUPLACE_TRACE_DIR"
DEFAULT_TRACE_DIR = Path("../shared/traces/alibaba-gpu-v2023")
"""Relative to the repository root (the shared folder sits beside the checkout)."""

POD_FILE_PATTERN = "openb_pod_list_{}.csv"
NODE_FILE_PATTERN = "openb_node_list_{}.csv"
DEFAULT_NODES = "gpu_node"

GPU_MEMORY_MIB_BY_MODEL = {
    "P100": 16384,
    "T4": 16384,
    "V100M16": 16384,
    "V100M32": 32768,
    "A10": 24576,
}


class TraceError(ValueError):
    """A trace file is missing or malformed; the message names the file."""


def trace_dir() -> Path:
    """$GPUPLACE_TRACE_DIR, else ../shared/traces/alibaba-gpu-v2023 from the repository root."""
    configured = os.environ.get(TRACE_DIR_ENV)
    if configured:
        return Path(configured)
    repo_root = Path(__file__).resolve().parents[3]
    return (repo_root / DEFAULT_TRACE_DIR).resolve()


def trace_names(directory: Path | None = None) -> tuple[str, ...]:
    """Short names of the pod traces in `directory` ("default", "cpu050", ...), sorted."""
    folder = directory or trace_dir()
    prefix, suffix = POD_FILE_PATTERN.split("{}")
    names = [p.name[len(prefix) : -len(suffix)] for p in folder.glob(POD_FILE_PATTERN.format("*"))]
    return tuple(sorted(names, key=lambda n: (n != "default", n)))


def pod_file(name_or_path: str, directory: Path | None = None) -> Path:
    """A path as given if it is a file, else the trace of that short name in the trace directory."""
    return _resolve(name_or_path, POD_FILE_PATTERN, directory)


def node_file(name_or_path: str = DEFAULT_NODES, directory: Path | None = None) -> Path:
    return _resolve(name_or_path, NODE_FILE_PATTERN, directory)


def read_pods(path: Path) -> list[Pod]:
    return [_pod(row, path, line) for line, row in _rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu"))]


def read_nodes(path: Path) -> list[Node]:
    return [_node(row, path, line) for line, row in _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))]


def _resolve(name_or_path: str, pattern: str, directory: Path | None) -> Path:
    given = Path(name_or_path)
    if given.is_file():
        return given
    candidate = (directory or trace_dir()) / pattern.format(name_or_path)
    if candidate.is_file():
        return candidate
    raise TraceError(f"no such file: {name_or_path!r} (nor {candidate})")


def _rows(path: Path, required: tuple[str, ...]):
    try:
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in required if c not in (reader.fieldnames or ())]
            if missing:
                raise TraceError(f"{path}: missing column(s) {', '.join(missing)}")
            yield from enumerate(reader, start=2)
    except OSError as error:
        raise TraceError(f"{path}: {error.strerror or error}") from error


def _int(row: dict, column: str, path: Path, line: int) -> int:
    try:
        return int(row[column])
    except (TypeError, ValueError):
        raise TraceError(f"{path}:{line}: {column}={row.get(column)!r} is not an integer") from None


def _pod(row: dict, path: Path, line: int) -> Pod:
    count = _int(row, "num_gpu", path, line)
    share = min(_int(row, "gpu_milli", path, line), MILLI_PER_GPU) if count and row.get("gpu_milli") else 0
    models = tuple(m for m in (row.get("gpu_spec") or "").split("|") if m)
    request = GpuRequest(count, share, None, models) if count and share > 0 else GpuRequest()
    return Pod(row["name"], _int(row, "cpu_milli", path, line), _int(row, "memory_mib", path, line), request)


def _node(row: dict, path: Path, line: int) -> Node:
    model = row["model"] or ""
    count = _int(row, "gpu", path, line)
    memory = GPU_MEMORY_MIB_BY_MODEL.get(model, 0)
    return Node.with_gpus(row["sn"], _int(row, "cpu_milli", path, line), _int(row, "memory_mib", path, line),
                          count, model if count else "", memory if count else 0)
