-- Helpers START and FINISH share (the loader puts this file before theirs). Records are
-- pydantic JSON: a record's top-level status and counters are read with a pattern on their
-- first occurrence, and written back as JSON that Python built.
local function status_of(doc)
  return string.match(doc, '"status":"(%a+)"')
end
local terminal = {succeeded = true, failed = true, skipped = true, cancelled = true}
local function exclusive(lock)
  local holder = redis.call('get', lock)
  return holder and string.sub(holder, 1, 2) == 'x:'
end
-- Replace the first match of ``pattern`` by the literal ``new`` (gsub would read ``%`` in it).
local function replace(doc, pattern, new)
  local s, e = string.find(doc, pattern)
  return string.sub(doc, 1, s - 1) .. new .. string.sub(doc, e + 1)
end
local function with_status(doc, new)
  return replace(doc, '"status":"%a+"', '"status":"' .. new .. '"')
end
