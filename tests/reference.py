"""Independent references and helpers shared by the test modules.

Nothing here calls the numerics of :mod:`kons`: the losses' derivatives, the kernels and the ONS update
are written out again from ``docs/kons-math.md`` ("The round") so that agreement with the
package is evidence, not tautology.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from scipy.spatial.distance import cdist

import kons
from kons import SketchedKONS
from kons.base import Learner

# ----------------------------------------------------------------------------- BLAS threads


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with a single BLAS thread.

    On the shared 2-core machine a threaded OpenBLAS call waits for a busy core: 300 solves of size 300
    took 25-30 s with two threads and 1-2 s with one (measured). No-op without ``threadpoolctl``.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional
        yield
        return
    with threadpool_limits(1):
        yield


F = TypeVar("F", bound=Callable[..., Any])


def single_threaded(func: F) -> F:
    """Decorator form of :func:`one_blas_thread`."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with one_blas_thread():
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


# ----------------------------------------------------------------------------- losses (derivatives only)


def loss_derivative(loss: str, y_hat: float, y: float) -> float:
    r""":math:`\partial \ell(\hat y, y) / \partial \hat y`, written independently of :mod:`kons.losses`."""
    if loss == "squared":
        return 2.0 * (y_hat - y)
    if loss == "logistic":
        result: float = -y / (1.0 + np.exp(y * y_hat))
        return result
    if loss == "squared_hinge":
        return -2.0 * y * max(0.0, 1.0 - y * y_hat)
    if loss == "hinge":
        return -y if y * y_hat < 1.0 else 0.0
    raise ValueError(loss)


# ----------------------------------------------------------------------------- kernels (Gram matrices)


