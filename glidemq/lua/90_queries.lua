---------------------------------------------------------------------------------------------
-- search (glidemq/queries.py)

-- Does a decoded top-level value match a filter of kind s, n, b or z?
local function valueMatches(v, kind, want)
  if kind == 's' then return v == want end
  if kind == 'n' then return type(v) == 'number' and v == tonumber(want) end
  if kind == 'b' then return v == (want == '1') end
  return kind == 'z' and v == cjson.null
end

-- Do the top-level fields of a job's JSON data hold the wanted values? filters: {field, kind,
-- value} with kind s (string), n (number), b (boolean, '1' / '0'), z (null). Compressed data
-- and data of another serializer ('<name>:' tagged) cannot be read here and count as a match:
-- the caller checks them.
local function dataMatches(raw, filters)
  if #filters == 0 then return true end
  if not raw then return false end
  if string.find(raw, '^%l[%l%d_]*:') then return true end
  local d
  for _, f in ipairs(filters) do
    local kind, want = f[2], f[3]
    if kind == 't' then
      -- text anywhere in the stored JSON, ASCII case ignored (want comes lowercased)
      if not string.find(string.lower(raw), want, 1, true) then return false end
    elseif d == nil then
      local ok, decoded = pcall(cjson.decode, raw)
      if not ok or type(decoded) ~= 'table' then return false end
      d = decoded
    end
  end
  for _, f in ipairs(filters) do
    -- kind 't' was matched above
    if f[2] ~= 't' and not valueMatches(d and d[f[1]], f[2], f[3]) then return false end
  end
  return true
end

