"""Auto's prediction and a Hoeffding tree's, mixed as auto mixes its own experts: fixed-share mixtures at the
switching rates (0, 0.01, 0.1), themselves in a Bayes mixture; the tree enters with prior `prior`."""
import os, sys, glob, numpy as np
RATES = (0.0, 0.01, 0.1)
def mixgrid(A, H, y, reg, prior, wake=0):
    """``H``: one tree's plays, or several (columns) sharing the prior."""
    H = H.reshape(len(y), -1); k = H.shape[1]
    n = len(y); Q = np.column_stack([A, H]); base = np.array([1 - prior] + [prior / k] * k)
    start = np.array([1.0] + [0.0] * k)
    inner = np.tile(base if wake == 0 else start, (len(RATES), 1)); louter = np.zeros(len(RATES)); out = np.zeros(n)
    lo = hi = None; s1 = s2 = 0.0
    for i in range(n):
        if i == wake and wake:
            inner = np.tile(base, (len(RATES), 1))
        q = Q[i].copy()
        q = (np.clip(q, lo, hi) if lo is not None else q) if reg else np.clip(q, 1e-6, 1 - 1e-6)
        preds = inner @ q; outer = np.exp(louter - louter.max()); outer /= outer.sum(); out[i] = outer @ preds
        if reg:
            lo = y[i] if lo is None else min(lo, y[i]); hi = y[i] if hi is None else max(hi, y[i])
            s1 += y[i]; s2 += y[i] ** 2
            var = max(s2 / (i + 1) - (s1 / (i + 1)) ** 2, 1e-12) if i else max(y[i] ** 2, 1e-12)
            loglike = lambda p: -0.5 / var * (p - y[i]) ** 2
        else:
            loglike = lambda p: np.log(p if y[i] > 0 else 1 - p)
        louter = louter + loglike(preds)
        lw = np.log(np.maximum(inner, 1e-300)) + loglike(q)
        inner = np.exp(lw - lw.max(axis=1, keepdims=True)); inner /= inner.sum(axis=1, keepdims=True)
        target = base if i >= wake else start
        for r, a in enumerate(RATES): inner[r] = (1 - a) * inner[r] + a * target
    return out
def metric(p, y, reg, spans=None):
    if reg: m = lambda a, b: float(np.mean((p[a:b] - y[a:b]) ** 2) / np.var(y))
    else: m = lambda a, b: float(np.mean(np.where(p[a:b] > 0.5, 1, -1) != y[a:b]))
    return m(0, len(y)), [m(a, b) for a, b in (spans or [])]
if sys.argv[1] == "stat":
    for f in sorted(glob.glob("/tmp/dbg/stat_*.npz")):
        d = np.load(f); A, H, y, reg = d["A"], d["H"], d["y"], bool(d["reg"])
        if os.environ.get("TREE") == "vfdt":  # our tree in place of River's (classification only)
            if reg:
                continue
            H = np.load(f"/tmp/dbg/vfdt_{f[14:-4]}.npy")
        if os.environ.get("TREE") == "vfdt3":
            if reg:
                continue
            H = np.column_stack([np.load(f"/tmp/dbg/vfdt_{f[14:-4]}{g}.npy") for g in ("_g50", "", "_g400")])
        a = metric(A, y, reg)[0]; row = [f"{f[14:-4]:14s} auto {a:.5f}"]
        for prior, wake in ((0.05, 0), (0.01, 0), (0.05, 200), (0.01, 200)):
            m = metric(mixgrid(A, H, y, reg, prior, wake), y, reg)[0]; row.append(f"{prior}/{wake}: {100 * (m / a - 1):+.2f}%")
        print("  ".join(row))
else:
    from benchmarks import drift
    name = sys.argv[1]; s = drift.STREAMS[name]; X, y = s.build(); P = np.load(f"/tmp/dbg/{name}_P.npy")
    if os.environ.get("TREE") == "vfdt":
        P[:, 1] = np.load(f"/tmp/dbg/vfdt_{name}.npy")
    if os.environ.get("TREE") == "vfdt3":  # three trees, grace 50, 200, 400
        trees = np.column_stack([np.load(f"/tmp/dbg/vfdt_{name}{g}.npy") for g in ("_g50", "", "_g400")])
        for prior, wake in ((0.01, 200), (0.03, 200)):
            o, w = metric(mixgrid(P[:, 0], trees, y, False, prior, wake), y, False, drift.windows(s, len(y)))
            print(f"grid auto+3 trees {prior}/{wake:<4} {o:.4f} " + " ".join(f"{v:.4f}" for v in w))
        sys.exit(0)
    spans = drift.windows(s, len(y)); reg = False
    for label, p in (("auto", P[:, 0]), ("ht", P[:, 1]), ("arf", P[:, 3])):
        o, w = metric(p, y, reg, spans); print(f"{label:20s} {o:.4f} " + " ".join(f"{v:.4f}" for v in w))
    for prior, wake in ((0.05, 0), (0.01, 0), (0.05, 200), (0.01, 200)):
        o, w = metric(mixgrid(P[:, 0], P[:, 1], y, reg, prior, wake), y, reg, spans)
        print(f"grid auto+ht {prior}/{wake:<4} {o:.4f} " + " ".join(f"{v:.4f}" for v in w))
