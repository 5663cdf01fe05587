"""Every Redis key genloop writes, named in one place.

A pool's keys live under one prefix (``genloop`` by default, so several pools can share a
Redis); the gateway's under its own (``genloop:gw``). Dramatiq's queues are named by Dramatiq
(``<namespace>:<queue>``, see :meth:`PoolKeys.dramatiq_queue`). Nothing else in genloop spells
a key: the state store, its scripts' callers, the op catalogue, the pool's published config and
the gateway store all ask here, so a layout change is one edit and two modules cannot disagree.
"""

from __future__ import annotations


class PoolKeys:
    """Keys of one worker pool: the state store's and what its workers publish."""

    def __init__(self, prefix: str = "genloop") -> None:
        self.p = prefix

    # -- a run ------------------------------------------------------------------------------
    def run(self, r: str) -> str:
        return f"{self.p}:run:{r}"

    def spec(self, r: str) -> str:
        return f"{self.p}:run:{r}:spec"

    def nodes(self, r: str) -> str:
        return f"{self.p}:run:{r}:nodes"

    def instances(self, r: str) -> str:
        return f"{self.p}:run:{r}:instances"

    def node_instances(self, r: str, node_id: str = "") -> str:
        """A node's instance ids, scored by ``seq`` (with no node: the run's prefix of them)."""
        return f"{self.p}:run:{r}:node:{node_id}"

    def events(self, r: str) -> str:
        return f"{self.p}:run:{r}:events"

    def ended_counts(self, r: str) -> str:
        """Each ended node's output count (a hash), for a run with limits."""
        return f"{self.p}:run:{r}:ended-counts"

    def ended(self, r: str) -> str:
        """The pub/sub channel told when the run ends (``FINISH`` builds it from ``events``)."""
        return f"{self.events(r)}:ended"

    def lock(self, r: str) -> str:
        """The run transaction's lock (its token says exclusive ``x:`` or shared ``s:``)."""
        return f"{self.p}:run:{r}:lock"

    # -- shared by all runs -------------------------------------------------------------------
    def idem(self, key: str = "") -> str:
        """A run's idempotency key (with no ``key``: the prefix every one starts with)."""
        return f"{self.p}:idem:{key}"

    def result(self, key: str = "") -> str:
        """A stored result (with no ``key``: the prefix every one starts with)."""
        return f"{self.p}:result:{key}"

    def claim(self, key: str) -> str:
        return f"{self.p}:claim:{key}"

    def named_lock(self, name: str) -> str:
        return f"{self.p}:lock:{name}"

    @property
    def run_index(self) -> str:
        """Every run id, scored by its creation time (the listing's index)."""
        return f"{self.p}:runs"

    @property
    def outbox(self) -> str:
        """``run|instance`` (or ``run|@node``, a node transition that may be due) -> when."""
        return f"{self.p}:outbox"

    @property
    def ended_runs(self) -> str:
        """Runs ended (or pinned, unpinned) and not yet given an expiry, scored by their end."""
        return f"{self.p}:ended"

    @property
    def expiry(self) -> str:
        """Finished runs, scored by when they expire (the retention pass's)."""
        return f"{self.p}:expiry"

    @property
    def results_until(self) -> str:
        """Result keys (not Redis keys), scored by how long each is kept at least."""
        return f"{self.p}:results-until"

    @property
    def pinned(self) -> str:
        """Ids of the pinned runs."""
        return f"{self.p}:pinned"

    @property
    def quarantine(self) -> str:
        """Unreadable instances taken out of recovery: member -> why."""
        return f"{self.p}:quarantine"

    @property
    def live(self) -> str:
        """Unfinished instances, scored by when they last changed."""
        return f"{self.p}:live"

    # -- what workers publish ---------------------------------------------------------------
    @property
    def artifacts_config(self) -> str:
        """The artifact store's URI, so a client can use the workers' own."""
        return f"{self.p}:config:artifacts"

    @property
    def retention_config(self) -> str:
        """Seconds the workers keep a finished run, so a client (a gateway) knows it too."""
        return f"{self.p}:config:retention"

    @property
    def queues(self) -> str:
        return f"{self.p}:queues"

    @property
    def models(self) -> str:
        return f"{self.p}:models"

    @property
    def evaluators(self) -> str:
        """The evaluators the pool's workers serve (name -> JSON description and needs)."""
        return f"{self.p}:evaluators"

    @property
    def cache_modes(self) -> str:
        """The step cache modes each configured model runs (name -> JSON list)."""
        return f"{self.p}:cache_modes"

    @property
    def ops(self) -> str:
        return f"{self.p}:ops"

    @staticmethod
    def dramatiq_queue(namespace: str, queue: str) -> str:
        """The list Dramatiq's RedisBroker keeps a queue's messages in (Dramatiq's layout)."""
        return f"{namespace}:{queue}"


class GatewayKeys:
    """Keys of the gateway's store (API keys, tenants, run ownership)."""

    def __init__(self, prefix: str) -> None:
        self.p = prefix

    def key(self, key_hash: str) -> str:
        return f"{self.p}:key:{key_hash}"

    def key_id(self, key_id: str) -> str:
        return f"{self.p}:keyid:{key_id}"

    @property
    def all_keys(self) -> str:
        return f"{self.p}:keys"

    def tenant(self, tenant: str) -> str:
        return f"{self.p}:tenant:{tenant}"

    def run_owner(self, run_id: str) -> str:
        return f"{self.p}:run:{run_id}"

    def cost(self, run_id: str) -> str:
        return f"{self.p}:cost:{run_id}"

    def run_artifacts(self, run_id: str) -> str:
        """The artifact keys a run made, counted once each in its tenant's ``art-refs``."""
        return f"{self.p}:run-art:{run_id}"

    def idem_of(self, run_id: str) -> str:
        """The idempotency key a run was recorded with (to drop it with the run)."""
        return f"{self.p}:idem-of:{run_id}"

    @property
    def forgets(self) -> str:
        """Ended runs, scored by when to look whether the back end still has them."""
        return f"{self.p}:forgets"

    def idem(self, key: str) -> str:
        return f"{self.p}:idem:{key}"

    def summary(self, run_id: str) -> str:
        """An ended run's row in the console's runs list."""
        return f"{self.p}:summary:{run_id}"

    @property
    def listed(self) -> str:
        """Set once the runs recorded before the ``runs`` index are in it."""
        return f"{self.p}:runs-listed"

    def session(self, session_hash: str) -> str:
        """A console session: the hash of its key (expires with the session)."""
        return f"{self.p}:session:{session_hash}"

    def webhook(self, webhook_id: str) -> str:
        """A webhook job (JSON)."""
        return f"{self.p}:webhook:{webhook_id}"

    def webhooks_of(self, run_id: str) -> str:
        """The webhook ids of a run's deliveries."""
        return f"{self.p}:webhooks-of:{run_id}"

    @property
    def webhooks_due(self) -> str:
        """Pending webhook jobs' ids, scored by when each is next due."""
        return f"{self.p}:webhooks-due"

    def webhook_secret(self, tenant: str) -> str:
        return f"{self.p}:webhook-secret:{tenant}"

    def hits(self, what: str, tenant: str, window: int) -> str:
        """A rate limit's counter for one fixed window (its index: start / length)."""
        return f"{self.p}:hits:{what}:{tenant}:{window}"

    def tenant_set(self, kind: str, tenant: str) -> str:
        """A tenant's ``open`` or ``unindexed`` runs, its ``runs`` by submission time (a sorted
        set, for the console's list), or its ``art`` (artifact keys)."""
        return f"{self.p}:{kind}:{tenant}"
