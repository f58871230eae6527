"""offer_dataframe and format("sqldelay") writes over a list of shard URLs (SQLite, PostgreSQL
and MariaDB side by side): every row lands on the shard ShardedQueue routes its key to."""

from __future__ import annotations

import json

import pytest

from sqldelay import DelayedQueue, InvalidArgumentError, ShardedQueue
from sqldelay.spark import OfferCounts, offer_dataframe

from .conftest import SPARK_BACKENDS
from .spark_helpers import messages_df, queue_rows

ROWS = 3000


def test_rows_go_to_the_shard_of_their_key(spark, spark_backends, queue_name):
    backends = [spark_backends.get(name) for name in SPARK_BACKENDS]
    urls = [url for url, _, _ in backends]
    table = backends[0][2]  # every backend's table has the same name
    df = messages_df(spark, ROWS)
    counts = offer_dataframe(df, url=urls, queue=queue_name, key="key", payload="body",
                             at="send_at", table_name=table)
    assert counts == OfferCounts(created=ROWS, updated=0, ignored=0)

    sharded = ShardedQueue([DelayedQueue(engine, queue_name, table_name=table)
                            for _, engine, _ in backends])
    keys = {f"k{i}" for i in range(ROWS)}
    for (_, engine, _), (name, queue) in zip(backends, sharded.shards.items(), strict=True):
        stored = [row[1] for row in queue_rows(engine, table, queue.pkind)]
        assert len(stored) == len(set(stored))
        assert set(stored) == {k for k in keys if sharded.route(k) == name}
        assert stored  # each database got its share

    (messages_df(spark, ROWS, version=2).write.format("sqldelay")
     .option("shards", json.dumps(urls)).option("queue", queue_name).option("table", table)
     .option("payload", "body").option("at", "send_at").option("update", "true")
     .mode("append").save())
    assert sharded.get("k42").payload == {"id": 42, "version": 2, "text": "hello"}
    stats = sharded.stats()
    assert stats.due + stats.scheduled == ROWS

    with pytest.raises(InvalidArgumentError, match="list of shard URLs"):
        offer_dataframe(df, url=[], queue=queue_name, payload="body", table_name=table)
