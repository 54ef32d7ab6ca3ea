"""Cost on stationary data of mixing a River Hoeffding tree into auto's predictions (fixed share)."""
import sys, math, numpy as np, kons
from kons.datasets import load_dataset
from river import tree
for name in sys.argv[1].split(","):
    data = load_dataset(name, 5000, standardize=False)
    X, y = data.X, data.y; n = len(y); reg = data.task == "regression"
    auto = kons.Auto(task="regression" if reg else "classification")
    ht = tree.HoeffdingTreeRegressor() if reg else tree.HoeffdingTreeClassifier()
    A = np.zeros(n); H = np.zeros(n)
    for i in range(n):
        d = dict(enumerate(X[i].tolist()))
        if reg:
            A[i] = auto.learn_one(X[i], float(y[i])); H[i] = ht.predict_one(d); ht.learn_one(d, float(y[i]))
        else:
            A[i] = auto.predict_proba_one(X[i]) if i else 0.5; auto.learn_one(X[i], float(y[i]))
            pr = ht.predict_proba_one(d); H[i] = pr.get(True, 0.5) if pr else 0.5; ht.learn_one(d, bool(y[i] > 0))
    np.savez(f"/tmp/dbg/stat_{name}.npz", A=A, H=H, y=y, reg=reg)
    print(name, "saved", flush=True)
