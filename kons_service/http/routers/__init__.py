"""HTTP routers: thin handlers that parse a schema, call the service and shape the answer."""
