import sys, numpy as np
from benchmarks import drift
from river import tree
name = sys.argv[1]
X, y = drift.STREAMS[name].build(); n = len(y)
P = np.load(f"/tmp/dbg/{name}_P.npy"); Y = (y > 0).astype(int)
restarts = [int(v) for v in sys.argv[2].split(",")] if len(sys.argv) > 2 else []
fresh = tree.HoeffdingTreeClassifier(); F = np.zeros(n)
for i in range(n):
    if i in restarts: fresh = tree.HoeffdingTreeClassifier()
    d = {f"f{j}": float(v) for j, v in enumerate(X[i])}
    pr = fresh.predict_proba_one(d); F[i] = pr.get(1, 0.5) if pr else 0.5
    fresh.learn_one(d, int(Y[i]))
P = np.column_stack([P, F]); names = ["auto", "ht", "hat", "arf", "ht_fresh"]
spans = drift.windows(drift.STREAMS[name], n)
def report(label, p):
    err = (p > 0.5) != (Y == 1)
    print(f"{label:34s} {err.mean():.4f} " + " ".join(f"{err[a:b].mean():.4f}" for a, b in spans))
for k, nm in enumerate(names): report(nm, P[:, k])
def mix(cols, alpha):
    Q = np.clip(P[:, cols], 1e-6, 1 - 1e-6); w = np.ones(len(cols)) / len(cols); out = np.zeros(n)
    for i in range(n):
        out[i] = w @ Q[i]; lik = np.where(Y[i] == 1, Q[i], 1 - Q[i]); w = w * lik; w /= w.sum()
        w = (1 - alpha) * w + alpha / len(cols)
    return out
for cols in ([0, 1], [0, 4], [0, 1, 4], [0, 1, 2]):
    for alpha in (0.0, 0.01, 0.05):
        report(f"mix {'+'.join(names[c] for c in cols)} a={alpha}", mix(cols, alpha))
