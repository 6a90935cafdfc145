"""Real inference processes co-located on one GPU, each serving its frame latency histogram; gpu-agent's scrape
code reads them into latency windows, compared with the frames each process measured itself (issue 38, item 5).

    PYTHONPATH=libs:. python bench/gpu_latency_scrape.py --mix r50:30:8,r18:30:8 --seconds 30 --window-s 5 \\
        --out bench/results/gpu-latency-scrape-h200

Each stream is a process (one CUDA context, time-sliced with the others as GPU-sharing device plugins do): a
torchvision model (random weights, fp16, channels-last, one 3x720x1280 frame, as ../shared/data/h200-colocation
was measured) run at its frame rate by examples/perception_reporter/program.run, every frame's release -> result
observed in the example's histogram and served on its own port. This process plays gpu-agent: every window it
builds the targets from pod objects that point at those ports (adapters/pod_metrics/targets.py) and scrapes them
with PodLatencyScraper, exactly the code gpu-agent runs. At the end each process writes the frames it measured;
for every window the frames that completed inside it give the direct p50/p95/p99 and deadline misses, set beside
the scraped ones (which can differ only by the bucket interpolation). The latency model fitted on the shared H200
data predicts the mix, and the report sets that beside what was observed too.

Without a GPU (or torch) it refuses with a message; `--simulate` runs the same pipeline with a sleep standing in for
the inference (checks the script, measures nothing about a GPU). Writes <out>.json and <out>.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from examples.perception_reporter.frame_latency import FrameLatency
from examples.perception_reporter.program import run, simulated, torch_inference
from gpuplace.adapters.pod_metrics.scraper import PodLatencyScraper
from gpuplace.adapters.pod_metrics.targets import LATENCY_PORT, scrape_targets
from gpuplace.contracts.events import LatencyWindow
from gpuplace.core.latency import fit
from gpuplace.core.latency.model import Stream
from gpuplace.core.latency.predict import predict
from gpuplace.core.latency.speed import relative_speed
from gpuplace.traces import colocation

MODELS = {"r18": "resnet18", "r50": "resnet50"}
SIMULATED_MS = {"r18": 4.0, "r50": 7.0}


@dataclass(frozen=True)
class StreamSpec:
    name: str
    workload: str
    fps: float
    port: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse_mix(text: str) -> list[tuple[str, float, int]]:
    """`r50:30:8,r18:60:4` -> [(class, fps, count)]."""
    out = []
    for part in text.split(","):
        workload, fps, count = part.split(":")
        if workload not in MODELS:
            raise SystemExit(f"unknown model {workload!r} (one of {', '.join(MODELS)})")
        out.append((workload, float(fps), int(count)))
    return out


def _worker(spec: StreamSpec, seconds: float, start_at: float, simulate: bool, frames_file: str) -> None:
    """One stream: serve the histogram, wait for the common start, run, write (release, done) per frame."""
    latency = FrameLatency()
    latency.serve(spec.port, addr="127.0.0.1")
    infer = simulated(SIMULATED_MS[spec.workload]) if simulate else torch_inference(MODELS[spec.workload])
    frames: list[tuple[float, float]] = []

    class Recording(FrameLatency):
        def __init__(self) -> None:  # shares the served histogram; records each frame as well
            self.registry = latency.registry

        def observe(self, released_s: float, done_s: float) -> None:
            latency.observe(released_s, done_s)
            frames.append((released_s, done_s))

    time.sleep(max(0.0, start_at - time.time()))
    run(spec.fps, infer, Recording(), frames=int(seconds * spec.fps), clock=time.time)
    Path(frames_file).write_text(json.dumps(frames))


def _pods(specs: list[StreamSpec]) -> list[dict]:
    """Pod objects as the API lists them, pointing at the local ports: all on GPU 0 of this machine."""
    assignment = json.dumps({"gpus": [{"index": 0, "memory_mib": 4000}]})
    return [{"metadata": {"name": s.name, "namespace": "bench", "uid": s.name,
                          "annotations": {LATENCY_PORT: str(s.port), "gpuplace.io/workload": s.workload,
                                          "gpuplace.io/deadline-ms": f"{1000 / s.fps:.1f}",
                                          "gpuplace.io/gpu-assignment": assignment}},
             "status": {"phase": "Running", "podIP": "127.0.0.1"}} for s in specs]


async def _scrape(specs: list[StreamSpec], seconds: float, window_s: float, start_at: float
                  ) -> list[tuple[float, LatencyWindow]]:
    targets, skipped = scrape_targets(_pods(specs))
    assert not skipped, skipped
    scraper = PodLatencyScraper(cluster="bench", region="local", node=socket.gethostname().lower()[:63],
                                metric="gpuplace_frame_latency_seconds")
    out = []
    at = start_at - 0.5  # the baseline before the first frame
    while at < start_at + seconds + window_s:
        await asyncio.sleep(max(0.0, at - time.time()))
        out += [(time.time(), w) for w in await scraper.windows(targets, time.time())]
        at += window_s
    return out


def _direct(frames: list[tuple[float, float]], end_s: float, window_s: float, deadline_ms: float) -> dict:
    """The frames that completed in (end - window, end]: the window the scrape at `end_s` saw."""
    lat = np.array([1000 * (d - r) for r, d in frames if end_s - window_s < d <= end_s])
    if len(lat) == 0:
        return {"frames": 0}
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    return {"frames": int(len(lat)), "p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99),
            "deadline_misses": int((lat > deadline_ms).sum())}


def _prediction(mix: list[tuple[str, float, int]], gpu: str) -> dict[str, dict]:
    data = [colocation.data_dir(), colocation.data_dir().parent / "h200-colocation-overload"]
    model = fit.fit(colocation.read_sessions(data), gpu_speed=relative_speed(colocation.DEFAULT_GPU),
                    utilisation=colocation.read_utilisation(data))
    streams = [Stream(fps, cls) for cls, fps, n in mix for _ in range(n)]
    p = predict(model, streams, speed=relative_speed(gpu))
    out = {}
    for i, s in enumerate(streams):
        out.setdefault(f"{s.workload_class}@{s.frame_rate_hz:g}", {
            "predicted_p95_ms": None if p.overloaded_streams[i] else round(float(p.p95_ms[i]), 2),
            "predicted_overload": bool(p.overloaded_streams[i]), "load": round(p.load_fraction, 3)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mix", default="r50:30:8,r18:30:8", help="class:fps:count,... (classes: r18, r50)")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--window-s", type=float, default=5.0)
    parser.add_argument("--gpu", default=colocation.DEFAULT_GPU, help="GPU product, for the model's prediction")
    parser.add_argument("--simulate", action="store_true", help="sleep instead of inference (no GPU needed)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/gpu-latency-scrape"))
    args = parser.parse_args()
    if not args.simulate:
        try:
            import torch
        except ImportError:
            sys.exit("torch is not installed: run on a GPU machine with torch and torchvision, or pass --simulate")
        if not torch.cuda.is_available():
            sys.exit("no CUDA GPU visible: run on a GPU machine, or pass --simulate")
    mix = parse_mix(args.mix)
    specs = [StreamSpec(f"{cls}-{int(fps)}-{i}", cls, fps, _free_port()) for cls, fps, n in mix for i in range(n)]
    start_at = time.time() + (5.0 if args.simulate else 60.0)  # model loading and warm-up before the common start
    with tempfile.TemporaryDirectory(prefix="gpu-latency-scrape-") as frames_dir:
        scraped, frames = _run(specs, args, start_at, Path(frames_dir))
    rows = []
    for at, w in scraped:
        direct = _direct(frames[w.pod], at, w.window_s, w.deadline_ms or 1e9)
        rows.append({"pod": w.pod, "workload": w.workload, "window_end_s": round(at - start_at, 2),
                     "scraped": {"frames": w.frames, "p50_ms": round(w.p50_ms, 2), "p95_ms": round(w.p95_ms, 2),
                                 "p99_ms": round(w.p99_ms, 2), "deadline_misses": w.deadline_misses},
                     "direct": {k: round(v, 2) if isinstance(v, float) else v for k, v in direct.items()}})
    summary = _summary(rows)
    report = {"command": " ".join(sys.argv), "mix": args.mix, "simulated": args.simulate, "gpu": args.gpu,
              "prediction": _prediction(mix, args.gpu), "summary": summary, "windows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(_markdown(report))
    print(_markdown(report))


def _run(specs: list[StreamSpec], args: argparse.Namespace, start_at: float, frames_dir: Path
         ) -> tuple[list[tuple[float, LatencyWindow]], dict[str, list[tuple[float, float]]]]:
    """Start one process per stream, scrape them while they run, and read back the frames each measured."""
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(s, args.seconds, start_at, args.simulate,
                                               str(frames_dir / f"{s.name}.json"))) for s in specs]
    for p in procs:
        p.start()
    scraped = asyncio.run(_scrape(specs, args.seconds, args.window_s, start_at))
    for p in procs:
        p.join()
    frames = {s.name: [(float(r), float(d)) for r, d in json.loads((frames_dir / f"{s.name}.json").read_text())]
              for s in specs}
    return scraped, frames


def _summary(rows: list[dict]) -> dict:
    """Per workload: windows, frames scraped vs measured, median |p95 error| of the scrape against the frames."""
    out: dict[str, dict] = {}
    for r in rows:
        s = out.setdefault(r["workload"], {"windows": 0, "frames_scraped": 0, "frames_direct": 0, "p95_err": [],
                                           "scraped_p95": [], "direct_p95": []})
        s["windows"] += 1
        s["frames_scraped"] += r["scraped"]["frames"]
        s["frames_direct"] += r["direct"]["frames"]
        if r["direct"]["frames"]:
            d, g = r["direct"]["p95_ms"], r["scraped"]["p95_ms"]
            s["p95_err"].append(100 * abs(g - d) / d)
            s["scraped_p95"].append(g)
            s["direct_p95"].append(d)
    return {k: {"windows": v["windows"], "frames_scraped": v["frames_scraped"], "frames_direct": v["frames_direct"],
                "median_abs_p95_error_pct": round(float(np.median(v["p95_err"])), 2) if v["p95_err"] else None,
                "median_scraped_p95_ms": round(float(np.median(v["scraped_p95"])), 2) if v["scraped_p95"] else None,
                "median_direct_p95_ms": round(float(np.median(v["direct_p95"])), 2) if v["direct_p95"] else None}
            for k, v in out.items()}


def _markdown(report: dict) -> str:
    lines = [f"# Scraped latency windows vs measured frames ({'simulated' if report['simulated'] else report['gpu']})",
             "", f"    {report['command']}", "", f"mix `{report['mix']}`; model prediction: "
             f"`{json.dumps(report['prediction'])}`", "",
             "| workload | windows | frames scraped | frames measured | median scraped p95 ms | median measured p95 ms "
             "| median abs p95 error % |", "|---|---|---|---|---|---|---|"]
    for k, v in report["summary"].items():
        lines.append(f"| {k} | {v['windows']} | {v['frames_scraped']} | {v['frames_direct']} | "
                     f"{v['median_scraped_p95_ms']} | {v['median_direct_p95_ms']} | {v['median_abs_p95_error_pct']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
