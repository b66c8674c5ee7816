"""Durable steps and sleeps: ``ctx.step(name, fn, *args)`` runs ``fn`` once per job across attempts (docs/steps.md).

The parts every feature folder has: ``plugin`` (``steps_plugin``, the feature's line on the App: it
sets ``ctx.steps`` and owns the ``Sleep`` end of a run), ``records`` (where a step is kept: an
attribute of the job's record, its write fenced by the claim token; the ``sleep`` and ``wake`` rows
of the state table) and ``namespace`` (``app.tokens``: wait tokens answered). Its own: ``book``, what
a step does (replay a recorded result, or run and record), and ``sleeps``, the end of a run that
sleeps (``ctx.sleep``). A job that takes no step never calls into this
folder: its record has no step, and the kernel asks it about no job (only about a ``Sleep`` raised).
"""
