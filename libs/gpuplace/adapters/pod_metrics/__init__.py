"""Frame latency from the pods' own Prometheus histograms, scraped by gpu-agent on each GPU node (DESIGN.md §2).

`targets` (which pods opted in, where, on which GPU, beside whom), `histogram` (the exposition text's histogram
and one window of it), `scraper` (one round of scrapes -> gpuplace.latency.v1 windows).
"""
