"""Slow, explicit references for the linear learners: the textbook form of every update, in d x d.

Each reference plays SON's Alg. 1 with an explicitly inverted :math:`A = \\alpha I + M`, where ``M`` is
the sketch's :math:`S^\\top S` rebuilt from its definition (the full Gram of the to-sketch vectors for
ONS, the epoch Frequent Directions of Alg. 8 with a fresh ``eigh``, the random projection of Alg. 6, and
Oja's rule of Eq. 4 with a QR orthonormalisation). Nothing here shares code with :mod:`kons`'s learners
except the losses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from kons.losses import get_loss


class Sketch(Protocol):
    """What :func:`son` asks of a sketch: the matrix it stands for, and its update by a gradient."""

    def matrix(self) -> np.ndarray: ...

    def update(self, g: np.ndarray) -> None: ...


class FullSketch:
    """ONS: M = sum of g_hat g_hat'."""

    def __init__(self, d: int) -> None:
        self.M = np.zeros((d, d))

    def matrix(self) -> np.ndarray:
        return self.M

    def update(self, g: np.ndarray) -> None:
        self.M = self.M + np.outer(g, g)


class FrequentDirections:
    """Alg. 8: keep up to m recent rows; at the m-th, eigendecompose S'S, keep the top min(m, d), shrink."""

    def __init__(self, m: int, d: int) -> None:
        self.m, self.d = m, d
        self.top = np.zeros((0, d))
        self.rows: list[np.ndarray] = []

    def matrix(self) -> np.ndarray:
        S = np.vstack([self.top, *(g[None] for g in self.rows)])
        result: np.ndarray = S.T @ S
        return result

    def update(self, g: np.ndarray) -> None:
        if self.m == 0 or not g.any():
            return
        self.rows.append(g.copy())
        if len(self.rows) == self.m:
            values, vectors = np.linalg.eigh(self.matrix())
            order = np.argsort(values)[::-1]
            values, vectors = np.maximum(values[order], 0.0), vectors[:, order]
            k = min(self.m, self.d)
            shrink = values[self.m - 1] if self.m <= self.d else 0.0
            D = np.sqrt(np.maximum(values[:k] - shrink, 0.0))
            self.top = D[:, None] * vectors[:, :k].T
            self.rows = []


class RandomProjection:
    """Alg. 6: S += r g_hat' with r ~ N(0, I/m) drawn from ``default_rng(seed)`` when g_hat != 0."""

    def __init__(self, m: int, d: int, seed: int) -> None:
        self.S = np.zeros((m, d))
        self.rng = np.random.default_rng(seed)

    def matrix(self) -> np.ndarray:
        return self.S.T @ self.S

    def update(self, g: np.ndarray) -> None:
        m = len(self.S)
        if m and g.any():
            self.S = self.S + np.outer(self.rng.standard_normal(m) / np.sqrt(m), g)


class Oja:
    """Eq. 4 with Gamma_t = I/t; 'orth' is Gram-Schmidt in row order (QR with a positive diagonal)."""

    def __init__(self, V0: np.ndarray) -> None:
        self.V = V0.copy()
        self.lam = np.zeros(len(V0))
        self.t = 0

    def matrix(self) -> np.ndarray:
        result: np.ndarray = self.V.T @ np.diag(self.t * self.lam) @ self.V
        return result

    def update(self, g: np.ndarray) -> None:
        self.t += 1
        rate = 1.0 / self.t
        vg = self.V @ g
        self.lam = (1.0 - rate) * self.lam + rate * vg**2
        if len(self.V) and g.any():
            q, r = np.linalg.qr((self.V + rate * np.outer(vg, g)).T)
            signs = np.where(np.diag(r) < 0, -1.0, 1.0)
            self.V = (q * signs).T


def son(X: np.ndarray, Y: np.ndarray, sketch: Sketch, *, loss: str = "squared", alpha: float = 1.0,
        eta: float | None = None, C: float = 1.0) -> np.ndarray:
    """Alg. 1 with explicit inverses; returns the played (clipped) predictions."""
    L = get_loss(loss)
    eta = L.curvature(C) if eta is None else eta
    d = X.shape[1]
    u = np.zeros(d)
    played = []
    for x, y in zip(X, Y, strict=True):
        Ainv = np.linalg.inv(alpha * np.eye(d) + sketch.matrix())
        y_bar = float(u @ x)
        y_hat = min(max(y_bar, -C), C)
        v = Ainv @ x
        w = u - (y_bar - y_hat) / float(x @ v) * v if y_bar != y_hat else u  # Lemma 1
        gdot = L.derivative(y_hat, y)
        sketch.update(np.sqrt(eta) * gdot * x)
        u = w - np.linalg.inv(alpha * np.eye(d) + sketch.matrix()) @ (gdot * x)
        played.append(y_hat)
    return np.array(played)


def first_order(X: np.ndarray, Y: np.ndarray, inverse_metric: Callable[[np.ndarray, int], np.ndarray], *,
                loss: str, C: float, after: Callable[[np.ndarray], None] = lambda g: None) -> np.ndarray:
    """Projection (Lemma 1) and step in a diagonal metric: ``inverse_metric(g, t)`` is diag(A^{-1})."""
    L = get_loss(loss)
    w = np.zeros(X.shape[1])
    played = []
    for t, (x, y) in enumerate(zip(X, Y, strict=True)):
        a_old = inverse_metric(np.zeros_like(x), t)
        y_bar = float(w @ x)
        y_hat = min(max(y_bar, -C), C)
        if y_bar != y_hat:
            w = w - (y_bar - y_hat) / float(x @ (a_old * x)) * a_old * x
        g = L.derivative(y_hat, y) * x
        w = w - inverse_metric(g, t) * g
        after(g)
        played.append(y_hat)
    return np.array(played)


def adagrad(X: np.ndarray, Y: np.ndarray, *, eta: float, delta: float, loss: str, C: float) -> np.ndarray:
    sum_sq = np.zeros(X.shape[1])

    def metric(g: np.ndarray, t: int) -> np.ndarray:
        result: np.ndarray = eta / (delta + np.sqrt(sum_sq + g * g))
        return result

    def after(g: np.ndarray) -> None:
        sum_sq[:] += g * g

    return first_order(X, Y, metric, loss=loss, C=C, after=after)


def ogd(X: np.ndarray, Y: np.ndarray, *, eta: float, schedule: str, loss: str, C: float) -> np.ndarray:
    def metric(g: np.ndarray, t: int) -> np.ndarray:
        step = eta if schedule == "constant" else eta / np.sqrt(t + 1)
        return np.full(len(g), step)

    return first_order(X, Y, metric, loss=loss, C=C)
