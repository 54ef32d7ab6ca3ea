"""The FastAPI application uvicorn serves, built by :func:`kons_service.http.app.create_app`.

    uvicorn kons_service.main:app          # settings from KONS_* variables
    python -m kons_service                 # the same, with host/port/workers from the settings
"""

from __future__ import annotations

from kons_service.http.app import create_app

__all__ = ["app", "create_app"]

app = create_app()
