"""MaskedViews: a latency view per decision that per-state caches follow row by row (core/snapshot.py)."""

import numpy as np

from gpuplace.core.model import Node
from gpuplace.core.policies.gpuplace.states import StateIndex
from gpuplace.core.snapshot import ClusterSnapshot, MaskedViews


def _cluster(n=6):
    return ClusterSnapshot([Node.with_gpus(f"n{i}", 64000, 262144, 4, "NVIDIA-H100-80GB-HBM3", 81559)
                            for i in range(n)])


def test_views_share_one_uid_and_move_a_rows_version_only_where_the_row_or_its_mask_changed():
    snapshot = _cluster()
    views = MaskedViews(snapshot)
    none = np.zeros(snapshot.gpu_exists.shape, dtype=bool)
    first = views.view(snapshot, none)
    masked = none.copy()
    masked[2, 1] = True
    second = views.view(snapshot, masked)
    assert second.uid == first.uid != snapshot.uid
    assert np.flatnonzero(second.version != first.version).tolist() == [2]
    assert second.free_share_milli[2, 1] == 0 and second.free_memory_mib[2, 1] == 0
    assert snapshot.free_share_milli[2, 1] == 1000  # the snapshot itself is untouched
    snapshot.charge(4, (0,), 1000, 1024, 500, 40000, kind=1)
    third = views.view(snapshot, masked)
    assert np.flatnonzero(third.version != second.version).tolist() == [4]
    assert third.free_share_milli[4, 0] == 500


def test_state_ids_followed_through_views_equal_ids_computed_afresh():
    """The house policy's StateIndex keys a view's changed rows only; the ids must be those of a fresh index."""
    rng = np.random.default_rng(1)
    snapshot = _cluster(20)
    views, followed = MaskedViews(snapshot), StateIndex(snapshot.max_gpus)
    for step in range(200):
        if step % 4 == 0:
            node, gpu = int(rng.integers(20)), int(rng.integers(4))
            if snapshot.free_share_milli[node, gpu] >= 250:
                snapshot.charge(node, (gpu,), 100, 128, 250, 20000, kind=1)
        view = views.view(snapshot, snapshot.gpu_exists & (rng.random(snapshot.gpu_exists.shape) < 0.1))
        fresh = StateIndex(snapshot.max_gpus)
        states_followed = followed.free_share_milli[followed.ids(view)]
        states_fresh = fresh.free_share_milli[fresh.ids(view)]
        assert (states_followed == states_fresh).all()
