"""genloop's Prometheus metrics (:mod:`.prometheus`: one object owns them, on a registry of its
own) and the tap that counts them from the events the state store commits (:mod:`.tap`).
Read by the engine, the runtime, the middleware, the pool and the gateway alike."""
