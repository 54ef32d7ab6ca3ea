"""The methods of the quality benchmark: kons learners and online peers behind one small interface.

A :class:`Method` builds a :class:`Runner` for a data set's :class:`Context` and a configuration dict.
The empty dict ``{}`` is always the *default* configuration (kons: the default rule below; peers: the
library's own defaults) and is the first entry of ``Method.grid``; the other entries are the tuning grid.
Every method with hyper-parameters gets :data:`GRID_SIZE` configurations in total.

Default rule for the kons learners (documented again in the results file):

* RBF kernel with ``gamma = 1 / median(||x_i - x_j||^2)`` over the first 500 rows of the stream
  (features only, no labels: what an online user can compute after a short warm-up buffer);
* ``C = 3`` for regression (targets are z-scored, so +-3 standard deviations), ``C = 1`` for
  classification (labels in {-1, +1});
* loss: squared (regression), logistic (classification);
* ``eta`` = the loss's curvature constant sigma(C) (the learners' own default; 1/(8 C^2) for squared),
  ``alpha = 1``; SketchedKONS ``beta = 1``, ``epsilon = 0.5``, ``seed = 0``;
  KernelOGD ``eta = 0.5`` with the ``1/sqrt(t)`` schedule (its defaults).

Peers (River, Vowpal Wabbit) are imported only when built, so this module imports without them.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

import kons
from kons.kernels import RBF
from kons.losses import get_loss

__all__ = ["GRID_SIZE", "METHODS", "Context", "Method", "Runner", "median_gamma", "missing_extras",
           "select_methods"]

GRID_SIZE = 9
#: Sub-directory of ``--out`` holding the per-data-set raw results (other benchmarks share ``--out``).
RAW_DIR = "quality_raw"
#: Exact KONS keeps a t x t factor: beyond this many rows it is not run.
KONS_MAX_ROWS = 12_000
#: Rows of the stream used by the median-distance rule for the RBF width.
GAMMA_ROWS = 500


@dataclass(frozen=True)
class Context:
    """What a builder may know about a data set: the task, the dimension and the default RBF width."""

    task: str  # "regression" or "binary"
    dim: int
    rbf_gamma: float

    @property
    def regression(self) -> bool:
        return self.task == "regression"

    @property
    def bound(self) -> float:
        """The clipping bound C of the kons learners."""
        return 3.0 if self.regression else 1.0

    @property
    def loss(self) -> str:
        return "squared" if self.regression else "logistic"


def median_gamma(X: np.ndarray, rows: int = GAMMA_ROWS) -> float:
    """``1 / median ||x_i - x_j||^2`` over the pairs of the first ``rows`` rows (the default RBF width)."""
    head = X[:rows]
    sq = (head * head).sum(axis=1)
    dist = sq[:, None] + sq[None, :] - 2.0 * head @ head.T
    median = float(np.median(dist[np.triu_indices(len(head), 1)]))
    return 1.0 / median if median > 0 else 1.0


class Runner(Protocol):
    """One online model: ``step`` predicts ``x`` on the current state, then learns ``(x, y)``."""

    def step(self, x: np.ndarray, y: float) -> float: ...

    def sizes(self) -> tuple[int, int] | None:
        """``(stored points, dictionary size)`` for kernel learners, else None."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Method:
    key: str
    label: str
    group: str  # "kons", "river" or "vw"
    build: Callable[[Context, dict[str, Any]], Runner]
    grid: tuple[dict[str, Any], ...] = ({},)
    kernel: bool = False
    #: Longest stream the method is run on (exact KONS needs O(t^2) memory); None = no limit.
    max_rows: int | None = None

    @property
    def online_peer(self) -> bool:
        return self.group != "kons"


def product_grid(axes: dict[str, Sequence[Any]]) -> tuple[dict[str, Any], ...]:
    """``{}`` (the default: every axis at its first value) then the rest of the product, in order."""
    combos = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]
    grid = ({}, *combos[1:])
    if len(grid) != GRID_SIZE:
        raise ValueError(f"grid of {len(grid)} configurations, expected {GRID_SIZE}")
    return grid


