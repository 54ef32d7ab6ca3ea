r"""Positive-definite kernels evaluated one row at a time against a block of stored points.

Each kernel gives ``row(x, P, sq_norms)`` :math:`= [k(x, p_i)]_i` in O(n d) with no Python loop over
points, ``diag(x)`` :math:`= k(x, x)` and the full Gram matrix ``gram(X, Y)`` (used by references and
tests). ``sq_norms`` are the stored points' squared norms, which the learners keep alongside the points
so that distance kernels cost one matrix-vector product.

Examples
--------
>>> import numpy as np
>>> from kons.kernels import RBF
>>> k = RBF(gamma=0.5)
>>> P = np.array([[0.0, 0.0], [1.0, 0.0]])
>>> k.row(np.array([0.0, 0.0]), P, (P * P).sum(1)).round(6).tolist()
[1.0, 0.606531]
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from kons._validation import check_int, check_real
from kons.errors import InvalidParameterError

__all__ = ["KERNELS", "RBF", "Kernel", "Laplacian", "Linear", "Polynomial", "kernel_from_dict"]


class Kernel:
    """Base class: hyper-parameters in ``__init__``, validated once; no state."""

    name: ClassVar[str]

    def row(self, x: np.ndarray, P: np.ndarray, sq_norms: np.ndarray) -> np.ndarray:
        """Kernel values between ``x`` (d,) and each row of ``P`` (n, d); ``sq_norms`` is (n,)."""
        raise NotImplementedError

    def diag(self, x: np.ndarray) -> float:
        """:math:`k(x, x)`."""
        raise NotImplementedError

    def gram(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """The (n, m) matrix :math:`[k(x_i, y_j)]`."""
        X = np.asarray(X, dtype=np.float64)
        Y = np.asarray(Y, dtype=np.float64)
        sq = (Y * Y).sum(axis=1)
        return np.stack([self.row(x, Y, sq) for x in X]) if len(X) else np.zeros((0, len(Y)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description; ``kernel_from_dict(k.to_dict())`` rebuilds ``k``."""
        return {"name": self.name, **vars(self)}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Kernel) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.to_dict().items())))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


def _sq_distances(x: np.ndarray, P: np.ndarray, sq_norms: np.ndarray) -> np.ndarray:
    # ||p - x||^2 = ||p||^2 - 2 p'x + ||x||^2: one GEMV instead of an (n, d) temporary.
    dist = sq_norms - 2.0 * (P @ x)
    dist += x @ x
    np.maximum(dist, 0.0, out=dist)  # cancellation can leave tiny negatives for near-duplicates
    return dist


class RBF(Kernel):
    r"""Gaussian kernel :math:`k(x, x') = \exp(-\gamma \|x - x'\|^2)`."""

    name = "rbf"

    def __init__(self, gamma: float = 1.0) -> None:
        self.gamma = check_real("RBF", "gamma", gamma, low=0.0, low_open=True)

    def row(self, x: np.ndarray, P: np.ndarray, sq_norms: np.ndarray) -> np.ndarray:
        dist = _sq_distances(x, P, sq_norms)
        dist *= -self.gamma
        return np.exp(dist, out=dist)

    def diag(self, x: np.ndarray) -> float:
        return 1.0


class Laplacian(Kernel):
    r"""Laplacian kernel :math:`k(x, x') = \exp(-\gamma \|x - x'\|_1)`."""

    name = "laplacian"

    def __init__(self, gamma: float = 1.0) -> None:
        self.gamma = check_real("Laplacian", "gamma", gamma, low=0.0, low_open=True)

    def row(self, x: np.ndarray, P: np.ndarray, sq_norms: np.ndarray) -> np.ndarray:
        dist = np.abs(P - x).sum(axis=1)
        dist *= -self.gamma
        return np.exp(dist, out=dist)

    def diag(self, x: np.ndarray) -> float:
        return 1.0


class Polynomial(Kernel):
    r"""Polynomial kernel :math:`k(x, x') = (\text{scale}\; x^\top x' + \text{coef0})^{\text{degree}}`."""

    name = "polynomial"

    def __init__(self, degree: int = 2, coef0: float = 1.0, scale: float = 1.0) -> None:
        self.degree = check_int("Polynomial", "degree", degree, low=1, high=32)
        self.coef0 = check_real("Polynomial", "coef0", coef0, low=0.0)
        self.scale = check_real("Polynomial", "scale", scale, low=0.0, low_open=True)

    def row(self, x: np.ndarray, P: np.ndarray, sq_norms: np.ndarray) -> np.ndarray:
        base = P @ x
        base *= self.scale
        base += self.coef0
        return base**self.degree

    def diag(self, x: np.ndarray) -> float:
        return float((self.scale * (x @ x) + self.coef0) ** self.degree)


class Linear(Kernel):
    r"""Linear kernel :math:`k(x, x') = x^\top x'` (KONS with it is explicit-feature ONS)."""

    name = "linear"

    def row(self, x: np.ndarray, P: np.ndarray, sq_norms: np.ndarray) -> np.ndarray:
        return P @ x

    def diag(self, x: np.ndarray) -> float:
        return float(x @ x)


KERNELS: dict[str, type[Kernel]] = {k.name: k for k in (RBF, Laplacian, Polynomial, Linear)}


def kernel_from_dict(spec: Any) -> Kernel:
    """Build a kernel from ``{"name": "rbf", "gamma": 0.5}`` (or return ``spec`` if it is a kernel)."""
    if isinstance(spec, Kernel):
        return spec
    if not isinstance(spec, dict) or spec.get("name") not in KERNELS:
        raise InvalidParameterError(
            f"The 'kernel' parameter must be a Kernel or a dict with 'name' in {sorted(KERNELS)}. "
            f"Got {spec!r} instead."
        )
    args = {k: v for k, v in spec.items() if k != "name"}
    cls = KERNELS[spec["name"]]
    try:
        return cls(**args)
    except TypeError:
        raise InvalidParameterError(
            f"Unknown parameter for kernel {spec['name']!r}: {sorted(args)}."
        ) from None
