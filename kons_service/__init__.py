"""The kons service: a FastAPI app hosting named kons learners for many tenants (``kons_service.main``)."""
