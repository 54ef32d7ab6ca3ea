"""The kernel learners: KONS, Sketched-KONS (with its KORS sampler), NystromKONS and kernel OGD.

KONS and Sketched-KONS share the dual-form Online Newton Step of :mod:`kons.kernel._newton`; they differ
only in which rounds enter the second-order matrix (``docs/kons-math.md``).
"""

from kons.kernel.kernel_ogd import KernelOGD
from kons.kernel.kons import KONS
from kons.kernel.kors import KORS
from kons.kernel.nystrom_kons import NystromKONS
from kons.kernel.sketched_kons import SketchedKONS

__all__ = ["KONS", "KORS", "KernelOGD", "NystromKONS", "SketchedKONS"]
