"""A perception program that reports its frame latency the way gpuplace reads it: a Prometheus histogram served
over HTTP, scraped by gpu-agent on its node (README, "Reporting latency"). Depends on prometheus_client only."""
