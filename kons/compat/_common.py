"""What both adapters share: the probability a loss gives, and a learner rebuilt with a fixed dimension."""

from __future__ import annotations

import math

from kons.base import Learner, learner_from_params

__all__ = ["PROBABILISTIC_LOSS", "positive_probability", "with_dim"]

#: The one loss whose prediction is a log-odds, so that it gives a class probability.
PROBABILISTIC_LOSS = "logistic"


def positive_probability(margin: float) -> float:
    """:math:`P(y = +1) = 1 / (1 + e^{-m})` for the logistic loss's (clipped) prediction ``m``."""
    # Both branches are the same function; each avoids exp overflowing for large |m|.
    if margin >= 0:
        return 1.0 / (1.0 + math.exp(-margin))
    e = math.exp(margin)
    return e / (1.0 + e)


def with_dim(template: Learner, dim: int) -> Learner:
    """A fresh learner with ``template``'s hyper-parameters and the input dimension ``dim``."""
    exact = {} if template.preprocesses else {"preprocess": False}  # the dict path would wrap it
    return learner_from_params(template.name, {**template.get_params(), **exact, "dim": dim})
