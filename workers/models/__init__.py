"""What a worker process loads and serves: the operator's models config, model folders and their
identities, weight fingerprints, the engine's capability map, thread budgets, and the long-lived
resources (models, evaluators, the in-memory image cache) shared by its threads."""