# ---------------------------------------------------------------------------------------------- kons
class KonsRunner:
    def __init__(self, learner: kons.Learner, kernel: bool) -> None:
        self.learner = learner
        self.kernel = kernel

    def step(self, x: np.ndarray, y: float) -> float:
        return self.learner.learn_one(x, y)  # predict-then-learn: returns the clipped play

    def sizes(self) -> tuple[int, int] | None:
        if not self.kernel:
            return None
        stats = self.learner.stats()
        return int(stats["stored_points"]), int(stats["dictionary_size"])

    def close(self) -> None:
        pass


_KERNEL_AXES: dict[str, Sequence[Any]] = {"gamma_mult": (1.0, 0.25, 4.0), "eta_mult": (1.0, 10.0, 100.0)}


def _kernel_newton(
    cls: Callable[..., kons.Learner], **fixed: Any
) -> Callable[[Context, dict[str, Any]], Runner]:
    def build(ctx: Context, p: dict[str, Any]) -> Runner:
        eta = get_loss(ctx.loss).curvature(ctx.bound) * p.get("eta_mult", 1.0)
        learner = cls(kernel=RBF(gamma=ctx.rbf_gamma * p.get("gamma_mult", 1.0)), loss=ctx.loss,
                      alpha=1.0, eta=eta, C=ctx.bound, **fixed)
        return KonsRunner(learner, kernel=True)

    return build


def _kernel_ogd(ctx: Context, p: dict[str, Any]) -> Runner:
    learner = kons.KernelOGD(kernel=RBF(gamma=ctx.rbf_gamma * p.get("gamma_mult", 1.0)), loss=ctx.loss,
                             eta=p.get("eta", 0.5), C=ctx.bound)
    return KonsRunner(learner, kernel=True)


def _defaults(cls: type[kons.Learner]) -> dict[str, Any]:
    return {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items()
            if name != "self"}


def _linear_axes(cls: type[kons.Learner]) -> dict[str, Sequence[Any]]:
    """Tuning axes of a linear kons learner read from its signature: eta and alpha multipliers."""
    defaults = _defaults(cls)
    # eta=None means the curvature default (second order), which is conservative: try larger steps.
    eta_mults = (1.0, 10.0, 100.0) if defaults.get("eta", 0) is None else (1.0, 0.1, 10.0)
    axes: dict[str, Sequence[Any]] = {}
    if "eta" in defaults:
        axes["eta_mult"] = eta_mults
    if "alpha" in defaults:
        axes["alpha_mult"] = (1.0, 0.1, 10.0)
    if len(axes) == 1:  # one axis: nine values along it
        (name,) = axes
        axes = {name: (*axes[name], 3.0, 30.0, 0.3, 300.0, 0.03, 1000.0)}
    elif not axes:
        axes = {"C_mult": (1.0, 0.5, 2.0, 0.75, 1.5, 3.0, 0.25, 4.0, 6.0)}
    return axes


def _linear(name: str) -> Callable[[Context, dict[str, Any]], Runner]:
    def build(ctx: Context, p: dict[str, Any]) -> Runner:
        cls = kons.LEARNERS[name]
        defaults = _defaults(cls)
        C = ctx.bound * p.get("C_mult", 1.0)
        args: dict[str, Any] = {"loss": ctx.loss, "C": C}
        if "seed" in defaults:
            args["seed"] = 0
        if "eta" in defaults:
            base = defaults["eta"] if defaults["eta"] is not None else get_loss(ctx.loss).curvature(C)
            args["eta"] = base * p.get("eta_mult", 1.0)
        if "alpha" in defaults and defaults["alpha"] is not None:
            args["alpha"] = defaults["alpha"] * p.get("alpha_mult", 1.0)
        return KonsRunner(cls(**{k: v for k, v in args.items() if k in defaults}), kernel=False)

    return build


