"""An example perception pod: a camera-rate loop whose every frame is timed from release to result.

    python -m examples.perception_reporter --fps 30 --port 9400 [--service-ms 8] [--torch resnet50]

Each frame is released every 1/fps seconds; the loop sleeps until the release, runs one inference and records
release -> done in the histogram (frame_latency.py). When it falls behind, the next frame is already released and
its latency includes the wait, which is what a deadline is about. The inference is a torchvision model on the GPU
with --torch (random weights, fp16, one 3x720x1280 frame, as ../shared/data/h200-colocation measured), otherwise a
sleep of --service-ms standing in for it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from examples.perception_reporter.frame_latency import FrameLatency


def simulated(service_ms: float) -> Callable[[], None]:
    return lambda: time.sleep(service_ms / 1000.0)


def torch_inference(model_name: str) -> Callable[[], None]:  # pragma: no cover - needs a GPU and torch
    """One synchronous fp16 inference of a torchvision model on a 720p frame."""
    import torch
    import torchvision

    model = getattr(torchvision.models, model_name)().half().cuda().eval().to(memory_format=torch.channels_last)
    frame = torch.randn(1, 3, 720, 1280, device="cuda").half().to(memory_format=torch.channels_last)

    def infer() -> None:
        with torch.inference_mode():
            model(frame)
        torch.cuda.synchronize()

    for _ in range(10):
        infer()  # warm-up: cuDNN autotuning and lazy allocation stay out of the histogram
    return infer


def run(fps: float, infer: Callable[[], None], latency: FrameLatency, *, frames: int | None = None,
        clock: Callable[[], float] = time.monotonic) -> int:
    """Frames at `fps` until `frames` (forever if None); returns how many were run."""
    if not fps > 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    period_s, start, n = 1.0 / fps, clock(), 0
    while frames is None or n < frames:
        released = start + n * period_s
        wait = released - clock()
        if wait > 0:
            time.sleep(wait)
        infer()
        latency.observe(released, clock())
        n += 1
    return n


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--service-ms", type=float, default=8.0, help="simulated inference time (without --torch)")
    parser.add_argument("--torch", metavar="MODEL", help="torchvision model to run on the GPU, e.g. resnet50")
    parser.add_argument("--frames", type=int, help="stop after this many frames (default: run forever)")
    args = parser.parse_args(argv)
    latency = FrameLatency()
    latency.serve(args.port)
    infer = torch_inference(args.torch) if args.torch else simulated(args.service_ms)
    run(args.fps, infer, latency, frames=args.frames)


__all__ = ["main", "run", "simulated", "torch_inference"]
