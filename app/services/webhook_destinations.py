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


def _is_public(address: IpAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


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
    refused = [str(address) for address in addresses if not _is_public(address)]
    if refused:
        raise DestinationRefused(
            f"host {host!r} resolves to {', '.join(refused)}: a loopback, private, link-local or other "
            "non-global address; give a public host, or have an admin add the host to TRAINYARD_WEBHOOK_ALLOW"
        )
    return Destination(url, host, addresses[0])
