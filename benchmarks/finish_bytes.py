"""Bytes Redis writes per FINISH, at two run sizes: a completion's writes must not grow with
the run.

    python benchmarks/finish_bytes.py [--nodes 100 10000] [--last 64] [--json]

For each size it starts a Redis of its own with an append-only file (what a durable Redis
writes to disk is what Redis writes), stores a run of that many one-instance nodes that keeps
its ended nodes' output counts (a run with limits: the kind whose record grew), finishes every
node through the store's ``FINISH`` script in chunks of 16 (as workers send them), and measures
the append-only file's growth over the last ``--last`` finishes, when the run has the most
ended nodes. The ratio largest / smallest should be 1.00: before the counts moved out of the
run's record, every FINISH rewrote them all (a 10,000-node run's record held ~150 KB of them).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from genloop.sdk.models import NodeStatus, RunStatus
from genloop.workers.stores.records import (
    EventRecord,
    InstanceRecord,
    NodeRecord,
    ResultRecord,
    RunRecord,
    RunSpecRecord,
)
from genloop.workers.stores.redis import RedisStateStore
from genloop.workers.stores.steps import Finish, Finished, ScriptedCompletion

CHUNK = 16


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _redis(home: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--dir", str(home), "--save", "",
         "--appendonly", "yes", "--appendfsync", "no", "--auto-aof-rewrite-percentage", "0"],
        stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(100):
        try:
            redis.Redis.from_url(url).ping()
            return server, url
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


def _aof_bytes(client: redis.Redis) -> int:
    return int(client.info("persistence")["aof_current_size"])


def _finish(node: InstanceRecord, now: float) -> Finish:
    key = f"k-{node.node_id}"
    done = node.model_copy(update={"status": NodeStatus.SUCCEEDED, "outputs": 1,
                                   "result_key": key})
    completion = ScriptedCompletion(
        f'[{{"key": "{key}", "index": 0}}]', 1,
        EventRecord(type="node.succeeded", time=now, node_id=node.node_id),
        EventRecord(type="run.succeeded", time=now), [])
    return Finish(done, EventRecord(type="instance.succeeded", time=now),
                  ResultRecord(key=key, op="o", items=[1], created_at=now), None, completion)


def measure(nodes: int, last: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home:
        server, url = _redis(Path(home))
        try:
            store = RedisStateStore(url, prefix="bench")
            run = RunRecord(id="r", spec_hash="h", pending_nodes=nodes, counts_ended=True,
                            status=RunStatus.RUNNING, created_at=time.time())
            ids = [f"n{i:05d}" for i in range(nodes)]
            insts = [InstanceRecord(run_id="r", instance_id=f"{n}#0", node_id=n, seq=0)
                     for n in ids]
            store.create_run(run, RunSpecRecord(spec={}, graph={}),
                             [NodeRecord(run_id="r", node_id=n, pending_instances=1,
                                         status=NodeStatus.QUEUED) for n in ids], insts)
            client = redis.Redis.from_url(url)
            before, began = None, 0.0
            for start in range(0, nodes, CHUNK):
                if before is None and start >= nodes - last:
                    before, began, counted = _aof_bytes(client), time.perf_counter(), start
                outs = store.finish_instances([_finish(i, time.time())
                                               for i in insts[start:start + CHUNK]])
                assert all(o.step is Finished.COMPLETED for o in outs), outs
            assert store.get_run("r").status == RunStatus.SUCCEEDED
            assert before is not None
            finished = nodes - counted
            return {"nodes": nodes, "finishes_measured": finished,
                    "bytes_per_finish": (_aof_bytes(client) - before) / finished,
                    "ms_per_finish": 1000 * (time.perf_counter() - began) / finished,
                    "run_record_bytes": len(client.get("bench:run:r") or b"")}
        finally:
            server.terminate()
            server.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[100, 10_000])
    p.add_argument("--last", type=int, default=64,
                   help="finishes measured, the run's last (a multiple of 16)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows = [measure(n, min(args.last, n)) for n in args.nodes]
    low, high = rows[0], rows[-1]
    ratio = high["bytes_per_finish"] / low["bytes_per_finish"]
    if args.json:
        print(json.dumps({"sizes": rows, "bytes_ratio": ratio}, indent=2))
        return
    print(f"{'nodes':>8} {'bytes/FINISH':>13} {'ms/FINISH':>10} {'run record':>11}")
    for r in rows:
        print(f"{r['nodes']:>8,} {r['bytes_per_finish']:>13,.0f} {r['ms_per_finish']:>10.3f} "
              f"{r['run_record_bytes']:>11,}")
    print(f"bytes per FINISH, {high['nodes']:,} nodes / {low['nodes']:,}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
