-- apply(commands): run a transaction's buffered writes (a JSON list of commands; the
-- ``_release key owner`` command drops a lease if ``owner`` holds it). COMMIT and CREATE
-- run after it.
local function apply(commands)
  for _, c in ipairs(cjson.decode(commands)) do
    if c[1] == '_release' then
      if redis.call('get', c[2]) == c[3] then redis.call('del', c[2]) end
    else
      redis.call(unpack(c))
    end
  end
end
