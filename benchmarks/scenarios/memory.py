"""Memory: a worker's resident set over a long drain, and the peak of one huge ``offer_many``.

worker_rss: ``rss_messages`` due no-op messages (``fill``), drained by
``Worker(concurrency=consumers, batch_size=batch).drain()`` in a fresh process, which reads its
own resident set (VmRSS in /proc/self/status) every 1% of the messages handled: the curve must
stay flat (start, peak and end RSS beside it; the drain rate in the first and last tenth of
the messages beside them).
offer_many_rss: for each N of ``offer_many_sizes``, a fresh process builds N messages (what the
caller holds: the input) and makes ONE ``offer_many`` call of them; its peak resident set
(VmHWM) over the resident set just before the call is what the call itself needed. The input's
size in Python objects and the total of the encoded payloads stand beside it, so the reader
sees which memory is the caller's and which is ours.

The measured work runs in a child process (``python -m benchmarks.scenarios.memory``) so that
neither the benchmark's earlier scenarios nor its fills are in the figures; both scenarios are
long (a million messages each) and run only when named (``--scenario worker_rss``).
Linux only: the figures come from /proc.
"""

from __future__ import annotations

import gc
import itertools
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from ..harness import OURS, Bench, fill

ROOT = Path(__file__).resolve().parents[2]  # the directory holding benchmarks/
MIB = 1 << 20
SAMPLES = 100  # RSS readings over a drain
# an offer_many_rss payload: a no-op job with a sequence number and a text of this many
# characters (one string shared by every message, as a template's would be)
PAD_CHARS = 200


def proc_status(field: str) -> int:
    """A size from /proc/self/status (VmRSS: resident now; VmHWM: the peak so far), bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _child(bench: Bench, what: str, *args: object) -> dict:
    """Run ``what`` of this module in a fresh process over the run's database; its JSON."""
    done = subprocess.run(
        [sys.executable, "-m", __name__, what, bench.url, bench.table_for(), *map(str, args)],
        cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def worker_rss(bench: Bench) -> None:
    n = bench.sizes.rss_messages
    queue = bench.queue("worker_rss")
    fill(queue, n)
    got = _child(bench, "drain", queue.name, n, bench.consumers, bench.batch)
    samples = got["samples"]
    series = [[handled, rss / MIB] for handled, rss, _ in samples]
    tenth = max(1, len(samples) // 10)  # the drain rate early and late: does it hold?
    params = {"messages": n, "handled": got["handled"], "concurrency": bench.consumers,
              "batch": bench.batch, "seconds": got["seconds"],
              "rate_first_tenth": _rate(samples[0], samples[tenth]),
              "rate_last_tenth": _rate(samples[-1 - tenth], samples[-1])}
    bench.add("worker_rss", OURS, "RSS MiB, start", samples[0][1] / MIB, params=params)
    bench.add("worker_rss", OURS, "RSS MiB, peak (VmHWM)", got["peak"] / MIB,
              params={**params, "axes": ("messages handled", "RSS MiB")}, series=series,
              note="the curve: RSS every 1% of the messages handled")
    bench.add("worker_rss", OURS, "RSS MiB, end", samples[-1][1] / MIB, params=params)


def _rate(earlier: list, later: list) -> float:
    """Messages/s between two samples [handled, rss, seconds]."""
    return (later[0] - earlier[0]) / max(later[2] - earlier[2], 1e-9)


def offer_many_rss(bench: Bench) -> None:
    ours, given = [], []
    for n in bench.sizes.offer_many_sizes:
        queue = bench.queue("offer_many_rss")
        got = _child(bench, "offer_many", queue.name, n)
        queue.clear()
        call = (got["peak"] - got["before_call"]) / MIB
        params = {"messages": n, "input_mib": got["input_bytes"] / MIB,
                  "input_rss_mib": (got["before_call"] - got["baseline"]) / MIB,
                  "encoded_payloads_mib": got["encoded_bytes"] / MIB,
                  "baseline_rss_mib": got["baseline"] / MIB, "seconds": got["seconds"],
                  "payload": f"{{job, seq, {PAD_CHARS} shared characters}}"}
        bench.add("offer_many_rss", OURS, f"peak MiB over the input, {n:,} messages", call,
                  params=params)
        ours.append([n, call])
        given.append([n, got["input_bytes"] / MIB])
    axes = {"axes": ("messages in one offer_many", "MiB")}
    bench.add("offer_many_rss", OURS, "peak MiB of the call, largest", ours[-1][1],
              params={**axes, "series_label": "peak of the call over its input"}, series=ours)
    bench.add("offer_many_rss", "input", "MiB of Message objects, largest", given[-1][1],
              params={**axes, "series_label": "the caller's Message list"}, series=given)


# ---- the child processes ----------------------------------------------------------------------


def _queue(url: str, table: str, name: str):
    import sqlalchemy as sa

    from sqldelay import DelayedQueue

    queue = DelayedQueue(sa.create_engine(url), name, table_name=table)
    queue.stats()  # connected: the pool's connection is part of the baseline
    return queue


def _drain(url: str, table: str, name: str, n: str, concurrency: str, batch: str) -> dict:
    from sqldelay.worker import Worker

    queue = _queue(url, table, name)
    step = max(1, int(n) // SAMPLES)
    counter = itertools.count(1)
    began = time.perf_counter()
    samples = [[0, proc_status("VmRSS"), 0.0]]

    def handler(_) -> None:
        handled = next(counter)  # one step at a time under the GIL: each count once
        if handled % step == 0:
            samples.append([handled, proc_status("VmRSS"), time.perf_counter() - began])

    worker = Worker(queue, handler, concurrency=int(concurrency), batch_size=int(batch))
    handled = worker.drain()
    seconds = time.perf_counter() - began
    return {"handled": handled, "seconds": seconds,
            "samples": samples + [[handled, proc_status("VmRSS"), seconds]],
            "peak": proc_status("VmHWM")}


def _offer_many(url: str, table: str, name: str, n: str) -> dict:
    from sqldelay import Message

    queue = _queue(url, table, name)
    gc.collect()
    baseline = proc_status("VmRSS")
    at = datetime.now(UTC)
    pad = "x" * PAD_CHARS
    messages = [Message(f"m{i}", {"job": "noop", "seq": i, "pad": pad}, at)
                for i in range(int(n))]
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM starts again from the resident set now: the call's own peak
    before = proc_status("VmRSS")
    began = time.perf_counter()
    outcomes = queue.offer_many(messages)
    seconds = time.perf_counter() - began
    peak = proc_status("VmHWM")
    assert len(outcomes) == len(messages)
    return {"baseline": baseline, "before_call": before, "peak": peak, "seconds": seconds,
            "input_bytes": _deep_size(messages),
            "encoded_bytes": sum(len(queue.serializer.encode(m.payload)) for m in messages)}


def _deep_size(root: object) -> int:
    """Bytes of ``root`` and every object it reaches (each counted once; classes left out)."""
    seen: set[int] = set()
    stack, total = [root], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


if __name__ == "__main__":
    what, *rest = sys.argv[1:]
    print(json.dumps({"drain": _drain, "offer_many": _offer_many}[what](*rest)))
