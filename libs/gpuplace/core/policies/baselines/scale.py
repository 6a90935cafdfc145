"""The largest node of the paper's clusters, by which BestFit, DotProd and GpuClustering normalise a node.

The reference simulator (Weng et al., ATC'23) divides free and requested CPU by 128 cores and GPU by 8 GPUs
whatever the node's own size, so these are constants of the policies, not properties of a cluster.
"""

from gpuplace.core.model import MILLI_PER_GPU

MAX_CPU_MILLI = 128_000
"""128 cores, in milli-CPU."""
MAX_GPU_MILLI = 8 * MILLI_PER_GPU
"""8 GPUs, in milli-GPU."""

__all__ = ["MAX_CPU_MILLI", "MAX_GPU_MILLI"]
