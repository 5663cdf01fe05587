"""The HTTP gateway: one FastAPI service in front of any back end, for many tenants.

``genloop serve --local HOME`` (embedded workers in the same process) or ``--redis URL`` (only
enqueues; ``genloop worker`` processes execute). In code::

    app = create_app(backend, SqliteGatewayStore(home / "gateway.db"), GatewaySettings())

Modules: ``app`` (routes), ``service`` (tenants, ownership, idempotency), ``auth`` (bearer keys),
``limits``, ``admission`` (allowed names, bounded strings, the run's cost),
``sse`` (event streams), ``errors`` (one error shape), ``body_limit`` (413), ``uploads``
(images a tenant uploads),
``store`` / ``sqlite_store`` / ``redis_store`` (keys and ownership), ``cli``, and the run
console at ``/ui``: ``ui`` (routes), ``ui_views`` (what pages show), ``ui_session`` (sign-in),
``templates/`` and ``static/``.
"""

from .admission import Admission, default_admission
from .app import GatewaySettings, create_app
from .limits import LimitExceeded, TenantLimits
from .service import Gateway
from .sqlite_store import SqliteGatewayStore
from .store import GatewayStore, KeyInfo

__all__ = [
    "Admission",
    "Gateway",
    "GatewaySettings",
    "GatewayStore",
    "KeyInfo",
    "LimitExceeded",
    "SqliteGatewayStore",
    "TenantLimits",
    "create_app",
    "default_admission",
]

if __name__ != "genloop.gateway":  # imported as a bare `gateway` from the checkout's root
    from genloop.sdk.unshadow import hand_over

    hand_over(__name__, __path__[0])
