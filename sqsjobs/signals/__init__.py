"""Signals: a job waits for one (``ctx.signals.wait``) without a slot, or is cancelled by one (``cancel_on``).

Built on steps (the wait token, the replay) and the state table's ``cancel`` and ``supersede`` rows:
see ``records`` for the signal item that makes a match one key read, ``waits`` for the handler's
side, ``namespace`` for the declarations and the send, and docs/signals.md.
"""
