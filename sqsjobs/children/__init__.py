"""Children awaited durably: ``ctx.children`` starts child jobs and the parent waits for them without a slot.

Built on batches (the children, their counts, one completion) and steps (the wait token, the replay):
see ``namespace`` for the model, ``records`` for what is kept where, and docs/children.md.
"""
