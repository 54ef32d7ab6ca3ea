r"""The mixture of :class:`~kons.Auto`: Vovk's aggregating algorithm over its experts' plays, with
Fixed-Share switching weights (:class:`SwitchingWeights`: Herbster and Warmuth, "Tracking the best
expert", 1998, the switching rate mixed over a small grid that includes 0, and experts that enter or are
replaced while the stream runs). The losses it mixes, their learning rates and the bounds they are
proved under: ``docs/auto.md``."""

from __future__ import annotations

import math

import numpy as np

from kons._numerics import SMALLEST_NORMAL, clip
from kons.auto.config import (
    CHANGE_LABEL_RATE,
    LABEL_ENTRY_PRIOR,
    LABEL_OWN_PRIOR,
    LABEL_PICK_DISCOUNT,
    LABEL_PICK_MARGIN,
    LABEL_RATE,
    LABEL_RATES,
    LABEL_SWITCHING_PRIOR,
    LABEL_VOTE_SHARE,
    LABEL_WEIGHT_POWER,
    MIX_BOUND,
    RATES,
    SWITCHING_PRIOR,
)

__all__ = ["MIX_BOUND", "RATES", "SWITCHING_PRIOR", "ChangeLabel", "LabelVote", "Mixture", "SwitchingWeights",
           "Units"]

#: The mixture's units of the target, as the affine map ``(offset, factor)`` from the plays' units: a play
#: ``f`` is ``(f - offset) / factor`` in them (regression; :meth:`Mixture.mix`).
Units = tuple[float, float]

#: The ends of the interval of Vovk's substitution (:meth:`Mixture._substituted`), as a column.
_ENDS = np.array([[-MIX_BOUND], [MIX_BOUND]])


def _log_normalised(log_w: np.ndarray) -> np.ndarray:
    """``log_w`` minus its log-sum-exp along the last axis (rows of weights summing to 1)."""
    normalised: np.ndarray = log_w - np.logaddexp.reduce(log_w, axis=-1, keepdims=True)
    return normalised


