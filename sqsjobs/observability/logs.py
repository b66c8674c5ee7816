"""The JSON logger of an App: Powertools' Logger, one line per job transition (docs/observability.md).

Set up here rather than inline so that what each line costs is decided in one place. A worker
writes two lines per job at INFO; Powertools first tries to decode every message as JSON (a message
may be a JSON document to embed), which for a plain message like "job claimed" means raising and
catching a ``JSONDecodeError``: 6 % of a line's instructions (361 → 340 thousand,
``bench/request_cpu.py --instructions --only log``). ``decode_message`` answers those messages
without trying, and is otherwise ``json.loads``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

#: What a JSON text may start with, after leading whitespace: an object, array, string, number,
#: ``true``/``false``/``null``, or Python's ``NaN``/``Infinity`` (``json.loads`` accepts both).
_JSON_STARTS = frozenset('{["-0123456789tfnNI')
#: The whitespace ``json.loads`` skips before a value.
_JSON_WHITESPACE = " \t\n\r"


def decode_message(message: Any) -> Any:
    """Powertools' ``json_deserializer``: ``json.loads``, but a text no JSON can start like is returned as is.

    Same result as ``json.loads`` with Powertools' fallback (a message that does not decode is
    logged as it is): ``json.loads`` would raise for such a text, and Powertools would keep it.
    """
    if isinstance(message, str):
        start = message.lstrip(_JSON_WHITESPACE)[:1]
        if start not in _JSON_STARTS:
            return message
    return json.loads(message)


class DeferredLogger:
    """The App's logger, made on its first use: what a producer's enqueue hands its flows.

    An enqueue logs only when SQS refuses a message. Made up front, the Powertools logger costs a
    thin producer (a web app that only enqueues) the import of Powertools on its first enqueue
    (about 9 ms of CPU, botocore already loaded), and that import hooks every botocore session made afterwards, so each
    request of the App's clients then runs one more handler (Powertools' User-Agent feature).
    """

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make

    def __getattr__(self, name: str) -> Any:
        return getattr(self._make(), name)


#: One Powertools Logger per service name. A second ``Logger(service=...)`` of a name already set up
#: finds the shared ``logging.Logger`` configured and skips its own formatter, so its
#: ``append_keys`` fails: two Apps of one name (a test, a CLI loading the app twice) share the first.
_LOGGERS: dict[str, Any] = {}
_LOGGERS_LOCK = threading.Lock()


def make_logger(service: str) -> Any:
    """Powertools' JSON logger for ``service``, to stderr, at ``SQSJOBS_LOG_LEVEL`` (else Powertools', else INFO)."""
    from aws_lambda_powertools import Logger

    with _LOGGERS_LOCK:
        if service not in _LOGGERS:
            level = os.environ.get("SQSJOBS_LOG_LEVEL") or os.environ.get("POWERTOOLS_LOG_LEVEL") or "INFO"
            _LOGGERS[service] = Logger(
                service=service,
                level=level,
                logger_handler=logging.StreamHandler(),
                json_deserializer=decode_message,
            )
        return _LOGGERS[service]
