"""`gpuplace explain POD [--namespace NS] [--cluster C] [--json]`: why a pod is where it is, or why it waits.

Reads the fleet state (GPUPLACE_DATABASE_URL) through usecases/explain; a pod gpuplace never saw, or a name that
several clusters or namespaces use, ends with one `gpuplace: error: ...` line and exit status 1.
"""

from __future__ import annotations

import asyncio
import json
import sys

import typer

from gpuplace.bootstrap import database
from gpuplace.settings import Settings
from gpuplace.usecases.explain import ExplainError, Explanation, explain


def register(app: typer.Typer) -> None:
    app.command("explain")(explain_command)


def explain_command(
    pod: str = typer.Argument(..., help="The pod: NAME or NAMESPACE/NAME."),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help="The pod's namespace."),
    cluster: str | None = typer.Option(None, "--cluster", help="The cluster, when the name is used in several."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object with the same facts."),
) -> None:
    """Why a pod is where it is (policy, score against the runners-up, time waited), why it waits (reasons per
    node class, attempts, defragmentation plans tried), or why it was moved (the plan and its beneficiary)."""
    try:
        found = asyncio.run(_explain(Settings(), pod, namespace, cluster))
    except ExplainError as exc:
        print(f"gpuplace: error: {exc}", file=sys.stderr)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(found.as_json(), indent=2) if as_json else found.text())


async def _explain(settings: Settings, pod: str, namespace: str | None, cluster: str | None) -> Explanation:
    async with database(settings) as uow_factory:
        return await explain(uow_factory, pod, namespace=namespace, cluster=cluster)


__all__ = ["register"]
