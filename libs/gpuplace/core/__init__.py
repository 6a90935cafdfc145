"""The placement core: pure Python + NumPy, no I/O, no clock, no unseeded randomness.

Everything that decides where a pod goes lives here, so the services, the simulators (gpuplace.sim), replay
and the benchmarks all drive the same code. What evaluates decisions (harnesses, arrivals, KPIs, generated
fleets, scenarios) lives in gpuplace.sim, which imports the core and never the reverse.

Public API in one breath:
- build the cluster: `snapshot.ClusterSnapshot(nodes)` from `model.Node`s (`Node.with_gpus(...)`);
- place one pod: `framework.runtime.place(snapshot, pod, policy)` -> `Decision` (node, GPU indices, or a
  diagnosis: why each node refused it), then `framework.runtime.bind(snapshot, demand.resolve(pod, snapshot),
  decision)`;
- get a policy: `policies.registry.create(name, PolicyContext(workload, rng))`, the workload from
  `workload.typical_workload(recent_pods, snapshot.gpu_types)`;
- replay a trace: `gpuplace.sim.simulator.run(nodes, pods, policy_name, seed)`.
"""

__all__ = [
    "arrays", "defrag", "demand", "filters", "fragmentation", "framework", "gpu_load", "gpu_selection", "gpu_usable",
    "latency", "model", "node_rules", "node_states", "policies", "queue", "scale_hints", "snapshot", "state_ids",
    "topology", "workload",
]
