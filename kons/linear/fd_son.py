r"""FD-SON: Sketched Online Newton with a Frequent Directions sketch (Alg. 1, 8-13, App. G.2)."""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import numpy as np

from kons._numerics import check_finite
from kons._validation import Constraint
from kons.linear._factored import FactoredBasis
from kons.linear._learner import SECOND_ORDER_CONSTRAINTS, Features, LinearLearner, leverage, projection_step
from kons.linear._linalg import (
    apply_deltas,
    checked_matrix,
    checked_vector,
    gram_schmidt,
    sherman_morrison,
)

__all__ = ["FDSON"]

_DENSE = slice(None)


class _Epoch(NamedTuple):
    """The end-of-epoch update, computed before anything is committed."""

    F: np.ndarray
    D: np.ndarray
    H: np.ndarray
    K: np.ndarray
    rows: list[tuple[slice | np.ndarray, np.ndarray]]
    zx: np.ndarray  # Z_new x
    support: slice | np.ndarray  # columns where Z may be non-zero afterwards
    delta: np.ndarray | None  # either the sparse update Z += delta G (Alg. 11) ...
    z_steps: list[np.ndarray] | None
    Z: np.ndarray | None  # ... or the direct one: Z[:, support] = Z, u_bar[support] += fold, F = I
    fold: np.ndarray | None
    full: bool  # every row of V = F Z is a unit direction


#: Condition number of N1 above which an epoch is computed directly instead of Z += N1^{-1} N2 G.
_MAX_COND = 1e8
#: A row of G whose part outside span(V) is below this fraction of its norm adds no new direction: that
#: changes S'S by at most _RANK_TOL^2 relative, while keeping it would turn rounding noise (about
#: 1e-8 of the norm, from the cancellation in |G - MV|) into a spurious unit direction.
_RANK_TOL = 1e-6


def _columns(support: slice | np.ndarray, index: slice | np.ndarray) -> slice | np.ndarray:
    """The positions of the features ``index`` among the sorted ``support`` columns.

    A dense row of G makes the support dense (every column, in place), so only sparse pairs map.
    """
    if isinstance(support, slice) or isinstance(index, slice):
        return index
    return np.searchsorted(support, index)


