"""HTTP routers: thin handlers that parse a schema, call the service and shape the answer."""

#: The prefix of the service's own API, version 1 (``/v2`` is KServe's inference protocol, :mod:`.v2`).
V1 = "/v1"
