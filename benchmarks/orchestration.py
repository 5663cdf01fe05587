"""No-op node throughput: genloop vs raw Dramatiq, same broker, threads and message count.

    python benchmarks/orchestration.py [--nodes 1000] [--threads 4] [--repeats 3] [--json]
    python benchmarks/orchestration.py --redis redis://127.0.0.1:6379/8 [--fanout 10000]
    python benchmarks/orchestration.py [--redis URL] --fair

Both sides run on one broker and one Dramatiq Worker in this process: the StubBroker with the
SQLite store (embedded), or with ``--redis`` a RedisBroker with the Redis store (keys under a
fresh prefix, deleted afterwards). Raw Dramatiq sends N messages to a no-op actor and joins the
queue. genloop submits a graph of N independent no-op nodes and waits for the run; every node
goes through validation, the store, a claim, a result and the scheduler. Its roots, released at
once, travel up to 16 to a message (``workers/runtime/chunks.py``); raw Dramatiq sends one per
call, as its API does, and also as many items to a message as genloop's chunks hold (``raw,
chunked``: the plain alternative for many tiny tasks). ``--fair`` sends genloop's messages through
its fair queue (in memory, or in Redis with ``--redis``), the path served and pooled deployments
take. Also: latency from submit to the first node's start (p50/p99 over single-node runs), and with
``--fanout`` one run that maps a node over that many items (wall time, and Redis memory per node
instance).

On Redis it also counts Redis commands per node (``MONITOR``: what clients send, so a script
call counts as one; Dramatiq's own commands included) over one more run of up to 400 nodes,
polled slowly and with the polls subtracted, and the same for raw Dramatiq messages.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker
from pydantic import BaseModel

from genloop.sdk import Graph
from genloop.workers import OpRegistry, op
from genloop.workers.artifacts import LocalArtifactStore
from genloop.workers.pool.broker import wire
from genloop.workers.runtime.chunks import chunk_size, chunked
from genloop.workers.stores import SqliteStateStore
from genloop.workers.stores.records import InstanceRecord
from genloop.workers.stores.redis import RedisStateStore


class Nothing(BaseModel):
    pass


class Index(BaseModel):
    """Each node gets its own index, so each has its own result key and really executes."""

    i: int


class Count(BaseModel):
    count: int


def build(home: str, threads: int, redis_url: str | None, prefix: str, fair: bool = False,
          broker_class: type[RedisBroker] = RedisBroker, worker_timeout: int = 20):
    registry = OpRegistry()
    op("noop", params=Index, output=Nothing, registry=registry)(
        lambda params, inputs, ctx: Nothing()
    )
    op("spread", params=Count, output=Index, registry=registry)(
        lambda params, inputs, ctx: [Index(i=i) for i in range(params.count)]
    )
    op("each", output=Nothing, registry=registry)(lambda params, inputs, ctx: Nothing())
    op("gather", output=Count, registry=registry)(
        lambda params, inputs, ctx: Count(count=len(inputs))
    )
    if redis_url:
        broker = broker_class(url=redis_url, namespace=prefix)
        store = RedisStateStore(redis_url, prefix=prefix)
    else:
        broker = StubBroker()
        store = SqliteStateStore(f"{home}/state.db")
    broker.emit_after("process_boot")
    # --fair: the path real deployments take, tenants' turns kept in memory (embedded, a
    # window of one message per thread) or in Redis (a pool: its window is the live threads).
    wiring = wire(broker, store, LocalArtifactStore(f"{home}/artifacts"), registry,
                  queues=("cpu",), fair_window=threads if fair and not redis_url else None,
                  shared_fair=prefix if fair and redis_url else None)
    started: dict[int, float] = {}
    done = threading.Semaphore(0)

    @dramatiq.actor(broker=broker, queue_name="cpu", actor_name="raw_noop")
    def raw_noop(i: int, mark: bool = False) -> None:
        if mark:
            started[i] = time.perf_counter()
            done.release()

    @dramatiq.actor(broker=broker, queue_name="cpu", actor_name="raw_noop_chunk")
    def raw_noop_chunk(items: list[int]) -> None:
        for _ in items:
            pass

    worker = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=worker_timeout)
    worker.start()
    return broker, wiring, worker, (raw_noop, raw_noop_chunk), started, done


def fanout(wiring, n: int, redis_client) -> dict:
    g = Graph()
    src = g.add("spread", id="spread", params={"count": n})
    each = g.add("each", id="each", inputs=[src], map=True)
    g.add("gather", id="gather", inputs=[each])
    before = redis_client.info("memory")["used_memory"] if redis_client else None
    t0 = time.perf_counter()
    run = wiring.scheduler.submit(g)
    store = wiring.scheduler.store
    while not store.get_run(run.id).status.terminal:
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    out = {"fanout_nodes": n, "fanout_status": store.get_run(run.id).status.value,
           "fanout_wall_s": wall}
    if redis_client:
        out["redis_bytes_per_node"] = (redis_client.info("memory")["used_memory"] - before) / n
    return out


#: A queue no worker reads: the expansion benchmark's messages wait there until deleted.
EXPANSION_QUEUE = "bench-expansion"


@contextmanager
def round_trips() -> Iterator[list[int]]:
    """Counts socket writes to Redis from this thread while the block runs (a pipeline is one):
    ``counts[0]``, which the caller may reset."""
    from redis.connection import AbstractConnection

    me, writes = threading.get_ident(), [0]
    real = AbstractConnection.send_packed_command

    def counted(self, command, check_health=True):
        if threading.get_ident() == me:
            writes[0] += 1
        return real(self, command, check_health)

    AbstractConnection.send_packed_command = counted
    try:
        yield writes
    finally:
        AbstractConnection.send_packed_command = real


def expansion(wiring, n: int, redis_client, prefix: str) -> dict:
    """The enqueue that releasing an ``n``-item map does (``Enqueuer(instances)``), side by side
    with one message per call, on a queue no worker reads: wall time and round trips to Redis
    (:func:`round_trips`)."""
    instances = [InstanceRecord(run_id="bench", instance_id=f"i{k}", node_id="each", seq=k,
                                queue=EXPANSION_QUEUE) for k in range(n)]

    def timed(send) -> tuple[float, int]:
        with round_trips() as writes:
            t0 = time.perf_counter()
            send()
            wall, trips = time.perf_counter() - t0, writes[0]
        for key in redis_client.scan_iter(f"{prefix}:{EXPANSION_QUEUE}*"):
            redis_client.delete(key)
        return wall, trips

    one_s, one_trips = timed(lambda: [wiring.enqueue.send(i) for i in instances])
    batch_s, batch_trips = timed(lambda: wiring.enqueue(instances))
    return {"expansion_instances": n, "expansion_messages": len(chunked(instances)),
            "expansion_one_per_call_s": one_s, "expansion_one_per_call_round_trips": one_trips,
            "expansion_enqueuer_s": batch_s, "expansion_enqueuer_round_trips": batch_trips}


class CommandCounter:
    """Counts the commands clients send to Redis (``MONITOR``), by name. Commands a script runs
    inside Redis are not counted: a script call is one command, as a round trip is one."""

    def __init__(self, redis_client) -> None:
        self.client = redis_client
        self.counts: Counter[str] = Counter()
        self._stop = f"bench-stop-{uuid.uuid4().hex}"
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)

    def _listen(self) -> None:
        with self.client.monitor() as monitor:
            self._ready.set()
            for cmd in monitor.listen():
                if self._stop in cmd["command"]:
                    return
                if cmd["client_type"] != "lua":
                    self.counts[cmd["command"].split(" ", 1)[0].upper()] += 1

    def __enter__(self) -> CommandCounter:
        self._thread.start()
        self._ready.wait()
        time.sleep(0.2)
        return self

    def __exit__(self, *exc) -> None:
        self.client.echo(self._stop)
        self._thread.join()
        self.counts["ECHO"] -= 1


def commands_per_node(wiring, broker, raw_noop, n: int, offset: int, redis_client) -> dict:
    """Redis commands per no-op node and per raw message. Both sides' idle consumers poll
    Redis too; that share is included, as it would be in a real pool. This benchmark's own
    polling for the run's end is subtracted."""
    store = wiring.scheduler.store
    g = Graph()
    for i in range(n):
        g.add("noop", id=f"n{i}", params={"i": offset + i})
    with CommandCounter(redis_client) as genloop:
        run = wiring.scheduler.submit(g)
        polls = 1
        while not store.get_run(run.id).status.terminal:
            polls += 1
            time.sleep(0.05)
    genloop.counts["GET"] -= polls
    with CommandCounter(redis_client) as raw:
        for i in range(n):
            raw_noop.send(i)
        join(broker)
    return {"redis_commands_per_node": sum(genloop.counts.values()) / n,
            "redis_commands_per_raw_message": sum(raw.counts.values()) / n,
            "redis_commands_by_name": {k: round(v / n, 2)
                                       for k, v in genloop.counts.most_common(12)}}


