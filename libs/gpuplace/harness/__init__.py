"""Harnesses that run gpuplace end to end against real components, for the benchmarks, the CLI's `bench` and
`demo` commands and the integration tests: the local stack's processes and kubeconfigs (stack_env, stack_run) and
the Kafka user each service it starts logs in as (kafka_users), a
pipeline run on KWOK fleets (pipeline_run), the same fleets under kube-scheduler (kube_scheduler_process,
kube_scheduler_run, pipeline_comparison and its report, cpu_accounting), DRA runs (dra_objects, dra_run,
dra_report), parity with kube-scheduler's filters (parity_specs, parity_run, shared_cluster), and chaos runs
(chaos_faults, chaos_probes, chaos_fuzz, chaos_truth, chaos_run).

Below the CLI and above the services: a harness starts the services and reads their stores; nothing that runs in
a deployment imports a harness (import-linter's "Harnesses are for runs and tests" contract in pyproject.toml).
Each module's public API is its `__all__`; the tests use only those names.
"""

__all__ = ["chaos_faults", "chaos_fuzz", "chaos_probes", "chaos_run", "chaos_truth", "cpu_accounting", "dra_objects",
           "dra_report", "dra_run", "kafka_users", "kube_scheduler_process", "kube_scheduler_run", "parity_run",
           "parity_specs",
           "pipeline_comparison", "pipeline_comparison_report", "pipeline_run", "shared_cluster", "stack_env",
           "stack_run"]
