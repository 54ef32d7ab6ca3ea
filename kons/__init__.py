"""kons: second-order online kernel learning (KONS, KORS, Sketched-KONS) and Sketched Online Newton.

>>> from kons import SketchedKONS
>>> from kons.kernels import RBF
>>> m = SketchedKONS(kernel=RBF(gamma=0.5), loss="squared", eta=0.1, C=3.0, seed=0)
>>> m.learn_one([0.0, 1.0], 0.5)
0.0
>>> 0.0 < m.predict_one([0.0, 1.0]) < 0.5
True
"""

from kons.base import LEARNERS, Learner, learner_from_params, load
from kons.errors import (
    InvalidInputError,
    InvalidParameterError,
    KonsError,
    NumericalError,
    StateFormatError,
)
from kons.kernel_ogd import KernelOGD
from kons.kons_learner import KONS
from kons.sketched_kons import SketchedKONS

__all__ = [
    "KONS",
    "LEARNERS",
    "InvalidInputError",
    "InvalidParameterError",
    "KernelOGD",
    "KonsError",
    "Learner",
    "NumericalError",
    "SketchedKONS",
    "StateFormatError",
    "learner_from_params",
    "load",
]
__version__ = "0.1.0"
