"""Workflows built from ordinary jobs: chains (``chains``, ``chain_store``, ``chain_hook``)."""
