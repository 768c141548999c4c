---------------------------------------------------------------------------------------------
-- broadcast: one stream, one consumer group per subscription

local function streamIdLess(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end

-- KEYS: a broadcast stream. Deletes the entries every subscription (consumer group) is done
-- with: those older than the oldest entry a group still has pending or has not read yet.
-- Returns how many were deleted.
-- @wire glidemq_bcTrim keys=1 args=0
redis.register_function('glidemq_bcTrim', function(keys, args)
  local err = shape('glidemq_bcTrim', keys, args, 1, 0, 0)
  if err then return err end
  local stream = keys[1]
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', stream)
  if not ok or #groups == 0 then return 0 end
  local floor
  for _, g in ipairs(groups) do
    local name, pending, keep
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1]
      elseif g[i] == 'pending' then pending = tonumber(g[i + 1])
      elseif g[i] == 'last-delivered-id' then keep = g[i + 1] end
    end
    -- the group needs the entries after its last delivered one, and those it has pending
    local ms, seq = string.match(keep, '^(%d+)-(%d+)$')
    keep = ms .. '-' .. (tonumber(seq) + 1)
    if pending and pending > 0 then
      local p = redis.call('XPENDING', stream, name)
      if p[2] and streamIdLess(p[2], keep) then keep = p[2] end
    end
    if floor == nil or streamIdLess(keep, floor) then floor = keep end
  end
  if floor == nil then return 0 end
  return redis.call('XTRIM', stream, 'MINID', floor)
end)
