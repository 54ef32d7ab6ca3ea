"""The kons service: a FastAPI app hosting kons learners per tenant, durable in Redis (see ``app.main``)."""
