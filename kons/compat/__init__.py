"""Adapters that let kons learners run inside other libraries' APIs.

* :mod:`kons.compat.river`: River ``Regressor``/``Classifier`` on dict features (``pip install river``).
* :mod:`kons.compat.sklearn`: scikit-learn estimators with ``partial_fit`` (``pip install scikit-learn``).

Each adapter imports its library itself, so neither is a dependency of :mod:`kons`.
"""
