"""Benchmarks of kons against the online learners people use today (River, Vowpal Wabbit, scikit-learn).

The peers are optional: ``pip install '.[bench]'``. Run ``python -m benchmarks.quality --help``.
"""
