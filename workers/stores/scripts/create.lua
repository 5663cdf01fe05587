-- KEYS: the idempotency key's key, or none. ARGV: run id, JSON list of commands (as COMMIT's).
-- Writes a new run unless the idempotency key names a run already; returns the id of the run
-- that holds the key (this one when it was written).
-- Runs after apply.lua (the loader puts it first).
if KEYS[1] then
  local existing = redis.call('get', KEYS[1])
  if existing then return existing end
  redis.call('set', KEYS[1], ARGV[1])
end
apply(ARGV[2])
return ARGV[1]
