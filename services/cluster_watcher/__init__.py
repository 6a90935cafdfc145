"""cluster-watcher: one cluster's pods (schedulerName gpuplace) and nodes -> Kafka."""
