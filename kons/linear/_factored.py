r"""The factored sketch shared by FD-SON and Oja-SON (Sec. 4, App. G.2 and H), a member of each.

The sketch's orthonormal directions are kept factored as :math:`V = F Z` with :math:`F` (k, k),
:math:`Z` (k, d) and the Gram matrix :math:`K = Z Z^\top`, and the weights as
:math:`u = \bar u + Z^\top b`, so that a round changes :math:`Z` and :math:`\bar u` only on the
support of the example. Non-zero columns of :math:`Z` are confined to a *support* the learner keeps (all
columns for Oja's random start, the features seen so far for FD's empty start).

:math:`Z` may keep growing along the top directions (Oja's update is a power iteration on it) while
:math:`F` shrinks to compensate; once :math:`K` gets ill-conditioned (see ``REBASE_AT``) the learner
re-bases: :math:`\bar u \leftarrow \bar u + Z^\top b,\ b \leftarrow 0,\ Z \leftarrow F Z,
F \leftarrow` Gram-Schmidt of :math:`I` in :math:`K = ZZ^\top`. That costs O(k^2) per column of the
support and happens about O(log T) times; ``stats()["rebases"]`` counts them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kons._numerics import check_finite
from kons.errors import NumericalError
from kons.linear._learner import Features
from kons.linear._linalg import checked_matrix, checked_vector, gram_schmidt

__all__ = ["REBASE_AT", "FactoredBasis"]

#: Re-base once ||F||_F^2 tr(K) / k^2 (at least cond(K) / k^2, 1 for orthonormal rows of Z) exceeds
#: this: Gram-Schmidt in the K inner product loses about cond(K) * 1e-16 relative accuracy.
REBASE_AT = 1e2

Support = slice | np.ndarray


class FactoredBasis:
    """``Z`` (k, d), ``K = Z Z'`` and ``F`` (k, k), ``b`` (k,), ``u_bar`` (d,) and the re-basing count.

    The learner that owns it reads and replaces these arrays in its round (after checking the new ones
    are finite), and asks it for the prediction, the conditioning and a re-basing.
    """

    def __init__(self, Z: np.ndarray, K: np.ndarray, F: np.ndarray, b: np.ndarray, ubar: np.ndarray,
                 rebases: int) -> None:
        self.Z, self.K, self.F, self.b, self.ubar, self.rebases = Z, K, F, b, ubar, rebases

    @classmethod
    def start(cls, k: int, dim: int, generator: np.random.Generator | None = None) -> FactoredBasis:
        """No direction yet (``Z = 0``), or, with a ``generator``, ``k`` random orthonormal ones."""
        if generator is not None and k:
            # Random orthonormal rows: Q factor of a Gaussian (d, k) matrix.
            Z = np.ascontiguousarray(np.linalg.qr(generator.standard_normal((dim, k)))[0].T)
        else:
            Z = np.zeros((k, dim))
        return cls(Z, Z @ Z.T, np.eye(k), np.zeros(k), np.zeros(dim), 0)

    @staticmethod
    def floats(k: int, dim: int) -> int:
        """Float64 entries of a basis of ``k`` directions in dimension ``dim``."""
        return k * dim + 2 * k * k + k + dim

    def margin(self, f: Features) -> float:
        """The unclipped prediction :math:`u^\\top x = \\bar u^\\top x + b^\\top Z x`."""
        return f.dot(self.ubar) + float(self.b @ f.cols(self.Z))

    @staticmethod
    def conditioning(F: np.ndarray, K: np.ndarray) -> float:
        """:math:`\\|F\\|_F^2 \\mathrm{tr}(K) / k^2`: between :math:`\\mathrm{cond}(K)/k^2` and cond(K)."""
        k = len(F)
        return float((F * F).sum() * np.trace(K)) / (k * k) if k else 1.0

    def rebased(self, b: np.ndarray, support: Support
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The same weights and directions with :math:`Z \\leftarrow FZ`, :math:`b = 0`, as new arrays.

        Returns ``(fold, Z_s, F, K)`` on the ``support``: ``u_bar[s] += fold``, ``Z[:, s] = Z_s``.
        """
        Zs = self.F @ self.Z[:, support]
        K = Zs @ Zs.T
        _, F = gram_schmidt(np.eye(len(K)), K)
        if F.shape != K.shape:
            raise NumericalError("the sketch's directions became linearly dependent.")
        return self.Z[:, support].T @ b, Zs, F, K

    def maybe_rebase(self, support: Support) -> None:
        """Re-base after a round if :math:`K` got ill-conditioned (never fails the round)."""
        if self.conditioning(self.F, self.K) <= REBASE_AT:
            return
        try:
            fold, Zs, F, K = self.rebased(self.b, support)
            check_finite(fold, Zs, F, K)
        except NumericalError:
            return  # keep the old (valid, if ill-conditioned) representation
        self.ubar[support] += fold
        self.Z[:, support] = Zs
        self.K, self.F = K, F
        self.b = np.zeros_like(self.b)
        self.rebases += 1

    def arrays(self) -> dict[str, np.ndarray]:
        return {"ubar": self.ubar, "b": self.b, "Z": self.Z, "F": self.F, "K": self.K}

    @classmethod
    def restore(cls, arrays: dict[str, np.ndarray], scalars: dict[str, Any], k: int, dim: int
                ) -> FactoredBasis:
        """The basis :meth:`arrays` (and the learner's ``rebases`` scalar) saved; ValueError if they do
        not fit ``k`` and ``dim``."""
        ubar = checked_vector(arrays["ubar"], dim)
        b = checked_vector(arrays["b"], k)
        Z = checked_matrix(arrays["Z"], k, dim)
        F = checked_matrix(arrays["F"], k, k)
        K = checked_matrix(arrays["K"], k, k)
        return cls(Z, K, F, b, ubar, int(scalars["rebases"]))