#: How often the raw side looks for the end of its batch (seconds): RedisBroker.join's default
#: 100 ms would round its ~1 s batch up by 5 % on average.
POLL = 0.01
#: The genloop side times to the run's recorded end (``finished_at``) and looks for it only this
#: often: a look reads the run in the process being measured (~0.2 ms of client CPU on Redis,
#: more as a big run's record grows), so looking every 10 ms took CPU from the workers.
RUN_POLL = 0.1


def raw_throughput(broker, raw_noop, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        raw_noop.send(i)
    join(broker)
    return n / (time.perf_counter() - t0)


def raw_chunked_throughput(broker, raw_noop_chunk, n: int) -> float:
    """Raw Dramatiq with items batched as genloop batches a release (``chunked``'s sizes): the
    plain alternative a skilled user would write for many tiny tasks."""
    size = chunk_size(n)
    t0 = time.perf_counter()
    for lo in range(0, n, size):
        raw_noop_chunk.send(list(range(lo, min(n, lo + size))))
    join(broker)
    return n / (time.perf_counter() - t0)


def join(broker) -> None:
    if isinstance(broker, RedisBroker):
        broker.join("cpu", interval=int(POLL * 1000))
    else:
        broker.join("cpu")  # the StubBroker's join blocks on the queue: no polling


def genloop_throughput(wiring, n: int, offset: int) -> float:
    g = Graph()
    for i in range(n):
        g.add("noop", id=f"n{i}", params={"i": offset + i})
    t0 = time.time()
    run = wiring.scheduler.submit(g)
    store = wiring.scheduler.store
    while not (ended := store.get_run(run.id)).status.terminal:
        time.sleep(RUN_POLL)
    assert ended.status == "succeeded" and ended.finished_at is not None
    return n / (ended.finished_at - t0)


def genloop_latency(wiring, runs: int, offset: int) -> list[float]:
    store = wiring.scheduler.store
    out = []
    for i in range(runs):
        g = Graph()
        g.add("noop", id="only", params={"i": offset + i})
        t0 = time.time()
        run = wiring.scheduler.submit(g)
        while True:
            started = [e for e in store.events(run.id) if e.type == "instance.started"]
            if started:
                out.append(started[0].time - t0)
                break
            time.sleep(0.0005)
        while not store.get_run(run.id).status.terminal:
            time.sleep(0.001)
    return out


def raw_latency(raw_noop, started, done, runs: int) -> list[float]:
    out = []
    for i in range(runs):
        t0 = time.perf_counter()
        raw_noop.send(i, mark=True)
        done.acquire()
        out.append(started[i] - t0)
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-runs", type=int, default=100)
    parser.add_argument("--redis", help="run on this Redis instead of the embedded seams")
    parser.add_argument("--fanout", type=int, default=0, help="also time a map over N items")
    parser.add_argument("--fair", action="store_true",
                        help="genloop through its fair queue, as served pools and workers run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    redis_client = redis.Redis.from_url(args.redis) if args.redis else None
    with tempfile.TemporaryDirectory() as home:
        broker, wiring, worker, (raw_noop, raw_noop_chunk), started, done = build(
            home, args.threads, args.redis, prefix, args.fair)
        try:
            raw, raw_chunked, gl = [], [], []
            for r in range(args.repeats):  # interleaved, so drift hits all sides alike
                raw.append(raw_throughput(broker, raw_noop, args.nodes))
                raw_chunked.append(raw_chunked_throughput(broker, raw_noop_chunk, args.nodes))
                gl.append(genloop_throughput(wiring, args.nodes, offset=r * args.nodes))
            lat_g = genloop_latency(wiring, args.latency_runs, offset=-1 - args.latency_runs)
            lat_r = raw_latency(raw_noop, started, done, args.latency_runs)
            fan = fanout(wiring, args.fanout, redis_client) if args.fanout else {}
            if redis_client and args.fanout:
                fan.update(expansion(wiring, args.fanout, redis_client, prefix))
            if redis_client:
                fan.update(commands_per_node(wiring, broker, raw_noop, min(args.nodes, 400),
                                             10 * args.nodes, redis_client))
        finally:
            worker.stop()
            if redis_client:
                for key in redis_client.scan_iter(f"{prefix}*"):
                    redis_client.delete(key)

    report = {
        "backend": "redis" if args.redis else "embedded",
        "nodes": args.nodes, "threads": args.threads, "repeats": args.repeats,
        "fair_queue": args.fair,
        # Both sides share the machine's load; on a busy one only the ratio is worth quoting.
        "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]},
        "raw_dramatiq_msgs_per_s": statistics.median(raw),
        "genloop_nodes_per_s": statistics.median(gl),
        "ratio": statistics.median(gl) / statistics.median(raw),
        "raw_dramatiq_chunked_items_per_s": statistics.median(raw_chunked),
        "ratio_to_chunked": statistics.median(gl) / statistics.median(raw_chunked),
        "genloop_submit_to_start_ms": {"p50": 1e3 * pct(lat_g, 0.5), "p99": 1e3 * pct(lat_g, .99)},
        "raw_send_to_start_ms": {"p50": 1e3 * pct(lat_r, 0.5), "p99": 1e3 * pct(lat_r, 0.99)},
        **fan,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    fair = ", through the fair queue" if args.fair else ""
    print(f"{report['backend']}{fair}: {args.nodes} no-op nodes, {args.threads} worker threads, "
          f"median of {args.repeats}, load average {load_before:.1f} -> "
          f"{report['load_average_1m']['after']:.1f}")
    print(f"  raw Dramatiq : {report['raw_dramatiq_msgs_per_s']:9.0f} messages/s")
    print(f"  genloop      : {report['genloop_nodes_per_s']:9.0f} nodes/s")
    print(f"  ratio        : {report['ratio']:.2f}x")
    print(f"  raw, chunked : {report['raw_dramatiq_chunked_items_per_s']:9.0f} items/s "
          f"(as many to a message as genloop's chunks); genloop "
          f"{report['ratio_to_chunked']:.2f}x of it")
    g, r = report["genloop_submit_to_start_ms"], report["raw_send_to_start_ms"]
    print(f"  submit->start: genloop p50 {g['p50']:.2f} ms p99 {g['p99']:.2f} ms | "
          f"raw p50 {r['p50']:.2f} ms p99 {r['p99']:.2f} ms")
    if "redis_commands_per_node" in report:
        print(f"  Redis calls  : genloop {report['redis_commands_per_node']:.1f} per node | "
              f"raw {report['redis_commands_per_raw_message']:.1f} per message")
        print(f"                 {report['redis_commands_by_name']}")
    if "fanout_nodes" in fan:
        line = f"  fan-out      : {fan['fanout_nodes']} mapped nodes {fan['fanout_status']} in " \
               f"{fan['fanout_wall_s']:.1f} s"
        if "redis_bytes_per_node" in fan:
            line += f", {fan['redis_bytes_per_node']:.0f} Redis bytes per node"
        print(line)
    if "expansion_messages" in fan:
        print(f"  expansion    : {fan['expansion_instances']} instances, Enqueuer "
              f"{fan['expansion_enqueuer_s']:.2f} s, {fan['expansion_messages']} messages in "
              f"{fan['expansion_enqueuer_round_trips']} "
              f"round trips | one per call {fan['expansion_one_per_call_s']:.2f} s in "
              f"{fan['expansion_one_per_call_round_trips']} | "
              f"{fan['expansion_one_per_call_s'] / fan['expansion_enqueuer_s']:.1f}x")


if __name__ == "__main__":
    main()
