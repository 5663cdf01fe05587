"""A campaign's own webhook: one ``campaign.ended`` delivery when a run of the campaign has
every variant settled, made by the gateway (``Client.notify``), signed like a run's.

The notice's key is the campaign's name and a hash of every variant's run and status, so
running a finished campaign again (which only collects) sends nothing new, while a re-run that
changed something (``--retry-failed``) is told as a new end. The body is small: counts, spend,
and the finalists (at most ``MAX_FINALISTS``; the manifest has the rest).
"""

from __future__ import annotations

import hashlib
from collections import Counter

from genloop.sdk import Client

from .manifest import Manifest
from .spec import CampaignSpec

MAX_FINALISTS = 20


def notify_end(spec: CampaignSpec, client: Client, manifest: Manifest) -> str | None:
    """Tell the campaign's webhook that it ended; the delivery's ``webhook-id`` (None if the
    spec has no webhook)."""
    if spec.webhook is None:
        return None
    outcome = "\n".join(f"{v.key} {v.run_id} {v.status}" for v in manifest.variants)
    key = f"campaign:{spec.name}:{hashlib.sha256(outcome.encode()).hexdigest()[:32]}"
    counts = Counter(v.status for v in manifest.variants)
    finalists = [v for v in manifest.variants if v.finalist]
    return client.notify(
        spec.webhook.url, "campaign.ended", key, campaign=spec.name,
        variants=len(manifest.variants), succeeded=counts["succeeded"],
        failed=counts["failed"] + counts["cancelled"], skipped=counts["skipped"],
        spent={"images": manifest.spent_images, "steps": manifest.spent_steps},
        finalists=[{"key": v.key, "values": v.values, "run_id": v.run_id, "score": v.score,
                    "artifact": v.artifact} for v in finalists[:MAX_FINALISTS]],
        finalists_total=len(finalists))
