"""Traces of the Alibaba families that ../shared does not hold, resampled the way the README describes the published
ones, to check that gpuplace is not tuned to the nine it was developed on.

    python bench/trace_variants.py --out /tmp/gpuplace-trace-variants [--variants gpushare60,multigpu30,...]
    gpuplace sim --pods /tmp/gpuplace-trace-variants/openb_pod_list_gpushare60.csv --policy gpuplace,fgd --seeds 42-51

Each variant is resampled (with replacement, seed 0) from the default trace, or for gpuspecXX from the pods of
gpuspec25, so that one quantity reaches its target, as the trace's README defines the families:
- cpuXXX: CPU-only tasks are XX.X% of tasks (the GPU tasks are kept, CPU-only ones drawn);
- gpushareXX: shared-GPU tasks carry XX% of the GPU request (as many GPU tasks, drawn from the shared and the
  other GPU tasks; CPU-only tasks kept);
- multigpuXX: multi-GPU tasks carry XX% of the GPU request (multi-GPU tasks added to the default's);
- gpuspecXX: XX% of GPU tasks carry a GPU-model constraint (drawn from gpuspec25's constrained and unconstrained
  GPU tasks, constraints included).
The files are written outside the repository (they are derived from ../shared's data). Regenerating a published
variant (gpushare40, multigpu20, ...) and simulating it checks the method against the real file.
"""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

import numpy as np

SOURCE = "default"
SPEC_SOURCE = "gpuspec25"
DEFAULT_VARIANTS = ("cpu100,cpu150,cpu250,gpushare20,gpushare60,gpushare100,multigpu30,multigpu50,gpuspec05,"
                    "gpuspec20,gpuspec33")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=Path("../shared/traces/alibaba-gpu-v2023"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/gpuplace-trace-variants"))
    parser.add_argument("--variants", default=DEFAULT_VARIANTS, help="comma-separated, e.g. gpushare60,cpu150")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    header, rows = _read(args.trace_dir / f"openb_pod_list_{SOURCE}.csv")
    _, spec_rows = _read(args.trace_dir / f"openb_pod_list_{SPEC_SOURCE}.csv")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.variants.split(","):
        match = re.fullmatch(r"(cpu|gpushare|multigpu|gpuspec)(\d+)", name.strip())
        if match is None:
            raise SystemExit(f"unknown variant {name!r}: cpuXXX, gpushareXX, multigpuXX or gpuspecXX")
        family, digits = match.groups()
        target = int(digits) / (1000.0 if family == "cpu" else 100.0)
        rng = np.random.default_rng(args.seed)
        source = spec_rows if family == "gpuspec" else rows
        made = FAMILIES[family](source, target, rng)
        path = args.out / f"openb_pod_list_{name.strip()}.csv"
        _write(path, header, made)
        print(f"{path}: {len(made)} pods; {_describe(made)}")


def _cpu(rows: list[dict], target: float, rng: np.random.Generator) -> list[dict]:
    gpu = [r for r in rows if _gpus(r) > 0]
    cpu_only = [r for r in rows if _gpus(r) == 0]
    wanted = round(target / (1.0 - target) * len(gpu))
    return gpu + _draw(cpu_only, wanted, rng)


def _gpushare(rows: list[dict], target: float, rng: np.random.Generator) -> list[dict]:
    cpu_only = [r for r in rows if _gpus(r) == 0]
    shared = [r for r in rows if _shared(r)]
    other = [r for r in rows if _gpus(r) > 0 and not _shared(r)]
    n_gpu = len(shared) + len(other)
    a, b = np.mean([_request(r) for r in shared]), np.mean([_request(r) for r in other])
    fraction = target * b / (a * (1.0 - target) + target * b)  # of GPU tasks, so that shared carry `target`
    n_shared = round(fraction * n_gpu)
    return cpu_only + _draw(shared, n_shared, rng) + _draw(other, n_gpu - n_shared, rng)


def _multigpu(rows: list[dict], target: float, rng: np.random.Generator) -> list[dict]:
    multi = [r for r in rows if _gpus(r) > 1]
    total, multi_request = sum(map(_request, rows)), sum(map(_request, multi))
    mean = np.mean([_request(r) for r in multi])
    extra = max(0, round((target * total - multi_request) / ((1.0 - target) * mean)))
    return rows + _draw(multi, extra, rng)


def _gpuspec(rows: list[dict], target: float, rng: np.random.Generator) -> list[dict]:
    cpu_only = [r for r in rows if _gpus(r) == 0]
    constrained = [r for r in rows if _gpus(r) > 0 and r.get("gpu_spec")]
    free = [r for r in rows if _gpus(r) > 0 and not r.get("gpu_spec")]
    n_gpu = len(constrained) + len(free)
    n_constrained = round(target * n_gpu)
    return cpu_only + _draw(constrained, n_constrained, rng) + _draw(free, n_gpu - n_constrained, rng)


FAMILIES = {"cpu": _cpu, "gpushare": _gpushare, "multigpu": _multigpu, "gpuspec": _gpuspec}


def _gpus(row: dict) -> int:
    return int(row["num_gpu"])


def _shared(row: dict) -> bool:
    return _gpus(row) == 1 and int(row["gpu_milli"]) < 1000


def _request(row: dict) -> int:
    return _gpus(row) * int(row["gpu_milli"] or 0)


def _draw(pool: list[dict], count: int, rng: np.random.Generator) -> list[dict]:
    return [pool[i] for i in rng.integers(len(pool), size=count)] if count > 0 else []


def _describe(rows: list[dict]) -> str:
    gpu = [r for r in rows if _gpus(r) > 0]
    total = sum(map(_request, rows))
    return (f"CPU-only {100 * (len(rows) - len(gpu)) / len(rows):.1f}% of tasks, shared "
            f"{100 * sum(_request(r) for r in gpu if _shared(r)) / total:.1f}% and multi-GPU "
            f"{100 * sum(_request(r) for r in gpu if _gpus(r) > 1) / total:.1f}% of the GPU request, "
            f"{100 * sum(bool(r.get('gpu_spec')) for r in gpu) / len(gpu):.1f}% of GPU tasks constrained")


def _read(path: Path) -> tuple[list[str], list[dict]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _write(path: Path, header: list[str], rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        for i, row in enumerate(rows):
            writer.writerow({**row, "name": f"openb-pod-{i:04d}"})


if __name__ == "__main__":
    main()
