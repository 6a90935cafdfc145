"""`gpuplace bench chaos` in miniature on the real stack (issue 20): services run as their own processes, two of
them are SIGKILLed and restarted while pods arrive and leave and malformed records are interleaved with canaries;
afterwards no pod is lost or bound twice, no GPU is over-committed and every malformed record is dead-lettered.

Kafka and PostgreSQL are not restarted here: other tests share them. The full-size run is the bench itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplace.harness.chaos_run import ChaosConfig, ChaosRun
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings

pytestmark = pytest.mark.integration


async def test_a_small_chaos_run_keeps_every_invariant(kafka_bootstrap: str, database_url: str, kube_clusters,
                                                       tmp_path: Path):
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url)
    config = ChaosConfig(kubeconfigs=cluster_kubeconfigs(), nodes=6, pods=20, kills=2, fuzz=50, seed=3,
                         kafka_restarts=0, postgres_restarts=0, kill_interval_s=6.0, min_phase_s=12.0,
                         settle_s=30.0, timeout_s=90.0, run_dir=tmp_path)
    result = await ChaosRun(config, settings).run()

    assert result.pods["submitted"] == 20 and result.pods["lost"] == 0, result.lost
    assert result.bound_twice == 0 and result.node_mismatch == []
    assert result.gpus_overcommitted == {"postgres": 0, "apiservers": 0}
    assert result.fuzz["sent"] == 50 and result.fuzz["dead_lettered"] == 50, result.fuzz
    assert sum(result.faults["kills"].values()) == 2
    assert result.canaries["sent"] > 0 and result.canaries["stored"] == result.canaries["sent"]
    assert result.to_json()["invariants"]["every fuzz record dead-lettered"]
