"""A learner's growth budget: room in its own budget and its tenant's for what it holds plus what its next
rounds may add, reserved ahead of them.

Before a group of rounds is played, its learner's reservation (:class:`.budget.TenantBudget`) must cover the
state it holds plus the most those rounds can add (:meth:`kons.Learner.max_growth_nbytes`), and the classes
they bring. A reservation covers a few rounds ahead, so that most groups need no call to Redis. A learner that
can learn without growing is held instead of refused when there is no room; any other is refused (422).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import kons
from kons_service.core.budget import TenantBudget
from kons_service.core.cache import CachedLearner
from kons_service.core.errors import ResourceLimitError
from kons_service.core.learning import check_budget, classifier
from kons_service.core.metrics import Metrics
from kons_service.settings import Settings

__all__ = ["GrowthBudget"]

log = logging.getLogger("kons_service.feedback")

_RESUME_SECONDS = 60.0  # how often a learner whose growth is held asks its tenant's budget for room again
_GROWTH_AHEAD = 32  # rounds of growth a reservation covers ahead (the bound grows with them: keep it short)


class GrowthBudget:
    """Cover the growth of a learner's next rounds, or hold it, before they are played."""

    def __init__(self, settings: Settings, metrics: Metrics, budget: TenantBudget) -> None:
        self.settings = settings
        self.metrics = metrics
        self.budget = budget

    async def held(self, entry: CachedLearner, learner: kons.Learner, first: Any, rows: int) -> bool:
        """Whether the learner's growth is held for the next ``rows`` rounds, once its reservation covers
        what it holds plus the most those rounds can add (:meth:`kons.Learner.max_growth_nbytes`); ``first``:
        the batch's first row (for a learner whose dimension it fixes).

        A learner that can learn without growing (``nystrom_kons``, ``auto``) is held instead of refused
        when its tenant's budget, or its own, has no room for that growth: it keeps learning with the
        dictionary it has (``stats()["growth_held"]``), and resumes growing when room is found again
        (looked for every ``_RESUME_SECONDS``). Any other learner that cannot be covered is refused
        (422): a kernel learner that learns by storing points, or one holding more than its own budget."""
        if not learner.growth_held and rows <= entry.growth_credit:  # covered by an earlier reservation
            entry.growth_credit -= rows
            return False
        ref, held, budget = entry.ref, entry.state_nbytes(), self.settings.learner_max_bytes
        holdable = learner.grows and learner.can_hold_growth
        if held > budget and not holdable:
            raise ResourceLimitError(
                f"Learner {ref.name!r} holds {held} bytes, over the budget of {budget} per learner: it takes "
                "no more feedback (it still predicts). Export it and start a bounded learner (e.g. "
                "sketched_kons or nystrom_kons)."
            )
        if learner.input_dim is None:  # the first batch fixes the dimension: bounded by the config
            # at the length kons takes the row as (an array's, a sparse vector's dim, a record's width)
            sized = check_budget(learner, len(learner.check_round(first)[0]), self.settings.learner_max_bytes)
            if not holdable:
                entry.reserved_bytes = await self.budget.cover(ref, sized, entry.reserved_bytes)
            return False
        was_held = learner.growth_held
        if was_held and time.monotonic() < entry.resume_at:
            return True
        learner.hold_growth(False)  # (its bound as a growing learner; set again before the rounds)
        need = held + learner.max_growth_nbytes(rows)
        # if it can, the reservation covers the growth of more rounds, so that most batches need no check
        ahead = max(rows, _GROWTH_AHEAD)
        need_ahead = held + learner.max_growth_nbytes(ahead)
        learner.hold_growth(was_held)
        got, credit = None, ahead - rows
        if need_ahead <= budget:
            got = await self.budget.try_cover(ref, need_ahead, entry.reserved_bytes)
        if got is None and not holdable:
            got, credit = await self.budget.cover(ref, need, entry.reserved_bytes), 0
        if got is None and need <= budget:
            got, credit = await self.budget.try_cover(ref, need, entry.reserved_bytes), 0
        if got is not None:
            entry.reserved_bytes, entry.growth_credit = got, credit
            if was_held:
                log.info("learner %s grows again: its tenant's budget has room", ref)
            return False
        entry.resume_at = time.monotonic() + _RESUME_SECONDS
        if not was_held:
            self.metrics.growth_held.inc()
            log.warning("learner %s stopped growing at %d bytes: its %s budget is full; it keeps learning "
                        "with the dictionary it has", ref, held, "own" if need > budget else "tenant's")
        return True

    async def cover_new_classes(self, entry: CachedLearner, learner: kons.Learner, new: int, first: Any,
                                held: bool, rows: int) -> None:
        """Cover the bytes of the ``new`` classes the group brings (:meth:`kons.Auto.class_growth_nbytes`) on
        top of what the learner holds and may grow in these ``rows`` rounds (its growth ``held`` or not;
        ``first``: the group's first row). A class is added whether or not the learner's growth is held, so
        when the budget is full a batch with a new label is refused (422) and one with known labels is not."""
        if not new or not classifier(learner):
            return
        if learner.input_dim is None:  # the first batch, whose first row fixes the dimension
            dim = len(learner.check_round(first)[0])
            need = max(entry.reserved_bytes, entry.state_nbytes()) + learner.class_growth_nbytes(new, dim)
        else:
            was_held = learner.growth_held
            learner.hold_growth(held)
            need = (entry.state_nbytes() + learner.max_growth_nbytes(rows)
                    + learner.class_growth_nbytes(new))
            learner.hold_growth(was_held)
        refused = f"its {new} new class(es) take no room (it still learns the classes it has)"
        if need > self.settings.learner_max_bytes:
            raise ResourceLimitError(
                f"Learner {entry.ref.name!r} would need {need} bytes with {new} new class(es), over the "
                f"budget of {self.settings.learner_max_bytes} per learner: {refused}.")
        entry.reserved_bytes = await self.budget.cover(entry.ref, need, entry.reserved_bytes, refused)
