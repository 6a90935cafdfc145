"""The `gpuplace` command line (typer + rich)."""
