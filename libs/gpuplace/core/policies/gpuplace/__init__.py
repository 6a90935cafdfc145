"""gpuplace, the house placement policy (policy.py), and the pieces it is built from.

- shape_estimate.py: the arriving workload, decayed shape frequencies of the pods seen;
- pattern_prices.py: LP prices of shared-GPU request sizes (Gilmore-Gomory), pure NumPy;
- hole_loss.py: what putting a request into a hole of a GPU gives up, from those prices;
- node_waste.py: a node's free share the workload could not use (pool-weighted FGD + CPU/memory stranding);
- states.py: interned node states, the cache key of everything above;
- state_terms.py: the per-state values kept between decisions;
- whole_gpu_reserve.py: when a shared pod of more than half a GPU is kept from opening a whole GPU.
"""

from gpuplace.core.policies.gpuplace.policy import NAME, Gpuplace

__all__ = [
    "NAME", "Gpuplace", "hole_loss", "node_waste", "pattern_prices", "policy", "shape_estimate", "state_terms",
    "states", "whole_gpu_reserve",
]
