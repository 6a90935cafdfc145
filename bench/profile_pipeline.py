"""Where every millisecond of gpuplace's CPU goes: a sampling profile of `gpuplace bench pipeline`, per service and hop.

    python bench/profile_pipeline.py --nodes 200 --pods 2000 --out bench/results/profile-200

runs py-spy (`py-spy record --subprocesses`, every service process sampled; the bench's own process too) over one
run of `gpuplace bench pipeline`, then writes beside `--out`:
- `.stacks.txt`: the collapsed stacks py-spy recorded (one line a distinct stack, its sample count last; megabytes,
  so git ignores them: `--raw` reads them again);
- `.svg`: a flame graph of them, one tower per process (this script draws it: no Perl, no Rust);
- `.md`: CPU seconds and milliseconds per pod of each service's hops (deciding, PostgreSQL, binds, Events, the
  outbox, Kafka, the watch, ...), from the samples whose innermost frame was running Python or native code (an
  event loop waiting in epoll, an idle thread, and module imports at start-up are left out).

A sample is one stack every 1/rate s of a busy thread, so a hop's CPU is its samples / rate. The profile covers the
whole run (the fleet created, the burst, the drain), and py-spy slows what it samples by a few per cent: read the
table for shares, and take binds/s and CPU per pod from `bench pipeline --against kube-scheduler`, which runs
unprofiled.
"""

from __future__ import annotations

import argparse
import html
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

IDLE = ("asyncio/runners.py", "threading.py", "selectors.py", "concurrent/futures/thread.py", "queue.py")
"""Innermost frames of a thread that waits: the event loop in epoll, a pool thread on its queue."""

HOPS: dict[str, tuple[tuple[str, str], ...]] = {
    # service -> (marker in the stack, hop): the first rule whose marker is in any frame wins (so a library's frames
    # count for the gpuplace hop that called them; the library rules last catch what runs with no gpuplace caller on
    # its stack: SQLAlchemy's greenlet side, a connection's callbacks)
    "placement": (
        ("Decider.__call__", "decide (core policy + latency filter)"),
        ("KubeClusterApi.bind", "bind (pods/binding)"), ("Binder._bind", "bind (pods/binding)"),
        ("Reporter._work", "Events and pod status"),
        ("OutboxRelay", "outbox relay (PostgreSQL -> Kafka)"),
        ("Binder._flush", "bind outcomes recorded (PostgreSQL)"),
        ("Deciding.on_pending", "pending batch: claim, record, reserve (PostgreSQL) and bookkeeping"),
        ("Deciding.try_place", "waiting pods tried again (PostgreSQL)"),
        ("BoundNews", "bound news (PostgreSQL)"), ("_on_run", "bound news (PostgreSQL)"),
        ("on_node", "node events (PostgreSQL)"), ("_retry_after_nodes", "node events (PostgreSQL)"),
        ("resync", "reconcile with the apiserver"), ("reconcile", "reconcile with the apiserver"),
        ("read_event", "records validated (pydantic)"), ("_validate", "records validated (pydantic)"),
        ("aiokafka", "Kafka client (fetch, commit)"), ("faststream", "Kafka client (fetch, commit)"),
        ("sqlalchemy", "PostgreSQL driver (greenlet side)"), ("asyncpg", "PostgreSQL driver (greenlet side)"),
        ("aiohttp", "HTTP client (responses)"), ("ssl.py", "HTTP client (responses)"),
    ),
    "cluster-watcher": (
        ("pod_event", "pod objects -> PodEvent"), ("node_event", "node objects -> NodeEvent"),
        ("ChangeFilter", "no-op updates filtered"),
        ("publish", "Kafka produce"), ("aiokafka", "Kafka produce"),
        ("list_and_watch", "watch stream read and parsed"), ("aiohttp", "watch stream read and parsed"),
        ("ssl.py", "watch stream read and parsed"),
    ),
}


def service_of(process: str) -> str:
    found = re.search(r"gpuplace (?:service ([\w-]+)|(bench))", process)
    return (found.group(1) or found.group(2)) if found else "other"


def read_samples(raw: Path) -> list[tuple[str, list[str], int]]:
    """(service, frames outermost first, count) of every busy stack; idle waits and imports left out."""
    out = []
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        parts = stack.split(";")
        processes = [p for p in parts if p.startswith("process ")]
        frames = [re.sub(r":\d+\)$", ")", p) for p in parts if not p.startswith("process ")]
        if not frames or any(w in frames[-1] for w in IDLE) or any("_find_and_load" in f for f in frames):
            continue
        out.append((service_of(processes[-1]) if processes else "other", frames, int(count)))
    return out


