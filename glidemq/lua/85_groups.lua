---------------------------------------------------------------------------------------------
-- groups at run time: pause and resume one group, change its limits, list groups

local GROUP_SETTINGS = {paused = true, resumed = true, concurrency = true, rate = true,
  maxSize = true}

-- Hands out what a group may run now that it runs again or has more room: the next job of an
-- ordering key, the next turns of a fair group, free slots of a concurrency group.
local function groupWakes(prefix, k, now)
  local gk = prefix .. 'group:' .. k
  local g = redis.call('HMGET', gk, 'maxConcurrency', 'active', 'weight', 'nextSeq', 'paused')
  if g[5] == '1' then return end
  if redis.call('HEXISTS', prefix .. 'ordering', k) == 1 then
    local gq = prefix .. 'groupq:' .. k
    local nextSeq = tonumber(g[4]) or 1
    local ids = redis.call('ZRANGEBYSCORE', gq, nextSeq, nextSeq, 'LIMIT', 0, 1)
    if ids[1] then wakeParked(prefix, k, ids[1], false, now) end
  elseif g[3] then
    fairPump(prefix, k, now)
  else
    local max, active = tonumber(g[1]) or 1, tonumber(g[2]) or 0
    if active < max then fillSlots(prefix, k, gk, max, active, now) end
  end
end

-- KEYS: meta, events. ARGS: now, group key, setting, value, value2.
--   paused / resumed          the group's jobs stop starting / start again (value unused)
--   concurrency n | ''        at most n of its jobs run at once, whatever adds say ('': adds
--                             set it again); not for an ordering key (ERR:ORDERING_KEY)
--   rate max duration | ''    at most max of its jobs start per duration ms ('': no limit,
--                             and adds set it again)
--   maxSize n | ''            adds past n jobs of it not started yet are refused (KEY_FULL)
-- Returns 1. Events: groupPaused / groupResumed (jobId is the group key).
-- @wire glidemq_setGroup keys=2 args=3..5
redis.register_function('glidemq_setGroup', function(keys, args)
  local err = shape('glidemq_setGroup', keys, args, 2, 3, 5)
  if err then return err end
  local prefix = prefixOf(keys[1], 'meta')
  local now, k, what = int(args[1], 0, MAX_TIME), args[2], args[3]
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_setGroup', 'now') end
  if k == '' or #k > 1024 then return badCall('ERR:BAD_ARGS', 'glidemq_setGroup', 'group key') end
  if not GROUP_SETTINGS[what] then return badCall('ERR:BAD_ARGS', 'glidemq_setGroup', 'setting') end
  local gk = prefix .. 'group:' .. k
  local v, v2 = args[4] or '', args[5] or ''
  local n, n2
  if v ~= '' then n = int(v, 1, UNLIMITED) end
  if v2 ~= '' then n2 = int(v2, 1, MAX_INT) end
  if v ~= '' and not n or v2 ~= '' and not n2 or what == 'rate' and (n == nil) ~= (n2 == nil) then
    return badCall('ERR:BAD_ARGS', 'glidemq_setGroup', 'value')
  end
  if what == 'paused' then
    redis.call('HSET', gk, 'paused', '1')
    emit(keys[2], 'groupPaused', k)
  elseif what == 'resumed' then
    redis.call('HDEL', gk, 'paused')
    emit(keys[2], 'groupResumed', k)
  elseif what == 'concurrency' then
    if redis.call('HEXISTS', prefix .. 'ordering', k) == 1 then return 'ERR:ORDERING_KEY' end
    if n then
      redis.call('HSET', gk, 'maxConcurrency', n, 'pinConcurrency', '1')
    else
      redis.call('HDEL', gk, 'pinConcurrency')
    end
  elseif what == 'rate' then
    redis.call('HDEL', gk, 'rateWindowStart', 'rateCount')
    if n then
      redis.call('HSET', gk, 'rateMax', n, 'rateDuration', n2, 'pinRate', '1')
    else
      redis.call('HDEL', gk, 'rateMax', 'rateDuration', 'pinRate')
      redis.call('DEL', prefix .. 'grouprate:' .. k)
    end
  elseif n then
    redis.call('HSET', gk, 'maxSize', n)
  else
    redis.call('HDEL', gk, 'maxSize')
  end
  redis.call('SADD', prefix .. 'groups', k)
  groupWakes(prefix, k, now)
  return 1
end)

local GROUP_FIELDS = {'waiting', 'active', 'maxConcurrency', 'paused', 'rateMax', 'rateDuration',
  'weight', 'maxSize', 'tbCapacity', 'tbRefillRate', 'tbTokens'}

-- One group as a flat row: key, the GROUP_FIELDS values ('' when unset), parked (jobs in its
-- wait set), ordering ('1': an ordering key). Nil when the queue knows no such group.
local function groupRow(prefix, k)
  local gk = prefix .. 'group:' .. k
  if redis.call('EXISTS', gk) == 0 and redis.call('SISMEMBER', prefix .. 'groups', k) == 0 then
    return nil
  end
  local row = {k}
  for _, v in ipairs(redis.call('HMGET', gk, unpack(GROUP_FIELDS))) do row[#row + 1] = v or '' end
  row[#row + 1] = redis.call('ZCARD', prefix .. 'groupq:' .. k)
  row[#row + 1] = redis.call('HEXISTS', prefix .. 'ordering', k) == 1 and '1' or ''
  return row
end

-- KEYS: meta. ARGS: cursor, count (a page of the queue's groups, SSCAN order) or 'key', a
-- group key (that group only). Returns {next cursor ('0': done; '' for one key), rows...},
-- each row as groupRow writes it.
-- @wire glidemq_groups keys=1 args=2
redis.register_function{function_name = 'glidemq_groups', callback = function(keys, args)
  local err = shape('glidemq_groups', keys, args, 1, 2, 2)
  if err then return err end
  local prefix = prefixOf(keys[1], 'meta')
  local out = {''}
  if args[1] == 'key' then
    out[2] = groupRow(prefix, args[2])
    return out
  end
  local cursor, count = args[1], int(args[2], 1, 1000)
  if not int(cursor, 0, 2 ^ 64) or not count then
    return badCall('ERR:BAD_ARGS', 'glidemq_groups', 'cursor or count')
  end
  local r = redis.call('SSCAN', prefix .. 'groups', cursor, 'COUNT', count)
  out[1] = r[1]
  for _, k in ipairs(r[2]) do out[#out + 1] = groupRow(prefix, k) end
  return out
end, flags = {'no-writes'}}
