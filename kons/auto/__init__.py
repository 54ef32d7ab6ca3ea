"""``auto``: the self-tuning learner for raw data, a mixture of experts (:class:`Auto`).

One module per concept: :mod:`~kons.auto.learner` (the learner users see), :mod:`~kons.auto.mixture`
(the weights), :mod:`~kons.auto.grid` (the experts played each round), :mod:`~kons.auto.experts` (one
module per kind of expert), :mod:`~kons.auto.restarts` (the generations started at a change),
:mod:`~kons.auto.detectors` (the change detectors), :mod:`~kons.auto.config` (every tuning constant),
:mod:`~kons.auto.slots` (the mixture's slots by name, and those of states saved earlier),
:mod:`~kons.auto.ring` (a ring of fixed capacity). What each part does, why, and what was measured:
``docs/auto.md``.
"""

from kons.auto.learner import Auto

__all__ = ["Auto"]
