-- KEYS: run lock. ARGV: lock token, JSON list of commands (``_release key owner`` drops a
-- lease if ``owner`` holds it). Applies a run transaction's writes and drops its lock, only if
-- the lock is still the caller's; returns 1, or 0 when the lock was lost (nothing written).
-- Keys are named in ARGV, so this store does not run on Redis Cluster.
-- Runs after apply.lua (the loader puts it first).
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
apply(ARGV[2])
redis.call('del', KEYS[1])
return 1
