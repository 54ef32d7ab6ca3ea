"""The service core: the learners of every tenant, their durable write protocol, snapshots, history,
budgets and fairness.

It raises its own errors (:mod:`kons_service.core.errors`) and imports neither FastAPI nor Starlette:
:mod:`kons_service.http` is the edge that calls it and answers for it over HTTP.
"""
