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

import abc
import dataclasses
from typing import Any, ClassVar

import numpy as np

from kons._validation import POSITIVE, Constraint, Integer, Interval
from kons.errors import InvalidParameterError

__all__ = [
    "KERNELS", "RBF", "Kernel", "KernelParameter", "Laplacian", "Linear", "Polynomial", "kernel_from_dict",
]


@dataclasses.dataclass(frozen=True)
class Kernel(abc.ABC):
    """Base class: an immutable (frozen) dataclass of hyper-parameters, validated once; no state.

    A subclass declares its fields and their limits (``_parameter_constraints``) and implements
    :meth:`row` and :meth:`diag`.
    """

    name: ClassVar[str]
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {}

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for field in dataclasses.fields(self):
            constraint = self._parameter_constraints[field.name]
            value = constraint.check(owner, field.name, getattr(self, field.name))
            object.__setattr__(self, field.name, value)  # the canonical form (an int gamma becomes a float)

    @abc.abstractmethod
    def row(self, x: np.ndarray, P: np.ndarray, sq_norms: np.ndarray) -> np.ndarray:
        """Kernel values between ``x`` (d,) and each row of ``P`` (n, d); ``sq_norms`` is (n,)."""

    @abc.abstractmethod
    def diag(self, x: np.ndarray) -> float:
        """:math:`k(x, x)`."""

    def gram(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """The (n, m) matrix :math:`[k(x_i, y_j)]`."""
        X = np.asarray(X, dtype=np.float64)
        Y = np.asarray(Y, dtype=np.float64)
        sq = (Y * Y).sum(axis=1)
        return np.stack([self.row(x, Y, sq) for x in X]) if len(X) else np.zeros((0, len(Y)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description; ``kernel_from_dict(k.to_dict())`` rebuilds ``k``."""
        return {"name": self.name, **dataclasses.asdict(self)}


def _sq_distances(x: np.ndarray, P: np.ndarray, sq_norms: np.ndarray) -> np.ndarray:
    # ||p - x||^2 = ||p||^2 - 2 p'x + ||x||^2: one GEMV instead of an (n, d) temporary.
    # (ndarray.dot: the products of ``@`` bit for bit, without the matmul ufunc's dispatch)
    dist: np.ndarray = sq_norms - 2.0 * P.dot(x)
    dist += x.dot(x)
    np.maximum(dist, 0.0, out=dist)  # cancellation can leave tiny negatives for near-duplicates
    return dist


@dataclasses.dataclass(frozen=True)
class RBF(Kernel):
    r"""Gaussian kernel :math:`k(x, x') = \exp(-\gamma \|x - x'\|^2)`."""

    name = "rbf"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {"gamma": POSITIVE}

    gamma: float = 1.0

    def row(self, x: np.ndarray, P: np.ndarray, sq_norms: np.ndarray) -> np.ndarray:
        dist = _sq_distances(x, P, sq_norms)
        dist *= -self.gamma
        values: np.ndarray = np.exp(dist, out=dist)
        return values

    def diag(self, x: np.ndarray) -> float:
        return 1.0


@dataclasses.dataclass(frozen=True)
class Laplacian(Kernel):
    r"""Laplacian kernel :math:`k(x, x') = \exp(-\gamma \|x - x'\|_1)`."""

    name = "laplacian"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {"gamma": POSITIVE}

    gamma: float = 1.0

    def row(self, x: np.ndarray, P: np.ndarray, sq_norms: np.ndarray) -> np.ndarray:
        dist = np.abs(P - x).sum(axis=1)
        dist *= -self.gamma
        values: np.ndarray = np.exp(dist, out=dist)
        return values

    def diag(self, x: np.ndarray) -> float:
        return 1.0


@dataclasses.dataclass(frozen=True)
class Polynomial(Kernel):
    r"""Polynomial kernel :math:`k(x, x') = (\text{scale}\; x^\top x' + \text{coef0})^{\text{degree}}`."""

    name = "polynomial"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "degree": Integer(low=1, high=32), "coef0": Interval(low=0.0), "scale": POSITIVE,
    }

    degree: int = 2
    coef0: float = 1.0
    scale: float = 1.0

    def row(self, x: np.ndarray, P: np.ndarray, sq_norms: np.ndarray) -> np.ndarray:
        base = P @ x
        base *= self.scale
        base += self.coef0
        values: np.ndarray = base**self.degree
        return values

    def diag(self, x: np.ndarray) -> float:
        return float((self.scale * (x @ x) + self.coef0) ** self.degree)


@dataclasses.dataclass(frozen=True)
class Linear(Kernel):
    r"""Linear kernel :math:`k(x, x') = x^\top x'` (KONS with it is explicit-feature ONS)."""

    name = "linear"

    def row(self, x: np.ndarray, P: np.ndarray, sq_norms: np.ndarray) -> np.ndarray:
        values: np.ndarray = P @ x
        return values

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


class KernelParameter:
    """The constraint of a learner's ``kernel`` parameter: a :class:`Kernel` or its dict description."""

    def check(self, owner: str, name: str, value: Any) -> Kernel:
        return kernel_from_dict(value)
