"""Which addresses a webhook may go to: the gateway must not become a way into the operator's
own network (SSRF).

A URL must be http(s), and every address its host resolves to must be public: loopback,
private, link-local (cloud metadata at 169.254.169.254), multicast, reserved and unspecified
ranges are refused unless the operator's ``allow`` list holds them; the ``deny`` list refuses more.
The check runs at submit and again at each delivery, where the request then goes to the very
address that was checked (a name that resolves elsewhere a second later, DNS rebinding, gains
nothing); redirects are never followed.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from genloop.sdk.errors import GenloopError

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
#: ``resolve(host, port)``: the addresses a name stands for (``socket.getaddrinfo`` by default).
Resolver = Callable[[str, int], list[str]]


class WebhookRefused(GenloopError):
    """A webhook URL the gateway will not call."""


def system_resolver(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise WebhookRefused(f"cannot resolve {host!r}: {exc.strerror}") from exc
    except UnicodeError as exc:  # the idna codec refuses the name before any lookup
        raise WebhookRefused(f"{host!r} is not a host name: {exc}") from exc
    return [str(info[4][0]) for info in infos]


@dataclass(frozen=True)
class Target:
    """A checked destination: connect to ``address`` and say ``host`` (Host header, TLS SNI)."""

    scheme: str
    host: str
    port: int
    address: str
    path: str

    @property
    def url(self) -> str:
        """The URL to connect to: the checked address, never the name again."""
        ip = ipaddress.ip_address(self.address)
        shown = f"[{ip}]" if ip.version == 6 else str(ip)
        return f"{self.scheme}://{shown}:{self.port}{self.path}"


@dataclass(frozen=True)
class AddressPolicy:
    allow: Sequence[IpNetwork] = ()
    deny: Sequence[IpNetwork] = ()
    resolve: Resolver = field(default=system_resolver)

    @classmethod
    def of(cls, allow: Sequence[str] = (), deny: Sequence[str] = (),
           resolve: Resolver = system_resolver) -> AddressPolicy:
        """From CIDR strings (``127.0.0.1/32``, ``10.0.0.0/8``)."""
        return cls(tuple(ipaddress.ip_network(a, strict=False) for a in allow),
                   tuple(ipaddress.ip_network(d, strict=False) for d in deny), resolve)

    def check(self, url: str) -> Target:
        """Where ``url`` may be delivered; :class:`WebhookRefused` saying why not."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise WebhookRefused("a webhook URL is http:// or https:// with a host")
        if parts.username or parts.password:
            raise WebhookRefused("a webhook URL carries no user or password")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise WebhookRefused(f"bad port in the webhook URL: {exc}") from exc
        addresses = self.resolve(parts.hostname, port)
        if not addresses:
            raise WebhookRefused(f"{parts.hostname!r} resolves to no address")
        for address in addresses:
            if why := self._refused(ipaddress.ip_address(address.split("%")[0])):
                raise WebhookRefused(f"{parts.hostname!r} resolves to {address}, {why}; the "
                                     "gateway calls public addresses only (the operator may "
                                     "allow others)")
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        return Target(parts.scheme, parts.hostname, port, addresses[0].split("%")[0], path)

    def _refused(self, ip: IpAddress) -> str | None:
        if any(ip in net for net in self.deny):
            return "an address the operator denies"
        if any(ip in net for net in self.allow):
            return None
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            return self._refused(ip.ipv4_mapped)
        for name in ("loopback", "private", "link_local", "multicast", "reserved",
                     "unspecified"):
            if getattr(ip, f"is_{name}"):
                return f"a {name.replace('_', '-')} address"
        return None
