"""Kafka wiring shared by every service, one idea a module:

- connection: access settings (bootstrap, TLS, SASL) as client options and FastStream security; the broker factory
- partitioning: every record of a cluster to one partition (cluster_partitioner, partition_of)
- producer: the one JSON publish every producer goes through (publish_json, publish_event); Acknowledgements
- consumer: the typed, dead-lettering subscriber (subscribe, Route), and what happens to each kind of bad record
- offsets: explicit, batched offset commits and the consumer's lag
- transient: which errors mean "read the record again" rather than "dead-letter it" (is_transient)
- dead_letters: the copies of records a consumer cannot handle, with the reason
- topics: creating, checking (one partition count for topics read together), listing and deleting topics
- event_log: a cluster's event log read out of Kafka and published back (`gpuplace export | import`)
- coordinator_log: aiokafka's coordinator-election errors said at INFO
- login: a refused SASL login told from a broker that is down

This package's public names are re-exported here, so callers import `gpuplace.adapters.kafka` and need not know
which module holds what (event_log and coordinator_log are imported by their own path).
"""

from gpuplace.adapters.kafka.connection import (
    Kafka,
    check_broker,
    client_options,
    make_broker,
    reaching,
    start_broker,
)
from gpuplace.adapters.kafka.consumer import Route, subscribe
from gpuplace.adapters.kafka.dead_letters import dead_letter, validation_reason
from gpuplace.adapters.kafka.offsets import ConsumerLag, OffsetCommits
from gpuplace.adapters.kafka.partitioning import cluster_partitioner, partition_of
from gpuplace.adapters.kafka.producer import JSON_HEADERS, Acknowledgements, publish_event, publish_json
from gpuplace.adapters.kafka.topics import (
    admin_client,
    broker_count,
    check_copartitioned,
    delete_topics,
    ensure_copartitioned,
    ensure_topics,
    list_topics,
)
from gpuplace.adapters.kafka.transient import is_transient

__all__ = ["JSON_HEADERS", "Acknowledgements", "ConsumerLag", "Kafka", "OffsetCommits", "Route", "admin_client",
           "broker_count", "check_broker", "check_copartitioned", "client_options", "cluster_partitioner",
           "dead_letter", "delete_topics", "ensure_copartitioned", "ensure_topics", "is_transient", "list_topics",
           "make_broker", "partition_of", "publish_event", "publish_json", "reaching", "start_broker", "subscribe",
           "validation_reason"]
