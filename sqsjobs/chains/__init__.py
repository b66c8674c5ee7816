"""Chains: jobs that run one after another, each seeing the result of the one before (docs/workflows-chains.md).

The parts every feature folder has: ``plugin`` (what the kernel sees: the previous result before a
step's run, the next step unblocked or the chain stopped with its finish), ``records`` (the chain's
record and its steps' writes: ``unblock`` and ``drop``, rows of the state table) and ``namespace``
(``app.chains``: start, get, wait, cancel).
"""