def rbf_gram(gamma: float) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Gram function of the Gaussian kernel via ``scipy.spatial.distance.cdist``."""

    def gram(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        result: np.ndarray = np.exp(-gamma * cdist(np.atleast_2d(A), np.atleast_2d(B), "sqeuclidean"))
        return result

    return gram


@single_threaded
def empirical_features(X: np.ndarray, gram: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """Explicit features ``F`` (n, n) with ``F F' = K`` (the empirical kernel map of the rows of ``X``).

    ONS on these features is ONS in the RKHS: every iterate lies in the span of the observed points and
    the map is an isometry on that span.
    """
    K = gram(X, X)
    K = 0.5 * (K + K.T)
    values, vectors = np.linalg.eigh(K)
    result: np.ndarray = vectors * np.sqrt(np.clip(values, 0.0, None))
    return result


# ----------------------------------------------------------------------------- the ONS round, explicitly


@dataclass
class Trace:
    """Per-round quantities of a reference run (each array has one entry per round)."""

    y_bar: np.ndarray  # unclipped prediction
    y_hat: np.ndarray  # played (clipped) prediction
    gdot: np.ndarray  # loss derivative at y_hat
    excess: np.ndarray  # h(y_bar) = y_bar - y_hat
    s: np.ndarray  # phi' A^{-1} phi

    @property
    def clipped(self) -> np.ndarray:
        result: np.ndarray = self.excess != 0.0
        return result

    @property
    def zero_gradient(self) -> np.ndarray:
        result: np.ndarray = self.gdot == 0.0
        return result

    @property
    def unstored(self) -> np.ndarray:
        """Rounds whose dual coefficient is zero and that cannot join the dictionary."""
        result: np.ndarray = self.zero_gradient & ~self.clipped
        return result


def _trace(rows: list[tuple[float, float, float, float, float]]) -> Trace:
    cols = np.array(rows, dtype=np.float64).reshape(-1, 5).T
    return Trace(*cols)


@single_threaded
def explicit_ons(
    Phi: np.ndarray,
    Y: np.ndarray,
    *,
    loss: str,
    alpha: float,
    eta: float,
    C: float,
    z: Sequence[bool] | np.ndarray | None = None,
) -> Trace:
    """ONS with the prediction projection on explicit features (docs/kons-math.md, "The round").

    ``A`` is the (p, p) matrix, solved afresh with ``np.linalg.solve`` every round. ``z[t]`` says
    whether round ``t``'s rank-one term enters ``A`` (all rounds when ``z`` is None).
    """
    T, p = Phi.shape
    A = alpha * np.eye(p)
    w = np.zeros(p)
    g_prev = np.zeros(p)
    rows = []
    for t in range(T):
        phi = Phi[t]
        u = w - np.linalg.solve(A, g_prev)  # u_t = w_{t-1} - A_{t-1}^{-1} g_{t-1}
        y_bar = float(phi @ u)
        y_hat = min(max(y_bar, -C), C)
        excess = y_bar - y_hat
        A_inv_phi = np.linalg.solve(A, phi)
        s = float(phi @ A_inv_phi)
        w = u - excess / s * A_inv_phi  # the projection step
        gdot = loss_derivative(loss, y_hat, float(Y[t]))
        g_prev = gdot * phi
        if z is None or z[t]:
            A = A + eta * gdot**2 * np.outer(phi, phi)
        rows.append((y_bar, y_hat, gdot, excess, s))
    return _trace(rows)


@single_threaded
def dual_bruteforce(
    X: np.ndarray,
    Y: np.ndarray,
    gram: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    loss: str,
    alpha: float,
    eta: float,
    C: float,
    z: Sequence[bool] | np.ndarray,
) -> Trace:
    """The dual form of docs/kons-math.md recomputed from scratch every round.

    Fresh Gram matrices over all past points and ``np.linalg.solve`` with
    ``E = D_R K_RR D_R + alpha I``; ``R`` holds the rounds with ``z[t]`` and a non-zero gradient.
    """
    T = len(Y)
    beta = np.zeros(T)
    members: list[int] = []
    scales: list[float] = []
    rows = []
    for t in range(T):
        x = X[t : t + 1]
        k = gram(X[:t], x)[:, 0] if t else np.zeros(0)
        kxx = float(gram(x, x)[0, 0])
        y_bar, s = float(k @ beta[:t]), kxx
        if members:
            d = np.array(scales)
            E = d[:, None] * gram(X[members], X[members]) * d[None, :] + alpha * np.eye(len(members))
            m = gram(X[members], X[:t]) @ beta[:t]
            a = d * k[members]
            y_bar -= float(a @ np.linalg.solve(E, d * m))
            s -= float(a @ np.linalg.solve(E, a))
        y_bar /= alpha
        s /= alpha
        y_hat = min(max(y_bar, -C), C)
        excess = y_bar - y_hat
        gdot = loss_derivative(loss, y_hat, float(Y[t]))
        joins = bool(z[t]) and gdot != 0.0
        beta[t] = (eta * gdot**2 * y_hat if joins else 0.0) - gdot - excess / s
        if joins:
            members.append(t)
            scales.append(np.sqrt(eta) * gdot)
        rows.append((y_bar, y_hat, gdot, excess, s))
    return _trace(rows)


@single_threaded
def unclipped_run(learner: Learner, X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run ``learner`` over the stream; return the unclipped ``y_bar`` before each round and the plays."""
    y_bar = np.empty(len(Y))
    played = np.empty(len(Y))
    for t, (x, y) in enumerate(zip(X, Y, strict=True)):
        y_bar[t] = learner._predict(x) if learner._has_model else 0.0
        played[t] = learner.learn_one(x, y)
    return y_bar, played


def relative_gap(a: np.ndarray, b: np.ndarray) -> float:
    """``max |a - b| / max(1, max |b|)``."""
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


# ----------------------------------------------------------------------------- forced coins


