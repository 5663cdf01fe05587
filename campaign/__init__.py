"""Ad campaigns: a spec file to finished creatives in every format, resumable and on budget.

    from genloop.campaign import load_spec, run
    from genloop.sdk import Client

    spec = load_spec("campaign.yaml")
    with Client.local() as client:
        manifest = run(spec, client)        # out/campaigns/NAME/: manifest, formats, report.html

Everything here sits on the SDK (no torch); formats, headlines and the brand palette use Pillow
(``pip install 'genloop[campaign]'``).
"""

from __future__ import annotations

from .brand import Compliance, subject_compliance
from .manifest import FormatOutput, Manifest, VariantRecord
from .report import render_report
from .reviews import Review
from .runlog import Attempt
from .runner import Progress, campaign_folder, loop_key, report, run
from .spec import (
    CampaignSpec,
    CampaignSpecError,
    CampaignWebhook,
    FormatSpec,
    load_spec,
    parse_spec,
)

__all__ = [
    "Attempt", "CampaignSpec", "CampaignSpecError", "CampaignWebhook",
    "Compliance", "FormatOutput", "FormatSpec",
    "Manifest", "Progress", "Review", "VariantRecord", "campaign_folder", "load_spec", "loop_key",
    "parse_spec", "render_report", "report", "run", "subject_compliance",
]


if __name__ != "genloop.campaign":  # imported as a bare `campaign` from the checkout's root
    from genloop.sdk.unshadow import hand_over

    hand_over(__name__, __path__[0])
