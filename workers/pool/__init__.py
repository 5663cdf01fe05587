"""The Redis worker pool: the Dramatiq broker and its wiring, worker processes, fair queuing and
model-aware routing in front of Dramatiq's queues, and the pool's status."""