def hop_of(service: str, frames: list[str]) -> str:
    stack = ";".join(frames)
    return next((hop for marker, hop in HOPS.get(service, ()) if marker in stack), "other")


def table(samples: list[tuple[str, list[str], int]], rate: int, pods: int) -> str:
    by_service: Counter[str] = Counter()
    by_hop: dict[str, Counter[str]] = defaultdict(Counter)
    for service, frames, n in samples:
        by_service[service] += n
        by_hop[service][hop_of(service, frames)] += n
    lines = ["| service | hop | CPU s | ms per pod | share of the service |", "|---|---|---|---|---|"]
    for service, total in by_service.most_common():
        lines.append(f"| **{service}** | all | {total / rate:.1f} | {1000 * total / rate / pods:.2f} | 100% |")
        for hop, n in by_hop[service].most_common():
            lines.append(f"| | {hop} | {n / rate:.1f} | {1000 * n / rate / pods:.2f} | {100 * n / total:.0f}% |")
    return "\n".join(lines)


def flame_svg(samples: list[tuple[str, list[str], int]], title: str, width: int = 1600) -> str:
    """A flame graph (Brendan Gregg's layout: the root at the bottom, a frame as wide as its samples), one tower a
    service; frames narrower than a pixel are merged away."""
    tree: dict = {"n": 0, "kids": {}}
    for service, frames, n in samples:
        node = tree
        node["n"] += n
        for name in [service, *[f for f in frames if not f.startswith("<module>")]]:
            node = node["kids"].setdefault(name, {"n": 0, "kids": {}})
            node["n"] += n
    total = max(tree["n"], 1)
    row_h, rects, depth_max = 16, [], 0

    def draw(node: dict, name: str, x: float, depth: int) -> None:
        nonlocal depth_max
        w = width * node["n"] / total
        if w < 1.0:
            return
        depth_max = max(depth_max, depth)
        hue = 20 + (hash(name.split(" (")[-1].split("/")[0]) % 40)
        rects.append((x, depth, w, name, node["n"], f"hsl({hue},80%,{55 + depth % 3 * 5}%)"))
        for kid_name, kid in sorted(node["kids"].items()):
            draw(kid, kid_name, x, depth + 1)
            x += width * kid["n"] / total

    x0 = 0.0
    for name, kid in sorted(tree["kids"].items()):
        draw(kid, name, x0, 0)
        x0 += width * kid["n"] / total
    height = (depth_max + 3) * row_h
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" '
           f'font-size="11"><text x="4" y="12">{html.escape(title)}</text>']
    for x, depth, w, name, n, color in rects:
        y = height - (depth + 1) * row_h
        label = html.escape(name[: int(w / 7)]) if w > 28 else ""
        out.append(f'<g><title>{html.escape(name)} ({n} samples, {100 * n / total:.2f}%)</title>'
                   f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 1}" fill="{color}"/>'
                   f'<text x="{x + 2:.1f}" y="{y + 12}">{label}</text></g>')
    out.append("</svg>")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--out", type=Path, required=True, help="path without suffix: .txt, .svg and .md are written")
    parser.add_argument("--raw", type=Path, help="read these collapsed stacks instead of running the bench")
    args = parser.parse_args()
    raw = args.raw or args.out.with_suffix(".stacks.txt")
    command = ["gpuplace", "bench", "pipeline", "--nodes", str(args.nodes), "--pods", str(args.pods),
               "--repeats", "1", "--out", str(args.out.with_suffix(".bench.md"))]
    if args.raw is None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["py-spy", "record", "--subprocesses", "--rate", str(args.rate), "--format", "raw", "-o",
                        str(raw), "--", *command], check=True)
    samples = read_samples(raw)
    title = f"{' '.join(command[:-2])}: py-spy --rate {args.rate}, busy samples only"
    args.out.with_suffix(".svg").write_text(flame_svg(samples, title))
    report = (f"# Where gpuplace's CPU goes: {args.pods} pods on {args.nodes} nodes\n\n"
              f"`python bench/profile_pipeline.py --nodes {args.nodes} --pods {args.pods} --rate {args.rate} "
              f"--out {args.out}`: py-spy over `{' '.join(command[:-2])}`, every process sampled {args.rate} "
              "times a second; busy samples only (no idle wait, no start-up imports), over the whole run (fleet "
              "created, burst, drain), so the per-pod figures include the fleet's start. Flame graph: "
              f"[{args.out.with_suffix('.svg').name}]({args.out.with_suffix('.svg').name}).\n\n"
              + table(samples, args.rate, args.pods) + "\n")
    args.out.with_suffix(".md").write_text(report)
    sys.stdout.write(report)


if __name__ == "__main__":
    main()
