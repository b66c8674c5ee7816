"""Which addresses a webhook may reach: callers name the URL, so the network behind the worker is refused by default.

A URL's host is resolved and every address it resolves to must be public (``ipaddress``'s
``is_global``): loopback, private, link-local (the instance metadata service, 169.254.169.254),
shared, reserved and multicast addresses are refused, as is plain ``http://``, unless the host or
address is on ``webhook_allow`` (hosts, addresses or CIDR blocks: tests, private networks). The
check runs again at the connection itself (``GuardedResolver``) and on every redirect, so a name
that resolves differently a moment later (DNS rebinding) is refused too.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver
from aiohttp.resolver import DefaultResolver

from sqsjobs.errors import WebhookRefused as AddressRefused

if TYPE_CHECKING:
    from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressGuard:
    """The allow-list and the public-address rule (see the module docstring)."""

    def __init__(self, allow: Iterable[str] = ()) -> None:
        self._hosts: set[str] = set()
        self._networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for entry in allow:
            try:
                self._networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                self._hosts.add(entry.lower())

    def allowed_host(self, host: str) -> bool:
        """True when ``host`` is on the allow-list by name or as an address."""
        if host.lower() in self._hosts:
            return True
        try:
            return self.allowed_address(ipaddress.ip_address(host), check_public=False)
        except ValueError:
            return False

    def allowed_address(self, address: IPAddress, *, check_public: bool = True) -> bool:
        """True when ``address`` is public, or on the allow-list."""
        if any(address in network for network in self._networks):
            return True
        return check_public and address.is_global and not address.is_multicast

    async def check_url(self, url: str) -> None:
        """``AddressRefused`` unless every address ``url``'s host resolves to may be reached."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.scheme not in ("https", "http") or not host:
            raise AddressRefused(f"webhook URL {url[:200]!r} is not an http(s) URL with a host")
        if parts.scheme == "http" and not self.allowed_host(host):
            raise AddressRefused(f"webhook URL {url[:200]!r} is plain http: use https, or allow the host")
        if self.allowed_host(host):
            return
        for address in await _addresses(host, parts.port or (443 if parts.scheme == "https" else 80)):
            if not self.allowed_address(address):
                raise AddressRefused(
                    f"webhook host {host!r} resolves to {address}, which is not a public address "
                    "(loopback, private, link-local or metadata): allow it with webhook_allow"
                )


async def _addresses(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise AddressRefused(f"webhook host {host!r} does not resolve: {exc}") from exc
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver, refusing an address the guard does not allow at the connection itself."""

    def __init__(self, guard: AddressGuard) -> None:
        self._guard = guard
        self._resolver = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[Any]:
        """The addresses of ``host``, each checked; ``OSError`` if one is refused."""
        found = await self._resolver.resolve(host, port, family)
        if not self._guard.allowed_host(host):
            for entry in found:
                if not self._guard.allowed_address(ipaddress.ip_address(entry["host"])):
                    raise OSError(f"webhook host {host!r} resolved to {entry['host']}, which is not public")
        return list(found)

    async def close(self) -> None:
        """Close the wrapped resolver."""
        await self._resolver.close()
