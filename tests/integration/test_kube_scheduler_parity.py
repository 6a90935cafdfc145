"""gpuplace agrees with kube-scheduler on every rule it does not improve on: a differential test on the real
stack, kube-scheduler (v1.37.2, the stack's: deploy/local/kube/go.mod) running beside gpuplace.

SPECS seeded random cases of harness/parity_specs.py (node affinity with empty terms and odd Gt/Lt operands, taints,
tolerations, host ports, pod slots, CPU, memory, ephemeral-storage, hugepages, extended resources, whole GPUs,
sidecars, init containers, pod-level requests, and fields gpuplace does not evaluate), each with twin nodes:
gpuplace's copy of the pod pinned to one twin, kube-scheduler's to the other (harness/parity_run.py). Whenever
gpuplace binds, kube-scheduler must bind (or have failed with an error rather than a rule); whenever gpuplace
refuses, kube-scheduler must refuse, unless the pod carries a field gpuplace refuses to place by. The large run
is `gpuplace bench parity --specs 1000` (bench/results/parity.md).
"""

from __future__ import annotations

import pytest

from gpuplace.harness.parity_run import run_parity, tally
from gpuplace.harness.parity_specs import cases, unevaluated
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import KafkaSettings

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

SPECS = 150
SEED = 20261204


async def test_gpuplace_and_kube_scheduler_agree_on_every_pinned_pod(kafka_bootstrap: str, database_url: str) -> None:
    kubeconfig = next(iter(cluster_kubeconfigs().values()))
    kafka = KafkaSettings(kafka_bootstrap=kafka_bootstrap).kafka
    results = await run_parity(cases(SEED, SPECS), kafka=kafka, database_url=database_url, kubeconfig=kubeconfig)
    counts = tally(results)
    broken = [r.as_json() for r in results if r.verdict in ("violation", "refused-more")]
    assert not broken, f"{counts}; {len(broken)} disagreement(s), first: {broken[0]}"
    for r in results:
        if r.gpuplace is not None and r.gpuplace.node is None:
            assert r.gpuplace.unschedulable, f"case {r.index}: gpuplace's pod waits without a reason"
        if r.gpuplace is not None and unevaluated(r.case.spec):  # refused, naming the field, never placed
            assert r.gpuplace.node is None and "gpuplace does not evaluate spec." in (r.gpuplace.unschedulable or "")
    assert any(unevaluated(r.case.spec) for r in results if r.gpuplace is not None)
    # Both outcomes must be common, or the comparison says little.
    refused = sum(1 for r in results if r.verdict == "agree" and r.gpuplace is not None and r.gpuplace.node is None)
    assert SPECS // 5 <= refused <= SPECS - SPECS // 5, f"{counts}: {refused} agreed refusals: lopsided"
