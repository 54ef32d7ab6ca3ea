r"""Shared code of the linear learners: input handling, the projection step, diagonal adaptation.

Every linear learner plays SON's round (Luo et al., NIPS 2016, Alg. 1) in some metric :math:`A_{t-1}`:

.. math::
    \bar y_t = u_t^\top x_t,\quad \hat y_t = \bar y_t - \tau_C(\bar y_t) = \mathrm{clip}(\bar y_t),\quad
    w_t = u_t - \frac{\tau_C(\bar y_t)}{x_t^\top A_{t-1}^{-1} x_t} A_{t-1}^{-1} x_t \quad\text{(Lemma 1)},

then takes its gradient step from :math:`w_t` with :math:`g_t = \ell'(\hat y_t)\,x_t`. An example is
handled as its support (:class:`Features`: an index, a slice for dense input, and the values there), so
one code path serves dense and sparse input and a sparse round never touches an O(d) array.

With ``diagonal=True`` the learner is fed :math:`D_t^{-1/2} x_t` instead of :math:`x_t`, where
:math:`D_t = 0.1 I + \mathrm{diag}\sum_{\tau<t} g_\tau g_\tau^\top` on the raw features (Sec. 5.2 and
footnote 6); :math:`D` is updated on the support of :math:`x_t` after the round.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import numpy as np

from kons._numerics import TINY, ridge_leverage
from kons._validation import POSITIVE, REGULARISER, Constraint, Flag, Integer, NoneOr
from kons.base import Learner
from kons.conformal import LEVERAGE_EXPONENT
from kons.errors import NumericalError
from kons.linear._linalg import checked_vector
from kons.sparse import SparseVector

__all__ = ["SECOND_ORDER_CONSTRAINTS", "WHOLE", "Features", "LinearLearner", "leverage", "projection_step"]

#: D_1 of the diagonal adaptation (Sec. 5.2, footnote 6).
DIAGONAL_INIT = 0.1


#: The support of a dense example: every coordinate (its products skip the indexing, a copy or a view).
WHOLE = slice(None)


class Features:
    """The (possibly rescaled) example on its support: ``index`` (:data:`WHOLE`, or an int64 array) and
    ``values``. Its products are ``ndarray.dot``, bit for bit ``@`` but without the matmul ufunc's
    dispatch, which costs more than the product itself at the sizes of a round."""

    __slots__ = ("_sq_norm", "index", "values")

    def __init__(self, index: slice | np.ndarray, values: np.ndarray) -> None:
        self.index = index
        self.values = values
        self._sq_norm: float | None = None

    @property
    def sq_norm(self) -> float:
        """:math:`\\|x\\|^2`, computed when first asked (ONS, on every round of ``auto``, never asks)."""
        if self._sq_norm is None:
            self._sq_norm = float(self.values.dot(self.values))
        return self._sq_norm

    @property
    def nonzero(self) -> bool:
        """Whether any value is non-zero (a zero example adds nothing to a sketch)."""
        return bool(self.values.any())

    def dot(self, v: np.ndarray) -> float:
        """:math:`v^\\top x` for a (d,) vector ``v``: O(s)."""
        index = self.index
        return float((v if index is WHOLE else v[index]).dot(self.values))

    def rows(self, M: np.ndarray) -> np.ndarray:
        """:math:`x^\\top M` for a (d, k) matrix ``M``: O(s k)."""
        index = self.index
        product: np.ndarray = self.values.dot(M if index is WHOLE else M[index])
        return product

    def cols(self, M: np.ndarray) -> np.ndarray:
        """:math:`M x` for a (k, d) matrix ``M``: O(k s)."""
        index = self.index
        product: np.ndarray = (M if index is WHOLE else M[:, index]).dot(self.values)
        return product


class LinearLearner(Learner):
    """Base of the linear learners: sparse or dense input and the diagonal adaptation.

    Subclasses implement ``_reset_model`` (calling ``super()._reset_model()`` first), ``_margin(f)`` (the
    unclipped :math:`u^\\top x` for :class:`Features` ``f``), ``_round(f, y)`` returning
    ``(y_hat, leverage, gdot)``, and ``_arrays``/``_restore`` (each adding to ``super()``'s).
    """

    accepts_sparse = True
    _spread_exponent = LEVERAGE_EXPONENT
    diagonal: bool = False
    _diag: np.ndarray | None

    # ----------------------------------------------------------------- state
    def _reset_model(self) -> None:
        self._diag = np.full(self._dim, DIAGONAL_INIT) if self.diagonal else None

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        return dim if params.get("diagonal") else 0

    # ----------------------------------------------------------------- input
    def _features(self, x: np.ndarray | SparseVector) -> Features:
        index, values = (x.indices, x.values) if isinstance(x, SparseVector) else (WHOLE, x)
        if self._diag is not None:
            values = values / np.sqrt(self._diag[index])  # feed D_t^{-1/2} x_t (Sec. 5.2)
        return Features(index, values)

    def predict_many(self, X: Any) -> np.ndarray:
        """:meth:`predict_one` per row of ``X``: (n, d) array, list of examples or scipy.sparse matrix."""
        return super().predict_many(_rows(X))

    def learn_many(self, X: Any, Y: Any) -> np.ndarray:
        """Sequential rounds over the rows of ``X`` (as in :meth:`predict_many`) and ``Y``."""
        return super().learn_many(_rows(X), Y)

    # ----------------------------------------------------------------- the round
    def _predict(self, x: np.ndarray | SparseVector) -> float:
        f = self._features(x)
        self._played_row, self._played_quad = f, None  # its leverage computed only if asked (_spread)
        return self._margin(f)

    def _learn(self, x: np.ndarray | SparseVector, y: float) -> tuple[float, float]:
        f = self._features(x)
        self._played_row, self._played_quad = None, None  # a second-order _round keeps its leverage
        y_hat, leverage, gdot = self._round(f, y)
        if self._diag is not None and gdot != 0.0:
            raw = x.values if isinstance(x, SparseVector) else x
            self._diag[f.index] += (gdot * raw) ** 2  # D_{t+1} = D_t + diag(g_t g_t')
        return y_hat, leverage

    def _play(self, y_bar: float) -> tuple[float, float]:
        """The played :math:`\\hat y_t = \\mathrm{clip}(\\bar y_t)` and :math:`\\tau_C(\\bar y_t)`."""
        if not math.isfinite(y_bar):
            raise NumericalError("the prediction overflowed for this input.")
        y_hat = self._clip(y_bar)
        return y_hat, y_bar - y_hat

    @abc.abstractmethod
    def _margin(self, f: Features) -> float:
        """The unclipped prediction :math:`u^\\top x` for the example ``f``."""

    @abc.abstractmethod
    def _round(self, f: Features, y: float) -> tuple[float, float, float]:
        r"""One round on ``f``: ``(y_hat, leverage, gdot)``; must leave the state unchanged if it raises.
        A second-order learner keeps :math:`x^\top A_{t-1}^{-1} x` in ``_played_quad`` (as ``_quad``
        computes it, bit for bit: the interval of a round is that of a prediction on the same state)."""

    # ----------------------------------------------------------------- persistence
    def _arrays(self) -> dict[str, np.ndarray]:
        return {} if self._diag is None else {"diag": self._diag}

    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        self._diag = checked_vector(arrays["diag"], self._dim) if self.diagonal else None


def _rows(X: Any) -> Any:
    """Rows of a scipy.sparse matrix as :class:`SparseVector`; anything else unchanged."""
    if type(X).__module__.startswith("scipy.sparse"):
        csr = X.tocsr(copy=True)
        csr.sum_duplicates()
        d = int(csr.shape[1])
        return [SparseVector(csr.indices[a:b], csr.data[a:b], d)
                for a, b in zip(csr.indptr[:-1], csr.indptr[1:], strict=True)]
    return X


#: The hyper-parameters of the second-order linear learners (ONS and the SON family). Their matrix is
#: :math:`A_t = \alpha I + \sum_s \hat g_s \hat g_s^\top` (or its sketch) with the to-sketch vector
#: :math:`\hat g_t = \sqrt{\eta}\, g_t` (Eq. 2 with :math:`\sigma_t + \eta_t = \eta`); ``eta`` defaults to
#: the loss's curvature (each sets ``_eta_from_curvature``).
SECOND_ORDER_CONSTRAINTS: dict[str, Constraint] = {
    **Learner._parameter_constraints,
    "alpha": REGULARISER,
    "eta": NoneOr(POSITIVE),
    "diagonal": Flag(),
    "sketch_size": Integer(low=0),
    "seed": Integer(low=0),
}


def leverage(scale: float, quad: float) -> float:
    """Ridge leverage :math:`r/(1+r)` with :math:`r = \\eta\\dot g^2\\, x^\\top A^{-1} x` (``quad``)."""
    return ridge_leverage(scale * scale * max(quad, 0.0))


def projection_step(excess: float, denom: float) -> float:
    """Alg. 1, line 5: :math:`\\gamma = \\tau_C(\\bar y)/(x^\\top x - \\hat x^\\top H \\hat x)` (Lemma 1)."""
    return 0.0 if excess == 0.0 else excess / max(denom, TINY)