#: Linear kons learners, included when the installed kons registers them.
LINEAR_LEARNERS = {"ons": "ONS", "fd_son": "FD-SON", "rp_son": "RP-SON", "oja_son": "Oja-SON",
                   "adagrad": "AdaGrad", "ogd": "OGD"}


# ---------------------------------------------------------------------------------------------- River
class RiverRunner:
    def __init__(self, model: Any, regression: bool) -> None:
        self.model = model
        self.regression = regression

    def step(self, x: np.ndarray, y: float) -> float:
        xd = dict(enumerate(x.tolist()))
        if self.regression:
            pred = self.model.predict_one(xd)  # None from a model that has learnt nothing (River's AMF)
            self.model.learn_one(xd, y)
            return 0.0 if pred is None else float(pred)
        proba = self.model.predict_proba_one(xd)
        self.model.learn_one(xd, y > 0)
        return float(proba.get(True, 0.0) - proba.get(False, 0.0))  # sign = predicted class

    def sizes(self) -> tuple[int, int] | None:
        return None

    def close(self) -> None:
        pass


def _river_linear(ctx: Context, p: dict[str, Any]) -> Runner:
    from river import linear_model, optim

    cls = linear_model.LinearRegression if ctx.regression else linear_model.LogisticRegression
    if not p:
        return RiverRunner(cls(), ctx.regression)
    optimizer = {"sgd": optim.SGD, "adagrad": optim.AdaGrad, "adam": optim.Adam}[p["optimizer"]]
    return RiverRunner(cls(optimizer=optimizer(p["lr"])), ctx.regression)


def _river_knn(ctx: Context, p: dict[str, Any]) -> Runner:
    from river import neighbors

    cls = neighbors.KNNRegressor if ctx.regression else neighbors.KNNClassifier
    # The default engine is SWINN with seed=None; seed it (and nothing else) so runs repeat.
    engine = neighbors.SWINN(maxlen=p.get("maxlen", 1000), seed=0)
    return RiverRunner(cls(n_neighbors=p.get("n_neighbors", 5), engine=engine), ctx.regression)


def _river_hat(ctx: Context, p: dict[str, Any]) -> Runner:
    from river import tree

    cls = tree.HoeffdingAdaptiveTreeRegressor if ctx.regression else tree.HoeffdingAdaptiveTreeClassifier
    if not p:
        return RiverRunner(cls(seed=0), ctx.regression)
    leaf = p["leaf"][0 if ctx.regression else 1]
    return RiverRunner(cls(grace_period=p["grace_period"], leaf_prediction=leaf, seed=0), ctx.regression)


def _river_arf(ctx: Context, p: dict[str, Any]) -> Runner:
    from river import forest

    cls = forest.ARFRegressor if ctx.regression else forest.ARFClassifier
    if not p:
        return RiverRunner(cls(seed=0), ctx.regression)
    return RiverRunner(cls(grace_period=p["grace_period"], max_features=p["max_features"], seed=0),
                       ctx.regression)


# ---------------------------------------------------------------------------------------------- VW
class VWRunner:
    """Vowpal Wabbit through its Python package: one namespace ``f`` holding ``f0:v0 f1:v1 ...``."""

    def __init__(self, args: str, regression: bool) -> None:
        import vowpalwabbit

        loss = "" if regression else " --loss_function logistic"
        self.args = f"--quiet{loss} {args}".strip()
        self.vw = vowpalwabbit.Workspace(self.args)
        self.regression = regression

    def step(self, x: np.ndarray, y: float) -> float:
        feats = " ".join(f"f{j}:{v!r}" for j, v in enumerate(x.tolist()))
        label = repr(float(y)) if self.regression else ("1" if y > 0 else "-1")
        example = self.vw.parse(f"{label} |f {feats}")
        pred = self.vw.predict(example)
        self.vw.learn(example)
        self.vw.finish_example(example)
        return float(pred)

    def sizes(self) -> tuple[int, int] | None:
        return None

    def close(self) -> None:
        self.vw.finish()


