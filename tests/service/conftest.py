"""The service tests' fixtures (``redis_server``, ``redis_url``, ``make_client``, ``client``) are in
``tests/conftest.py``, shared with ``tests/reliability``; process helpers in :mod:`testkit.processes`."""
