"""The scenarios, in the order a full run takes them; each is ``scenario(bench)``."""

from __future__ import annotations

from . import throughput

SCENARIOS = {
    "offer": throughput.offer,
    "offer_many": throughput.offer_many,
    "poll_ack": throughput.poll_ack,
    "poll_many_ack_many": throughput.poll_many_ack_many,
}