class ForcedCoinSketchedKONS(SketchedKONS):
    """Sketched-KONS whose dictionary coin ``z_t`` is read from ``forced_z[t]`` (not registered).

    Every round with a non-zero gradient draws two uniforms: the first is KORS's own coin (left to
    the generator), the second is ``z_t``; it is answered with -1 (below any probability: join) or
    2 (above any probability: stay out). ``coin_rounds`` records the rounds that drew a ``z`` coin.
    """

    forced_z: np.ndarray
    coin_rounds: list[int]
    _draws: int = 0

    def _uniform(self) -> float:
        self._draws += 1
        if self._draws % 2 == 1:
            return super()._uniform()
        self.coin_rounds.append(self._rounds)
        return -1.0 if self.forced_z[self._rounds] else 2.0


def forced_coin_learner(z: Sequence[bool] | np.ndarray, **params: Any) -> ForcedCoinSketchedKONS:
    """A :class:`ForcedCoinSketchedKONS` with the coin sequence ``z``."""
    learner = ForcedCoinSketchedKONS(**params)
    learner.forced_z = np.asarray(z, dtype=bool)
    learner.coin_rounds = []
    return learner


# ----------------------------------------------------------------------------- the learner registry

#: Small parameter sets for the registered learners the core ships; learners added later are built with
#: their defaults (and ``loss`` overridden where a test needs it).
LEARNER_PARAMS: dict[str, dict[str, Any]] = {
    "kons": {"kernel": {"name": "rbf", "gamma": 0.3}, "C": 2.0, "alpha": 1.0},
    "sketched_kons": {"kernel": {"name": "rbf", "gamma": 0.3}, "C": 2.0, "alpha": 1.0, "gamma": 0.05,
                      "seed": 7},
    "kernel_ogd": {"kernel": {"name": "rbf", "gamma": 0.3}, "C": 2.0, "eta": 0.3},
    # A small bound, so that the suites also run rounds with a full (frozen) dictionary.
    "nystrom_kons": {"kernel": {"name": "rbf", "gamma": 0.3}, "C": 2.0, "alpha": 1.0, "seed": 7,
                     "max_dictionary": 12},
}


def make_learner(name: str, **overrides: Any) -> Learner:
    """The learner registered as ``name`` with :data:`LEARNER_PARAMS` and ``overrides`` it accepts."""
    cls = kons.LEARNERS[name]
    accepted = set(cls._param_names())
    params = {k: v for k, v in {**LEARNER_PARAMS.get(name, {}), **overrides}.items() if k in accepted}
    return cls.from_params(params)


def is_binary(learner: Learner) -> bool:
    """Whether the learner's loss needs labels in {-1, +1}."""
    return bool(learner._loss.binary)


def stream_for(learner: Learner, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Labels suited to the learner's loss: ``y`` itself, or its sign for binary losses."""
    return X, (np.where(y >= 0.0, 1.0, -1.0) if is_binary(learner) else y)


def restored_in_step(learner: Learner, X: np.ndarray, ys: Sequence[Any] | np.ndarray,
                     cuts: Sequence[int]) -> list[Learner]:
    """Learn the stream ``X, ys`` with ``learner``, saving it at each of the increasing ``cuts``: the copy
    loaded from each save has its bytes and stats, and learns the rest of the stream in step with it,
    playing exactly what it plays (asserted part by part). So several cuts cost one pass of the stream
    (and a pass per copy from its cut), not one of each per cut. Returns the copies, in the order of the
    cuts, for the caller to compare with ``learner`` at the end."""
    copies: list[Learner] = []
    start = 0
    for cut in [*cuts, len(ys)]:
        part = slice(start, cut)
        plays = learner.learn_many(X[part], ys[part])
        for copy in copies:
            assert np.array_equal(copy.learn_many(X[part], ys[part]), plays), (len(copies), cut)
        if cut < len(ys):
            blob = learner.to_bytes()
            copy = kons.load(blob)
            assert copy.to_bytes() == blob and copy.stats() == learner.stats(), cut
            copies.append(copy)
        start = cut
    return copies
