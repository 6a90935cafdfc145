"""Defragmentation: when a pod is blocked by fragmentation, which running pods to move, and where.

Pure like the rest of the core: no I/O, time passed in as `now_s`. The executor (usecases) reserves
every target a plan names, then evicts wave by wave (Move.wave; all 0 unless Limits.max_chain_depth
allows chains), binding each wave's pods at their targets, then binds the beneficiary;
`apply.apply_plan` is that order on a snapshot.

Public API in one breath:
- `blockers.classify(snapshot, pod, policy) -> model.Blocker`: capacity, fragmentation, latency or
  a constraint (NONE if it fits);
- `planner.plan(snapshot, pod, running, policy, limits, history, now_s) -> model.Plan | model.Refusal`
  with `model.RunningPod`, `model.Limits`, `model.PastMove`;
- `apply.apply_plan(snapshot, plan, pod, running_by_uid)`: carry a plan out on a snapshot;
- `consolidate.consolidate(snapshot, running, policy, workload, limits, history, now_s, min_gain_mib=...)`:
  with no pod blocked, the one move that lowers stranded GPU memory most per second of cost.
The paper's harness with defragmentation is `gpuplace.sim.defrag_simulator`.
"""

__all__ = [
    "apply", "blockers", "chains", "consolidate", "cost", "eligibility", "landing", "model", "occupancy", "options",
    "planner", "targets",
]
