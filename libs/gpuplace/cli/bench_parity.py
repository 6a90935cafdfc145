"""`gpuplace bench parity`: gpuplace against kube-scheduler on generated pod specs, on the local stack.

    gpuplace bench parity --specs 1000 --seed 20261204

Each spec of harness/parity_specs.py goes to both schedulers on twin nodes (harness/parity_run.py). The report
counts each verdict, lists every disagreement with its node and spec, and lists apart the specs kube-scheduler
refused with an error rather than a rule and the specs gpuplace refused for a field it does not evaluate. A
violation (gpuplace bound a pod kube-scheduler refused by a rule: its node breaks a Kubernetes rule) makes the
command exit 1.
"""

from __future__ import annotations

import asyncio
import json
import platform
import time
from pathlib import Path

import typer

from gpuplace.cli import bench
from gpuplace.cli.console import new_console
from gpuplace.harness.parity_run import BATCH, VERDICTS, CaseResult, run_parity, tally
from gpuplace.harness.parity_specs import cases
from gpuplace.harness.shared_cluster import Outcome
from gpuplace.harness.stack_env import cluster_kubeconfigs, resolve
from gpuplace.harness.stack_run import stack_fallbacks
from gpuplace.settings import KafkaSettings

DEFAULT_OUT = Path("bench/results/parity.md")
DEFAULT_SEED = 20261204
EXPLAINED = {
    "agree": "both bound, or both refused",
    "violation": "gpuplace bound a pod kube-scheduler refused by a rule: gpuplace's node breaks that rule",
    "kube-error": "gpuplace bound; kube-scheduler refused with an error, not a rule (listed apart)",
    "unevaluated": "gpuplace refused for a field it does not evaluate; kube-scheduler bound (listed apart)",
    "refused-more": "gpuplace refused a pod kube-scheduler bound, for no such field",
    "rejected": "the apiserver refused the pod itself (both copies)",
}


def bench_parity(
    specs: int = typer.Option(1000, "--specs", min=1, help="Generated pod specs, each on its own twin nodes."),
    seed: int = typer.Option(DEFAULT_SEED, "--seed", help="Seed of the specs: the same seed, the same specs."),
    batch: int = typer.Option(BATCH, "--batch", min=1, help="Specs per batch (2 nodes and 2 pods each)."),
    out: Path = typer.Option(DEFAULT_OUT, "-o", "--out", help="Markdown report; the JSON goes beside it."),
) -> None:
    """Generated pod specs through gpuplace and kube-scheduler side by side: every disagreement, listed."""
    console = new_console()
    kafka, database, kubeconfigs = resolve("GPUPLACE_KAFKA_BOOTSTRAP"), resolve("GPUPLACE_DATABASE_URL"), \
        cluster_kubeconfigs()
    access = KafkaSettings(**stack_fallbacks()).kafka  # the stack's Kafka with its admin user, or the environment's
    if not (kafka and database and kubeconfigs):
        raise typer.BadParameter("needs the local stack (make stack-up) or GPUPLACE_KAFKA_BOOTSTRAP, "
                                 "GPUPLACE_DATABASE_URL and a kubeconfig", param_hint="environment")
    started = time.perf_counter()
    results = asyncio.run(run_parity(
        cases(seed, specs), kafka=access, database_url=database, kubeconfig=next(iter(kubeconfigs.values())),
        batch=batch, progress=lambda done: console.print(f"{done} of {specs} specs decided by both schedulers")))
    seconds = time.perf_counter() - started
    counts = tally(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report(results, seed=seed, seconds=seconds))
    out.with_suffix(".json").write_text(json.dumps(
        {"seed": seed, "specs": specs, "counts": counts, "seconds": round(seconds, 1),
         "cases": [r.as_json() for r in results if r.verdict != "agree"]}, indent=1) + "\n")
    console.print(f"{counts}\nwrote {out} and {out.with_suffix('.json')}")
    if counts["violation"]:
        raise typer.Exit(1)


def report(results: list[CaseResult], *, seed: int, seconds: float) -> str:
    counts = tally(results)
    bound = sum(1 for r in results if r.verdict == "agree" and r.gpuplace is not None and r.gpuplace.node)
    lines = [
        "# gpuplace and kube-scheduler on generated pod specs", "",
        f"`gpuplace bench parity --specs {len(results)} --seed {seed}` on the local stack (kube-scheduler v1.37.2), "
        f"{seconds:.0f} s, {platform.node()}. Each spec ran on its own twin nodes, one copy per scheduler "
        "(libs/gpuplace/harness/parity_run.py). Disagreements, with their node and spec, are in the JSON beside this "
        "page.", "",
        "| verdict | specs | meaning |", "|---|---|---|",
        *(f"| {v} | {counts[v]} | {EXPLAINED[v]} |" for v in VERDICTS), "",
        f"Of the {counts['agree']} agreements, both schedulers bound {bound} and refused {counts['agree'] - bound}.",
    ]
    for verdict in VERDICTS[1:-1]:
        listed = [r for r in results if r.verdict == verdict]
        if listed:
            lines += ["", f"## {verdict}", ""]
            lines += [f"- spec {r.index}: gpuplace {_said(r.gpuplace)}; kube-scheduler {_said(r.kube)}"
                      for r in listed[:50]]
    return "\n".join(lines) + "\n"


def _said(outcome: Outcome | None) -> str:
    if outcome is None:
        return "refused: rejected by the apiserver"
    return f"bound to {outcome.node}" if outcome.node else \
        f"refused: {(outcome.unschedulable or outcome.error or '')[:300]}"


def register(app: typer.Typer) -> None:
    bench.bench_app.command("parity")(bench_parity)


__all__ = ["bench_parity", "register", "report"]
