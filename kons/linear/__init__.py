"""The linear learners: ONS and the Sketched Online Newton family (FD-SON, RP-SON, Oja-SON), AdaGrad, OGD.

They all play SON's round (Luo et al., NIPS 2016, Alg. 1) in their own metric, on dense or sparse input
(:class:`~kons.sparse.SparseVector`); :mod:`kons.linear._learner` holds the shared round.
"""

from kons.linear.adagrad import AdaGrad
from kons.linear.fd_son import FDSON
from kons.linear.ogd import OGD
from kons.linear.oja_son import OjaSON
from kons.linear.ons import ONS
from kons.linear.rp_son import RPSON
from kons.sparse import SparseVector

__all__ = ["FDSON", "OGD", "ONS", "RPSON", "AdaGrad", "OjaSON", "SparseVector"]
