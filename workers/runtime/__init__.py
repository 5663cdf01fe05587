"""Running a graph: the scheduler and its transitions, the planner, the executor every actor
runs, op contexts and deferred outputs, result keys, recovery and agent-answered refines.

Store- and broker-neutral: the back ends (:mod:`genloop.workers.backends`) and the Redis pool
(:mod:`genloop.workers.pool`) put these parts together.
"""
