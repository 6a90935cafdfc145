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
  GPU tasks, constraints included);
- cpu200xNNN (CPU-heavy, issue 39): cpu200 with every task's CPU request x NNN/100 (capped at the largest node's
  CPU, so that no task is made unplaceable by the scaling alone). cpu200 asks 16.0 cores per GPU asked, the
  cluster has 17.2 per GPU: at x110 the CPU asked passes the cluster's before its GPU does, at x125 well before;
- cpu200xNNNmixMM: MM% of the tasks drawn from cpu200xNNN, the rest from default (a mix between the two).
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
CPU_HEAVY = "cpu250,cpu300,cpu200x110,cpu200x125,cpu200x125mix50"
"""The CPU-heavy variants of issue 39 (`--variants cpu-heavy`): more CPU-only tasks, or more CPU per task."""
CPU_SOURCE = "cpu200"
MAX_NODE_CPU_MILLI = 128_000
"""The largest node's CPU in openb_node_list_gpu_node.csv: a scaled request is capped there."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=Path("../shared/traces/alibaba-gpu-v2023"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/gpuplace-trace-variants"))
    parser.add_argument("--variants", default=DEFAULT_VARIANTS, help="comma-separated, e.g. gpushare60,cpu150")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    header, rows = _read(args.trace_dir / f"openb_pod_list_{SOURCE}.csv")
    _, spec_rows = _read(args.trace_dir / f"openb_pod_list_{SPEC_SOURCE}.csv")
    _, cpu_rows = _read(args.trace_dir / f"openb_pod_list_{CPU_SOURCE}.csv")
    args.out.mkdir(parents=True, exist_ok=True)
    variants = CPU_HEAVY if args.variants == "cpu-heavy" else args.variants
    for name in variants.split(","):
        scaled = re.fullmatch(r"cpu200x(\d+)(?:mix(\d+))?", name.strip())
        if scaled is not None:
            factor, mix = int(scaled.group(1)) / 100.0, scaled.group(2)
            made = _cpu_scaled(cpu_rows, factor)
            if mix is not None:
                made = _mixed(made, rows, int(mix) / 100.0, np.random.default_rng(args.seed))
            _emit(args.out, name.strip(), header, made)
            continue
        match = re.fullmatch(r"(cpu|gpushare|multigpu|gpuspec)(\d+)", name.strip())
        if match is None:
            raise SystemExit(f"unknown variant {name!r}: cpuXXX, gpushareXX, multigpuXX, gpuspecXX, cpu200xNNN[mixMM]")
        family, digits = match.groups()
        target = int(digits) / (1000.0 if family == "cpu" else 100.0)
        rng = np.random.default_rng(args.seed)
        source = spec_rows if family == "gpuspec" else rows
        _emit(args.out, name.strip(), header, FAMILIES[family](source, target, rng))


def _emit(out: Path, name: str, header: list[str], made: list[dict]) -> None:
    path = out / f"openb_pod_list_{name}.csv"
    _write(path, header, made)
    print(f"{path}: {len(made)} pods; {_describe(made)}")


def _cpu_scaled(rows: list[dict], factor: float) -> list[dict]:
    """Every task's CPU request x `factor`, rounded to 100 milli-cores and capped at the largest node's CPU."""
    return [{**r, "cpu_milli": str(min(MAX_NODE_CPU_MILLI, round(int(r["cpu_milli"]) * factor / 100) * 100))}
            for r in rows]


def _mixed(heavy: list[dict], rows: list[dict], part: float, rng: np.random.Generator) -> list[dict]:
    """As many tasks as `rows`: a `part` of them drawn from `heavy`, the rest from `rows`."""
    n_heavy = round(part * len(rows))
    return _draw(heavy, n_heavy, rng) + _draw(rows, len(rows) - n_heavy, rng)


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
            f"{100 * sum(bool(r.get('gpu_spec')) for r in gpu) / len(gpu):.1f}% of GPU tasks constrained, "
            f"{sum(int(r['cpu_milli']) for r in rows) / max(total, 1):.1f} CPU cores asked per GPU asked")


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
