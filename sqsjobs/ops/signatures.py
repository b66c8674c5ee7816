"""An error's signature: its class and its message with the parts that vary per job taken out.

Dead jobs that failed for one reason rarely share a message word for word: ``smtp refused
ann@example.com``, ``smtp refused bob@example.com``; ``order 8812 not found``, ``order 9034 not
found``. Grouping them by the exact text shows one group per job. ``signature`` keeps the class and
the words and replaces what a handler fills in from its input with a placeholder, so the dashboard,
``GET /dead/groups`` and the CLI group the same jobs the same way (one normaliser, here):

=====================================  ==================
in the message                         becomes
=====================================  ==================
a URL (``https://...``)                ``<url>``
an e-mail address                      ``<email>``
a UUID, or an id of 8+ letters/digits  ``<id>``
an IPv4 address (and port)             ``<ip>``
a number (``42``, ``-3.5``, ``1e9``)   ``<n>``, a unit kept
=====================================  ==================

Quoted text keeps its quotes and has the same rules applied inside (``KeyError: 'user_id'`` stays
as it is: the key is the reason). Whitespace is collapsed and the result cut at ``MAX_CHARS``, so a
message that embeds a whole payload still yields a bounded key.
"""

from __future__ import annotations

import re

__all__ = ["MAX_CHARS", "normalise", "signature"]

#: The longest normalised message kept (the rest is cut: a signature is a key, not a report).
MAX_CHARS = 200

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+", re.IGNORECASE), "<url>"),
    (re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b"), "<email>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE), "<id>"),
    # A run of 8+ letters and digits is an id only when it holds a digit: "deadbeef" stays a word.
    (re.compile(r"\b(?=[0-9a-z]*\d)[0-9a-z]{8,}\b", re.IGNORECASE), "<id>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<ip>"),
    # A number not inside a word ("v2" stays), its unit kept: "3.5s" becomes "<n>s".
    (re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", re.IGNORECASE), "<n>"),
)
_SPACE = re.compile(r"\s+")


def normalise(message: str) -> str:
    """``message`` with URLs, e-mail addresses, ids and numbers replaced by placeholders (see above)."""
    text = message
    for pattern, placeholder in _RULES:
        text = pattern.sub(placeholder, text)
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"


def signature(error_class: str, message: str) -> str:
    """``Class: normalised message``: the key dead jobs are grouped by."""
    return f"{error_class}: {normalise(message)}" if message.strip() else error_class
