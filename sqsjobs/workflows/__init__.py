"""Workflows over ordinary jobs: batches (and trees of them) with a completion callback, and chains.

See docs/workflows-batches.md. ``batches`` is the model and the producer's flows, ``batch_store`` the
sans-I/O DynamoDB requests, ``completion`` the seal/check/complete/cancel flows, and ``batch_hook``
the ``FinishHook`` through which an item's finish counts on its batch.
"""
