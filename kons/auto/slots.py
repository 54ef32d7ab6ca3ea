"""The slots of :class:`~kons.Auto`'s mixture, by name, and the layouts of the states saved before today's.

A slot's name is also the name of its expert's state in a saved grid: ``base<i>`` for the members of
:data:`~kons.auto.config.GRID`, ``constant``, ``young<g>_<j>`` and ``young<g>_recent`` for the copies and
the linear model of generation ``g``, then one name per expert of :data:`~kons.auto.grid.EXPERTS` (``bins``,
``neighbours``, ``tree<i>``, ``target_last``, ``target_lags``, ``linear``, ``forest``, ``fresh_bins``,
``target_long_lags``, ``wide_numbers``). A state saved by an
earlier release holds the mixture's weights in that release's layout; :func:`in_layout` brings them to
today's by name, the slots it did not have inactive at weight 0, so that such a learner goes on exactly as it
would have.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["EARLIER_LAYOUTS", "generation_slots", "in_layout", "member_slots", "saved_order"]


def member_slots(members: int) -> tuple[str, ...]:
    return tuple(f"base{i}" for i in range(members))


def generation_slots(generation: int, copies: int, recent: bool = True) -> tuple[str, ...]:
    """Generation ``generation``'s slots: its ``copies`` restarted copies, then its linear model."""
    recents = (f"young{generation}_recent",) if recent else ()
    return (*(f"young{generation}_{j}" for j in range(copies)), *recents)


def _layout(copies: int, recent: bool, *after: str) -> tuple[str, ...]:
    """The slots of a layout of the grid's 11 members, the constant, two generations of ``copies`` copies
    (and their linear models if ``recent``), then ``after``."""
    return (*member_slots(11), "constant", *generation_slots(0, copies, recent),
            *generation_slots(1, copies, recent), *after)


#: The layouts of the mixture's slots saved by earlier releases, oldest first, and today's own (the last):
#: a saved state is told by its width.
EARLIER_LAYOUTS: tuple[tuple[str, ...], ...] = (
    _layout(3, False),  # before the generations had a linear model
    _layout(3, True),  # before the quantile-threshold view
    _layout(3, True, "bins"),  # while a generation copied one kernel member
    _layout(4, True, "bins"),  # before the local expert
    _layout(4, True, "bins", "neighbours"),  # before the trees
    _layout(4, True, "bins", "neighbours", "tree0", "tree1", "tree2"),  # before the last targets
    _layout(4, True, "bins", "neighbours", "tree0", "tree1", "tree2", "target_last", "target_lags"),
    _layout(4, True, "bins", "neighbours", "tree0", "tree1", "tree2", "target_last", "target_lags", "linear"),
    _layout(4, True, "bins", "neighbours", "tree0", "tree1", "tree2", "target_last", "target_lags", "linear",
            "forest"),  # before the threshold model since a declared change
    # before the second autoregression (and, today, while it has not entered: Grid._mixture_arrays)
    _layout(4, True, "bins", "neighbours", "tree0", "tree1", "tree2", "target_last", "target_lags", "linear",
            "forest", "fresh_bins"),
    # before the kernel member on the wide numbers (and, today, while it does not play)
    _layout(4, True, "bins", "neighbours", "tree0", "tree1", "tree2", "target_last", "target_lags", "linear",
            "forest", "fresh_bins", "target_long_lags"),
    # today's
    _layout(4, True, "bins", "neighbours", "tree0", "tree1", "tree2", "target_last", "target_lags", "linear",
            "forest", "fresh_bins", "target_long_lags", "wide_numbers"),
)


def in_layout(arrays: dict[str, np.ndarray], layout: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The mixture's arrays (``mix_log_weights``, ``mix_active``, the label vote's ``label_*`` whose last
    slot is the mixture's own label, and the label after a change's ``change_label_*``) in ``layout``, from
    a state saved in it or in any of :data:`EARLIER_LAYOUTS` (its slots by name, the others inactive at
    weight 0); the other arrays as they are, and the mixture's as they are if their width is no known
    layout's."""
    width = arrays["mix_active"].shape[0] if arrays["mix_active"].ndim == 1 else -1
    saved = next((earlier for earlier in EARLIER_LAYOUTS if len(earlier) == width), None)
    if width == len(layout) or saved is None:
        return arrays
    at = {name: i for i, name in enumerate(layout)}
    where = [at[name] for name in saved]
    moved = dict(arrays)
    for prefix, own in (("mix", []), ("label", [len(layout)]), ("change_label", [])):
        if f"{prefix}_active" not in arrays:
            continue
        slots = [*where, *own]  # the vote's own slot stays the last
        log_weights = np.zeros((arrays[f"{prefix}_log_weights"].shape[0], len(layout) + len(own)))
        active = np.zeros(len(layout) + len(own), dtype=bool)
        log_weights[:, slots] = arrays[f"{prefix}_log_weights"]
        active[slots] = arrays[f"{prefix}_active"]
        moved.update({f"{prefix}_log_weights": log_weights, f"{prefix}_active": active})
    return moved


#: The order of a saved grid's arrays (a blob's bytes follow it): the nested learners (the members, the
#: threshold view's, the generations' copies), the dictionaries of the Nystrom ones (each saved once), the
#: generations' linear models, the grid's own arrays (the mixture, the log view's scaler, the kept rounds),
#: then the other experts' in the order they were added.
_SAVED_ORDER = (r"base\d+", r"bins_base", r"young\d+_\d+", r"dictionary_.*", r"young\d+_recent_.*",
                r"(mix|log|replay)_.*", r"neighbours_.*", r"tree\d+_.*", r"bins_.*", r"target_last_.*",
                r"target_lags_.*", r"linear_.*", r"forest_.*", r"fresh_bins_.*",
                r"target_long_lags_.*", r"wide_numbers")


def saved_order(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``arrays`` in the order of :data:`_SAVED_ORDER` (an expert added later: after them all), each group
    in the order given."""
    def rank(name: str) -> int:
        return next((i for i, pattern in enumerate(_SAVED_ORDER) if re.fullmatch(pattern, name)),
                    len(_SAVED_ORDER))
    return dict(sorted(arrays.items(), key=lambda item: rank(item[0])))
