"""benchmarks.drift / benchmarks.quality with the error detector's threshold and the kept rounds patched."""
import os, sys
import kons._grid as g, kons._tracking as tr
threshold, kept = float(os.environ["V_THRESHOLD"]), int(os.environ["V_KEPT"])
class Detector(tr.ErrorChangeDetector):
    def __init__(self, **kw):
        kw.setdefault("threshold", threshold); super().__init__(**kw)
g.ErrorChangeDetector = Detector
g.REPLAY_ROWS = kept
module = sys.argv[1]
import importlib
sys.exit(importlib.import_module(module).main(sys.argv[2:]))