-- KEYS: stream, scheduled. ARGS: state (waiting, active, delayed, prioritized, completed,
-- failed, dlq), namePattern (a Lua pattern; '' matches every name), limit, scanMax, then
-- field/kind/value triples for dataMatches (kind 't': the lowercased value appears anywhere
-- in the data's JSON text, field ignored). Looks at no more than scanMax jobs of the state
-- (finished ones newest first). Returns up to limit matching job ids.
-- @wire glidemq_searchByName keys=2 args=4..
redis.register_function{function_name = 'glidemq_searchByName', callback = function(keys, args)
  local err = shape('glidemq_searchByName', keys, args, 2, 4)
  if err then return err end
  local stream, scheduled = keys[1], keys[2]
  local prefix = prefixOf(stream, 'stream')
  local state, pattern = args[1], args[2]
  local limit, scanMax = int(args[3], 1, MAX_INT), int(args[4], 0, MAX_INT)
  if not limit or not scanMax or (#args - 4) % 3 ~= 0 then
    return badCall('ERR:BAD_ARGS', 'glidemq_searchByName', 'arguments')
  end
  local filters = {}
  for i = 5, #args - 2, 3 do filters[#filters + 1] = {args[i], args[i + 1], args[i + 2]} end
  local finished = state == 'completed' or state == 'failed' or state == 'dlq'
  local out = {}
  local function consider(jobId)
    local jobKey = prefix .. 'job:' .. jobId
    local h = redis.call('HMGET', jobKey, 'state', 'name')
    if not h[1] or (not finished and h[1] ~= state) then return false end
    if pattern ~= '' and not string.find(h[2] or '', pattern) then return false end
    if #filters > 0 and not dataMatches(redis.call('HGET', jobKey, 'data'), filters) then
      return false
    end
    out[#out + 1] = jobId
    return #out >= limit
  end
  if finished then
    for _, jobId in ipairs(redis.call('ZREVRANGE', prefix .. state, 0, scanMax - 1)) do
      if consider(jobId) then break end
    end
  elseif state == 'delayed' then
    for _, jobId in ipairs(redis.call('ZRANGE', scheduled, 0, scanMax - 1)) do
      if consider(jobId) then break end
    end
  elseif state == 'prioritized' then
    -- prioritized jobs live in the bands >= 1, after every delayed job of band 0
    local ids = redis.call('ZRANGEBYSCORE', scheduled, SHIFT, '+inf', 'LIMIT', 0, scanMax)
    for _, jobId in ipairs(ids) do
      if consider(jobId) then break end
    end
  elseif state == 'waiting' then
    for _, e in ipairs(redis.call('XRANGE', stream, '-', '+', 'COUNT', scanMax)) do
      local jobId = entryJobId(e[2])
      if jobId and consider(jobId) then break end
    end
  elseif state == 'active' then
    local ok, pend = pcall(redis.call, 'XPENDING', stream, GROUP, '-', '+', scanMax)
    if ok then
      for _, p in ipairs(pend) do
        local e = redis.call('XRANGE', stream, p[1], p[1])
        local jobId = e[1] and entryJobId(e[1][2])
        if jobId and consider(jobId) then break end
      end
    end
  else
    return redis.error_reply('ERR glidemq: searchByName: unknown state ' .. tostring(state))
  end
  return out
end, flags = {'no-writes'}}

---------------------------------------------------------------------------------------------
-- reads

-- KEYS: stream, scheduled. Returns {waiting, active, delayed, prioritized, completed, failed,
-- dlq, paused, waitingChildren, groupWaiting, rateLimited}; waiting includes LIFO and
-- group-waiting jobs, delayed includes rate-limited ones (the last two are those parts).
-- @wire glidemq_getCounts keys=2 args=0
redis.register_function{function_name = 'glidemq_getCounts', callback = function(keys, args)
  local err = shape('glidemq_getCounts', keys, args, 2, 0, 0)
  if err then return err end
  local stream, scheduled = keys[1], keys[2]
  local prefix = prefixOf(stream, 'stream')
  local active = 0
  local ok, pending = pcall(redis.call, 'XPENDING', stream, GROUP)
  if ok then active = tonumber(pending[1]) end
  local now = clockMs()
  local total = redis.call('ZCARD', scheduled)
  local prioritized = 0
  local base = SHIFT
  for _ = 1, 100000 do
    local first = redis.call('ZRANGEBYSCORE', scheduled, base, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #first == 0 then break end
    base = math.floor(tonumber(first[2]) / SHIFT) * SHIFT
    -- runnable members of a priority band (offset <= now) count as prioritized
    prioritized = prioritized + redis.call('ZCOUNT', scheduled, base, base + now)
    base = base + SHIFT
  end
  -- rate-limited jobs count as delayed; LIFO and group-waiting ones as waiting
  local rateLimited = redis.call('ZCARD', prefix .. 'ratelimited')
  local delayed = total - prioritized + rateLimited
  local m = redis.call('HMGET', prefix .. 'meta', 'paused', 'groupWaiting')
  local paused = m[1] == '1' and 1 or 0
  local inGroups = tonumber(m[2]) or 0
  local parked = redis.call('LLEN', prefix .. 'list') + inGroups
  return {redis.call('XLEN', stream) - active + parked, active, delayed, prioritized,
    redis.call('ZCARD', prefix .. 'completed'), redis.call('ZCARD', prefix .. 'failed'),
    redis.call('ZCARD', prefix .. 'dlq'), paused, redis.call('ZCARD', prefix .. 'waiting-children'),
    inGroups, rateLimited}
end, flags = {'no-writes'}}

-- When a not-yet-started job became ready to start (ms): when it was added and due, or when its
-- last try started if that was later (a retried job; its backoff is not recorded, so this is
-- early by the backoff and the run time).
local function readySince(prefix, jobId)
  local h = redis.call('HMGET', prefix .. 'job:' .. jobId, 'timestamp', 'delay', 'processedOn')
  local t = (tonumber(h[1]) or 0) + (tonumber(h[2]) or 0)
  return math.max(t, tonumber(h[3]) or 0)
end

-- KEYS: stream, scheduled. ARGS: now. What an autoscaler reads: the jobs waiting to start and
-- when the oldest of them became ready. Returns {waiting, prioritized, due, grouped, active,
-- oldestReadyAt (ms, -1: none), delayed, paused}. waiting: stream entries not delivered yet
-- plus LIFO jobs; prioritized: runnable members of the priority bands; due: delayed and
-- rate-limited jobs whose time has come (a worker's promotion moves them); grouped: jobs
-- parked in their groups; delayed: the delayed and rate-limited jobs not due yet. The oldest
-- covers waiting, prioritized and due jobs, not grouped ones (their wait is set by their
-- group's limits; their scores are not times).
-- @wire glidemq_backlog keys=2 args=1
redis.register_function{function_name = 'glidemq_backlog', callback = function(keys, args)
  local err = shape('glidemq_backlog', keys, args, 2, 1, 1)
  if err then return err end
  local now = int(args[1], 0, MAX_TIME)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_backlog', 'now') end
  local stream, scheduled = keys[1], keys[2]
  local prefix = prefixOf(stream, 'stream')
  local oldest = -1
  local function seen(t)
    if t and (oldest < 0 or t < oldest) then oldest = t end
  end
  -- entries after the last pending one were never delivered (delivered ones are deleted when
  -- acknowledged), so the first of them is the oldest entry waiting
  local active, after = 0, '-'
  local ok, pending = pcall(redis.call, 'XPENDING', stream, GROUP)
  if ok then
    active = tonumber(pending[1]) or 0
    if active > 0 and pending[3] then after = '(' .. pending[3] end
  end
  local head = redis.call('XRANGE', stream, after, '+', 'COUNT', 1)
  if head[1] then seen(tonumber(string.match(head[1][1], '^(%d+)'))) end
  local list = prefix .. 'list'
  local lifo = redis.call('LLEN', list)
  if lifo > 0 then seen(readySince(prefix, redis.call('LRANGE', list, 0, 0)[1])) end
  local waiting = redis.call('XLEN', stream) - active + lifo
  -- band 0: delayed jobs, due ones first (promotion takes score <= now + LAST_TIE)
  local due = redis.call('ZCOUNT', scheduled, 0, now + LAST_TIE)
  local delayed = redis.call('ZCOUNT', scheduled, 0, SHIFT - 1) - due
  if due > 0 then
    local first = redis.call('ZRANGEBYSCORE', scheduled, 0, SHIFT - 1, 'WITHSCORES', 'LIMIT', 0, 1)
    seen(math.floor(tonumber(first[2])))
  end
  local rl = prefix .. 'ratelimited'
  local rlDue = redis.call('ZCOUNT', rl, '-inf', now)
  delayed = delayed + redis.call('ZCARD', rl) - rlDue
  if rlDue > 0 then
    seen(math.floor(tonumber(redis.call('ZRANGE', rl, 0, 0, 'WITHSCORES')[2])))
  end
  due = due + rlDue
  -- bands >= 1: runnable members, first in first out; the head of each is its oldest
  local prioritized = 0
  local base = SHIFT
  for _ = 1, MAX_PRIORITY do
    local first = redis.call('ZRANGEBYSCORE', scheduled, base, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #first == 0 then break end
    base = math.floor(tonumber(first[2]) / SHIFT) * SHIFT
    local n = redis.call('ZCOUNT', scheduled, base, base + now)
    if n > 0 then
      prioritized = prioritized + n
      seen(readySince(prefix, first[1]))
    end
    base = base + SHIFT
  end
  local m = redis.call('HMGET', prefix .. 'meta', 'paused', 'groupWaiting')
  return {waiting, prioritized, due, tonumber(m[2]) or 0, active, oldest, delayed,
    m[1] == '1' and 1 or 0}
end, flags = {'no-writes'}}

-- Calls visit(member) on a sorted set's members in order, reading 1000 at a time, until visit
-- returns true (then returns true). A page near the front never reads the whole set.
local function eachMember(key, visit)
  local pos = 0
  while true do
    local ids = redis.call('ZRANGE', key, pos, pos + 999)
    for _, id in ipairs(ids) do
      if visit(id) then return true end
    end
    if #ids < 1000 then return false end
    pos = pos + 1000
  end
end

-- KEYS: stream, scheduled. ARGS: state, start, stop (inclusive indices). Returns job ids:
-- finished sets newest first, others in the order they would run. Reads the stream and the
-- sets in chunks, so the cost grows with start + count, not with the size of the queue.
-- @wire glidemq_getJobIds keys=2 args=3
redis.register_function{function_name = 'glidemq_getJobIds', callback = function(keys, args)
  local err = shape('glidemq_getJobIds', keys, args, 2, 3, 3)
  if err then return err end
  local stream, scheduled = keys[1], keys[2]
  local prefix = prefixOf(stream, 'stream')
  local state, start, stop = args[1], int(args[2], -MAX_INT, MAX_INT), int(args[3], -MAX_INT, MAX_INT)
  if not start or not stop then return badCall('ERR:BAD_ARGS', 'glidemq_getJobIds', 'start or stop') end
  if state == 'completed' or state == 'failed' or state == 'dlq' then
    return redis.call('ZREVRANGE', prefix .. state, start, stop)
  end
  local want = stop - start + 1
  if stop < 0 then want = 1000000 end
  local out, seen = {}, 0
  local function consider(jobId)
    if redis.call('HGET', prefix .. 'job:' .. jobId, 'state') == state then
      if seen >= start then out[#out + 1] = jobId end
      seen = seen + 1
    end
    return #out >= want
  end
  if state == 'active' then
    local ok, pend = pcall(redis.call, 'XPENDING', stream, GROUP, '-', '+', start + want)
    if ok then
      for _, p in ipairs(pend) do
        local e = redis.call('XRANGE', stream, p[1], p[1])
        local jobId = e[1] and entryJobId(e[1][2])
        if jobId and consider(jobId) then return out end
      end
    end
  elseif state == 'waiting' then
    -- Entries before `start` are counted as getCounts counts them (every stream entry not
    -- pending is waiting), without reading their hashes, when the PEL is small enough to
    -- hold in a table; the entries of the page itself are always checked.
    local pending
    local ok, summary = pcall(redis.call, 'XPENDING', stream, GROUP)
    local npending = ok and tonumber(summary[1]) or 0
    if start > 0 and npending <= 10000 then
      pending = {}
      if npending > 0 then
        for _, p in ipairs(redis.call('XPENDING', stream, GROUP, '-', '+', npending)) do
          pending[p[1]] = true
        end
      end
    end
    local from = '-'
    while true do
      local entries = redis.call('XRANGE', stream, from, '+', 'COUNT', 1000)
      for _, e in ipairs(entries) do
        if pending and seen < start then
          if not pending[e[1]] and entryJobId(e[2]) then seen = seen + 1 end
        else
          local jobId = entryJobId(e[2])
          if jobId and consider(jobId) then return out end
        end
      end
      if #entries < 1000 then break end
      from = '(' .. entries[#entries][1]
    end
    local list = prefix .. 'list'
    local hi = redis.call('LLEN', list) - 1
    while hi >= 0 do
      local lo = math.max(0, hi - 999)
      local part = redis.call('LRANGE', list, lo, hi)
      for x = #part, 1, -1 do
        if consider(part[x]) then return out end
      end
      hi = lo - 1
    end
  elseif state == 'group-waiting' or state == 'rate-limited' then
    local sets = {prefix .. 'ratelimited'}
    if state == 'group-waiting' then
      sets = {}
      for _, k in ipairs(redis.call('SMEMBERS', prefix .. 'groups')) do
        sets[#sets + 1] = prefix .. 'groupq:' .. k
      end
    end
    for _, key in ipairs(sets) do
      if eachMember(key, consider) then return out end
    end
  elseif state == 'delayed' or state == 'prioritized' then
    if eachMember(scheduled, consider) then return out end
  elseif state == 'waiting-children' then
    if eachMember(prefix .. 'waiting-children', consider) then return out end
  else
    return redis.error_reply('ERR glidemq: getJobIds: unknown state ' .. tostring(state))
  end
  return out
end, flags = {'no-writes'}}
