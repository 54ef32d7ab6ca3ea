"""Would a tree base close auto's gap to ARF on Agrawal? Mix auto's and a River tree's probabilities
with a fixed-share Bayes mixture (log loss) and score the error overall and by window."""
import math, sys, numpy as np
import kons
from benchmarks import drift
from river import tree, forest

X, y = drift.STREAMS[sys.argv[1] if len(sys.argv) > 1 else "agrawal_recurring"].build()
n = len(y)
names = ["auto", "ht", "hat", "arf"]
models = {"ht": tree.HoeffdingTreeClassifier(), "hat": tree.HoeffdingAdaptiveTreeClassifier(seed=0),
          "arf": forest.ARFClassifier(seed=0)}
auto = kons.Auto(task="classification")
P = np.zeros((n, 4))
for i in range(n):
    x = X[i]; t = int(y[i] > 0)
    P[i, 0] = auto.predict_proba_one(x) if i else 0.5
    auto.learn_one(x, float(y[i]))
    d = {f"f{j}": float(v) for j, v in enumerate(x)}
    for k, name in enumerate(names[1:], 1):
        pr = models[name].predict_proba_one(d)
        P[i, k] = pr.get(1, pr.get(True, 0.5)) if pr else 0.5
        models[name].learn_one(d, t)
Y = (y > 0).astype(int)
np.save(f"/tmp/dbg/{sys.argv[1]}_P.npy", P)
spans = [(1000, 2000), (2000, 3000), (3000, 4000)]
def report(label, p):
    err = (p > 0.5) != (Y == 1)
    print(f"{label:28s} {err.mean():.4f} " + " ".join(f"{err[a:b].mean():.4f}" for a, b in spans))
for k, name in enumerate(names):
    report(name, P[:, k])
def mix(cols, alpha):
    Q = np.clip(P[:, cols], 1e-6, 1 - 1e-6); w = np.ones(len(cols)) / len(cols); out = np.zeros(n)
    for i in range(n):
        out[i] = w @ Q[i]
        lik = np.where(Y[i] == 1, Q[i], 1 - Q[i]); w = w * lik; w /= w.sum()
        w = (1 - alpha) * w + alpha / len(cols)
    return out
for cols in ([0, 1], [0, 2], [0, 1, 2]):
    for alpha in (0.0, 0.01, 0.05):
        report(f"mix {'+'.join(names[c] for c in cols)} a={alpha}", mix(cols, alpha))