class SwitchingWeights:
    r"""Fixed-Share weights over ``experts`` slots (the first ``active`` in play), mixed over the switching
    rates ``rates``: ``rates[0]`` is 0, with the prior weight ``1 - switching_prior``, the others share
    ``switching_prior``.

    For each rate :math:`\alpha_r` a weight vector :math:`w_r` over the active experts, and a weight
    :math:`v_r` on the rate. A round with the experts' losses :math:`\ell_i` (already multiplied by the
    mixture's learning rate :math:`\eta`, so that :math:`e^{-\ell_i}` is expert ``i``'s likelihood):

    .. math::

        v_r \leftarrow v_r \sum_i w_{r,i} e^{-\ell_i}, \qquad
        w_{r,i} \leftarrow (1 - \alpha_r) \frac{w_{r,i} e^{-\ell_i}}{\sum_j w_{r,j} e^{-\ell_j}}
        + \frac{\alpha_r}{K},

    ``K`` the number of active experts, and the mixture plays with the marginal weights
    :math:`p_i = \sum_r v_r w_{r,i}` (:meth:`weights`). This is Bayes' rule over the pairs (rate, sequence
    of experts) under the Fixed-Share prior: at every round the expert is kept with probability
    :math:`1 - \alpha` or drawn afresh. So the aggregating algorithm run with :math:`p` on an
    :math:`\eta`-mixable loss has, against any sequence of experts with ``m`` switches over ``T`` rounds,
    a cumulative loss at most

    .. math::

        L_{\text{seq}} + \frac{1}{\eta}\Big(\ln K + m \ln\frac{K}{\alpha_r} + (T - m - 1)
        \ln\frac{1}{1 - \alpha_r} + \ln\frac{1}{\pi_r}\Big)

    for every rate of the grid, :math:`\pi_r` its prior weight (Herbster and Warmuth 1998, Theorem 1;
    Vovk 1998 for the mixable losses; Cesa-Bianchi and Lugosi 2006, Sec. 5.2; the mixture over the rates
    is one more Bayes mixture, whose price is :math:`\ln(1/\pi_r)/\eta`). With :math:`\alpha = 0` in the
    grid, the price against the best single expert is the aggregating algorithm's :math:`\ln K / \eta`
    plus :math:`\ln(1/\pi_0)/\eta`, whatever the other rates; against a sequence with ``m`` switches, about
    :math:`m \ln(K T / m) / \eta` for the rate nearest ``m / T``. Assumptions: the loss is
    :math:`\eta`-mixable on the mixture's interval (the squared loss on :math:`[-B, B]` with
    :math:`\eta = 1/(2B^2)`, the log loss with :math:`\eta = 1`); the comparator may switch at arbitrary
    rounds, chosen in hindsight.

    An expert that enters at a round (:meth:`replace`: a restarted copy of a base) takes the prior
    weight ``prior`` in every :math:`w_r`, the others sharing the rest in their proportions; the bound
    then holds for sequences that use an expert only after it entered ("sleeping" experts, Freund et al.
    1997), at the price :math:`\ln(1/\text{prior})/\eta` per entry.
    """

    def __init__(self, experts: int, active: int, rates: tuple[float, ...] = RATES,
                 switching_prior: float = SWITCHING_PRIOR, name: str = "mix") -> None:
        self.rates = rates
        self.name = name  # the prefix of its arrays' names in a saved state
        self.active = np.zeros(experts, dtype=bool)
        self.active[:active] = True
        others = len(rates) - 1
        prior = [1.0 - switching_prior, *[switching_prior / others] * others] if others else [1.0]
        self.log_rate_weights = np.log(prior)
        self.log_weights = np.where(self.active, -math.log(active), -math.inf) * np.ones((len(rates), 1))
        self._log_keep = np.log1p(-np.array(rates))[:, None]
        with np.errstate(divide="ignore"):  # the rate 0 shares nothing: log 0 = -inf, exactly
            self._log_share = np.log(np.array(rates))[:, None]
        self._shares: tuple[bytes, np.ndarray] | None = None  # (active's bytes, _shares_of() of them)

    def weights(self) -> np.ndarray:
        r"""The marginal weights :math:`p_i = \sum_r v_r w_{r,i}` of the experts (0 for inactive slots)."""
        log_p = np.logaddexp.reduce(self.log_rate_weights[:, None] + self.log_weights, axis=0)
        p = np.exp(log_p - np.maximum.reduce(log_p))  # (the ufuncs' reductions: ndarray's wrap them)
        normalised: np.ndarray = p / np.add.reduce(p)
        return normalised

    def rate_weights(self) -> np.ndarray:
        """The weights :math:`v_r` of the switching rates."""
        v: np.ndarray = np.exp(self.log_rate_weights)
        normalised: np.ndarray = v / v.sum()
        return normalised

    def apply(self, losses: np.ndarray) -> None:
        r"""One round: Bayes' rule with the likelihoods :math:`e^{-\ell_i}`, then the share.

        ``losses``: (experts,), :math:`\eta`-scaled; an inactive slot's value is ignored.
        """
        posterior = self.log_weights - np.where(self.active, losses, 0.0)
        evidence = np.logaddexp.reduce(posterior, axis=1)
        self.log_rate_weights = _log_normalised(self.log_rate_weights + evidence)
        posterior -= evidence[:, None]
        self.log_weights = np.logaddexp(self._log_keep + posterior, self._shares_of())

    def _shares_of(self) -> np.ndarray:
        """Each rate's share of every expert in play, :math:`\\log(\\alpha_r / K)` (-inf out of play):
        computed again only when the experts in play change (every round's share takes them)."""
        active = self.active.tobytes()
        if self._shares is None or self._shares[0] != active:
            uniform = np.where(self.active, -math.log(int(self.active.sum())), -math.inf)
            self._shares = active, self._log_share + uniform
        return self._shares[1]

    def replace(self, slots: list[int], prior: float | np.ndarray) -> None:
        """Experts enter ``slots`` (whatever was there leaves), each with weight ``prior`` (one for all, or
        one each) under every rate, the other active experts keeping their proportions of the rest."""
        priors = np.broadcast_to(np.asarray(prior, dtype=float), (len(slots),))
        self.active[slots] = False
        staying = _log_normalised(np.where(self.active, self.log_weights, -math.inf))
        self.log_weights = staying + math.log1p(-float(priors.sum()))
        self.log_weights[:, slots] = np.log(priors)
        self.active[slots] = True

    def leave(self, slots: list[int]) -> None:
        """The experts of ``slots`` leave (they play no more until they enter again), the others keeping
        their proportions under every rate."""
        self.active[slots] = False
        self.log_weights = _log_normalised(np.where(self.active, self.log_weights, -math.inf))

    def reprice(self, slots: list[int], was: float, now: float) -> None:
        """Move the weights of the experts in ``slots``, which entered with the prior ``was`` each, to those
        an entry at ``now`` each would have given them: their odds against the others scaled by
        ``now (1 - n was) / (was (1 - n now))`` under every rate (``n`` experts in ``slots``)."""
        n = len(slots)
        shift = np.full(len(self.active), math.log1p(-now * n) - math.log1p(-was * n))
        shift[slots] = math.log(now / was)
        self.log_weights = _log_normalised(self.log_weights + shift)

    def copied(self, name: str) -> SwitchingWeights:
        """A copy of these weights (the same rates, experts in play and weights) saved under ``name``."""
        copy = SwitchingWeights(len(self.active), len(self.active), self.rates, name=name)
        copy.active, copy.log_weights = self.active.copy(), self.log_weights.copy()
        copy.log_rate_weights = self.log_rate_weights.copy()
        return copy

    def arrays(self) -> dict[str, np.ndarray]:
        """The state, finite (an inactive slot's -inf is saved as 0 and restored from ``active``)."""
        name = self.name
        return {f"{name}_log_weights": np.where(self.active, self.log_weights, 0.0),
                f"{name}_log_rate_weights": self.log_rate_weights, f"{name}_active": self.active}

    def restore(self, arrays: dict[str, np.ndarray]) -> bool:
        """Load :meth:`arrays`' state; False (and nothing loaded) if its shapes do not match."""
        name = self.name
        log_weights, active = arrays[f"{name}_log_weights"], arrays[f"{name}_active"]
        log_rate_weights = arrays[f"{name}_log_rate_weights"]
        if (log_weights.shape != self.log_weights.shape or active.shape != self.active.shape
                or active.dtype != np.bool_ or log_rate_weights.shape != self.log_rate_weights.shape):
            return False
        self.active = active.copy()
        self.log_weights = np.where(active, log_weights, -math.inf)
        self.log_rate_weights = log_rate_weights.copy()
        return True


