"""Our VFDT in place of River's HT: its probabilities on a drift stream or a stationary classification set,
saved beside the River tree's for mixgrid.py (column 4 of the drift arrays, ``V`` in the stationary ones)."""
import sys, numpy as np
sys.path.insert(0, "experiments/tree_mix")
from vfdt import VFDT
import os
if os.environ.get("KTREE"):  # the kons module in place of the experiment's
    from kons._tree import HoeffdingTree
    class VFDT(HoeffdingTree):  # noqa: N801
        def learn(self, x, label): super().learn(x, label)
name = sys.argv[1]
if name in ("agrawal_recurring", "sea_abrupt", "rbf_gradual"):
    from benchmarks import drift
    X, y = drift.STREAMS[name].build()
else:
    from kons.datasets import load_dataset
    d = load_dataset(name, 5000, standardize=False); X, y = d.X, d.y
X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=float)
grace = int(sys.argv[2]) if len(sys.argv) > 2 else 200
tree = VFDT(X.shape[1], 2, grace=grace)
V = np.zeros(len(y))
for i in range(len(y)):
    V[i] = tree.predict_proba(X[i])[1]
    tree.learn(X[i], int(y[i] > 0))
np.save(f"/tmp/dbg/vfdt_{name}" + ("" if grace == 200 else f"_g{grace}") + ".npy", V)
print(name, "leaves", tree.leaves, "error alone", float(np.mean(np.where(V > 0.5, 1, -1) != y)))
