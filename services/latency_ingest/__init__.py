"""latency-ingest: gpuplace.latency.v1 -> per-pod latency windows in PostgreSQL."""
