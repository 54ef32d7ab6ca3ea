"""Per-round cost and state size of auto with and without the trees (this branch), on one stream."""
import sys, time, numpy as np, kons, kons._grid as g
from benchmarks import drift
from kons.datasets import load_dataset
name = sys.argv[1]
if name in drift.STREAMS:
    X, y = drift.STREAMS[name].build()
else:
    d = load_dataset(name, 4000, standardize=False); X, y = d.X, d.y
def run(trees: bool):
    saved = g.TREE_MAX_DIM
    g.TREE_MAX_DIM = saved if trees else -1
    a = kons.Auto(task="classification")
    t0 = time.perf_counter()
    for i in range(len(y)):
        a.learn_one(X[i], float(y[i]))
    secs = time.perf_counter() - t0
    g.TREE_MAX_DIM = saved
    return secs / len(y) * 1e3, a.stats().get("state_nbytes", None), a
for rep in range(2):
    on, _, a_on = run(True); off, _, a_off = run(False)
    print(f"{name} round ms with trees {on:.3f}, without {off:.3f}, ratio {on / off:.2f}")
for label, a in (("with", a_on), ("without", a_off)):
    print(label, "state_nbytes", a.state_nbytes(), "to_bytes", len(a.to_bytes()))
