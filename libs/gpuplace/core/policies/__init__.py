"""Placement policies: FGD, the house policies and wrappers here; the paper's baselines in `baselines`;
`default_steps` (the filter/score/select steps most policies share) and `registry` (name -> policy)."""

__all__ = ["baselines", "default_steps", "exclusive", "fgd", "gpuplace", "latency_aware", "registry"]
