"""Development kit shared by ``tests/`` and ``benchmarks/``; not part of the installed package.

* :mod:`testkit.processes`: real ``redis-server`` and ``python -m kons_service`` processes, in-process
  apps, and a proxy that loses Redis replies;
* :mod:`testkit.scenarios`: the reliability scenarios (feedback storms through crashes, Redis faults and
  replicas; a bounded soak) and the audit of what a storm acknowledged.

It lives at the top of the checkout, next to ``kons/`` and ``kons_service/``; the wheel holds only
those two (``[tool.setuptools.packages.find]`` in ``pyproject.toml``), and pytest finds this package
through ``pythonpath = ["."]``.
"""