class _KeptWeights:
    """A label rule's switching weights, computed once until one of their arrays is replaced (every change
    of the weights replaces one): a round's prediction and its learning vote with the same."""

    weights: SwitchingWeights
    _weights_of: tuple[np.ndarray, np.ndarray, np.ndarray] | None

    def _weights(self) -> np.ndarray:
        switching, kept = self.weights, self._weights_of
        if (kept is None or kept[0] is not switching.log_weights
                or kept[1] is not switching.log_rate_weights):
            kept = self._weights_of = (switching.log_weights, switching.log_rate_weights, switching.weights())
        return kept[2]


class LabelVote(_KeptWeights):
    r"""The label of fewest errors: a weighted majority vote (Littlestone and Warmuth, "The weighted
    majority algorithm", 1994) over the experts' own labels and the mixture's top label, the weights
    exponential in each voter's errors, switching as the mixture's (:class:`SwitchingWeights` under the
    0-1 loss, its own rates :data:`~kons.auto.config.LABEL_RATES`).

    The log-loss mixture is the right play for the probabilities, but the class it makes most probable
    is not the one of fewest errors: an expert confident where it is wrong loses the weight, one that is
    right more often but less sure of itself does not gain it (``docs/auto.md``, "The label of fewest
    errors"). The vote scores each voter by its errors alone: after a round with the true class ``y`` a
    voter's weight is multiplied by :math:`e^{-\eta}` if its label was not ``y`` (:math:`\eta` =
    :data:`~kons.auto.config.LABEL_RATE`), and the label played is the class of the largest total weight,
    the mixture's own on a tie. The mixture's label is a voter too (slot ``experts``, the last), with the
    prior :data:`~kons.auto.config.LABEL_OWN_PRIOR`, the experts in play sharing the rest. Weighted
    majority makes at most
    :math:`(\eta m + \ln(1/\pi)) / \ln(2 / (1 + e^{-\eta}))` errors against a voter of ``m`` errors and
    prior :math:`\pi`; the switching rates give the same against a sequence of voters, as in
    :class:`SwitchingWeights`.

    The label played is then picked between two rules by their own errors, follow the leader: the vote's
    label and the mixture's tempered class (the most probable class under the mixture's weights raised to
    :data:`~kons.auto.config.LABEL_WEIGHT_POWER`, :meth:`Mixture.tempered_class`) each keep their errors,
    discounted by ``pick_discount`` a round (:data:`~kons.auto.config.LABEL_PICK_DISCOUNT`), and the
    tempered class is played while its count is lower than the vote's by more than ``pick_margin``
    (:data:`~kons.auto.config.LABEL_PICK_MARGIN`), the vote's otherwise: the vote holds where the experts'
    labels beat the mixture's class, the tempered class where the mixture's experts averaged are right
    (``docs/auto-log.md``, "Picking the label by its errors", "The tempered class"). Where the vote's class
    holds less than ``vote_share`` of its weight (:data:`~kons.auto.config.LABEL_VOTE_SHARE`) and the
    tempered class names another, the tempered class is played: split voters name the class less often than
    the mixture's experts averaged (``docs/auto-log.md``, "A split vote"). The pick still counts the vote's
    own label.

    A voter's label is a class index, -1 for none.
    """

    def __init__(self, active: np.ndarray, *, rate: float = LABEL_RATE,
                 rates: tuple[float, ...] = LABEL_RATES, switching_prior: float = LABEL_SWITCHING_PRIOR,
                 own_prior: float = LABEL_OWN_PRIOR, entry_prior: float = LABEL_ENTRY_PRIOR,
                 pick_discount: float = LABEL_PICK_DISCOUNT, pick_margin: float = LABEL_PICK_MARGIN,
                 vote_share: float = LABEL_VOTE_SHARE) -> None:
        """A vote among the mixture's experts ``active`` (a mask of its slots), uniform, and its label
        at ``own_prior``; no errors yet for either label rule."""
        self.rate, self.entry_prior = rate, entry_prior
        self.pick_discount, self.pick_margin, self.vote_share = pick_discount, pick_margin, vote_share
        #: The discounted errors of the label rules: the vote's label, the mixture's tempered class.
        self.pick_errors = np.zeros(2)
        # the voters' labels, the mixture's class and the weights the vote's last label is of, that label
        # and the weight of each class (not state): a round's label and the count of its errors after it
        # read the same
        self._voted_of: tuple[np.ndarray, int, np.ndarray, tuple[int, np.ndarray]] | None = None
        self.own = len(active)
        voting = np.append(active, True)
        self.weights = SwitchingWeights(len(voting), 1, rates, switching_prior, name="label")
        self.weights.active = voting
        self.weights.log_weights = np.where(voting, -math.log(int(voting.sum())), -math.inf) \
            * np.ones((len(rates), 1))
        self.weights.replace([self.own], own_prior)
        self._weights_of = None  # (_KeptWeights)

    def _voters(self, labels: np.ndarray, own: int) -> np.ndarray:
        voters: np.ndarray = np.concatenate((labels, (own,))).astype(np.int64, copy=False)  # (np.append's)
        return voters

    def voted(self, labels: np.ndarray, own: int) -> int:
        """The class of the largest weight among the voters' ``labels`` (the experts', by slot) and the
        mixture's ``own``; ``own`` on a tie."""
        return self._vote(labels, own)[0]

    def _vote(self, labels: np.ndarray, own: int) -> tuple[int, np.ndarray]:
        """The vote's class (:meth:`voted`) and the weight that named each class."""
        weights, kept = self._weights(), self._voted_of
        if kept is not None and kept[0] is labels and kept[1] == own and kept[2] is weights:
            return kept[3]
        # the voters' weights summed by class as they come, a voter of no class (-1) into a first bin left
        # out: the sums that leaving those voters out first gives, bit for bit, with two numpy calls fewer
        votes = np.bincount(self._voters(labels, own) + 1, weights=weights)[1:]
        # (the ufunc's reduction: ndarray.max wraps it; every prediction of three classes or more votes)
        if own >= 0 and own < len(votes) and votes[own] == np.maximum.reduce(votes):
            voted = own
        else:
            voted = int(votes.argmax()) if len(votes) else own
        self._voted_of = labels, own, weights, (voted, votes)
        return voted, votes

    def label(self, labels: np.ndarray, own: int, tempered: int) -> int:
        """The label played: the mixture's ``tempered`` class while its errors are lower than the vote's
        by more than the margin, or where the vote's class holds less than ``vote_share`` of the voters'
        weight; the vote's (:meth:`voted`, the mixture's ``own`` class a voter) otherwise."""
        errors = self.pick_errors
        if errors[1] + self.pick_margin < errors[0]:
            return tempered
        voted, votes = self._vote(labels, own)
        if voted == tempered or not 0 <= voted < len(votes):
            return voted
        return voted if votes[voted] >= self.vote_share * np.add.reduce(votes) else tempered

    def score(self, labels: np.ndarray, own: int, tempered: int, y: int) -> None:
        """Each label rule's errors after a round whose true class is ``y``, the vote's label as played
        (before :meth:`follow` and :meth:`update`)."""
        # (the array's arithmetic on its two floats, without numpy's calls: every round of classes scores)
        vote_errors, mixture_errors = self.pick_errors.tolist()
        discount = self.pick_discount
        self.pick_errors = np.array([discount * vote_errors + (self.voted(labels, own) != y),
                                     discount * mixture_errors + (tempered != y)])

    def update(self, labels: np.ndarray, own: int, y: int) -> None:
        """A round whose true class is ``y``: each voter that did not name it pays ``rate``."""
        self.weights.apply(self.rate * (self._voters(labels, own) != y))

    def enter(self, slots: list[int]) -> None:
        """Fresh experts enter ``slots``, each with the weight ``entry_prior``."""
        self.weights.replace(slots, self.entry_prior)

    def follow(self, active: np.ndarray) -> None:
        """The voters in play as the mixture's experts ``active`` (a state restored, or saved before the
        vote): those out of the mixture leave, those in it and not in the vote enter."""
        if self.weights.active[:self.own].tobytes() == active.tobytes():  # (most rounds: nothing changes)
            return
        voting = self.weights.active[:self.own].copy()
        left = voting & ~active
        if left.any():
            self.weights.active[:self.own] &= active
            self.weights.log_weights = _log_normalised(
                np.where(self.weights.active, self.weights.log_weights, -math.inf))
        entered = (active & ~voting).nonzero()[0]  # (np.flatnonzero without its wrappers)
        if len(entered):
            self.enter(entered.tolist())


