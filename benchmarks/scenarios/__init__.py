"""The scenarios, in the order a full run takes them; each is ``scenario(bench)``.

OPTIONAL ones run only when named with ``--scenario``.
"""

from __future__ import annotations

from . import (
    asyncio_front,
    churn,
    contention,
    flow,
    history,
    inspection,
    memory,
    mysql_offer,
    peers,
    processes,
    scaling,
    shards,
    spark,
    steady,
    tasks,
    throughput,
    web,
    worker,
)

SCENARIOS = {
    "offer": throughput.offer,
    "offer_many": throughput.offer_many,
    "offer_many_changed": throughput.offer_many_changed,
    "mysql_offer": mysql_offer.mysql_offer,
    "offer_new_keys": contention.offer_new_keys,
    "poll_ack": throughput.poll_ack,
    "poll_many_ack_many": throughput.poll_many_ack_many,
    "steady": steady.steady,
    "scaling_backlog": scaling.backlog,
    "scaling_consumers": scaling.consumers,
    "fresh_backlog": scaling.fresh_backlog,
    "churn": churn.churn,
    "flow_drain": flow.flow_drain,
    "flow_fairness": flow.flow_fairness,
    "flow_serial": flow.flow_serial,
    "flow_plans": flow.flow_plans,
    "history_offer": history.history_offer,
    "history_drain": history.history_drain,
    "peers": peers.peers,
    "inspect_queues": inspection.inspect_queues,
    "peek_depth": inspection.peek_depth,
    "worker_drain": worker.worker_drain,
    "worker_wakeup": worker.worker_wakeup,
    "tasks_drain": tasks.tasks_drain,
    "async_overhead": asyncio_front.async_overhead,
    "async_peers": asyncio_front.async_peers,
    "async_worker_drain": asyncio_front.async_worker_drain,
    "async_worker_wakeup": asyncio_front.async_worker_wakeup,
    "web_push": web.web_push,
    "spark_offer": spark.spark_offer,
    "shards_scaling": shards.shards_scaling,
    "shards_routing": shards.shards_routing,
    "worker_rss": memory.worker_rss,
    "offer_many_rss": memory.offer_many_rss,
    "worker_processes": processes.worker_processes,
}
# Spark starts slowly; the shard scenarios start PostgreSQL servers of their own; the memory
# scenarios move a million messages each; worker_processes starts worker commands, 9 times
OPTIONAL = {"spark_offer", "shards_scaling", "shards_routing", "worker_rss", "offer_many_rss",
            "worker_processes"}
