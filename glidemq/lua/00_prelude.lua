#!lua name=glidemq
-- glidemq server library: every state change of a job is one call into this file.
-- (The line above stays as it is: clients recognise libraries from before version 11 by it.)
-- The file Valkey loads is the files of glidemq/lua/ joined in the order glidemq/functions.py
-- lists (LIBRARY_FILES): this one first; each may use the locals of the files before it.
-- Keys share the queue's hash tag, so each call touches one cluster slot.
-- Conventions: KEYS[1] of every queue-scoped function is a key of the queue whose name
-- ends in a known suffix; the queue prefix "glide:{name}:" is derived from it.

local LIBRARY_VERSION = '__GLIDEMQ_LIBRARY_VERSION__'
local SHIFT = 4398046511104 -- 2^42: priority band width in the scheduled set
local GROUP = 'workers'
local EVENTS_MAXLEN = 1000
local MAX_BANDS = 64 -- priority bands walked per call, bounds the work of one call
-- Limits that keep every score exact (a double holds 53 bits): a run time stays below 2^42
-- (band 0) and a band's base priority * 2^42 plus its offset stays below 2^53.
local MAX_PRIORITY = 2047
local MAX_DELAY = 315360000000 -- 10 years of 365 days, in ms
local MAX_TIME = SHIFT - 1 - MAX_DELAY -- latest 'now' accepted (ms, the year 2099)
local MAX_INT = 9007199254740991 -- 2^53 - 1: the largest count or duration accepted
local TIE = 1 / 2048 -- delayed jobs due in the same ms: steps of the fraction keep add order
local LAST_TIE = 2047 / 2048
local MAX_DATA = 1048576 -- job data, as the clients check it (1 MiB of JSON)
local MAX_GZ_DATA = 1400000 -- 'gz:' data: what 1 MiB of JSON becomes at worst in that form
local MAX_NAME = 1024 -- a job's name, in bytes (not empty)

-- Input checks, all before the first write. A numeric argument is a number whose value is an
-- integer within lo..hi (nan, inf, '1.5', 'abc' and a missing argument give nil).
-- An integer from lo to hi, given as a number or as decimal digits (an optional '-'): nil
-- for anything else, hex ('0x10'), exponents ('1e3'), fractions and blanks included.
local function int(v, lo, hi)
  if type(v) == 'string' and not string.find(v, '^%-?%d+$') then return nil end
  local n = tonumber(v)
  if n and n >= lo and n <= hi and n == math.floor(n) then return n end
  return nil
end

-- The server's clock in ms, for calls that are given no time.
local function clockMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function badCall(code, fname, what)
  return redis.error_reply(code .. ' ' .. fname .. ': ' .. what)
end