class ChangeLabel(_KeptWeights):
    r"""The label of two classes for some rounds after a declared change: a weighted majority (Littlestone
    and Warmuth 1994) over the experts, its weights a copy of the mixture's switching weights at the
    declaration moved by the experts' errors alone (an error multiplies a weight by :math:`e^{-\eta}`,
    :math:`\eta` = :data:`~kons.auto.config.CHANGE_LABEL_RATE`, then the mixture's share), played while it
    has had fewer errors since the declaration than the sign of the mixture's score.

    After a change the log-loss weights follow the expert of the lowest log loss, which is not always the
    one of the fewest errors: an old expert, confident and mostly right, keeps the weight while the change's
    generation, less sure but right more often, gains it slowly, and the score's sign is the old expert's.
    The errors move the weight within a few rounds; the probabilities stay the log-loss mixture's
    (``docs/drift-log.md``, "The label after a change"). Once it has led and then had more errors than the
    sign, as after a second change nobody declared whose old leaders it follows, it stands down until the
    next declared change: it costs at most the lead it had.

    An expert's label is its score's sign; a play of exactly 0 is an error.
    """

    def __init__(self, weights: SwitchingWeights, *, rate: float = CHANGE_LABEL_RATE) -> None:
        """The label from the mixture's switching ``weights`` as they are at the declaration (copied); no
        errors yet."""
        self.rate = rate
        self.weights = weights.copied("change_label")
        #: The errors since the declaration: this rule's label's, the score's sign's.
        self.errors = np.zeros(2)
        #: Whether it has been played (had fewer errors than the sign): once it has led and falls behind,
        #: it stands down (:meth:`update`).
        self.led = False
        self._weights_of = None  # (_KeptWeights)
        # the weights and the plays' bytes the last class voted is of, and that class (not state): a
        # prediction's vote is its learning round's, the same plays in a new array
        self._voted_of: tuple[np.ndarray, bytes, int] | None = None

    def voted(self, plays: np.ndarray) -> int:
        """The class (1 positive, 0 negative, -1 none on a tie) of the experts' probabilities of the
        positive class mixed under this rule's weights: the last one again for the same weights and plays."""
        weights, values, kept = self._weights(), plays.tobytes(), self._voted_of
        if kept is not None and kept[0] is weights and kept[1] == values:
            return kept[2]
        p = float(weights.dot(0.5 + 0.5 * np.tanh(0.5 * plays)))  # (the logistic, without overflow)
        voted = 1 if p > 0.5 else 0 if p < 0.5 else -1
        self._voted_of = weights, values, voted
        return voted

    def label(self, voted: int, own: int) -> int:
        """The label played when this rule's class is ``voted`` (:meth:`voted`) and the score's sign is the
        class ``own``: this rule's while its errors are fewer than the sign's, ``own`` otherwise (and on
        this rule's tie)."""
        return voted if voted >= 0 and self.leads() else own

    def leads(self) -> bool:
        """Whether its label is played, its class voted (:meth:`label`): it has had fewer errors than the
        score's sign since the declaration."""
        errors = self.errors
        return bool(errors[0] < errors[1])

    def update(self, plays: np.ndarray, voted: int, own: int, t: float) -> bool:
        """A round whose label is ``t`` (-1 or +1) after the experts' ``plays``, this rule's class
        ``voted`` and the score's sign ``own``: both rules' errors, then each expert that was wrong pays
        ``rate``. False if it stands down: it led and has now had more errors than the sign since the
        declaration, as after a change nobody declared, whose old leaders it would follow (the sign's own
        errors then hold the label)."""
        y = int(t > 0.0)
        self.led = self.led or self.leads()
        self.errors = self.errors + np.array([voted != y, own != y])
        self.weights.apply(self.rate * (plays * t <= 0.0))
        return not (self.led and self.errors[0] > self.errors[1])

    def arrays(self) -> dict[str, np.ndarray]:
        """The state: its weights' arrays (``change_label_*``), its errors and whether it led."""
        return {**self.weights.arrays(), "change_label_errors": self.errors,
                "change_label_led": np.array([self.led])}

    def follow(self, active: np.ndarray) -> None:
        """The experts in play as the mixture's ``active``: those that left the mixture leave (an expert
        entering is given its weight by :meth:`enter`)."""
        mine = self.weights.active
        if mine.tobytes() == active.tobytes():  # (most rounds: nothing changes)
            return
        left = mine & ~active
        if left.any():
            self.weights.leave(left.nonzero()[0].tolist())

    def enter(self, slots: list[int], prior: float | np.ndarray) -> None:
        """Fresh experts enter ``slots``, each with the mixture's entry weight ``prior``."""
        self.weights.replace(slots, prior)


