"""The HTTP edge: the app factory, routers, request and response schemas, body reading, authentication,
the OpenAPI pages, and the one table that maps the core's errors to HTTP answers
(:mod:`kons_service.http.errors`).

This ``__init__`` imports nothing, so that :mod:`kons_service.client` uses the schemas without FastAPI.
"""
