"""How an AWS client is configured (pool, retries, region, User-Agent), and the botocore data sessions share.

A client is costly to make (a botocore session registers ~600 event handlers, a client builds its
service model), so ``sqsjobs._aws``' client sets make each one once, from one session, read region
and retries from that session, and every session in the process shares the JSON botocore loads.
Run only when a client is made, never on a job's path.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.config import Config

    from sqsjobs.config import Settings


#: Connections per client at least (botocore's ``max_pool_connections``: aiohttp's connector limit,
#: urllib3's pool size). A request beyond the limit waits for a free connection (aiohttp) or opens
#: one it then throws away, handshake included (urllib3).
MIN_POOL_CONNECTIONS = 64
#: Connections a worker's client needs besides one per running job: the receive long polls (one per
#: queue, held up to 20 s each), the batched deletes and visibility changes, the heartbeat's
#: renewals and what handlers enqueue.
POOL_HEADROOM = 16


def pool_connections(concurrency: int) -> int:
    """Connections per client for ``concurrency`` jobs at once: each running job has one request in flight."""
    return max(MIN_POOL_CONNECTIONS, concurrency + POOL_HEADROOM)


def _botocore_config(
    *, validate: bool = False, pool: int = MIN_POOL_CONNECTIONS, retries: bool = True
) -> Config:
    from botocore.config import Config

    # Standard retry mode backs off on throttling and 5xx; the flows stay safe under a retried write
    # because every write is conditional.
    # CPU per request (profile in docs/bench.md): botocore rebuilds and sanitises its User-Agent from
    # its components twice per request and re-validates every parameter against the service model,
    # about a fifth of the SDK's CPU in a worker. The User-Agent is built once instead (the same
    # string, plus sqsjobs/<version>); parameters come from the tested sans-I/O builders, and AWS
    # validates every request anyway.
    return Config(
        retries={"mode": "standard", "max_attempts": 5} if retries else None,  # None: botocore's own
        connect_timeout=5,
        read_timeout=30,
        max_pool_connections=pool,
        user_agent=_user_agent(),
        parameter_validation=validate,
    )


@functools.cache
def _user_agent() -> str | None:
    """The User-Agent botocore would send from here, computed once (None: let botocore build it)."""
    try:
        from importlib.metadata import version

        from botocore.useragent import UserAgentString

        return f"sqsjobs/{version('sqsjobs')} {UserAgentString.from_environment().to_string()}"
    except Exception:  # an older botocore or a vendored copy without metadata: keep the default
        return None


#: The region an emulator endpoint is signed for when none is configured (any one would do).
EMULATOR_REGION = "us-east-1"


def region_of(settings: Settings, session: Any = None) -> str | None:
    """The App's region, else botocore's (environment, then the profile), else ``EMULATOR_REGION`` for an emulator.

    None (no region anywhere, against AWS itself): botocore then refuses to make the client, naming it.
    ``session``: the botocore session the clients come from (a new one otherwise; one costs ~5 ms).
    """
    import botocore.session

    configured = settings.region or (session or botocore.session.Session()).get_config_variable("region")
    return configured or (EMULATOR_REGION if settings.endpoint_url else None)


def _retries_configured(session: Any) -> bool:
    """Whether retries are set the botocore way (``AWS_MAX_ATTEMPTS``/``AWS_RETRY_MODE``, or the profile)."""
    import os

    import botocore.exceptions

    if os.environ.get("AWS_MAX_ATTEMPTS") or os.environ.get("AWS_RETRY_MODE"):
        return True
    try:
        scoped = session.get_scoped_config()
    except botocore.exceptions.ProfileNotFound:
        return False
    return "max_attempts" in scoped or "retry_mode" in scoped


def client_kwargs(settings: Settings, service: str, session: Any) -> dict[str, Any]:
    # Region and retries are resolved as botocore resolves them unless the App sets them; the
    # standard mode with 5 attempts is only the default when nothing is configured.
    config = _botocore_config(
        validate=settings.validate_requests,
        pool=pool_connections(settings.concurrency),
        retries=not _retries_configured(session),
    )
    kwargs: dict[str, Any] = {"config": config}
    region = region_of(settings, session)
    if region:
        kwargs["region_name"] = region
    if settings.endpoint_url:
        kwargs["endpoint_url"] = settings.endpoint_url
        if service == "s3":  # an emulator on 127.0.0.1 has no <bucket>.host names: path-style URLs
            from botocore.config import Config

            kwargs["config"] = config.merge(Config(s3={"addressing_style": "path"}))
    return kwargs


_LOADERS: dict[str, Any] = {}
_LOADERS_LOCK = threading.Lock()


def share_botocore_data(session: Any) -> Any:
    """Give a botocore session the process's one data loader, and return the session.

    The loader reads botocore's JSON (endpoints, partitions, each service's model and rules) and
    keeps what it read; a new session would read it all again: about 60 ms of CPU for DynamoDB and
    SQS, paid by every App, every async client set beside a sync one, every CLI command run in
    process. The loaded data is only read, so sessions can share it; one loader per ``data_path``
    (``AWS_DATA_PATH``) keeps custom models apart.
    """
    data_path = session.get_config_variable("data_path") or ""
    with _LOADERS_LOCK:
        loader = _LOADERS.get(data_path)
        if loader is None:
            loader = _LOADERS[data_path] = session.get_component("data_loader")
    session.register_component("data_loader", loader)
    return session
