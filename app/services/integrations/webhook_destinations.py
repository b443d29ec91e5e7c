"""Where a webhook may send: http or https to a host that resolves only to global addresses, unless the host
matches TRAINYARD_WEBHOOK_ALLOW. Checked when a webhook is made and again before every attempt, and the
attempt connects to the address that was checked, so a name that resolves elsewhere later (DNS rebinding)
cannot turn a webhook into a way into the service's own network."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from fnmatch import fnmatchcase
from urllib.parse import urlsplit

from jobspec.problems import Problem, SpecError

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
SCHEMES = ("http", "https")


class DestinationRefused(SpecError):
    """A webhook URL the service will not send to. A SpecError of one problem under `url`, so the API answers
    422 naming the field, as for any other body field that cannot be used as written."""

    def __init__(self, message: str) -> None:
        super().__init__([Problem("url", message)])


@dataclass(frozen=True)
class Destination:
    """A checked URL: the host to name (Host header, TLS server name) and the address to connect to."""

    url: str
    host: str
    address: IpAddress

    @property
    def connect_url(self) -> str:
        """The URL with the checked address in place of the host name."""
        parts = urlsplit(self.url)
        literal = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        netloc = f"{literal}:{parts.port}" if parts.port else literal
        return parts._replace(netloc=netloc).geturl()


def allowed_patterns(allow: str) -> list[str]:
    return [pattern.strip().lower() for pattern in allow.split(",") if pattern.strip()]


# IPv6 forms that carry an IPv4 address (issue 42, #9). Where the IPv4 sits in a fixed place and the form
# reaches it (IPv4-mapped ::ffff:0:0/96, NAT64's well-known 64:ff9b::/96, 6to4 2002::/16), that IPv4 is judged
# by the same rules as a plain one: a public host seen through DNS64 or 6to4 still works, 127.0.0.1 in any
# of them does not. The rest are refused outright: IPv4-compatible ::/96 (deprecated, routed by no stack;
# it holds :: and ::1 too), local-use NAT64 64:ff9b:1::/48 (the operator picks where the IPv4 sits) and
# Teredo 2001::/32 (the client's IPv4 is obfuscated and reached through relays).
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
REFUSED_V6 = tuple(ipaddress.IPv6Network(net) for net in ("::/96", "64:ff9b:1::/48", "2001::/32"))


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return address.ipv4_mapped or address.sixtofour


def _is_public(address: IpAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        if any(address in network for network in REFUSED_V6):
            return False
        address = _embedded_ipv4(address) or address
    return address.is_global and not address.is_multicast


def _shown(address: IpAddress) -> str:
    embedded = _embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    return f"{address} (which carries {embedded})" if embedded else str(address)


def _resolve(host: str, port: int) -> list[IpAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise DestinationRefused(
            f"host {host!r} does not resolve ({error}); give a host name that does"
        ) from None
    # scope ids (fe80::1%eth0) are dropped: such an address is link-local, refused unless allowed anyway
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def check_destination(url: str, allow: str) -> Destination:
    """The URL's host and the address to send to, or DestinationRefused naming the fix."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise DestinationRefused(f"scheme {parts.scheme!r} is not taken; give an http:// or https:// URL")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise DestinationRefused(f"the port of {url!r} is not a number from 0 to 65535") from None
    host = (parts.hostname or "").lower()
    if not host:
        raise DestinationRefused(
            f"{url!r} names no host; give one, as in https://hooks.example.com/trainyard"
        )
    if parts.username is not None or parts.password is not None:
        raise DestinationRefused("credentials in the URL are not taken; the signature header authenticates")
    addresses = _resolve(host, port)
    if any(fnmatchcase(host, pattern) for pattern in allowed_patterns(allow)):
        return Destination(url, host, addresses[0])
    refused = [_shown(address) for address in addresses if not _is_public(address)]
    if refused:
        raise DestinationRefused(
            f"host {host!r} resolves to {', '.join(refused)}: a loopback, private, link-local or other "
            "non-global address, or an IPv6 form that carries one; give a public host, or have an admin add "
            "the host to TRAINYARD_WEBHOOK_ALLOW"
        )
    return Destination(url, host, addresses[0])
