"""Evaluation: what measures placement decisions rather than making them.

The paper's arrival-only harness (`simulator`, with `arrivals` and `kpi`), the same harness with
defragmentation (`defrag_simulator`), autoscalers compared on a waiting wave (`autoscaler`, `scale_scenario`),
generated robotics fleets and pods (`robotics_fleet`), event-driven scenarios with departures and latency
(`scenarios`), the fleet over days under churn (`fleet`), small fleets over many seeds (`robustness`), the
latency model's cross-validation (`latency_evaluation`), and what a deployment needs (`capacity`: measured costs
per pod and per sample times a fleet's rates, docs/capacity.md). It imports the core and never the reverse
(import-linter checks both), so the services ship no evaluation code and the evaluation drives exactly the code
the services run.
"""

__all__ = [
    "arrivals", "autoscaler", "capacity", "defrag_simulator", "dra_stream", "fleet", "kpi", "latency_evaluation",
    "robotics_fleet", "robustness", "scale_scenario", "scenarios", "simulator", "stranded",
]