class FDSON(LinearLearner):
    r"""Sketched Online Newton with the epoch version of Frequent Directions (App. G.2, Alg. 8).

    The sketch is :math:`S = \binom{D V}{G}`: ``k = min(m, d)`` orthonormal directions :math:`V` with
    weights :math:`D` from the last eigendecomposition, and up to ``m`` recent to-sketch vectors
    :math:`\hat g = \sqrt\eta\, g` in :math:`G`. Within an epoch :math:`H = (\alpha I + SS^\top)^{-1}` takes
    the two Sherman-Morrison updates of Alg. 8 (line 4); when :math:`G` is full, the top ``k``
    eigenpairs of :math:`S^\top S` are computed from a small matrix (Alg. 9/12) and shrunk by the
    ``m``-th eigenvalue, :math:`D_{ii} = \sqrt{\Sigma_{ii} - \Sigma_{mm}}` (Alg. 8, line 8), and
    :math:`G` is emptied. So :math:`A_t = \alpha I + S_t^\top S_t` with
    :math:`G^\top G - S^\top S \succeq 0` as in Frequent Directions; with ``sketch_size > d`` nothing
    is ever shrunk and the learner is :class:`~kons.ONS` exactly.

    The update is the sparse form of Alg. 10-11: :math:`V = FZ`, :math:`u = \bar u + Z^\top b`, the Gram
    matrix :math:`K = ZZ^\top`, :math:`Z \leftarrow Z + \Delta G` with
    :math:`\Delta = N_1^{-1} N_2` at the end of an epoch and the eigen-system by Gram-Schmidt in the
    :math:`K` inner product (Alg. 12-13). A round with ``s`` non-zeros costs O(m^2 + m s) on average
    (the epoch's O(m^3 + m^2 s) eigen step is spread over its ``m`` rounds), independent of ``d``.

    The paper's :math:`\Delta` does not exist when a new top direction has no component in the span
    of :math:`Z` (:math:`N_1` singular), which is always the case in the first epoch and whenever the
    sketch adopts a direction it has not seen: such an epoch is computed directly, by an SVD of
    :math:`S` restricted to the features seen so far (O((k + m)^2 n) for ``n`` seen features, still
    independent of ``d``), and resets :math:`V = Z`, :math:`F = I`. :math:`Z` starts at zero, so its
    non-zero columns never leave the seen features; ``stats()["direct_epochs"]`` counts these
    epochs. Rounds with :math:`\hat g = 0` add nothing to the sketch.
    ``sketch_size=0`` is :class:`~kons.OGD` with the constant step :math:`1/\alpha`.

    Parameters
    ----------
    loss : {"squared", "logistic", "squared_hinge", "hinge"}, default "squared"
    alpha : float, default 1.0
        Regulariser :math:`\alpha` (:math:`1/\alpha` is the step size off the sketch).
    eta : float or None, default None
        :math:`\hat g_t = \sqrt{\eta}\, g_t`; None takes the loss's curvature :math:`\sigma(C)`.
    C : float, default 1.0
        Predictions are clipped to :math:`[-C, C]`.
    sketch_size : int, default 10
        ``m``: directions kept and epoch length (the sketch holds up to ``k + m`` rows).
    diagonal : bool, default False
        Feed :math:`D_t^{-1/2} x_t` (Sec. 5.2).
    dim : int or None, default None

    Examples
    --------
    >>> import numpy as np
    >>> from kons import FDSON
    >>> X = np.random.default_rng(0).normal(size=(400, 5))
    >>> y = np.sign(X @ [1.0, -1.0, 0.5, 0.0, 0.2])
    >>> m = FDSON(loss="squared", alpha=8.0, C=1.0, sketch_size=3)
    >>> played = m.learn_many(X, y)
    >>> bool(np.mean(np.sign(played[200:]) != y[200:]) < 0.25), m.stats()["rounds"]
    (True, 400)
    >>> m.predict_one({"indices": [0, 1], "values": [1.0, -1.0]}) > 0
    True
    """

    name = "fd_son"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = SECOND_ORDER_CONSTRAINTS
    _eta_from_curvature = True
    _eta: float  # resolved in _set_params, never None here
    _sqrt_eta: float

    alpha: float
    eta: float | None
    sketch_size: int

    def __init__(
        self,
        *,
        loss: str = "squared",
        alpha: float = 1.0,
        eta: float | None = None,
        C: float = 1.0,
        sketch_size: int = 10,
        diagonal: bool = False,
        dim: int | None = None,
    ) -> None:
        self._set_params(loss=loss, alpha=alpha, eta=eta, C=C, sketch_size=sketch_size, diagonal=diagonal,
                         dim=dim)
        self._reset()

    def _reset_model(self) -> None:
        super()._reset_model()
        m, d = self.sketch_size, self._dim
        k = min(m, d)
        self._basis = FactoredBasis.start(k, d)  # Z = 0: no direction yet
        self._full = False  # whether all k rows of V = F Z are unit directions (else: direct epochs)
        self._support_index: slice | np.ndarray = np.zeros(0, dtype=np.int64)
        self._D = np.zeros(k)
        self._Gd = np.zeros((m, d))  # rows of G (dense buffer, only the supports are non-zero)
        self._g_index: list[slice | np.ndarray] = []  # support of each filled row of G
        self._H = np.eye(k + m) / self.alpha
        self._direct_epochs = 0

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        m: int = params["sketch_size"]
        k = min(m, dim)
        # the basis, D (k,), the rows of G (m, d) and H (k + m, k + m)
        return super()._model_floats(dim, params) + FactoredBasis.floats(k, dim) + k + m * dim + (k + m) ** 2

    # ----------------------------------------------------------------- the round
    def _metric(self, f: Features) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
        r""":math:`Z x`, :math:`G x`, :math:`\hat x = S x`, :math:`H \hat x` and :math:`\alpha x^\top
        A^{-1} x` (the sketch's)."""
        k, n = len(self._D), len(self._g_index)
        zx = f.cols(self._basis.Z)
        gx = f.cols(self._Gd[:n])
        sx = np.zeros(k + self.sketch_size)
        sx[:k], sx[k : k + n] = self._D * (self._basis.F @ zx), gx
        hx = self._H @ sx
        return zx, gx, sx, hx, f.sq_norm - float(sx @ hx)

    def _quad(self, row: Features) -> float:
        return self._metric(row)[4] / self.alpha

    def _round(self, f: Features, y: float) -> tuple[float, float, float]:
        alpha, xx, m = self.alpha, f.sq_norm, self.sketch_size
        k, n = len(self._D), len(self._g_index)
        F, D, H = self._basis.F, self._D, self._H
        zx, gx, sx, hx, denom = self._metric(f)
        self._played_quad = denom / alpha
        y_hat, excess = self._play(f.dot(self._basis.ubar) + float(self._basis.b @ zx))
        gamma = projection_step(excess, denom)
        # Projection (Alg. 10, line 6): w_bar = u_bar + gamma (G'H_2 x_hat - x), b += gamma F'D H_1 x_hat.
        b = self._basis.b + gamma * (F.T @ (D * hx[:k]))
        x_coef = -gamma
        row_coef = gamma * hx[k : k + n]
        gdot = self._loss.derivative(y_hat, y)
        c = self._sqrt_eta * gdot  # g_hat = c x
        epoch = None
        grows = c != 0.0 and m > 0 and f.nonzero  # g_hat != 0 joins G
        if grows:
            row_coef = np.append(row_coef, 0.0)  # the new row of G is g_hat = c x
            gx1 = np.append(gx, c * xx)
            if n + 1 < m:  # Alg. 8, lines 3-4
                sx1 = sx.copy()
                sx1[k + n] = c * xx
                e = np.zeros(k + m)
                e[k + n] = 1.0
                q = c * sx1
                q[k + n] -= 0.5 * c * c * xx
                H = sherman_morrison(sherman_morrison(H, q, e), e, q)
                sg = gdot * sx1
            else:  # Alg. 11, lines 8-14
                epoch = self._eigen_step(f, c, b, zx, gx1)
                F, D, H = epoch.F, epoch.D, epoch.H
                if epoch.delta is not None:
                    row_coef -= epoch.delta.T @ b  # -G'Delta'b keeps w fixed while Z moves
                else:
                    b = np.zeros(k)  # folded into u_bar by the dense re-basing
                sg = np.zeros(k + m)
                sg[:k] = gdot * D * (F @ epoch.zx)
        else:
            sg = gdot * sx
        # Weight step (Alg. 10, line 10): u_bar = w_bar + (G'H_2 S g - g)/alpha, b += F'D H_1 S g/alpha.
        hsg = H @ sg
        b = b + (F.T @ (D * hsg[:k])) / alpha
        x_coef -= gdot / alpha
        if epoch is None:
            row_coef += hsg[k : k + len(row_coef)] / alpha
        if len(row_coef) > n:  # the new row's contribution lives on the support of x
            x_coef += c * row_coef[n]
        deltas: list[tuple[slice | np.ndarray, np.ndarray]] = [(f.index, x_coef * f.values)]
        deltas += [(index, row_coef[j] * self._Gd[j, index]) for j, index in enumerate(self._g_index)]
        if epoch is not None and epoch.fold is not None:
            deltas.append((epoch.support, epoch.fold))
        check_finite(b, H, *(v for _, v in deltas))
        # Commit.
        apply_deltas(self._basis.ubar, deltas)
        self._basis.b, self._H = b, H
        if epoch is not None:
            self._commit_epoch(epoch)
        elif grows:
            self._Gd[n, f.index] = c * f.values
            self._g_index.append(f.index)
        return y_hat, leverage(c, denom / alpha), gdot

    def _eigen_step(self, f: Features, c: float, b: np.ndarray, zx: np.ndarray, gx: np.ndarray) -> _Epoch:
        """Alg. 11 lines 8-12 on the full G (the current rows plus g_hat = c x), into temporaries.

        ``b`` is the weight vector after the projection step, ``zx`` = Z x and ``gx`` = G x (new row
        included); the result carries ``zx`` for the new Z.
        """
        m = self.sketch_size
        k = len(self._D)
        F, Z, K = self._basis.F, self._basis.Z, self._basis.K
        n = len(self._g_index)  # = m - 1: the new row g_hat = c x completes G
        new_values = c * f.values
        rows = [(index, self._Gd[j, index]) for j, index in enumerate(self._g_index)]
        rows.append((f.index, new_values))
        GZ = np.stack([Z[:, index] @ values for index, values in rows])  # (m, k) = G Z'
        GG = np.empty((m, m))  # G G' from the rows' supports: O(m^2 s)
        for j, (index, values) in enumerate(rows[:-1]):
            GG[:n, j] = self._Gd[:n, index] @ values
        GG[:n, n] = self._Gd[:n, f.index] @ new_values
        GG[n, :n] = GG[:n, n]
        GG[n, n] = c * c * f.sq_norm
        support = self._support_with(rows)
        if not self._full:
            return self._direct_epoch(rows, support, f, b, zx)
        M = GZ @ F.T  # Alg. 12, line 1: M = G V'
        P = np.hstack([-(M @ F), np.eye(m)])
        KR = np.block([[K, GZ.T], [GZ, GG]])  # Gram matrix of R = (Z; G)
        # Alg. 12, line 2 (Alg. 13); |G - MV| is a difference of near-equal terms, so rows are measured
        # against |G| itself.
        L, Q = gram_schmidt(P, KR, tol=_RANK_TOL, scale=np.diag(GG))
        ML = np.hstack([M, L])
        C = ML.T @ ML
        C[np.diag_indices(k)] += self._D**2
        values, vectors = np.linalg.eigh(C)  # Alg. 12, line 3
        order = np.argsort(values)[::-1][:k]
        U = vectors[:, order].T  # (k, k + r)
        D = self._shrunk(values[order], len(values))
        N1 = U[:, :k] @ F + U[:, k:] @ Q[:, :k]  # Alg. 12, line 4
        N2 = U[:, k:] @ Q[:, k:]
        check_finite(N1, N2, D)
        if np.linalg.cond(N1) >= _MAX_COND:
            # A new direction has (almost) no component in the span of Z, so Z + N1^{-1} N2 G does not
            # exist (always so in the first epoch, where S'S = G'G lies in the span of G).
            return self._direct_epoch(rows, support, f, b, zx)
        delta = np.linalg.solve(N1, N2)  # Alg. 11, line 9
        DG = delta @ GZ
        K1 = K + DG + DG.T + delta @ GG @ delta.T  # Alg. 11, line 10
        z_steps = [np.outer(delta[:, j], values) for j, (_, values) in enumerate(rows)]
        check_finite(delta, K1, *z_steps)
        return _Epoch(N1, D, self._h(D), K1, rows, zx + delta @ gx, support, delta, z_steps, None, None,
                      True)

    def _shrunk(self, eigenvalues: np.ndarray, rank_bound: int) -> np.ndarray:
        """Alg. 8, line 8: :math:`D_{ii} = \\sqrt{\\Sigma_{ii} - \\Sigma_{mm}}` for the top ``k`` eigenvalues.

        ``rank_bound`` is the number of eigenvalues computed; the m-th eigenvalue of S'S is 0 beyond it.
        """
        m = self.sketch_size
        sigma = np.maximum(eigenvalues, 0.0)
        shrink = sigma[m - 1] if m <= min(len(sigma), rank_bound) else 0.0
        shrunk: np.ndarray = np.sqrt(np.maximum(sigma - shrink, 0.0))
        return shrunk

    def _h(self, D: np.ndarray) -> np.ndarray:
        """H after an epoch: diag(1 / (alpha + D^2), 1 / alpha, ...) (Alg. 8, line 9)."""
        return np.diag(np.r_[1.0 / (self.alpha + D * D), np.full(self.sketch_size, 1.0 / self.alpha)])

    def _support_with(self, rows: list[tuple[slice | np.ndarray, np.ndarray]]) -> slice | np.ndarray:
        """The support of Z after this epoch: the features seen in any row of G so far (sorted)."""
        if isinstance(self._support_index, slice) or any(isinstance(i, slice) for i, _ in rows):
            return _DENSE
        return np.unique(np.concatenate([self._support_index, *(i for i, _ in rows)]))

    def _direct_epoch(
        self, rows: list[tuple[slice | np.ndarray, np.ndarray]], support: slice | np.ndarray,
        f: Features, b: np.ndarray, zx: np.ndarray,
    ) -> _Epoch:
        """Alg. 8, line 7 by an SVD of S restricted to its support: O((k + m)^2 n) for n seen features.

        Used when the sparse update does not exist (see :meth:`_eigen_step`); gives F = I and Z = V.
        ``stats()["direct_epochs"]`` counts these.
        """
        k, m = len(self._D), self.sketch_size
        Zs = self._basis.Z[:, support]
        n = Zs.shape[1]
        G = np.zeros((m, n))
        for j, (index, values) in enumerate(rows):
            G[j, _columns(support, index)] = values
        S = np.vstack([self._D[:, None] * (self._basis.F @ Zs), G])
        _, singular, Vt = np.linalg.svd(S, full_matrices=False)
        kk = min(k, len(singular))
        D = np.zeros(k)
        D[:kk] = self._shrunk(singular[:kk] ** 2, len(singular))
        Z1 = np.zeros((k, n))
        Z1[:kk] = Vt[:kk]
        K1 = Z1 @ Z1.T
        x_at = _columns(support, f.index)
        fold = Zs.T @ b
        check_finite(D, Z1, fold)
        return _Epoch(np.eye(k), D, self._h(D), K1, rows, Z1[:, x_at] @ f.values, support, None, None,
                      Z1, fold, kk == k)

    def _commit_epoch(self, epoch: _Epoch) -> None:
        if epoch.z_steps is not None:
            for (index, _), step in zip(epoch.rows, epoch.z_steps, strict=True):
                self._basis.Z[:, index] += step  # Z += Delta G (Alg. 11, line 11), one row of G at a time
        else:
            self._basis.Z[:, epoch.support] = epoch.Z  # (u_bar took the fold with the round's deltas)
            self._direct_epochs += 1
        self._basis.F, self._D, self._basis.K, self._full = epoch.F, epoch.D, epoch.K, epoch.full
        self._support_index = epoch.support
        for j, index in enumerate(self._g_index):
            self._Gd[j, index] = 0.0
        self._g_index = []
        self._basis.maybe_rebase(self._support_index)

    def _margin(self, f: Features) -> float:
        return self._basis.margin(f)

    # ----------------------------------------------------------------- state
    def _model_stats(self) -> dict[str, Any]:
        return {"rebases": self._basis.rebases, "buffered_rows": len(self._g_index),
                "direct_epochs": self._direct_epochs}

    def _scalars(self) -> dict[str, Any]:
        return {"rebases": self._basis.rebases, "direct_epochs": self._direct_epochs}

    def _arrays(self) -> dict[str, np.ndarray]:
        support = self._support_index
        dense = np.array([isinstance(index, slice) for index in self._g_index], dtype=bool)
        sparse = [index for index in self._g_index if not isinstance(index, slice)]
        return {
            **self._basis.arrays(),
            **super()._arrays(),
            "D": self._D,
            "H": self._H,
            "G": self._Gd,
            "g_dense": dense,
            "g_counts": np.array([len(index) for index in sparse], dtype=np.int64),
            "g_index": np.concatenate(sparse) if sparse else np.zeros(0, dtype=np.int64),
            "support": np.zeros(0, dtype=np.int64) if isinstance(support, slice) else support,
            "flags": np.array([self._full, isinstance(support, slice)], dtype=bool),
        }

    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        super()._restore(arrays, scalars)
        m, d = self.sketch_size, self._dim
        k = min(m, d)
        self._basis = FactoredBasis.restore(arrays, scalars, k, d)
        self._D = checked_vector(arrays["D"], k)
        self._direct_epochs = int(scalars["direct_epochs"])
        self._H = checked_matrix(arrays["H"], k + m, k + m)
        self._Gd = checked_matrix(arrays["G"], m, d)
        dense, counts, flat = arrays["g_dense"], arrays["g_counts"], arrays["g_index"]
        if len(dense) >= max(m, 1) or counts.sum() != len(flat) or len(counts) != (~dense).sum():
            raise ValueError("buffered rows of G are inconsistent")
        if len(flat) and (flat.min() < 0 or flat.max() >= d):
            raise ValueError("buffered row indices are out of range")
        pieces = iter(np.split(flat, np.cumsum(counts)[:-1]) if len(counts) else [])
        self._g_index = [_DENSE if is_dense else next(pieces) for is_dense in dense]
        full, support_dense = (bool(v) for v in arrays["flags"])
        self._full = full
        self._support_index = _DENSE if support_dense else arrays["support"]
