r"""Dense linear algebra of the sketched learners: rank-one updates, Gram-Schmidt, checks of the state."""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "apply_deltas", "checked_matrix", "checked_vector", "gram_schmidt", "sherman_morrison",
]


def sherman_morrison(H: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    r""":math:`(H^{-1} + a b^\top)^{-1} = H - \frac{H a b^\top H}{1 + b^\top H a}` (a new array)."""
    Ha = H @ a
    bH = b @ H
    return H - np.outer(Ha, bH) / (1.0 + float(b @ Ha))


def gram_schmidt(
    P: np.ndarray, K: np.ndarray, tol: float = 1e-10, scale: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    r"""Gram-Schmidt on the rows of ``P`` (n, q) in the inner product :math:`\langle a,b\rangle = a^\top K b`.

    The paper's Decompose (Alg. 13): with :math:`K = R R^\top`, returns ``L`` (n, r) and ``Q`` (r, q) with
    :math:`L Q R = P R` and the rows of :math:`Q R` orthonormal; ``r`` is the numerical rank: a row whose
    residual norm is below ``tol`` times its own norm (or ``sqrt(scale[i])``, when the norm of row ``i``
    of :math:`PR` itself comes out of a cancellation) is dropped. Each row is orthogonalised twice
    (classical Gram-Schmidt with re-orthogonalisation), which is the same map in exact arithmetic and keeps
    :math:`QR` orthonormal to rounding over long streams. O(n q^2).
    """
    n, q = P.shape
    Q = np.zeros((n, q))
    L = np.zeros((n, n))
    kept = np.zeros(n, dtype=bool)
    for i in range(n):
        p = P[i]
        Kp = K @ p
        coef = Q @ Kp
        beta = p - Q.T @ coef
        again = Q @ (K @ beta)
        beta -= Q.T @ again
        coef += again
        c2 = float(beta @ (K @ beta))
        reference = float(p @ Kp) if scale is None else float(scale[i])
        if c2 > tol * tol * reference and c2 > 0.0:
            c = math.sqrt(c2)
            Q[i] = beta / c
            coef[i] = c
            kept[i] = True
        L[i] = coef
    return L[:, kept], Q[kept]


def apply_deltas(target: np.ndarray, deltas: list[tuple[slice | np.ndarray, np.ndarray]]) -> None:
    """``target[index] += values`` for each pair (after the caller checked they are finite)."""
    for index, values in deltas:
        target[index] += values


def checked_vector(arr: np.ndarray, n: int) -> np.ndarray:
    """``arr`` if its shape is ``(n,)``, else ValueError (a restored state that does not fit)."""
    if arr.shape != (n,):
        raise ValueError(f"stored vector has shape {arr.shape}, expected ({n},)")
    return arr


def checked_matrix(arr: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """``arr`` if its shape is ``(rows, cols)``, else ValueError."""
    if arr.shape != (rows, cols):
        raise ValueError(f"stored matrix has shape {arr.shape}, expected ({rows}, {cols})")
    return arr
