"""The fleet over time (issue 18): regions x clusters x nodes of mixed GPUs under churn, simulated by events.

- plan.py: the fleet and its demand, drawn up front from the seed (the same for every policy);
- cluster.py: one cluster as a placement service holds it: snapshot, policy, queue, running pods;
- engine.py: the discrete-event run (`FleetSim`, `run_fleet`), with defragmentation under churn;
- kpis.py: what is measured and how (stranded GPU memory, allocation, pending times, SLO, moves);
- autoscaling.py: what two autoscalers would add as pods wait (the run unchanged);
- scaling.py: an autoscaler that acts (adds and removes nodes), with latency_view.py's filter for growing clusters
  and headroom.py's spare room.
"""

from gpuplace.sim.fleet.engine import FLEET_LIMITS, FleetSim, run_fleet
from gpuplace.sim.fleet.plan import FleetScenario, make_plan

__all__ = ["FLEET_LIMITS", "FleetScenario", "FleetSim", "autoscaling", "cluster", "engine", "headroom", "kpis",
           "latency_view",
           "make_plan", "plan", "run_fleet", "scaling"]
