"""`gpuplace bench chaos` in miniature on the real stack (issue 20): services run as their own processes, two of
them are SIGKILLed and restarted while pods arrive and leave and malformed records are interleaved with canaries;
a node is deleted and registered again with pods on it, bound and node events are forged, a deletion is missed
while a cluster-watcher is down (issue 40); afterwards no pod is lost or bound twice, no GPU is over-committed,
every malformed record and forged node event is dead-lettered and the missed deletion is freed within 30 s of
the watcher's restart.

Kafka and PostgreSQL are not restarted here: other tests share them. The full-size run is the bench itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplace.harness.chaos_run import ChaosConfig, ChaosRun
from gpuplace.harness.chaos_truth import TruthCounts
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings

pytestmark = pytest.mark.integration


async def test_a_small_chaos_run_keeps_every_invariant(kafka_bootstrap: str, database_url: str, kube_clusters,
                                                       tmp_path: Path):
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url)
    config = ChaosConfig(kubeconfigs=cluster_kubeconfigs(), nodes=6, pods=20, kills=2, fuzz=50, seed=3,
                         kafka_restarts=0, postgres_restarts=0, kill_interval_s=6.0, min_phase_s=12.0,
                         settle_s=30.0, timeout_s=90.0, run_dir=tmp_path,
                         truth=TruthCounts(node_recreates=1, forged_bound=1, forged_nodes=2, missed_deletions=1))
    result = await ChaosRun(config, settings).run()
    print("chaos result:", json.dumps(result.to_json(), default=str))  # shown when an assertion fails

    assert result.pods["submitted"] == 20 and result.pods["lost"] == 0, result.lost
    assert result.bound_twice == 0 and result.node_mismatch == []
    assert result.gpus_overcommitted == {"postgres": 0, "apiservers": 0}
    assert result.fuzz["sent"] == 50 and result.fuzz["dead_lettered"] == 50, result.fuzz
    assert sum(result.faults["kills"].values()) == 2
    assert result.canaries["sent"] > 0 and result.canaries["stored"] == result.canaries["sent"]
    assert result.to_json()["invariants"]["every fuzz record dead-lettered"]
    truth = result.truth
    assert len(truth["node_recreates"]) == 1 and truth["skipped"] == {}, truth
    # a forged node event is always refused; a forged bound event may instead meet its pod's bind in flight,
    # which placement ignores (it changes nothing): the invariants above are what tell whether it did harm
    assert truth["forged"]["node capacity"] == truth["forged"]["node deletion"] == {"sent": 1, "dead_lettered": 1}
    assert truth["forged"]["bound"]["sent"] == 1, truth
    (missed,) = truth["missed_deletions"]
    assert missed["deleted_before_restart"] and missed["freed_s_after_watcher_restart"] is not None
    assert missed["freed_s_after_watcher_restart"] <= 30, missed
    assert result.info["allocations_of_gone_pods"] == 0
