"""Scenarios: event-driven runs of placement policies over time (arrivals and departures), beside the
paper's arrival-only harness (sim/simulator.py). Each scenario module exports `run_<name>_scenario`;
`latency_ledger` keeps the latency KPIs they report."""

from gpuplace.sim.scenarios import latency_ledger, robotics
from gpuplace.sim.scenarios.robotics import RoboticsScenario, run_robotics_scenario

__all__ = ["RoboticsScenario", "latency_ledger", "robotics", "run_robotics_scenario"]
