"""The one state table, as values: each row is a transition's write builder, its refusals and the witness it keeps.

A row is registered where its builder is written, by decorating it: the core's in ``store/runs.py``,
``store/requests.py``, ``store/operator.py`` and ``store/deadlines.py``, a feature's in its own
folder (a step's ``sleep`` and ``wake`` in ``steps/records.py``, a chain's ``unblock`` and ``drop``
in ``chains/records.py``). Nothing else lists the transitions: ``docs/lifecycle.md``'s table,
``tests/unit/test_state_table.py`` (each write's condition admits exactly the row's sources and sets
its target) and ``tests/integration/test_state_table_applied.py`` (each write, sent through
``store.apply`` to a real store, lands from exactly those statuses) all read ``STATE_TABLE``.

The decorator returns the builder itself: a row costs nothing per write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from sqsjobs.job import TERMINAL, WITNESSES, JobStatus, Witness
from sqsjobs.store.apply import ClaimRefusal, Refusal
from sqsjobs.store.write import Write

Builder = TypeVar("Builder", bound=Callable[..., Write])

#: The refusal every fenced transition of a run reads as (``JobStore``): another run owns the job.
FENCED = (Refusal.LEASE_LOST,)
#: A claim's refusals: the record it met says what the message is worth (``runtime/claim_stage.py``).
CLAIM = (*ClaimRefusal, Refusal.EXPIRED)
#: An operator's or a feature's write on a record that moved since it was read (the caller reads it again).
CHANGED = (Refusal.CHANGED,)


@dataclass(frozen=True)
class Transition:
    """One arrow of the state machine: one conditional write."""

    name: str
    #: The statuses its condition admits (beyond them, it is refused whatever else holds).
    sources: frozenset[JobStatus]
    #: The status it sets (a self-transition leaves the status alone).
    target: JobStatus
    #: What builds the write (its arguments are the transition's own).
    build: Callable[..., Write]
    #: What a refusal of this write reads as, for the code that sent it.
    refusals: tuple[Refusal | ClaimRefusal, ...]
    #: The witness the write keeps or makes (one of them, whichever applies); none into a terminal state.
    kept: frozenset[Witness]
    #: ``core``, or the feature that registered the row.
    owner: str

    @property
    def self_transition(self) -> bool:
        """The write leaves the status as it found it (a heartbeat, a wake)."""
        return self.sources == {self.target}


class StateTable:
    """Every registered transition, by name; a name registered twice with two builders is a bug."""

    def __init__(self) -> None:
        self._rows: dict[str, Transition] = {}

    def row(
        self,
        name: str,
        *,
        sources: Iterable[JobStatus],
        target: JobStatus,
        refusals: Iterable[Refusal | ClaimRefusal],
        kept: Iterable[Witness] = (),
        owner: str = "core",
    ) -> Callable[[Builder], Builder]:
        """Register the decorated builder as the write of transition ``name``.

        Raises:
            ValueError: the row breaks the witness rule (an unfinished target with no witness kept,
                or one its state cannot have), or its name is taken by another builder.
        """
        row_sources, row_kept = frozenset(sources), frozenset(kept)
        if target not in TERMINAL and not row_kept:
            raise ValueError(f"{name} leaves {target} without naming the witness it keeps")
        if not row_kept <= WITNESSES[target]:
            raise ValueError(
                f"{name} keeps {sorted(row_kept - WITNESSES[target])}, which {target} cannot have"
            )

        def register(build: Builder) -> Builder:
            known = self._rows.get(name)
            if known is not None and known.build is not build:
                raise ValueError(f"transition {name!r} is registered already, by {known.owner}")
            self._rows[name] = Transition(name, row_sources, target, build, tuple(refusals), row_kept, owner)
            return build

        return register

    def __getitem__(self, name: str) -> Transition:
        return self._rows[name]

    def __iter__(self) -> Iterator[Transition]:
        return iter(sorted(self._rows.values(), key=lambda row: row.name))

    def sharing(self, name: str) -> frozenset[JobStatus]:
        """The sources of every row built by ``name``'s builder: what that one write's condition admits."""
        build = self._rows[name].build
        return frozenset().union(*(row.sources for row in self._rows.values() if row.build is build))


#: The one table (see the module docstring).
STATE_TABLE = StateTable()
