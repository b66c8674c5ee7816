"""Which webhook addresses a worker may reach (sqsjobs.notify.address_guard): public HTTPS only, unless allowed."""

from __future__ import annotations

import asyncio

import pytest

from sqsjobs.errors import WebhookRefused
from sqsjobs.notify.address_guard import AddressGuard


def check(url: str, allow: tuple[str, ...] = ()) -> None:
    asyncio.run(AddressGuard(allow).check_url(url))


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hooks",  # loopback
        "https://localhost:8443/hooks",  # a name that resolves to loopback
        "https://[::1]/hooks",
        "https://169.254.169.254/latest/meta-data/",  # the instance metadata service
        "https://[fd00:ec2::254]/latest/",  # its IPv6 address
        "https://10.1.2.3/hooks",
        "https://172.16.0.9/hooks",
        "https://192.168.1.1/hooks",
        "https://100.64.0.1/hooks",  # shared address space
        "https://0.0.0.0/hooks",
        "https://224.0.0.1/hooks",  # multicast
        "http://93.184.215.14/hooks",  # public, but plain http
        "ftp://93.184.215.14/hooks",
        "https:///no-host",
    ],
)
def test_an_address_that_is_not_public_https_is_refused(url):
    with pytest.raises(WebhookRefused):
        check(url)


def test_a_public_https_address_is_reached():
    check("https://93.184.215.14/hooks")
    check("https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/hooks")


def test_the_allow_list_lets_hosts_and_networks_through_over_http_too():
    check("http://127.0.0.1:8080/hooks", ("127.0.0.1",))
    check("https://10.1.2.3/hooks", ("10.0.0.0/8",))
    check("http://localhost:8080/hooks", ("localhost",))
    with pytest.raises(WebhookRefused):
        check("https://10.1.2.3/hooks", ("192.168.0.0/16",))
