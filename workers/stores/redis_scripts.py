"""The hot transitions of a node instance as Redis server-side scripts: one round trip each, no
run-wide lock, no ``WATCH`` retry loop.

- :data:`START`: claim the result key's lease and mark the instance running (and its node and run,
  the first time), with their events. The claim and the start land together or not at all.
- :data:`FINISH`: store the result (first wins), mark the instance ended, drop the lease, count
  the node's pending instances down; when that reaches zero on a node of one instance (every
  plain node, the common case), also complete the node: its outputs, its children's waiting
  counters, the run's pending nodes and the run's end, with their events. Children that became
  ready get an outbox mark; expanding them into instances needs the planner, so the caller does
  it in a run transaction (or the sweeper does, from the mark, if the caller dies). A node of
  many instances (a map, shards) gets a node-done mark instead and is completed in a run
  transaction once per node, not once per instance.
- :data:`CREATE`: a new run's records, all at once, unless its idempotency key is taken;
  :data:`COMMIT`: a run transaction's writes, if it still holds the run's lock;
  :data:`EXPIRE_RUN` and :data:`DELETE_RESULTS`: the retention pass's deletions.

START and FINISH refuse to act while an exclusive run transaction holds the run's lock (they
return ``busy`` and the caller tries again a moment later), so such a transaction never
interleaves with a script: the lock orders them, and Redis runs scripts one at a time. A shared
transaction (a node's completion, see ``StateStore.transaction``) lets them start and end
instances: by then nothing those parts write is a record it reads or writes (the run left
``pending`` at its first start, before any completion; the children it releases have no
instances running yet). FINISH completes a node itself only while no transaction at all holds
the lock, since that writes the run and the children as a shared transaction does.

The scripts are Lua files in ``scripts/`` (each says its KEYS, ARGV and answer), loaded here
as Dramatiq loads its own; the steps' inputs and outcomes are store-neutral (``steps.py``).

Records are pydantic JSON. The scripts read a record's top-level ``status`` and counter with a
pattern on its first occurrence (nested models carry neither field, and JSON strings escape
quotes, so a user's id cannot fake one) and write back JSON that Python built, so no Lua JSON
encoder ever rewrites a record.
"""

from __future__ import annotations

from importlib.resources import files


def _lua(*names: str) -> str:
    """The named scripts of ``scripts/``, one after the other (helpers first)."""
    folder = files(__package__) / "scripts"
    return "\n".join((folder / f"{name}.lua").read_text() for name in names)


START = _lua("lib", "start")
FINISH = _lua("lib", "finish")
COMMIT = _lua("apply", "commit")
CREATE = _lua("apply", "create")
EXPIRE_RUN = _lua("expire_run")
DELETE_RESULTS = _lua("delete_results")