#: A mixture's last plays, weights and plays less their weighted mean (:meth:`Mixture.spread`).
_Last = tuple[np.ndarray, np.ndarray, np.ndarray | None] | None



def _log_sigmoid(margin: np.ndarray) -> np.ndarray:
    logged: np.ndarray = -np.logaddexp(0.0, -margin)
    return logged


class Mixture:
    r"""Vovk's aggregating algorithm over ``experts`` predictions on standardised data, with switching
    weights (:class:`~kons.auto.mixture.SwitchingWeights`): it competes with the best *sequence* of experts.

    ``binary``: the log loss of probabilities, plays the score of the Bayes mixture; else the squared loss
    on :math:`[-B, B]`, :math:`B` = :data:`MIX_BOUND`. Every play is clipped at ``bound`` (the bases' own).
    ``active``: the experts in play at the start (the first ones; the others enter by :meth:`enter`).
    ``centred``: Vovk's substitution on the interval around the experts' weighted mean (else around 0, as
    a state saved before it plays).
    """

    def __init__(self, *, binary: bool, bound: float, experts: int, active: int | None = None,
                 rates: tuple[float, ...] = RATES, centred: bool = True) -> None:
        self.binary = binary
        self.bound = bound
        self.centred = centred
        active = experts if active is None else active
        self.switching = SwitchingWeights(experts, active, rates)
        #: The label of fewest errors among three classes or more: a vote over the experts' labels, from
        #: the first multinomial round (two classes: the sign of the score, :meth:`label`, or after a
        #: declared change :attr:`change_label`'s).
        self.vote: LabelVote | None = None
        #: The label of two classes for some rounds after a declared change (:class:`ChangeLabel`), None
        #: outside them: the grid starts and ends it (:class:`~kons.auto.grid.Grid`).
        self.change_label: ChangeLabel | None = None
        # the last round's plays, weights and plays less their weighted mean, None until computed (not
        # state: read for its spread, kons.conformal)
        self._last: _Last = None
        # read-only weights (the grid's, the same array until they change) and their logs, which a
        # prediction and the learning round after it both take
        self._log_w: tuple[np.ndarray, np.ndarray] | None = None
        self._factor = 1.0  # of the last mix's units (Units), for its spread in the plays' units
        # the last play of one score: the read-only weights and the plays' bytes and units it is of, the play,
        # and _last and _factor after it (not state): a round's learning mixes the plays its prediction did
        self._mixed: tuple[np.ndarray, bytes, Units | None, float, _Last, float] | None = None
        # the experts' labels last computed, the probabilities (shape and bytes) and the mask in play they are
        # of, and the tempered class last computed, the powers and the probabilities it is of (not state): a
        # learning round's experts play what its prediction's did, the same values in a new array, whose
        # labels, tempered class and vote are then those the prediction computed
        self._labels_of: tuple[tuple[int, ...], bytes, bytes, np.ndarray] | None = None
        self._tempered_of: tuple[np.ndarray, tuple[int, ...], bytes, int] | None = None
        # the switching weights' arrays and the weights they give, raised to LABEL_WEIGHT_POWER or not (not
        # state; every change of the weights replaces those arrays): the weights a round's mix was given
        # serve its tempered class, and one state's powers its prediction and its learning
        self._weights_given: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._powers_of: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def weights(self) -> np.ndarray:
        return self.switching.weights()

    def mix(self, preds: np.ndarray, weights: np.ndarray | None = None, units: Units | None = None) -> float:
        """The aggregating algorithm's play for the experts' predictions ``preds`` (``weights``: the
        current :meth:`weights`, if the caller has them); regression in ``units`` (:data:`Units`; None:
        those of the plays), the play returned in the plays' units."""
        w = self.weights() if weights is None else weights
        plays = preds.tobytes()
        kept = self._mixed
        if kept is not None and kept[0] is w and kept[1] == plays and kept[2] == units:
            self._last, self._factor = kept[4], kept[5]
            return kept[3]
        played = self._mixed_play(preds, w, units)
        if not w.flags.writeable:  # (weights that no one changes: the same array is the same weights)
            self._mixed = w, plays, units, played, self._last, self._factor
        return played

    def _mixed_play(self, preds: np.ndarray, w: np.ndarray, units: Units | None) -> float:
        bound = self.bound
        # (products by ndarray.dot: bit for bit ``@``, without the matmul ufunc's dispatch, which costs
        # more than the product itself at a round's sizes)
        if self.binary:
            self._last = (preds, w, None)
            p = float(w.dot(np.exp(_log_sigmoid(preds))))
            p = clip(p, 1.0 / (1.0 + math.exp(bound)), 1.0 / (1.0 + math.exp(-bound)))
            return math.log(p / (1.0 - p))
        if units is None:
            self._factor = 1.0
            return self._substituted(preds, w)
        offset, self._factor = units
        # clipped at the bound in the plays' units only: a concept of a smaller scale than the grid's
        # puts the grid's members' plays beyond the bound in its own units (docs/series.md)
        played = self._substituted((preds - offset) / self._factor, w, math.inf)
        return clip(offset + self._factor * played, -bound, bound)

    def _substituted(self, preds: np.ndarray, w: np.ndarray, bound: float | None = None) -> float:
        """Vovk's substitution for the squared loss: the play for ``preds`` under the weights ``w``,
        clipped at ``bound`` (by default the bases' own)."""
        bound = self.bound if bound is None else bound
        eta = 1.0 / (2.0 * MIX_BOUND * MIX_BOUND)
        log_w = self._logs(w)
        centre = float(w.dot(preds)) if self.centred else 0.0
        shifted = preds - centre
        self._last = (preds, w, shifted if self.centred else None)

        # g(y) = -log(sum_i w_i exp(-eta (f_i - y)^2)) / eta at both ends -B and +B, one row each: each row's
        # elements and reduction are those of g at its end alone, bit for bit, in fewer numpy calls
        g = np.logaddexp.reduce(log_w - eta * (shifted - _ENDS) ** 2, axis=1) / -eta

        # Vovk's substitution on the interval of half-width MIX_BOUND around the experts' weighted mean
        # (its guarantee holds on any interval chosen before the outcome; the weights' update does not
        # depend on it): centred at 0, the running mean, the substitution pulled the play to the mean as
        # soon as the heavy experts predicted a tail beyond the interval (docs/series.md). It follows
        # bases that agree beyond the interval (one expert's f gives f), so the play is clipped at the
        # bases' own bound.
        return clip(centre + float(g[0] - g[1]) / (4.0 * MIX_BOUND), -bound, bound)

    def _logs(self, w: np.ndarray) -> np.ndarray:
        """``log(w)``, floored: kept for read-only weights, computed again for any other array."""
        kept = self._log_w
        if kept is not None and kept[0] is w:
            return kept[1]
        log_w: np.ndarray = np.log(np.maximum(w, 1e-300))
        if not w.flags.writeable:
            self._log_w = w, log_w
        return log_w

    def spread(self) -> float:
        """The standard deviation of the last :meth:`mix`'s plays under its weights, in the plays' units."""
        if self._last is None:
            return 0.0
        preds, w, deviation = self._last
        if deviation is None:
            deviation = preds - float(w.dot(preds))
        return self._factor * math.sqrt(max(float(w.dot(deviation * deviation)), 0.0))

    def mix_probabilities(self, probabilities: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        r"""The aggregating algorithm's play for the experts' class probabilities (experts, K): for the
        log loss, 1-mixable for any K, the Bayes mixture :math:`p = \sum_i w_i p_i` (``weights``: the current
        :meth:`weights`, if the caller has them; the caller leaves them unchanged: they serve the tempered
        class of the same weights, :meth:`tempered_class`)."""
        if weights is not None:
            self._weights_given = self.switching.log_weights, self.switching.log_rate_weights, weights
        mixed: np.ndarray = (self.weights() if weights is None else weights).dot(probabilities)
        return mixed

    def losses(self, plays: np.ndarray, t: float, units: Units | None = None) -> np.ndarray:
        r"""The experts' losses times the mixture's learning rate: :math:`\eta \ell(f_i, t)`, whose
        :math:`e^{-\eta \ell}` is each expert's likelihood (the log loss, or the squared loss on
        :math:`[-B, B]` with :math:`\eta = 1/(2B^2)`, in ``units`` as :meth:`mix`)."""
        if self.binary:
            scaled: np.ndarray = -_log_sigmoid(t * plays)
            return scaled
        if units is not None:
            offset, factor = units
            plays, t = (plays - offset) / factor, (t - offset) / factor
        target = clip(t, -self.bound, self.bound)
        return (plays - target) ** 2 / (2.0 * MIX_BOUND * MIX_BOUND)

    def loss(self, played: float, t: float, units: Units | None = None) -> float:
        """The loss of one play (the mixture's own): :meth:`losses` of it, the same float, without an
        array's allocation and dispatch (each round scores its play once or twice)."""
        if self.binary:
            return float(np.logaddexp(0.0, -(t * played)))
        if units is not None:
            offset, factor = units
            played, t = (played - offset) / factor, (t - offset) / factor
        gap = played - clip(t, -self.bound, self.bound)
        return float(gap * gap / (2.0 * MIX_BOUND * MIX_BOUND))  # (numpy's square of an array: x * x)

    def update(self, plays: np.ndarray, t: float, units: Units | None = None) -> None:
        r""":math:`w_i \leftarrow w_i e^{-\eta \ell(f_i, t)}` (in ``units`` as :meth:`mix`), then the
        switching weights' share."""
        self.switching.apply(self.losses(plays, t, units))

    @staticmethod
    def label(played: float) -> int:
        """The class of the binary model's play ``played``: 1 (the positive class) for a positive score, 0
        for a negative one, -1 (none) for 0. Two classes have no :class:`LabelVote`: on the tuning streams of
        ``benchmarks/label_vote.py`` none of its settings had fewer errors than the sign of the score
        (docs/auto.md, "The label of fewest errors"); after a declared change :class:`ChangeLabel` may
        play instead (:meth:`binary_label`)."""
        return 1 if played > 0.0 else 0 if played < 0.0 else -1

    def class_label(self, probabilities: np.ndarray, played: np.ndarray) -> int:
        """The class played for the experts' class probabilities (experts, K) when the mixture played
        ``played``: the vote's pick (:meth:`LabelVote.label`), the most probable class of ``played`` before
        there is a vote."""
        own = int(played.argmax())
        if self.vote is None:
            return own
        plays = probabilities.tobytes()
        return self.vote.label(self._labels(probabilities, plays), own, self._tempered(probabilities, plays))

    def tempered_class(self, probabilities: np.ndarray) -> int:
        """The most probable class of the experts' ``probabilities`` (experts, K) mixed under the weights
        raised to :data:`~kons.auto.config.LABEL_WEIGHT_POWER`: flatter than the log-loss mixture's, so
        that its class averages the experts its leader would outweigh (``docs/auto-log.md``, "The tempered
        class")."""
        return self._tempered(probabilities, probabilities.tobytes())

    def _tempered(self, probabilities: np.ndarray, plays: bytes) -> int:
        """:meth:`tempered_class` of ``probabilities``, whose bytes are ``plays``: the last one again for
        the same powers and probabilities."""
        powers, kept = self._powers(), self._tempered_of
        if kept is not None and kept[0] is powers and kept[1] == probabilities.shape and kept[2] == plays:
            return kept[3]
        tempered = int(powers.dot(probabilities).argmax())
        self._tempered_of = powers, probabilities.shape, plays, tempered
        return tempered

    def _powers(self) -> np.ndarray:
        log_weights, log_rate_weights = self.switching.log_weights, self.switching.log_rate_weights
        kept = self._powers_of
        if kept is None or kept[0] is not log_weights or kept[1] is not log_rate_weights:
            given = self._weights_given
            weights = given[2] if given is not None and given[0] is log_weights \
                and given[1] is log_rate_weights else self.weights()
            kept = self._powers_of = log_weights, log_rate_weights, np.power(weights, LABEL_WEIGHT_POWER)
        return kept[2]

    @staticmethod
    def class_losses(probabilities: np.ndarray, label: int) -> np.ndarray:
        r"""The experts' log losses for K classes, :math:`-\log p_i(y)` (the log loss is 1-mixable)."""
        losses: np.ndarray = -np.log(np.maximum(probabilities[..., label], SMALLEST_NORMAL))
        return losses

    def update_probabilities(self, probabilities: np.ndarray, label: int, played: np.ndarray | None = None
                             ) -> None:
        r""":math:`w_i \leftarrow w_i\, p_i(y)`, then the share: :meth:`update` for K classes; and the
        vote's round (the vote starts at the first, among the experts then in play). ``played``: the
        mixture's play for ``probabilities`` under the current weights, if the caller has it."""
        plays = probabilities.tobytes()
        labels = self._labels(probabilities, plays)
        own = int((self.mix_probabilities(probabilities) if played is None else played).argmax())
        if self.vote is None:  # (its first round played the mixture's class, no rule's: not scored)
            self.vote = LabelVote(self.switching.active.copy())
        else:
            self.vote.score(labels, own, self._tempered(probabilities, plays), label)
        self.vote.follow(self.switching.active)  # (experts that went to sleep leave the vote too)
        self.vote.update(labels, own, label)
        self.switching.apply(self.class_losses(probabilities, label))

    def _labels(self, probabilities: np.ndarray, plays: bytes) -> np.ndarray:
        """Each expert's most probable class for ``probabilities`` (whose bytes are ``plays``), -1 (none)
        for one out of the mixture: the last ones again for the same probabilities and experts in play (a
        round's label, then its vote's update; a prediction, then the learning round of its row)."""
        active = self.switching.active.tobytes()
        kept = self._labels_of
        if kept is not None and kept[0] == probabilities.shape and kept[1] == plays and kept[2] == active:
            return kept[3]
        labels: np.ndarray = np.where(self.switching.active, probabilities.argmax(axis=1), -1)
        labels.flags.writeable = False  # (the vote knows its voters by this array: no one writes to it)
        self._labels_of = probabilities.shape, plays, active, labels
        return labels

    def enter(self, slots: list[int], prior: float | np.ndarray) -> None:
        """Fresh experts enter ``slots``, each with the weight ``prior`` (one for all, or one each; in the
        vote, its own)."""
        self.switching.replace(slots, prior)
        if self.vote is not None:
            self.vote.enter(slots)
        if self.change_label is not None:
            self.change_label.enter(slots, prior)

    def binary_label(self, plays: np.ndarray, played: float, t: float | None = None) -> int:
        """The class played on two classes for the experts' ``plays`` when the mixture played ``played``:
        the label after a change while there is one (:class:`ChangeLabel`), else the score's
        (:meth:`label`). With the round's label ``t`` (-1 or +1), the label after a change then learns
        from it, and ends if it stands down (:meth:`ChangeLabel.update`)."""
        own = self.label(played)
        change = self.change_label
        if change is None:
            return own
        change.follow(self.switching.active)
        # (a prediction plays the score's sign while the rule does not lead: no vote, -1 for none)
        voted = change.voted(plays) if t is not None or change.leads() else -1
        label = change.label(voted, own)
        if t is not None and not change.update(plays, voted, own, t):
            self.change_label = None  # (it stands down until the next declared change)
        return label

    def arrays(self) -> dict[str, np.ndarray]:
        """The switching weights' arrays, the vote's (``label_*``) and the label after a change's
        (``change_label_*``) if there are."""
        vote = {} if self.vote is None else {**self.vote.weights.arrays(),
                                             "label_pick_errors": self.vote.pick_errors}
        change = {} if self.change_label is None else self.change_label.arrays()
        return {**self.switching.arrays(), **vote, **change}

    def restore_vote(self, arrays: dict[str, np.ndarray]) -> bool:
        """The vote's state from ``arrays``, its voters then following the experts in play (none: a state
        saved before the vote, or before a multinomial round, whose vote starts at its next one); False
        if its shapes do not match."""
        self.vote = None
        if "label_active" not in arrays:
            return True
        self.vote = LabelVote(self.switching.active.copy())
        if not self.vote.weights.restore(arrays):
            return False
        # (a vote saved before its label rules were scored counts their errors from here, the vote's
        # label played until the mixture's class has made fewer since)
        errors = arrays.get("label_pick_errors", self.vote.pick_errors)
        if errors.shape != self.vote.pick_errors.shape:
            return False
        self.vote.pick_errors = errors.astype(float)
        self.vote.follow(self.switching.active)
        return True

    def restore_change_label(self, arrays: dict[str, np.ndarray]) -> bool:
        """The label after a change from ``arrays`` (none: none was going on, or a state saved before
        there was one, which goes on as it would have); False if its shapes do not match."""
        self.change_label = None
        if "change_label_active" not in arrays:
            return True
        change_label = ChangeLabel(self.switching)
        errors, led = arrays.get("change_label_errors"), arrays.get("change_label_led")
        if (not change_label.weights.restore(arrays) or errors is None or led is None
                or errors.shape != change_label.errors.shape or led.shape != (1,)):
            return False
        change_label.errors, change_label.led = errors.astype(float), bool(led[0])
        self.change_label = change_label
        return True