-- The call's shape: exactly nk keys (nil: at least one), amin..amax arguments (amax nil: no
-- upper bound). Returns an error reply, or nil.
local function shape(fname, keys, args, nk, amin, amax)
  if (nk and #keys ~= nk) or #keys < 1 then
    return badCall('ERR:BAD_KEYS', fname, 'takes ' .. tostring(nk or 'at least 1') .. ' keys, got ' .. #keys)
  end
  if #args < amin or (amax and #args > amax) then
    return badCall('ERR:BAD_ARGS', fname, 'wrong number of arguments (' .. #args .. ')')
  end
  return nil
end

-- A stream entry id as the functions take it ('ms-seq').
local function entryIdOk(v)
  return type(v) == 'string' and string.find(v, '^%d+%-%d+$') ~= nil
end

-- A job's opts JSON as a table, for the few options this library reads itself (by field, at
-- the top level, whatever the spacing). Text that is not a JSON object sets none of them: it
-- is stored as it is and its worker reports the job. (A decode of ~100 bytes of options
-- takes about 5 us of server time, less than four pattern searches of the same text.)
local function jobOpts(opts)
  if type(opts) ~= 'string' or #opts <= 2 then return {} end -- '{}' and '' set nothing
  local ok, o = pcall(cjson.decode, opts)
  if ok and type(o) == 'table' then return o end
  return {}
end

-- An optional integer option of the opts JSON: absent (nil or null) is true, nil; an integer
-- 0..MAX_INT is true and its decimal text; anything else is false.
local function optInt(v)
  if v == nil or v == cjson.null then return true, nil end
  if type(v) ~= 'number' or v < 0 or v > MAX_INT or v ~= math.floor(v) then return false, nil end
  return true, string.format('%d', v)
end

-- A job's opts JSON as an add receives it: a table for a JSON object ('' and '{}' are no
-- options), nil for any other text ('{', '[]', '7'), which the add refuses.
local function addOpts(opts)
  if opts == '' or opts == '{}' then return {} end
  if not string.find(opts, '^%s*{') then return nil end
  local ok, o = pcall(cjson.decode, opts)
  if ok and type(o) == 'table' then return o end
  return nil
end

-- Whether a job name is one an add stores: 1 to MAX_NAME bytes.
local function nameOk(name)
  return #name > 0 and #name <= MAX_NAME
end

-- The queue prefix ('glide:{q}:') of `key` when it is the key `suffix` of a queue, spelled as
-- WIRE_PROTOCOL.md section 2 says (a hash tag, then ':' and the suffix); nil otherwise.
local function keyPrefix(key, suffix)
  if #key <= #suffix or string.sub(key, -#suffix) ~= suffix then return nil end
  local prefix = string.sub(key, 1, #key - #suffix)
  if not string.find(prefix, '{[^{}]+}:$') then return nil end
  return prefix
end

-- What each queue key the add functions write holds (section 2).
local KEY_TYPES = {id = 'string', stream = 'stream', scheduled = 'zset', events = 'stream',
  meta = 'hash', dedup = 'hash', schedulers = 'hash'}

-- Checks the keys of an add-like call before anything is read or written: keys[first + i - 1]
-- is the key names[i] of one queue, and each of those, of `derived` (the queue's keys the
-- call finds from the prefix) and the queue's meta is absent or of its type, so no write
-- fails halfway with WRONGTYPE. Returns the queue's prefix, or nil and an ERR:BAD_KEYS error.
local function addKeys(fname, keys, first, names, derived)
  local prefix
  for i, name in ipairs(names) do
    local k = keys[first + i - 1]
    local p = k and keyPrefix(k, name)
    if not p or (prefix and p ~= prefix) then
      return nil, badCall('ERR:BAD_KEYS', fname, 'key ' .. (first + i - 1) .. ' is not the '
        .. name .. ' key of the queue')
    end
    prefix = p
  end
  local all = {'meta'}
  for _, name in ipairs(names) do all[#all + 1] = name end
  for _, name in ipairs(derived or {}) do all[#all + 1] = name end
  for _, name in ipairs(all) do
    local t = redis.call('TYPE', prefix .. name)['ok']
    if t ~= 'none' and t ~= KEY_TYPES[name] then
      return nil, badCall('ERR:BAD_KEYS', fname, prefix .. name .. ' holds a ' .. t
        .. ', not a ' .. KEY_TYPES[name])
    end
  end
  return prefix
end

local function dataTooLarge(data)
  if #data <= MAX_DATA then return false end
  return string.sub(data, 1, 3) ~= 'gz:' or #data > MAX_GZ_DATA
end

local function prefixOf(key, suffix)
  return string.sub(key, 1, #key - #suffix)
end

local function emit(events, name, jobId, ...)
  redis.call('XADD', events, 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'event', name, 'jobId', jobId, ...)
end

local function isTerminal(state)
  return state == 'completed' or state == 'failed'
end

-- Custom IDs end up inside key names: keep them from breaking the key layout.
local function validCustomId(id)
  if #id > 256 then return false end
  if string.find(id, '[%c{}:]') then return false end
  return true
end

-- Score of a delayed job in band 0: its run time, plus a fraction that puts it after the
-- jobs already due in the same ms (add order; past 2048 of them they tie).
local function delayedScore(scheduled, runAt)
  local top = redis.call('ZREVRANGEBYSCORE', scheduled, runAt + LAST_TIE, runAt, 'WITHSCORES',
    'LIMIT', 0, 1)
  if not top[2] then return runAt end
  return math.min(tonumber(top[2]) + TIE, runAt + LAST_TIE)
end

-- Score of a runnable job of priority p: its band plus the queue's priority sequence number
-- (meta field prioSeq), so a band runs first-in first-out. The sequence stays far below any
-- time in ms, so the member is due at once.
local function prioritizedScore(prefix, priority)
  return priority * SHIFT + redis.call('HINCRBY', prefix .. 'meta', 'prioSeq', 1)
end

-- Put a job where a worker will find it: the stream (waiting) or the scheduled set. A delayed
-- job waits in band 0 whatever its priority, and enters its band when it is due.
local function enqueue(prefix, jobId, priority, runAt, now)
  if runAt > now then
    local scheduled = prefix .. 'scheduled'
    redis.call('ZADD', scheduled, delayedScore(scheduled, runAt), jobId)
    return 'delayed', nil
  elseif priority > 0 then
    redis.call('ZADD', prefix .. 'scheduled', prioritizedScore(prefix, priority), jobId)
    return 'prioritized', nil
  end
  local sid = redis.call('XADD', prefix .. 'stream', '*', 'id', jobId)
  return 'waiting', sid
end

local function requeue(prefix, jobKey, jobId, priority, runAt, now)
  local state, sid = enqueue(prefix, jobId, priority, runAt, now)
  if sid then
    redis.call('HSET', jobKey, 'state', state, 'sid', sid)
  else
    redis.call('HSET', jobKey, 'state', state)
  end
  return state
end

-- A finished job's keys: its hash, its log, and the set of children a flow parent still
-- waited for (a parent failed by a child keeps the others listed there).
-- The next generated job id of a queue: its counter's next value that no job (and no id in
-- `reserved`, prefix .. id -> true, when given) already has, since custom ids may be numbers.
-- Every skipped id is skipped once: the counter moves past it. Nil after ID_PROBES taken ids
-- in a row (the caller answers ERR:ID_EXHAUSTED; a later call goes on from there).
local ID_PROBES = 10000
local function generatedId(prefix, idKey, reserved)
  for _ = 1, ID_PROBES do
    local c = tostring(redis.call('INCR', idKey))
    if not (reserved and reserved[prefix .. c])
        and redis.call('EXISTS', prefix .. 'job:' .. c) == 0 then
      return c
    end
  end
  return nil
end

local function deleteJob(prefix, jobId)
  redis.call('DEL', prefix .. 'job:' .. jobId, prefix .. 'log:' .. jobId, prefix .. 'deps:' .. jobId)
end

-- Retention of finished jobs: keepCount -1 keeps all, 0 keeps none, N keeps the newest N;
-- keepAge (seconds, 0 = unlimited) drops older ones. Bounded work per call.
local function retain(prefix, setKey, now, keepCount, keepAge)
  if keepCount > 0 then
    local n = redis.call('ZCARD', setKey)
    if n > keepCount then
      local extra = math.min(n - keepCount, 1000)
      local victims = redis.call('ZRANGE', setKey, 0, extra - 1)
      for _, v in ipairs(victims) do deleteJob(prefix, v) end
      redis.call('ZREMRANGEBYRANK', setKey, 0, extra - 1)
    end
  end
  if keepAge > 0 then
    local victims = redis.call('ZRANGEBYSCORE', setKey, '-inf', now - keepAge * 1000, 'LIMIT', 0, 1000)
    for _, v in ipairs(victims) do
      deleteJob(prefix, v)
      redis.call('ZREM', setKey, v)
    end
  end
end

-- Per-minute counts of finished jobs (Queue.get_metrics): hash field = epoch minute. One
-- HINCRBY per call; when a new minute starts and the hash holds more than a day, old minutes go.
local METRICS_MINUTES = 1440
local function countMetric(key, now, n)
  local minute = math.floor(now / 60000)
  if redis.call('HINCRBY', key, minute, n) == n
      and redis.call('HLEN', key) > METRICS_MINUTES + 60 then
    local oldest = minute - METRICS_MINUTES
    for _, f in ipairs(redis.call('HKEYS', key)) do
      if (tonumber(f) or 0) <= oldest then redis.call('HDEL', key, f) end
    end
  end
end

-- Result cache: a finished job's outcome under prefix 'result:' .. id for rttl ms, whatever
-- the job's retention. Only jobs added with a resultTtl option (hash field 'rttl') get one.
local function keepResult(prefix, jobId, rttl, ...)
  local key = prefix .. 'result:' .. jobId
  redis.call('HSET', key, ...)
  redis.call('PEXPIRE', key, rttl)
end

-- Backpressure: room left under the queue's maxWaiting (meta field) for jobs not started yet
-- (waiting with LIFO and group-waiting jobs, prioritized, delayed with rate-limited jobs: what
-- getCounts counts), or nil when the queue has no limit: one HGET per call without a limit.
local QUEUE_FULL = 'ERR:QUEUE_FULL'
local KEY_FULL = 'ERR:KEY_FULL' -- the job's ordering / group key is at maxWaitingPerKey
local function waitingRoom(prefix)
  local meta = prefix .. 'meta'
  local max = redis.call('HGET', meta, 'maxWaiting')
  if not max then return nil end
  local stream = prefix .. 'stream'
  local active = 0
  local ok, pending = pcall(redis.call, 'XPENDING', stream, GROUP)
  if ok then active = tonumber(pending[1]) end
  local parked = redis.call('LLEN', prefix .. 'list') + redis.call('ZCARD', prefix .. 'ratelimited')
    + (tonumber(redis.call('HGET', meta, 'groupWaiting')) or 0)
  return tonumber(max) - (redis.call('XLEN', stream) - active)
    - redis.call('ZCARD', prefix .. 'scheduled') - parked
end

local function isAdded(reply)
  return reply ~= 'duplicate' and reply ~= 'skipped' and string.sub(reply, 1, 4) ~= 'ERR:'
end

-- Members of bands >= 1 (prioritized, or delayed with priority) that may run now, in
-- priority order, at most n of them.
local function takeDueBands(scheduled, now, n)
  local out = {}
  local base = SHIFT
  for _ = 1, MAX_BANDS do
    if #out >= n then break end
    local first = redis.call('ZRANGEBYSCORE', scheduled, base, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #first == 0 then break end
    local band = math.floor(tonumber(first[2]) / SHIFT)
    base = band * SHIFT
    local due = redis.call('ZRANGEBYSCORE', scheduled, base, base + now, 'LIMIT', 0, n - #out)
    for _, m in ipairs(due) do out[#out + 1] = m end
    base = base + SHIFT
  end
  return out
end

-- The job id in a stream entry's [field, value, ...] list (nil for a deleted entry).
local function entryJobId(f)
  if not f then return nil end
  for i = 1, #f, 2 do
    if f[i] == 'id' then return f[i + 1] end
  end
  return nil
end

local function moveToStream(prefix, scheduled, ids)
  for _, jobId in ipairs(ids) do
    redis.call('ZREM', scheduled, jobId)
    local jobKey = prefix .. 'job:' .. jobId
    if redis.call('EXISTS', jobKey) == 1 then
      local sid = redis.call('XADD', prefix .. 'stream', '*', 'id', jobId)
      redis.call('HSET', jobKey, 'state', 'waiting', 'sid', sid)
    end
  end
end

-- Due delayed jobs (band 0, in score order): to the stream, or into their priority band
-- behind the jobs already there.
local function releaseDue(prefix, scheduled, ids)
  for _, jobId in ipairs(ids) do
    redis.call('ZREM', scheduled, jobId)
    local jobKey = prefix .. 'job:' .. jobId
    local h = redis.call('HMGET', jobKey, 'state', 'priority')
    local priority = tonumber(h[2]) or 0
    if h[1] and priority > 0 then
      redis.call('ZADD', scheduled, prioritizedScore(prefix, priority), jobId)
      redis.call('HSET', jobKey, 'state', 'prioritized')
    elseif h[1] then
      local sid = redis.call('XADD', prefix .. 'stream', '*', 'id', jobId)
      redis.call('HSET', jobKey, 'state', 'waiting', 'sid', sid)
    end
  end
end

---------------------------------------------------------------------------------------------
-- version

-- @wire glidemq_version keys=0..1 args=0
redis.register_function{function_name = 'glidemq_version', callback = function(keys, args)
  if #keys > 1 then return badCall('ERR:BAD_KEYS', 'glidemq_version', 'takes at most 1 key') end
  if #args > 0 then return badCall('ERR:BAD_ARGS', 'glidemq_version', 'takes no arguments') end
  return LIBRARY_VERSION
end, flags = {'no-writes'}}

-- The mark of this project's library (from version 11): its clients replace an older version of
-- it, but never another project's library that is also named glidemq, nor run on one.
-- @wire glidemq_library keys=0..1 args=0
redis.register_function{function_name = 'glidemq_library', callback = function(keys, args)
  if #keys > 1 then return badCall('ERR:BAD_KEYS', 'glidemq_library', 'takes at most 1 key') end
  if #args > 0 then return badCall('ERR:BAD_ARGS', 'glidemq_library', 'takes no arguments') end
  return 'glidemq-python'
end, flags = {'no-writes'}}
