"""Workflows over ordinary jobs: batches (and trees of them) with a completion callback, and chains.

See docs/workflows.md. ``batches`` is the model and the producer's flows, ``batch_store`` the
sans-I/O DynamoDB requests, ``completion`` the seal/check/complete/cancel flows, and ``batch_hook``
the ``FinishHook`` through which an item's finish counts on its batch. ``chains``, ``chain_store``
and ``chain_hook`` are the same three roles for chains, whose next step is unblocked by the finish
of the one before.
"""
