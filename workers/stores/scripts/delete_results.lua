-- KEYS: results kept until. ARGV: now, result key prefix, result keys...
-- Deletes each result still due (not reused since it was listed); returns how many went.
local gone = 0
for i = 3, #ARGV do
  local at = redis.call('zscore', KEYS[1], ARGV[i])
  if at and tonumber(at) <= tonumber(ARGV[1]) then
    redis.call('zrem', KEYS[1], ARGV[i])
    gone = gone + redis.call('del', ARGV[2] .. ARGV[i])
  end
end
return gone