def _vw(ctx: Context, p: dict[str, Any]) -> Runner:
    args = "" if not p else f"-l {p['l']} {p['extra']}"
    return VWRunner(args, ctx.regression)


def _vw_oja(ctx: Context, p: dict[str, Any]) -> Runner:
    args = "--OjaNewton" if not p else f"--OjaNewton --sketch_size {p['sketch_size']} --alpha {p['alpha']}"
    return VWRunner(args, ctx.regression)


# ---------------------------------------------------------------------------------------------- registry
def _methods() -> list[Method]:
    kernel_grid = product_grid(_KERNEL_AXES)
    found = [
        Method("kons", "KONS", "kons", _kernel_newton(kons.KONS), kernel_grid, kernel=True,
               max_rows=KONS_MAX_ROWS),
        *(Method(f"skons{floor:g}", f"SketchedKONS gamma={floor:g}", "kons",
                 _kernel_newton(kons.SketchedKONS, gamma=floor, seed=0), kernel_grid, kernel=True)
          for floor in (0.0, 0.1, 0.3)),
        Method("kernel_ogd", "KernelOGD", "kons", _kernel_ogd,
               product_grid({"gamma_mult": (1.0, 0.25, 4.0), "eta": (0.5, 0.1, 2.0)}), kernel=True),
        *(Method(name, label, "kons", _linear(name), product_grid(_linear_axes(kons.LEARNERS[name])))
          for name, label in LINEAR_LEARNERS.items() if name in kons.LEARNERS),
        Method("river_linear", "River Linear/LogisticRegression", "river", _river_linear,
               product_grid({"optimizer": ("sgd", "adagrad", "adam"), "lr": (0.01, 0.001, 0.1)})),
        Method("river_knn", "River KNN", "river", _river_knn,
               product_grid({"n_neighbors": (5, 10, 20), "maxlen": (1000, 500, 2000)})),
        Method("river_hat", "River HoeffdingAdaptiveTree", "river", _river_hat,
               product_grid({"grace_period": (200, 50, 500),
                             "leaf": (("adaptive", "nba"), ("mean", "mc"), ("model", "nb"))})),
        Method("river_arf", "River ARF", "river", _river_arf,
               product_grid({"grace_period": (50, 25, 200), "max_features": ("sqrt", 0.5, None)})),
        Method("vw", "VW", "vw", _vw,
               product_grid({"l": (0.5, 0.1, 2.0), "extra": ("", "-q ff", "--power_t 0")})),
        Method("vw_oja", "VW --OjaNewton", "vw", _vw_oja,
               product_grid({"sketch_size": (10, 5, 20), "alpha": (1.0, 0.1, 10.0)})),
    ]
    return found


METHODS: dict[str, Method] = {m.key: m for m in _methods()}
#: Selection shortcuts for ``--methods``.
GROUPS = {"all": list(METHODS), "kons": [k for k, m in METHODS.items() if m.group == "kons"],
          "peers": [k for k, m in METHODS.items() if m.online_peer],
          "river": [k for k, m in METHODS.items() if m.group == "river"],
          "vw": [k for k, m in METHODS.items() if m.group == "vw"]}
_EXTRAS = {"river": "river", "vw": "vowpalwabbit"}


def missing_extras(methods: Sequence[Method]) -> dict[str, str]:
    """Method key -> the optional package it needs and that is not installed."""
    out = {}
    for m in methods:
        package = _EXTRAS.get(m.group)
        if package and importlib.util.find_spec(package) is None:
            out[m.key] = package
    return out


def select_methods(spec: str) -> list[Method]:
    """Methods named by a comma list of keys and group names (``all``, ``kons``, ``peers``, ...)."""
    keys: list[str] = []
    for token in (t.strip() for t in spec.split(",") if t.strip()):
        if token in GROUPS:
            keys.extend(GROUPS[token])
        elif token in METHODS:
            keys.append(token)
        else:
            raise SystemExit(f"unknown method {token!r}; choose from {sorted(GROUPS)} or {sorted(METHODS)}")
    return [METHODS[k] for k in dict.fromkeys(keys)]
