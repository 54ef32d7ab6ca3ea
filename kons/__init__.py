"""kons: second-order online kernel learning (KONS, KORS, Sketched-KONS) and Sketched Online Newton.

>>> from kons import SketchedKONS
>>> from kons.kernels import RBF
>>> m = SketchedKONS(kernel=RBF(gamma=0.5), loss="squared", eta=0.1, C=3.0, seed=0)
>>> m.learn_one([0.0, 1.0], 0.5)  # the play of round 1, on the empty state
0.0
>>> m.predict_one([0.0, 1.0]) > 0.0  # the gradient step moved the prediction towards y
True
>>> m.stats()["rounds"]
1
"""

from importlib.metadata import version

from kons.auto import Auto
from kons.base import LEARNERS, Learner, learner_class, learner_from_params, load, peek
from kons.errors import (
    InvalidInputError,
    InvalidParameterError,
    KonsError,
    NumericalError,
    StateFormatError,
)
from kons.kernel import KONS, KernelOGD, NystromKONS, SketchedKONS
from kons.linear import FDSON, OGD, ONS, RPSON, AdaGrad, OjaSON, SparseVector
from kons.preprocessing import Preprocessed
from kons.rounds import Round

__all__ = [
    "FDSON",
    "KONS",
    "LEARNERS",
    "OGD",
    "ONS",
    "RPSON",
    "AdaGrad",
    "Auto",
    "InvalidInputError",
    "InvalidParameterError",
    "KernelOGD",
    "KonsError",
    "Learner",
    "NumericalError",
    "NystromKONS",
    "OjaSON",
    "Preprocessed",
    "Round",
    "SketchedKONS",
    "SparseVector",
    "StateFormatError",
    "learner_class",
    "learner_from_params",
    "load",
    "peek",
]
#: The one version number, from the installed distribution's metadata (pyproject.toml's).
__version__ = version("kons")
