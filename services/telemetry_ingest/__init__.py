"""telemetry-ingest: gpuplace.telemetry.v1 -> observed GPU memory, utilisation and health in PostgreSQL."""
