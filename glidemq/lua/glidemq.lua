#!lua name=glidemq
-- glidemq server library: every state change of a job is one call into this file.
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

-- Input checks, all before the first write. A numeric argument is a number whose value is an
-- integer within lo..hi (nan, inf, '1.5', 'abc' and a missing argument give nil).
local function int(v, lo, hi)
  local n = tonumber(v)
  if n and n >= lo and n <= hi and n == math.floor(n) then return n end
  return nil
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

local function deleteJob(prefix, jobId)
  redis.call('DEL', prefix .. 'job:' .. jobId, prefix .. 'log:' .. jobId)
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
-- limits: queue-wide rate limit and concurrency, groups, token buckets, ordering keys, LIFO
--
-- meta          rateLimitMax, rateLimitDuration (global rate limit), concurrency (global),
--               limitUntil (Worker.rate_limit), groupWaiting (jobs parked in groups)
-- rate          fixed-window counters: start/count (global), wStart/wCount (worker limiter);
--               seq numbers the members of the sliding logs
-- ratelog, wratelog  sliding logs (global, worker limiter): one member per start, scored by
--               its start time; used while max <= SLIDING_MAX, fixed windows above it
-- grouprate:{k} the sliding log of group k's rate limit (same rule)
-- group:{k}     waiting (its jobs not started: what meta maxWaitingPerKey limits),
--               maxConcurrency, active (slots held, reservations included), reserved (slots
--               handed to woken jobs that have not started yet), nextSeq (ordering keys),
--               rateMax, rateDuration, rateWindowStart, rateCount, tbCapacity,
--               tbRefillRate, tbTokens, tbLastRefill, tbRefillRemainder (millitokens)
-- groupq:{k}    jobs parked while their group is busy, scored by the stream entry they were
--               read from (entryScore; ordering keys: seq)
-- ordering      per-key sequence counters of ordering keys; orderdone:pending:{k} holds the
--               sequence numbers that finished while an earlier one had not
-- ratelimited   jobs waiting for a group's rate window or tokens, scored by eligible time
-- groups        every group key in use (drain walks it); list: LIFO jobs, newest at the tail
--
-- A group key with concurrency 1 is an ordering key (job field orderingKey): its jobs run
-- strictly in sequence order, one at a time, and a job waiting for a retry keeps the key.
-- With concurrency n > 1 (job field groupSlot = '1' while a slot is held) a slot freed goes
-- straight to the first parked job, which holds it as a reservation until it runs. A woken
-- job re-enters the stream at its tail, behind entries of its group not read yet; while any
-- reservation is unused those park too, so none of them gets a slot before the woken job.

local CONCURRENCY_POLL_MS = 50 -- retry hint when the global concurrency is used up

-- Counts d more (or fewer) jobs of group k not started yet, never below 0.
local function groupWaiting(prefix, k, d)
  local gk = prefix .. 'group:' .. k
  if redis.call('HINCRBY', gk, 'waiting', d) < 0 then redis.call('HSET', gk, 'waiting', 0) end
end

-- Per-key backpressure: whether key k already holds the queue's maxWaitingPerKey (meta field)
-- jobs not started yet.
local function keyFull(prefix, k)
  local max = tonumber(redis.call('HGET', prefix .. 'meta', 'maxWaitingPerKey'))
  if not max then return false end
  return (tonumber(redis.call('HGET', prefix .. 'group:' .. k, 'waiting')) or 0) >= max
end
local SLIDING_MAX = 10000      -- rate limits up to this max keep a sliding log of starts

-- Sliding window: drops starts that left the window from log; returns how many starts the
-- window still allows now, and when none, the ms until the oldest start that blocks leaves
-- it. A start is stamped at the fetch and runs a little later on the worker (whole-ms stamps,
-- dispatch), so it stays in the window for dur plus a guard: 2% of dur, 1 to 20 ms.
local function rateGuard(dur)
  return math.max(1, math.min(20, math.floor(dur / 50)))
end

local function slidingRoom(log, max, dur, now)
  local span = dur + rateGuard(dur)
  redis.call('ZREMRANGEBYSCORE', log, '-inf', now - span)
  local n = redis.call('ZCARD', log)
  if n < max then return max - n, 0 end
  local first = redis.call('ZRANGE', log, n - max, n - max, 'WITHSCORES')
  return 0, math.max(1, tonumber(first[2]) + span - now)
end

-- Records used starts at now in a sliding log; seqKey/seqField number the members.
local function slidingCharge(log, dur, now, used, seqKey, seqField)
  local last = redis.call('HINCRBY', seqKey, seqField, used)
  local z = {}
  for i = last - used + 1, last do z[#z + 1] = now; z[#z + 1] = i end
  redis.call('ZADD', log, unpack(z))
  redis.call('PEXPIRE', log, dur + rateGuard(dur))
end
local MAX_WAKE = 1000          -- parked jobs woken per call, bounds the work of one call

-- LIFO jobs wait in the list, newest at the tail; move up to n of them, newest first, to the
-- stream. Returns how many moved.
local function admitLifo(prefix, stream, n)
  if n <= 0 then return 0 end
  local ids = redis.call('RPOP', prefix .. 'list', n)
  if not ids then return 0 end
  local moved = 0
  for _, jobId in ipairs(ids) do
    local jobKey = prefix .. 'job:' .. jobId
    local h = redis.call('HMGET', jobKey, 'state', 'sid')
    if h[1] == 'waiting' and not h[2] then -- else removed or re-queued meanwhile
      redis.call('HSET', jobKey, 'sid', redis.call('XADD', stream, '*', 'id', jobId))
      moved = moved + 1
    end
  end
  return moved
end

-- Due rate-limited jobs back to where they run from. Returns how many moved.
local function promoteRateLimited(prefix, now, limit)
  local rl = prefix .. 'ratelimited'
  local ids = redis.call('ZRANGEBYSCORE', rl, '-inf', now, 'LIMIT', 0, limit)
  for _, jobId in ipairs(ids) do
    redis.call('ZREM', rl, jobId)
    local jobKey = prefix .. 'job:' .. jobId
    local h = redis.call('HMGET', jobKey, 'state', 'priority')
    if h[1] == 'rate-limited' then requeue(prefix, jobKey, jobId, tonumber(h[2]) or 0, now, now) end
  end
  return #ids
end

-- A stream entry read for a job that does not start now: the job lives elsewhere from here on.
local function unstream(stream, jobKey, entryId)
  redis.call('XACK', stream, GROUP, entryId)
  redis.call('XDEL', stream, entryId)
  redis.call('HDEL', jobKey, 'sid')
end

-- A stream entry's place in the stream as a sorted-set score: ms * 2048 + seq, exact below
-- 2^53 (ms up to the year 2109); entries past the 2048th of one ms tie.
local function entryScore(entryId)
  local ms, seq = string.match(entryId, '^(%d+)-(%d+)$')
  if not ms then return math.huge end
  return tonumber(ms) * 2048 + math.min(tonumber(seq), 2047)
end

local function parkInGroup(prefix, jobKey, jobId, k, score)
  redis.call('ZADD', prefix .. 'groupq:' .. k, score, jobId)
  redis.call('HSET', jobKey, 'state', 'group-waiting')
  redis.call('HINCRBY', prefix .. 'meta', 'groupWaiting', 1)
end

local function parkRateLimited(prefix, jobKey, jobId, at)
  redis.call('ZADD', prefix .. 'ratelimited', at, jobId)
  redis.call('HSET', jobKey, 'state', 'rate-limited')
end

-- A parked job runs again (to the stream, or its priority band); with reserve it holds one of
-- the group's slots meanwhile. Returns false when it was not parked (or is gone).
local function wakeParked(prefix, k, jobId, reserve, now)
  if redis.call('ZREM', prefix .. 'groupq:' .. k, jobId) == 0 then return false end
  redis.call('HINCRBY', prefix .. 'meta', 'groupWaiting', -1)
  local jobKey = prefix .. 'job:' .. jobId
  local priority = redis.call('HGET', jobKey, 'priority')
  if not priority then return false end
  if reserve then
    redis.call('HSET', jobKey, 'groupSlot', '1')
    redis.call('HINCRBY', prefix .. 'group:' .. k, 'reserved', 1)
  end
  requeue(prefix, jobKey, jobId, tonumber(priority) or 0, now, now)
  return true
end

-- Hand free slots of a concurrency group to its first parked jobs.
local function fillSlots(prefix, k, gk, max, active, now)
  local gq = prefix .. 'groupq:' .. k
  for _ = 1, MAX_WAKE do
    if active >= max then break end
    local head = redis.call('ZRANGE', gq, 0, 0)
    if not head[1] then break end
    if wakeParked(prefix, k, head[1], true, now) then active = active + 1 end
  end
  redis.call('HSET', gk, 'active', active)
end

-- A slot of concurrency group k is given back: to the first parked job, or to the group.
-- unused: the slot was a reservation whose job never started.
local function passSlot(prefix, k, now, unused)
  local gk = prefix .. 'group:' .. k
  local g = redis.call('HMGET', gk, 'maxConcurrency', 'active', 'reserved')
  local max, active, reserved = tonumber(g[1]) or 1, tonumber(g[2]) or 0, tonumber(g[3]) or 0
  if unused and reserved > 0 then
    reserved = reserved - 1
    redis.call('HSET', gk, 'reserved', reserved)
  end
  if active <= max then
    local gq = prefix .. 'groupq:' .. k
    for _ = 1, MAX_WAKE do
      local head = redis.call('ZRANGE', gq, 0, 0)
      if not head[1] then break end
      if wakeParked(prefix, k, head[1], true, now) then return end
    end
  end
  if active > 0 then active = active - 1 end
  if reserved > active then -- reservations are slots too: a count above active is stale
    redis.call('HSET', gk, 'active', active, 'reserved', active)
  else
    redis.call('HSET', gk, 'active', active)
  end
end

-- Job seq of ordering key k finished for good (or will never run): the key moves on to the
-- next sequence number not finished yet, and that job runs if it was parked. Idempotent.
local function orderingDone(prefix, k, seq, now)
  if seq <= 0 then return end
  local gk = prefix .. 'group:' .. k
  local nextSeq = tonumber(redis.call('HGET', gk, 'nextSeq')) or 1
  if seq < nextSeq then return end
  local pending = prefix .. 'orderdone:pending:' .. k
  if seq > nextSeq then
    redis.call('HSET', pending, seq, '1')
    return
  end
  nextSeq = nextSeq + 1
  while redis.call('HDEL', pending, nextSeq) == 1 do nextSeq = nextSeq + 1 end
  redis.call('HSET', gk, 'nextSeq', nextSeq)
  local gq = prefix .. 'groupq:' .. k
  local ids = redis.call('ZRANGEBYSCORE', gq, nextSeq, nextSeq, 'LIMIT', 0, 1)
  if ids[1] then wakeParked(prefix, k, ids[1], false, now) end
end

-- A job of group k gives up its claim: the slot it holds or has reserved (concurrency
-- groups; unused: a reservation, the job never started on it), or, once it finished for
-- good, its turn (ordering keys).
local function releaseHold(prefix, jobKey, k, strict, seq, slot, finished, now, unused)
  if strict then
    if finished then orderingDone(prefix, k, seq, now) end
  elseif slot then
    redis.call('HDEL', jobKey, 'groupSlot')
    passSlot(prefix, k, now, unused)
  end
end

-- Decides whether a job of group k read from the stream starts now. If not, the job is parked
-- (group-waiting or rate-limited) or, when its cost can never be paid, dead-lettered; its
-- entry is gone then and false is returned. Charges the group's rate window and tokens.
local function admitGroupJob(prefix, stream, entryId, jobId, jobKey, k, now, emitEvents, events)
  local gk = prefix .. 'group:' .. k
  local j = redis.call('HMGET', jobKey, 'orderingKey', 'orderingSeq', 'groupSlot', 'cost')
  local g = redis.call('HMGET', gk, 'maxConcurrency', 'active', 'nextSeq', 'rateMax',
    'rateDuration', 'rateWindowStart', 'rateCount', 'tbCapacity', 'tbRefillRate', 'tbTokens',
    'tbLastRefill', 'tbRefillRemainder', 'reserved')
  local strict, seq, reserved = j[1] and true or false, tonumber(j[2]) or 0, j[3] == '1'
  if strict then
    if seq > (tonumber(g[3]) or 1) then -- an earlier job of the key has not finished
      unstream(stream, jobKey, entryId)
      parkInGroup(prefix, jobKey, jobId, k, seq)
      return false
    end
  elseif not reserved then
    local max, active = tonumber(g[1]) or 1, tonumber(g[2]) or 0
    -- parked jobs go first, and so do woken ones not started yet (they re-entered the
    -- stream behind this entry): a job arriving while others wait queues behind them
    if active >= max or math.min(tonumber(g[13]) or 0, active) > 0
        or redis.call('ZCARD', prefix .. 'groupq:' .. k) > 0 then
      unstream(stream, jobKey, entryId)
      -- in stream order, not the order reads are processed: an idle worker's blocking read
      -- activates its entries in a second call, after later entries may have been parked
      parkInGroup(prefix, jobKey, jobId, k, entryScore(entryId))
      if active < max then fillSlots(prefix, k, gk, max, active, now) end
      return false
    end
  end
  local set = {}
  local rateMax, rateDur = tonumber(g[4]) or 0, tonumber(g[5]) or 0
  local rlog = prefix .. 'grouprate:' .. k
  if rateMax > 0 and rateDur > 0 and rateMax <= SLIDING_MAX then
    local room, wait = slidingRoom(rlog, rateMax, rateDur, now)
    if room <= 0 then
      unstream(stream, jobKey, entryId)
      parkRateLimited(prefix, jobKey, jobId, now + wait)
      return false
    end
  elseif rateMax > 0 and rateDur > 0 then
    local ws, n = tonumber(g[6]) or 0, tonumber(g[7]) or 0
    if now >= ws + rateDur then ws, n = now, 0 end
    if n >= rateMax then
      unstream(stream, jobKey, entryId)
      parkRateLimited(prefix, jobKey, jobId, ws + rateDur)
      return false
    end
    set = {'rateWindowStart', ws, 'rateCount', n + 1}
  end
  local cap = tonumber(g[8]) or 0
  if cap > 0 then
    local cost = tonumber(j[4]) or 0
    if cost <= 0 then cost = 1000 end
    if cost > cap then
      unstream(stream, jobKey, entryId)
      local reason = string.format('cost %s exceeds the capacity %s of the token bucket of group %s',
        tostring(cost / 1000), tostring(cap / 1000), k)
      redis.call('HSET', jobKey, 'state', 'failed', 'failedReason', reason, 'finishedOn', now,
        'deadLetter', '1')
      redis.call('ZADD', prefix .. 'dlq', now, jobId)
      if emitEvents then emit(events, 'failed', jobId, 'failedReason', reason) end
      releaseHold(prefix, jobKey, k, strict, seq, reserved, true, now, true)
      groupWaiting(prefix, k, -1)
      return false
    end
    local rate = tonumber(g[9]) or 0
    local tokens = math.min(cap, tonumber(g[10]) or cap)
    local last = tonumber(g[11]) or now
    local rem = tonumber(g[12]) or 0
    if now > last then
      if rate > 0 and tokens < cap then
        -- millitokens/s times ms: thousandths of a millitoken; the remainder carries over
        local elapsed = math.min(now - last, math.ceil(cap * 1000 / rate) + 1)
        local raw = elapsed * rate + rem
        tokens = math.min(cap, tokens + math.floor(raw / 1000))
        rem = raw % 1000
      end
      if tokens >= cap then rem = 0 end
      last = now
    end
    if tokens < cost then
      local wait = 60000 -- a bucket that never refills: look again now and then
      if rate > 0 then wait = math.max(1, math.ceil(((cost - tokens) * 1000 - rem) / rate)) end
      redis.call('HSET', gk, 'tbTokens', tokens, 'tbLastRefill', last, 'tbRefillRemainder', rem)
      unstream(stream, jobKey, entryId)
      parkRateLimited(prefix, jobKey, jobId, now + wait)
      return false
    end
    set[#set + 1] = 'tbTokens'; set[#set + 1] = tokens - cost
    set[#set + 1] = 'tbLastRefill'; set[#set + 1] = last
    set[#set + 1] = 'tbRefillRemainder'; set[#set + 1] = rem
  end
  if not strict and not reserved then
    set[#set + 1] = 'active'; set[#set + 1] = (tonumber(g[2]) or 0) + 1
    redis.call('HSET', jobKey, 'groupSlot', '1')
  elseif reserved then -- the reservation is used: the job runs on it
    set[#set + 1] = 'reserved'; set[#set + 1] = math.max(0, (tonumber(g[13]) or 0) - 1)
  end
  if #set > 0 then redis.call('HSET', gk, unpack(set)) end
  if rateMax > 0 and rateDur > 0 and rateMax <= SLIDING_MAX then
    slidingCharge(rlog, rateDur, now, 1, gk, 'rateSeq')
  end
  return true
end

-- A job leaves the queue without finishing a run (removed, revoked, drained, cleaned,
-- debounced): out of the LIFO list and the wait sets, and its group claim given back.
local function forgetJob(prefix, jobKey, jobId, now)
  local j = redis.call('HMGET', jobKey, 'state', 'sid', 'lifo', 'groupKey', 'orderingKey',
    'orderingSeq', 'groupSlot')
  local state, k = j[1], j[4]
  if state == 'rate-limited' then
    redis.call('ZREM', prefix .. 'ratelimited', jobId)
  elseif state == 'waiting' and j[3] == '1' and not j[2] then
    redis.call('LREM', prefix .. 'list', 1, jobId)
  end
  if not k then return end
  if state and state ~= 'active' and not isTerminal(state) then groupWaiting(prefix, k, -1) end
  if state == 'group-waiting' and redis.call('ZREM', prefix .. 'groupq:' .. k, jobId) == 1 then
    redis.call('HINCRBY', prefix .. 'meta', 'groupWaiting', -1)
  end
  releaseHold(prefix, jobKey, k, j[5] and true or false, tonumber(j[6]) or 0, j[7] == '1', true,
    now, state ~= 'active')
end

-- The group arguments of addJob (10-15) for a job with ordering key k: a table, or an error
-- reply. Cost is checked against the capacity here, before anything is written.
local function groupArgs(a, o)
  local g = {}
  for i, name in ipairs({'concurrency', 'rateMax', 'rateDuration', 'tbCapacity', 'tbRefillRate',
    'cost'}) do
    local raw = a[o + 8 + i]
    local v = 0
    if raw and raw ~= '' then v = int(raw, 0, MAX_INT) end
    if not v then return 'ERR:BAD_OPTION' end
    g[name] = v
  end
  if g.concurrency < 1 then g.concurrency = 1 end
  if g.rateMax > 0 and g.rateDuration <= 0 then return 'ERR:BAD_OPTION' end
  if g.cost > 0 and g.tbCapacity == 0 then return 'ERR:BAD_OPTION' end
  if g.tbCapacity > 0 and (g.cost > 0 and g.cost or 1000) > g.tbCapacity then
    return 'ERR:COST_EXCEEDS_CAPACITY'
  end
  return g
end

-- Each add restates its group's settings: they are stored on the group, last add wins.
-- Returns the job hash fields that tie the job to the group.
local function joinGroup(prefix, k, g, now)
  local gk = prefix .. 'group:' .. k
  local cur = redis.call('HMGET', gk, 'maxConcurrency', 'rateMax', 'rateDuration', 'tbCapacity',
    'tbRefillRate')
  local set, del = {}, {}
  local function put(f, v) set[#set + 1] = f; set[#set + 1] = v end
  if tonumber(cur[1]) ~= g.concurrency then put('maxConcurrency', g.concurrency) end
  if g.rateMax > 0 then
    if tonumber(cur[2]) ~= g.rateMax then put('rateMax', g.rateMax) end
    if tonumber(cur[3]) ~= g.rateDuration then put('rateDuration', g.rateDuration) end
  elseif cur[2] then
    del = {'rateMax', 'rateDuration', 'rateWindowStart', 'rateCount'}
  end
  if g.tbCapacity > 0 then
    if not cur[4] then
      put('tbTokens', g.tbCapacity); put('tbLastRefill', now); put('tbRefillRemainder', 0)
    end
    if tonumber(cur[4]) ~= g.tbCapacity then put('tbCapacity', g.tbCapacity) end
    if tonumber(cur[5]) ~= g.tbRefillRate then put('tbRefillRate', g.tbRefillRate) end
  elseif cur[4] then
    for _, f in ipairs({'tbCapacity', 'tbRefillRate', 'tbTokens', 'tbLastRefill',
      'tbRefillRemainder'}) do del[#del + 1] = f end
  end
  if #set > 0 then redis.call('HSET', gk, unpack(set)) end
  if #del > 0 then redis.call('HDEL', gk, unpack(del)) end
  redis.call('SADD', prefix .. 'groups', k)
  groupWaiting(prefix, k, 1)
  local fields = {'groupKey', k}
  if g.concurrency == 1 then
    fields[3], fields[4] = 'orderingKey', k
    fields[5], fields[6] = 'orderingSeq', redis.call('HINCRBY', prefix .. 'ordering', k, 1)
  end
  if g.cost > 0 then fields[#fields + 1] = 'cost'; fields[#fields + 1] = g.cost end
  return fields
end

-- Queue-wide limits on how many jobs one fetch may start. m: meta fields {paused,
-- rateLimitMax, rateLimitDuration, concurrency, limitUntil}; lim: the calling worker's limiter
-- {max, duration} or nil; held: entries of this call already in the pending list. Returns the
-- number allowed (0: plus the ms to wait before asking again) and the windows to charge.
local function queueAllowance(prefix, stream, m, lim, count, now, held)
  local untilMs = tonumber(m[5])
  if untilMs then
    if untilMs > now then return 0, untilMs - now end
    redis.call('HDEL', prefix .. 'meta', 'limitUntil')
  end
  local charge
  local gMax, gDur = tonumber(m[2]) or 0, tonumber(m[3]) or 0
  local wMax, wDur = 0, 0
  if lim then wMax, wDur = lim[1], lim[2] end
  if (gMax > 0 and gDur > 0) or (wMax > 0 and wDur > 0) then
    local r = redis.call('HMGET', prefix .. 'rate', 'start', 'count', 'wStart', 'wCount')
    charge = {}
    for i, w in ipairs({{gMax, gDur, 'start', 'count', 'ratelog'},
        {wMax, wDur, 'wStart', 'wCount', 'wratelog'}}) do
      local max, dur = w[1], w[2]
      if max > 0 and dur > 0 and max <= SLIDING_MAX then
        local room, wait = slidingRoom(prefix .. w[5], max, dur, now)
        if room <= 0 then return 0, wait end
        if room < count then count = room end
        charge[#charge + 1] = {prefix .. w[5], dur}
      elseif max > 0 and dur > 0 then
        local s, n = tonumber(r[2 * i - 1]) or 0, tonumber(r[2 * i]) or 0
        if now >= s + dur then s, n = now, 0 end
        if n >= max then return 0, s + dur - now end
        if max - n < count then count = max - n end
        charge[#charge + 1] = {w[3], s, w[4], n}
      end
    end
  end
  local conc = tonumber(m[4]) or 0
  if conc > 0 then
    local ok, p = pcall(redis.call, 'XPENDING', stream, GROUP)
    local active = (ok and tonumber(p[1]) or 0) - held
    if active >= conc then return 0, CONCURRENCY_POLL_MS end
    if conc - active < count then count = conc - active end
  end
  return count, 0, charge
end

local function chargeWindows(prefix, charge, used, now)
  if not charge or used <= 0 then return end
  local f = {}
  for _, c in ipairs(charge) do
    if #c == 2 then
      slidingCharge(c[1], c[2], now, used, prefix .. 'rate', 'seq')
    else
      f[#f + 1] = c[1]; f[#f + 1] = c[2]; f[#f + 1] = c[3]; f[#f + 1] = c[4] + used
    end
  end
  if #f > 0 then redis.call('HSET', prefix .. 'rate', unpack(f)) end
end

-- The worker limiter {max, duration} passed as two arguments, or nil.
local function limiterArg(max, duration)
  max, duration = tonumber(max), tonumber(duration)
  if max and max > 0 and duration and duration > 0 then return {max, duration} end
  return nil
end

local META_LIMITS = {'paused', 'rateLimitMax', 'rateLimitDuration', 'concurrency', 'limitUntil'}

-- Empties the LIFO list, the rate-limited set and every group's wait set (drain); returns the
-- ids of the jobs that waited there, their group claims given back.
local function takeParked(prefix, now)
  local ids = {}
  local function take(key, members, state)
    for _, jobId in ipairs(members) do
      local h = redis.call('HMGET', prefix .. 'job:' .. jobId, 'state', 'sid')
      if h[1] == state and not (state == 'waiting' and h[2]) then ids[#ids + 1] = jobId end
    end
    redis.call('DEL', key)
  end
  take(prefix .. 'list', redis.call('LRANGE', prefix .. 'list', 0, -1), 'waiting')
  take(prefix .. 'ratelimited', redis.call('ZRANGE', prefix .. 'ratelimited', 0, -1),
    'rate-limited')
  for _, k in ipairs(redis.call('SMEMBERS', prefix .. 'groups')) do
    local gq = prefix .. 'groupq:' .. k
    take(gq, redis.call('ZRANGE', gq, 0, -1), 'group-waiting')
  end
  redis.call('HDEL', prefix .. 'meta', 'groupWaiting')
  for _, jobId in ipairs(ids) do
    local jobKey = prefix .. 'job:' .. jobId
    local j = redis.call('HMGET', jobKey, 'groupKey', 'orderingKey', 'orderingSeq', 'groupSlot')
    if j[1] then
      releaseHold(prefix, jobKey, j[1], j[2] and true or false, tonumber(j[3]) or 0,
        j[4] == '1', true, now, true)
      groupWaiting(prefix, j[1], -1)
    end
  end
  return ids
end

-- The server's clock in ms, for calls that are given no time.
local function clockMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

---------------------------------------------------------------------------------------------
-- ai-native: usage, streams, suspend and signal
--
-- usage (Job.report_usage, glidemq/usage.py): the job hash field 'usage' holds the job's
-- summed usage as JSON {model, provider, calls, latencyMs, tokens = {kind = n},
-- costs = {kind = amount}}. Each report also goes into the queue's bucket of its minute,
-- usage:{minute} (a hash: calls, tokens, cost, tok|kind, cost|kind, and per model mcalls|m,
-- mtok|m, mcost|m), listed in the sorted set 'usage' and kept USAGE_MINUTES, so a summary
-- reads buckets, never job hashes.

local USAGE_MINUTES = 10080 -- a week of per-minute buckets
local MAX_COST = 1e15
local MAX_USAGE_KINDS = 64

-- A finite number within lo..hi (fractions allowed), or nil.
local function num(v, lo, hi)
  local n = tonumber(v)
  if n and n == n and n >= lo and n <= hi then return n end
  return nil
end

-- The total of a report: its 'total' entry when given, else the sum of the others.
local function usageTotal(t)
  if t.total then return t.total end
  local s = 0
  for _, v in pairs(t) do s = s + v end
  return s
end

local function addInto(into, t)
  for k, v in pairs(t) do into[k] = (into[k] or 0) + v end
end

-- Flow budgets (FlowProducer.add(budget=...), glidemq/budget.py): hash budget:{rootId} in the
-- root's queue {maxTokens, maxCost (0: no cap), mode (fail|pause), tokens, cost, exceeded
-- (the reason, once a total passed its cap)}; every job of the flow has field 'budget' naming
-- it. Reports add to it; a job of the flow fetched after 'exceeded' is set fails with that
-- reason (fail) or is parked as suspended until the budget is raised (pause, set 'held').

-- Parses a budget {maxTotalTokens, maxTotalCost, onExceeded} (decoded JSON): the caps and the
-- mode, or nil and the name of the bad field.
local function budgetSpec(b)
  if type(b) ~= 'table' then return nil, nil, nil, 'budget' end
  local mt = b.maxTotalTokens == nil and 0 or int(b.maxTotalTokens, 0, MAX_INT)
  if not mt then return nil, nil, nil, 'budget.max_total_tokens' end
  local mc = b.maxTotalCost == nil and 0 or num(b.maxTotalCost, 0, MAX_COST)
  if not mc then return nil, nil, nil, 'budget.max_total_cost' end
  local mode = b.onExceeded or 'fail'
  if mode ~= 'fail' and mode ~= 'pause' then return nil, nil, nil, 'budget.on_exceeded' end
  return mt, mc, mode, nil
end

-- The reason a budget is exceeded, or false.
local function budgetReason(tokens, cost, maxTokens, maxCost)
  if maxTokens > 0 and tokens > maxTokens then
    return 'budget exceeded: total tokens ' .. tokens .. ' > cap ' .. maxTokens
  end
  if maxCost > 0 and cost > maxCost then
    return 'budget exceeded: total cost ' .. string.format('%.10g', cost) .. ' > cap '
      .. string.format('%.10g', maxCost)
  end
  return false
end

-- Adds a report to the budget hash bk and marks it exceeded when a total passes its cap.
local function chargeBudget(bk, tok, cost)
  local tokens = redis.call('HINCRBY', bk, 'tokens', tok)
  local total = tonumber(redis.call('HINCRBYFLOAT', bk, 'cost', cost))
  local b = redis.call('HMGET', bk, 'maxTokens', 'maxCost', 'exceeded')
  if not b[3] or b[3] == '' then
    local reason = budgetReason(tokens, total, tonumber(b[1]) or 0, tonumber(b[2]) or 0)
    if reason then redis.call('HSET', bk, 'exceeded', reason) end
  end
end

-- Token limiter (Worker token_limiter): hash 'tpm' {start, used} is a fixed window of tokens
-- reported by jobs of workers that have one; when a report fills it, meta field limitUntil
-- (the queue-wide pause every fetch respects) is set to the window's end, so no job starts
-- until then and none is dropped.

-- KEYS: usage (the bucket index), the job hash. ARGS: jobId, now, model, provider, latencyMs,
-- tpmMax, tpmDuration (0 0: no token limiter), n, then n token pairs (kind, count), then cost
-- pairs (kind, amount). Adds the report to the job's usage, to the bucket of the minute and to
-- the token window. Returns the job's usage (JSON) after it, or 0 when the job is gone
-- (nothing written).
-- @wire glidemq_reportUsage keys=2 args=8..
redis.register_function('glidemq_reportUsage', function(keys, args)
  local fname = 'glidemq_reportUsage'
  local err = shape(fname, keys, args, 2, 8)
  if err then return err end
  local now = int(args[2], 0, MAX_TIME)
  if not now then return badCall('ERR:BAD_TIMESTAMP', fname, 'now') end
  local latency, nt = int(args[5], 0, MAX_INT), int(args[8], 0, MAX_USAGE_KINDS)
  local tpmMax, tpmDur = int(args[6], 0, MAX_INT), int(args[7], 0, MAX_DELAY)
  if not latency or not nt or not tpmMax or not tpmDur or (tpmMax > 0 and tpmDur == 0) then
    return badCall('ERR:BAD_ARGS', fname, 'latencyMs, tpmMax, tpmDuration or n')
  end
  local costEnd = #args
  if costEnd < 8 + 2 * nt or (costEnd - 8) % 2 ~= 0 or costEnd - 8 - 2 * nt > 2 * MAX_USAGE_KINDS then
    return badCall('ERR:BAD_ARGS', fname, 'wrong number of token or cost pairs')
  end
  local tokens, costs = {}, {}
  for i = 9, costEnd, 2 do
    local kind = args[i]
    if kind == '' or string.find(kind, '|', 1, true) then
      return badCall('ERR:BAD_ARGS', fname, 'bad usage kind')
    end
    if i < 9 + 2 * nt then
      local n = int(args[i + 1], 0, MAX_INT)
      if not n then return badCall('ERR:BAD_ARGS', fname, 'token count of ' .. kind) end
      tokens[kind] = n
    else
      local x = num(args[i + 1], 0, MAX_COST)
      if not x then return badCall('ERR:BAD_ARGS', fname, 'cost of ' .. kind) end
      costs[kind] = x
    end
  end
  local jobKey = keys[2]
  if redis.call('EXISTS', jobKey) == 0 then return 0 end
  local jh = redis.call('HMGET', jobKey, 'usage', 'budget')
  local old = jh[1]
  local u
  if old then
    local ok, parsed = pcall(cjson.decode, old)
    if ok and type(parsed) == 'table' then u = parsed end
  end
  u = u or {}
  if type(u.tokens) ~= 'table' then u.tokens = {} end
  if type(u.costs) ~= 'table' then u.costs = {} end
  addInto(u.tokens, tokens)
  addInto(u.costs, costs)
  u.calls = (tonumber(u.calls) or 0) + 1
  u.latencyMs = (tonumber(u.latencyMs) or 0) + latency
  if args[3] ~= '' then u.model = args[3] end
  if args[4] ~= '' then u.provider = args[4] end
  local encoded = cjson.encode(u)
  redis.call('HSET', jobKey, 'usage', encoded)
  -- the minute's bucket
  local index = keys[1]
  local minute = math.floor(now / 60000)
  local bucket = index .. ':' .. minute
  local tok, cost = usageTotal(tokens), usageTotal(costs)
  if redis.call('HINCRBY', bucket, 'calls', 1) == 1 then
    redis.call('PEXPIRE', bucket, (USAGE_MINUTES + 1) * 60000)
    redis.call('ZADD', index, minute, minute)
    redis.call('ZREMRANGEBYSCORE', index, '-inf', minute - USAGE_MINUTES - 1)
  end
  redis.call('HINCRBY', bucket, 'tokens', tok)
  redis.call('HINCRBYFLOAT', bucket, 'cost', cost)
  for k, v in pairs(tokens) do redis.call('HINCRBY', bucket, 'tok|' .. k, v) end
  for k, v in pairs(costs) do redis.call('HINCRBYFLOAT', bucket, 'cost|' .. k, v) end
  local model = args[3] ~= '' and args[3] or (u.model or '')
  redis.call('HINCRBY', bucket, 'mcalls|' .. model, 1)
  redis.call('HINCRBY', bucket, 'mtok|' .. model, tok)
  redis.call('HINCRBYFLOAT', bucket, 'mcost|' .. model, cost)
  if jh[2] then chargeBudget(jh[2], tok, cost) end
  if tpmMax > 0 then
    local prefix = prefixOf(index, 'usage')
    local tpm = prefix .. 'tpm'
    local w = redis.call('HMGET', tpm, 'start', 'used')
    local start, used = tonumber(w[1]) or 0, tonumber(w[2]) or 0
    if now >= start + tpmDur then start, used = now, 0 end
    used = used + tok
    redis.call('HSET', tpm, 'start', start, 'used', used)
    redis.call('PEXPIRE', tpm, tpmDur * 2)
    if used >= tpmMax then
      local untilMs = start + tpmDur
      if untilMs > (tonumber(redis.call('HGET', prefix .. 'meta', 'limitUntil')) or 0) then
        redis.call('HSET', prefix .. 'meta', 'limitUntil', untilMs)
      end
    end
  end
  return encoded
end)

-- KEYS: usage (the bucket index). ARGS: fromMinute, toMinute (epoch minutes, inclusive).
-- Returns the buckets of those minutes summed, as a flat list of field, value (strings).
-- @wire glidemq_usageSummary keys=1 args=2
redis.register_function{function_name = 'glidemq_usageSummary', callback = function(keys, args)
  local fname = 'glidemq_usageSummary'
  local err = shape(fname, keys, args, 1, 2, 2)
  if err then return err end
  local from, to = int(args[1], 0, MAX_INT), int(args[2], 0, MAX_INT)
  if not from or not to then return badCall('ERR:BAD_ARGS', fname, 'fromMinute or toMinute') end
  local sum, order = {}, {}
  local minutes = redis.call('ZRANGEBYSCORE', keys[1], from, to, 'LIMIT', 0, USAGE_MINUTES + 1)
  for _, m in ipairs(minutes) do
    local h = redis.call('HGETALL', keys[1] .. ':' .. m)
    for i = 1, #h, 2 do
      local f = h[i]
      if not sum[f] then sum[f] = 0; order[#order + 1] = f end
      sum[f] = sum[f] + (tonumber(h[i + 1]) or 0)
    end
  end
  local out = {}
  for _, f in ipairs(order) do
    out[#out + 1] = f
    out[#out + 1] = string.format('%.17g', sum[f])
  end
  return out
end, flags = {'no-writes'}}

-- streams (Job.stream, glidemq/streams.py): a job's chunks go to the stream jstream:{id}
-- (entry field 'c'), capped at maxLen entries and expiring ttlMs after its last chunk.

local MAX_STREAM_LEN = 1000000
local MAX_CHUNK = 1048576

-- KEYS: the job hash, its stream. ARGS: maxLen, ttlMs, then one or more chunks. Returns the
-- entry id of the last chunk, or 0 when the job is gone (nothing written).
-- @wire glidemq_streamChunk keys=2 args=3..
redis.register_function('glidemq_streamChunk', function(keys, args)
  local fname = 'glidemq_streamChunk'
  local err = shape(fname, keys, args, 2, 3)
  if err then return err end
  local maxLen, ttl = int(args[1], 1, MAX_STREAM_LEN), int(args[2], 1, MAX_INT)
  if not maxLen or not ttl then return badCall('ERR:BAD_ARGS', fname, 'maxLen or ttlMs') end
  for i = 3, #args do
    if #args[i] > MAX_CHUNK then return badCall('ERR:PAYLOAD_TOO_LARGE', fname, 'chunk') end
  end
  if redis.call('EXISTS', keys[1]) == 0 then return 0 end
  local id
  for i = 3, #args do
    id = redis.call('XADD', keys[2], 'MAXLEN', maxLen, '*', 'c', args[i])
  end
  redis.call('PEXPIRE', keys[2], ttl)
  return id
end)

-- suspend and signal (Job.suspend, Queue.signal, glidemq/suspend.py): a suspended job has
-- left the stream and waits in the sorted set 'suspended', scored by its deadline (ms; +inf
-- without one), with job fields suspendReason and suspendUntil. A signal re-queues it and
-- appends {name, data, at} to the JSON list in job field 'signals'; a passed deadline fails it.

-- KEYS: stream, suspended, events. ARGS: now, jobId, entryId, reason, timeoutMs (0: none),
-- emitEvents. Ends the current run of a job this worker holds without counting an attempt
-- (a concurrency slot is given back; an ordering key stays with the job). Returns
-- 'suspended', 'stale' (the worker no longer owns it) or 'missing'.
-- @wire glidemq_suspend keys=3 args=6
redis.register_function('glidemq_suspend', function(keys, args)
  local fname = 'glidemq_suspend'
  local err = shape(fname, keys, args, 3, 6, 6)
  if err then return err end
  local now = int(args[1], 0, MAX_TIME)
  if not now then return badCall('ERR:BAD_TIMESTAMP', fname, 'now') end
  local timeout = int(args[5], 0, MAX_DELAY)
  if not timeout or not entryIdOk(args[3]) then
    return badCall('ERR:BAD_ARGS', fname, 'entryId or timeoutMs')
  end
  local stream, jobId, entryId = keys[1], args[2], args[3]
  local prefix = prefixOf(stream, 'stream')
  if redis.call('XACK', stream, GROUP, entryId) == 0 then return 'stale' end
  redis.call('XDEL', stream, entryId)
  local jobKey = prefix .. 'job:' .. jobId
  if redis.call('EXISTS', jobKey) == 0 then return 'missing' end
  local j = redis.call('HMGET', jobKey, 'groupKey', 'orderingKey', 'orderingSeq', 'groupSlot', 'state')
  if j[1] and j[5] == 'active' then
    releaseHold(prefix, jobKey, j[1], j[2] and true or false, tonumber(j[3]) or 0, j[4] == '1',
      false, now, false)
  end
  local deadline = timeout > 0 and (now + timeout) or '+inf'
  redis.call('ZADD', keys[2], deadline, jobId)
  redis.call('HSET', jobKey, 'state', 'suspended', 'suspendReason', args[4],
    'suspendUntil', timeout > 0 and deadline or '')
  if args[6] == '1' then emit(keys[3], 'suspended', jobId, 'reason', args[4]) end
  return 'suspended'
end)

-- KEYS: stream, suspended, events. ARGS: now, jobId, name, data (JSON), emitEvents.
-- Re-queues a suspended job with the signal appended to its 'signals'. Returns the job's new
-- state, 0 when it does not exist, or 'ERR:STATE' when it is not suspended (nothing written).
-- @wire glidemq_signal keys=3 args=5
redis.register_function('glidemq_signal', function(keys, args)
  local fname = 'glidemq_signal'
  local err = shape(fname, keys, args, 3, 5, 5)
  if err then return err end
  local now = int(args[1], 0, MAX_TIME)
  if not now then return badCall('ERR:BAD_TIMESTAMP', fname, 'now') end
  local jobId, name, data = args[2], args[3], args[4]
  if name == '' then return badCall('ERR:BAD_ARGS', fname, 'name') end
  if #data > MAX_DATA then return badCall('ERR:PAYLOAD_TOO_LARGE', fname, 'data') end
  if not pcall(cjson.decode, data) then return badCall('ERR:BAD_ARGS', fname, 'data is not JSON') end
  local prefix = prefixOf(keys[1], 'stream')
  local jobKey = prefix .. 'job:' .. jobId
  local h = redis.call('HMGET', jobKey, 'state', 'signals', 'priority')
  if not h[1] then return 0 end
  if h[1] ~= 'suspended' then return 'ERR:STATE' end
  local entry = '{"name":' .. cjson.encode(name) .. ',"data":' .. data .. ',"at":' .. now .. '}'
  local signals = h[2] and (string.sub(h[2], 1, -2) .. ',' .. entry .. ']') or ('[' .. entry .. ']')
  redis.call('ZREM', keys[2], jobId)
  redis.call('HSET', jobKey, 'signals', signals, 'suspendUntil', '')
  local state = requeue(prefix, jobKey, jobId, tonumber(h[3]) or 0, now, now)
  if args[5] == '1' then emit(keys[3], 'signaled', jobId, 'name', name) end
  return state
end)

-- KEYS: suspended, events. ARGS: now, limit. Fails suspended jobs whose deadline passed
-- (failedReason 'suspension timed out: <reason>'); they are kept in the failed set. Returns
-- how many failed.
-- @wire glidemq_expireSuspended keys=2 args=2
redis.register_function('glidemq_expireSuspended', function(keys, args)
  local fname = 'glidemq_expireSuspended'
  local err = shape(fname, keys, args, 2, 2, 2)
  if err then return err end
  local now, limit = int(args[1], 0, MAX_TIME), int(args[2], 1, 10000)
  if not now then return badCall('ERR:BAD_TIMESTAMP', fname, 'now') end
  if not limit then return badCall('ERR:BAD_ARGS', fname, 'limit') end
  local prefix = prefixOf(keys[1], 'suspended')
  local n = 0
  for _, jobId in ipairs(redis.call('ZRANGEBYSCORE', keys[1], '-inf', now, 'LIMIT', 0, limit)) do
    redis.call('ZREM', keys[1], jobId)
    local jobKey = prefix .. 'job:' .. jobId
    local h = redis.call('HMGET', jobKey, 'state', 'suspendReason')
    if h[1] == 'suspended' then
      local reason = 'suspension timed out'
      if h[2] and h[2] ~= '' then reason = reason .. ': ' .. h[2] end
      countMetric(prefix .. 'metrics:failed', now, 1)
      redis.call('HSET', jobKey, 'state', 'failed', 'failedReason', reason, 'finishedOn', now,
        'suspendUntil', '')
      redis.call('ZADD', prefix .. 'failed', now, jobId)
      emit(keys[2], 'failed', jobId, 'failedReason', reason)
      n = n + 1
    end
  end
  return n
end)

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

---------------------------------------------------------------------------------------------
-- add

-- Checks the 17 (+ lifo) addJob arguments at a[o]..a[o + 17] before anything is written.
-- Returns nil and the parsed values, or an addJob error reply.
local function checkAdd(a, o)
  local name, data, opts = a[o], a[o + 1], a[o + 2]
  if type(name) ~= 'string' or type(data) ~= 'string' or type(opts) ~= 'string' then
    return 'ERR:BAD_OPTION'
  end
  local now = int(a[o + 3], 0, MAX_TIME)
  if not now then return 'ERR:BAD_TIMESTAMP' end
  -- '' stands for 0 in the optional numbers, as some producers send it
  local delay = int(a[o + 4] == '' and 0 or a[o + 4], 0, MAX_DELAY)
  local priority = int(a[o + 5] == '' and 0 or a[o + 5], 0, MAX_PRIORITY)
  local maxAttempts = int(a[o + 7] == '' and 0 or a[o + 7], 0, MAX_INT)
  local ttl = int(a[o + 15] == '' and 0 or a[o + 15], 0, MAX_INT)
  if not delay or not priority or not maxAttempts or not ttl then return 'ERR:BAD_OPTION' end
  if dataTooLarge(data) or #opts > MAX_DATA then return 'ERR:PAYLOAD_TOO_LARGE' end
  local rttl = string.match(opts, '"resultTtl"%s*:%s*(%d+)')
  if rttl and #rttl > 15 then return 'ERR:BAD_OPTION' end
  local lockMs = string.match(opts, '"lockDuration"%s*:%s*(%d+)')
  if lockMs and #lockMs > 15 then return 'ERR:BAD_OPTION' end
  -- Arguments 10-15 configure the group named by the ordering key; without a key they mean
  -- nothing: refuse them rather than accept a promise that would not be kept.
  local orderingKey = a[o + 8] or ''
  local group
  if orderingKey ~= '' then
    group = groupArgs(a, o)
    if type(group) == 'string' then return group end
  else
    for i = 9, 14 do
      local v = a[o + i]
      if v ~= nil and v ~= '' and tonumber(v) ~= 0 then return 'ERR:BAD_OPTION' end
    end
  end
  local customId = a[o + 16] or ''
  if customId ~= '' and not validCustomId(customId) then return 'ERR:INVALID_JOB_ID' end
  return nil, {now = now, delay = delay, priority = priority, ttl = ttl, rttl = rttl,
    group = group, orderingKey = orderingKey, customId = customId, lockMs = lockMs,
    atMostOnce = string.find(opts, '"atMostOnce":true', 1, true) ~= nil}
end

-- a: argument table, o: index of the first of the 17 addJob arguments; a[o + 17] = '1' adds
-- the job LIFO (glidemq's 18th argument); v: what checkAdd returned for them.
local function addJobCore(idKey, events, a, o, v)
  local prefix = prefixOf(idKey, 'id')
  local name, data, opts = a[o], a[o + 1], a[o + 2]
  local now, delay, priority, ttl, rttl = v.now, v.delay, v.priority, v.ttl, v.rttl
  local parentId = a[o + 6] or ''
  local maxAttempts = a[o + 7]
  local orderingKey, group, customId = v.orderingKey, v.group, v.customId
  local lifo = a[o + 17] == '1' and delay == 0 and priority == 0

  local jobId
  if customId ~= '' then
    jobId = customId
    if redis.call('EXISTS', prefix .. 'job:' .. jobId) == 1 then return 'duplicate' end
    -- With a result cache, the id stays taken while the outcome of its last job is kept.
    if rttl and redis.call('EXISTS', prefix .. 'result:' .. jobId) == 1 then return 'duplicate' end
  else
    for _ = 1, 10 do
      local candidate = tostring(redis.call('INCR', idKey))
      if redis.call('EXISTS', prefix .. 'job:' .. candidate) == 0 then
        jobId = candidate
        break
      end
    end
    if jobId == nil then return 'ERR:ID_EXHAUSTED' end
  end
  if group and keyFull(prefix, orderingKey) then return KEY_FULL end

  local jobKey = prefix .. 'job:' .. jobId
  local state, sid
  if lifo then
    redis.call('RPUSH', prefix .. 'list', jobId)
    state = 'waiting'
  else
    state, sid = enqueue(prefix, jobId, priority, now + delay, now)
  end
  local fields = {'id', jobId, 'name', name, 'data', data, 'opts', opts, 'timestamp', now,
    'attemptsMade', 0, 'delay', delay, 'priority', priority, 'maxAttempts', maxAttempts,
    'state', state}
  if sid then fields[#fields + 1] = 'sid'; fields[#fields + 1] = sid end
  if parentId ~= '' then fields[#fields + 1] = 'parentId'; fields[#fields + 1] = parentId end
  if ttl > 0 then fields[#fields + 1] = 'expireAt'; fields[#fields + 1] = now + ttl end
  if rttl then fields[#fields + 1] = 'rttl'; fields[#fields + 1] = rttl end
  if lifo then fields[#fields + 1] = 'lifo'; fields[#fields + 1] = '1' end
  if v.lockMs then fields[#fields + 1] = 'lockDuration'; fields[#fields + 1] = v.lockMs end
  if v.atMostOnce then fields[#fields + 1] = 'atMostOnce'; fields[#fields + 1] = '1' end
  if group then
    for _, f in ipairs(joinGroup(prefix, orderingKey, group, now)) do fields[#fields + 1] = f end
  end
  redis.call('HSET', jobKey, unpack(fields))
  if not string.find(opts, '"skipEvents":true', 1, true) then
    emit(events, 'added', jobId, 'name', name)
  end
  return jobId
end

-- KEYS: id, stream, scheduled, events. ARGS: the 17 documented addJob arguments.
-- @wire glidemq_addJob keys=4 args=17..18
redis.register_function('glidemq_addJob', function(keys, args)
  local err = shape('glidemq_addJob', keys, args, 4, 17, 18)
  if err then return err end
  local bad, v = checkAdd(args, 1)
  if bad then return bad end
  local room = waitingRoom(prefixOf(keys[1], 'id'))
  if room and room <= 0 then return QUEUE_FULL end
  return addJobCore(keys[1], keys[4], args, 1, v)
end)

-- KEYS: id, stream, scheduled, events. ARGS: now, then runs of jobs that share everything but
-- their data. A run is n, name, opts, delay, priority, maxAttempts, ttl, customJobId, ext; when
-- ext is '1', 8 more follow: orderingKey, groupConcurrency, groupRateMax, groupRateDuration,
-- tbCapacity, tbRefillRate, jobCost, lifo (ext '' for a plain job); then n data arguments.
-- The compact form our own producers use: a bulk of like jobs costs about one argument per
-- job on both sides. Returns one addJob reply per job.
-- One run of addBulk as addJob arguments in a (a[2], the data, is left to the caller).
local function bulkRun(args, i, now, a)
  local ext = args[i + 8] == '1'
  a[1], a[3], a[4] = args[i + 1], args[i + 2], now
  a[5], a[6], a[7], a[8] = args[i + 3], args[i + 4], '', args[i + 5]
  if ext then
    for x = 9, 15 do a[x] = args[i + x] end
    a[18] = args[i + 16]
  else
    a[9], a[10], a[11], a[12], a[13], a[14], a[15] = '', '0', '0', '0', '0', '0', '0'
    a[18] = ''
  end
  a[16], a[17] = args[i + 6], args[i + 7]
  return i + (ext and 17 or 9)
end

-- @wire glidemq_addBulk keys=4 args=1..
redis.register_function('glidemq_addBulk', function(keys, args)
  local err = shape('glidemq_addBulk', keys, args, 4, 1)
  if err then return err end
  local now = args[1]
  if not int(now, 0, MAX_TIME) then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_addBulk', 'now') end
  -- Check the whole call first (layout, options, sizes): a malformed call writes nothing.
  local a, checked = {}, {}
  local i = 2
  while i <= #args do
    local n = int(args[i], 1, MAX_INT)
    local ext = args[i + 8] == '1'
    local last = i + (ext and 16 or 8) + (n or 0)
    if not n or last > #args then
      return badCall('ERR:BAD_ARGS', 'glidemq_addBulk', 'malformed run at argument ' .. i)
    end
    local first = bulkRun(args, i, now, a)
    a[2] = ''
    local bad, v = checkAdd(a, 1)
    if bad then return badCall(bad, 'glidemq_addBulk', 'run at argument ' .. i) end
    checked[#checked + 1] = v
    for d = first, last do
      if dataTooLarge(args[d]) then
        return badCall('ERR:PAYLOAD_TOO_LARGE', 'glidemq_addBulk', 'argument ' .. d)
      end
    end
    i = last + 1
  end
  local out = {}
  local room = waitingRoom(prefixOf(keys[1], 'id'))
  i = 2
  local run = 0
  while i <= #args do
    local n = tonumber(args[i])
    local first = bulkRun(args, i, now, a)
    run = run + 1
    local v = checked[run] -- the jobs of a run differ only in their data, checked above
    for d = first, first + n - 1 do
      if room and room <= 0 then
        out[#out + 1] = QUEUE_FULL
      else
        a[2] = args[d]
        local r = addJobCore(keys[1], keys[4], a, 1, v)
        out[#out + 1] = r
        if room and isAdded(r) then room = room - 1 end
      end
    end
    i = first + n
  end
  return out
end)

-- KEYS: dedup, id, stream, scheduled, events. ARGS: dedupId, ttlMs, mode, then the 17 addJob args.
-- @wire glidemq_dedup keys=5 args=20..21
redis.register_function('glidemq_dedup', function(keys, args)
  local err = shape('glidemq_dedup', keys, args, 5, 20, 21)
  if err then return err end
  local dedupKey = keys[1]
  local dedupId, ttl, mode = args[1], int(args[2] == '' and 0 or args[2], 0, MAX_INT), args[3]
  if mode ~= 'simple' and mode ~= 'throttle' and mode ~= 'debounce' then
    return 'ERR:BAD_DEDUP_MODE'
  end
  if not ttl then return 'ERR:BAD_OPTION' end
  -- the new job's arguments are checked before a debounce deletes the job it replaces
  local bad, v = checkAdd(args, 4)
  if bad then return bad end
  local now = v.now
  local prefix = prefixOf(dedupKey, 'dedup')
  local room = waitingRoom(prefix)
  local entry = redis.call('HGET', dedupKey, dedupId)
  if entry then
    local sep = string.find(entry, ':', 1, true)
    local prevId = string.sub(entry, 1, (sep or 0) - 1)
    local prevTs = tonumber(string.sub(entry, (sep or #entry) + 1)) or 0
    local prevKey = prefix .. 'job:' .. prevId
    local prevState = redis.call('HGET', prevKey, 'state')
    if mode == 'simple' then
      if prevState and not isTerminal(prevState) then return 'skipped' end
    elseif mode == 'throttle' then
      if now - prevTs < ttl then return 'skipped' end
    elseif mode == 'debounce' then
      if prevState == 'delayed' or prevState == 'prioritized' then
        -- the replaced job frees its place; refuse before deleting anything
        if room and room + 1 <= 0 then return QUEUE_FULL end
        if room then room = room + 1 end
        redis.call('ZREM', keys[4], prevId)
        forgetJob(prefix, prevKey, prevId, now)
        deleteJob(prefix, prevId)
        emit(keys[5], 'removed', prevId, 'reason', 'debounced')
      elseif prevState and not isTerminal(prevState) then
        return 'skipped'
      end
    else
      return 'ERR:BAD_DEDUP_MODE'
    end
  end
  if room and room <= 0 then return QUEUE_FULL end
  local jobId = addJobCore(keys[2], keys[5], args, 4, v)
  if jobId ~= 'duplicate' and string.sub(jobId, 1, 4) ~= 'ERR:' then
    redis.call('HSET', dedupKey, dedupId, jobId .. ':' .. args[7])
  end
  return jobId
end)

---------------------------------------------------------------------------------------------
-- scheduling

-- KEYS: scheduled, stream, events. ARGS: now, limit, prioritizedLimit.
-- Moves due delayed jobs of priority 0 and due rate-limited jobs to the stream; moves LIFO
-- jobs, then prioritized jobs only while the stream holds nothing undelivered, so priority
-- order is kept among waiting jobs. Returns {moved, nextDueMs or -1} (the earliest due time of
-- a delayed or rate-limited job).
-- @wire glidemq_promote keys=3 args=2..3
redis.register_function('glidemq_promote', function(keys, args)
  local scheduled = keys[1]
  local prefix = prefixOf(scheduled, 'scheduled')
  local err = shape('glidemq_promote', keys, args, 3, 2, 3)
  if err then return err end
  local now = int(args[1], 0, MAX_TIME)
  local limit = int(args[2], 0, MAX_INT)
  local prioLimit = int(args[3] or '0', 0, MAX_INT)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_promote', 'now') end
  if not limit or not prioLimit then return badCall('ERR:BAD_ARGS', 'glidemq_promote', 'limit') end
  local due = redis.call('ZRANGEBYSCORE', scheduled, 0, now + LAST_TIE, 'LIMIT', 0, limit)
  releaseDue(prefix, scheduled, due)
  local moved = #due + promoteRateLimited(prefix, now, limit)
  if prioLimit > 0 then
    local ok, pending = pcall(redis.call, 'XPENDING', keys[2], GROUP)
    local active = 0
    if ok then active = tonumber(pending[1]) end
    if redis.call('XLEN', keys[2]) - active <= 0 then
      -- LIFO jobs come before prioritized ones (they have priority 0)
      local lifo = admitLifo(prefix, keys[2], prioLimit)
      local ids = takeDueBands(scheduled, now, prioLimit - lifo)
      moveToStream(prefix, scheduled, ids)
      moved = moved + lifo + #ids
    end
  end
  local nextDue = -1
  local first = redis.call('ZRANGEBYSCORE', scheduled, 0, SHIFT - 1, 'WITHSCORES', 'LIMIT', 0, 1)
  if #first > 0 then nextDue = math.floor(tonumber(first[2])) end
  local rl = redis.call('ZRANGE', prefix .. 'ratelimited', 0, 0, 'WITHSCORES')
  if #rl > 0 and (nextDue < 0 or tonumber(rl[2]) < nextDue) then nextDue = tonumber(rl[2]) end
  return {moved, nextDue}
end)

-- KEYS: scheduled. ARGS: now. Returns {next due time of a delayed job or -1, count in bands >= 1}.
-- @wire glidemq_nextDue keys=1 args=0..1
redis.register_function{function_name = 'glidemq_nextDue', callback = function(keys, args)
  local err = shape('glidemq_nextDue', keys, args, 1, 0, 1)
  if err then return err end
  if args[1] and not int(args[1], 0, MAX_TIME) then
    return badCall('ERR:BAD_TIMESTAMP', 'glidemq_nextDue', 'now')
  end
  local first = redis.call('ZRANGEBYSCORE', keys[1], 0, SHIFT - 1, 'WITHSCORES', 'LIMIT', 0, 1)
  local nextDue = -1
  if #first > 0 then nextDue = math.floor(tonumber(first[2])) end
  return {nextDue, redis.call('ZCOUNT', keys[1], SHIFT, '+inf')}
end, flags = {'no-writes'}}

---------------------------------------------------------------------------------------------
-- activation

-- Marks stream entries as active and returns {entryId, jobId, {hash fields...}} triples, flat.
---------------------------------------------------------------------------------------------
-- leaving the active state
--
-- Every path that takes a job out of the active state calls leaveActive once, before the job
-- hash can be deleted. outcome: 'completed' and 'failed' (finished for good), 'retry' (failed,
-- will run again), 'requeued' (stalled or handed back), 'delayed' (moved to delayed while
-- running), 'waiting-children' (moved to wait for its children while running; it runs again
-- later, like 'delayed'). One HMGET per call keeps the hot path cheap for plain jobs.

-- Groups and ordering keys: give back the slot the job held. Must be idempotent.
local function releaseGroupSlot(prefix, jobKey, jobId, groupKey, outcome, now)
  local j = redis.call('HMGET', jobKey, 'orderingKey', 'orderingSeq', 'groupSlot', 'state')
  local finished = outcome == 'completed' or outcome == 'failed'
  -- Read from the stream but never started (handed back, or its reader died): a reservation
  -- stays with the job going back to the stream, so it keeps its place in the group.
  local unused = j[4] ~= 'active'
  if unused and not finished then return end
  -- An ordering key stays with a job that runs again (retry, stall, delay): strict order.
  -- A concurrency slot is given back on every exit; HDEL of groupSlot makes that once only.
  releaseHold(prefix, jobKey, groupKey, j[1] and true or false, tonumber(j[2]) or 0,
    j[3] == '1', finished, now, unused)
end

-- Flows. A job reference is its queue prefix without the last ':', then ':' and the id
-- ('glide:{q}:42'). deps:{id} holds the references of the children a parent still waits for.
-- A child names its first parent in parentId / parentQueue ('glide:{pq}') and any further
-- parents in extraParents (references joined by '\n'). What finished children left for a
-- parent lives in the parent's own hash ('cv:<ref>' = return value, 'cf:<ref>' = reason of an
-- ignored failure), so whatever deletes the parent deletes it too.

local function serverNow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function jobRef(prefix, jobId)
  return string.sub(prefix, 1, #prefix - 1) .. ':' .. jobId
end

-- 'glide:{q}:42' -> 'glide:{q}:', '42' (ids and queue names contain no ':').
local function splitRef(ref)
  local i = string.find(ref, ':[^:]*$')
  if not i or i == #ref then return nil, nil end
  return string.sub(ref, 1, i), string.sub(ref, i + 1)
end

-- parentQueue is 'glide:{pq}'; a bare queue name (as some producers write it) is read too.
local function parentPrefixOf(childPrefix, parentQueue)
  if not parentQueue or parentQueue == '' then return childPrefix end
  if string.find(parentQueue, '{', 1, true) then return parentQueue .. ':' end
  local tag = string.find(childPrefix, ':{', 1, true) or 0
  return string.sub(childPrefix, 1, tag) .. '{' .. parentQueue .. '}:'
end

-- What a child's final failure does to its parents (BullMQ's option names, in the child's
-- opts): fail them (the default), or drop the dependency, recorded ('ignore') or not ('remove'),
-- or record it and run the parent at once ('continue').
local function failurePolicy(opts)
  if opts then
    if string.find(opts, '"ignoreDependencyOnFailure":true', 1, true) then return 'ignore' end
    if string.find(opts, '"removeDependencyOnFailure":true', 1, true) then return 'remove' end
    if string.find(opts, '"continueParentOnFailure":true', 1, true) then return 'continue' end
  end
  return 'fail'
end

-- A parent whose last pending child finished: runnable now, or after its own delay.
local function wakeParent(pPrefix, pKey, pid, now)
  redis.call('ZREM', pPrefix .. 'waiting-children', pid)
  local h = redis.call('HMGET', pKey, 'priority', 'delay')
  local delay = tonumber(h[2]) or 0
  local state = requeue(pPrefix, pKey, pid, tonumber(h[1]) or 0, now + delay, now)
  if state == 'delayed' then
    emit(pPrefix .. 'events', 'delayed', pid, 'delay', delay, 'reason', 'children')
  else
    emit(pPrefix .. 'events', 'waiting', pid, 'reason', 'children')
  end
end

-- Settles one child with one parent. Returns the parent's reason when the child's failure
-- failed that parent too (its own parents are told next).
local function settleChild(pPrefix, pid, ref, outcome, value, policy, now)
  local depsKey = pPrefix .. 'deps:' .. pid
  if redis.call('SREM', depsKey, ref) == 0 then return nil end -- not pending: settled before
  local pKey = pPrefix .. 'job:' .. pid
  local pstate = redis.call('HGET', pKey, 'state')
  if not pstate then return nil end
  if outcome == 'completed' then
    redis.call('HSET', pKey, 'cv:' .. ref, value or 'null')
  elseif outcome == 'failed' then
    if policy == 'ignore' then
      redis.call('HSET', pKey, 'cf:' .. ref, value or '')
    elseif policy == 'continue' then
      -- The parent runs now with the failure recorded; children still pending stay its deps.
      redis.call('HSET', pKey, 'cf:' .. ref, value or '')
      if pstate == 'waiting-children' then wakeParent(pPrefix, pKey, pid, now) end
      return nil
    elseif policy == 'fail' then
      local reason = 'child ' .. ref .. ' failed: ' .. tostring(value or '')
      if pstate == 'waiting-children' then
        redis.call('ZREM', pPrefix .. 'waiting-children', pid)
        redis.call('HSET', pKey, 'state', 'failed', 'failedReason', reason, 'finishedOn', now)
        redis.call('ZADD', pPrefix .. 'failed', now, pid)
        emit(pPrefix .. 'events', 'failed', pid, 'failedReason', reason)
        return reason
      elseif not isTerminal(pstate) then
        -- A running parent learns it from moveToWaitingChildren.
        redis.call('HSET', pKey, 'childFailed', reason)
      end
      return nil
    end
  end
  if pstate == 'waiting-children' and redis.call('EXISTS', depsKey) == 0 then
    wakeParent(pPrefix, pKey, pid, now)
  end
  return nil
end

-- Settles a finished or deleted job with every parent waiting for it. outcome: 'completed',
-- 'failed' or 'removed'; value: the return value or the failure reason. A work list, not
-- recursion: a failure can travel up a chain of any length.
local function flowNotify(prefix, jobKey, jobId, outcome, value, now)
  local work = {{prefix, jobKey, jobId, outcome, value}}
  local i = 1
  while i <= #work do
    local w = work[i]
    i = i + 1
    local h = redis.call('HMGET', w[2], 'parentId', 'parentQueue', 'extraParents')
    if h[1] then
      now = now or serverNow()
      local policy = 'fail'
      if w[4] == 'failed' then policy = failurePolicy(redis.call('HGET', w[2], 'opts')) end
      local ref = jobRef(w[1], w[3])
      local parents = {{parentPrefixOf(w[1], h[2]), h[1]}}
      if h[3] then
        for other in string.gmatch(h[3], '[^\n]+') do
          local pp, pid = splitRef(other)
          if pp then parents[#parents + 1] = {pp, pid} end
        end
      end
      for _, p in ipairs(parents) do
        local reason = settleChild(p[1], p[2], ref, w[4], w[5], policy, now)
        if reason then work[#work + 1] = {p[1], p[1] .. 'job:' .. p[2], p[2], 'failed', reason} end
      end
    end
  end
end

-- Flows: tell the parents a child finished. Only for 'completed' and 'failed'.
local function notifyParent(prefix, jobKey, jobId, parentId, outcome, value, now)
  flowNotify(prefix, jobKey, jobId, outcome, value, now)
end

-- Returns the job's result-cache ttl ('rttl', read in the same HMGET) or false.
local function leaveActive(prefix, jobKey, jobId, outcome, value, now)
  local h = redis.call('HMGET', jobKey, 'parentId', 'groupKey', 'rttl')
  if h[2] then
    releaseGroupSlot(prefix, jobKey, jobId, h[2], outcome, now)
    if outcome ~= 'completed' and outcome ~= 'failed' then groupWaiting(prefix, h[2], 1) end
  end
  if h[1] and (outcome == 'completed' or outcome == 'failed') then
    notifyParent(prefix, jobKey, jobId, h[1], outcome, value, now)
  end
  return h[3]
end

-- An entry this library did not write (no 'id' field: another producer shares the stream) is
-- never deleted unread. It moves to the 'quarantine' stream with its fields plus glidemqEntryId,
-- glidemqReason and glidemqAt; meta field 'quarantined' counts such entries and a
-- 'quarantined' event names them. A job hash it names by 'jobId' (glide-mq's field) that is
-- waiting for this entry fails with the same reason. now: ms, or nil for the server's clock.
local function quarantine(prefix, stream, events, entryId, f, now)
  now = now or clockMs()
  local reason = 'stream entry ' .. entryId .. " has no 'id' field (written by another producer?); "
    .. 'moved to ' .. prefix .. 'quarantine'
  local kept, named = {}, nil
  for i = 1, #f, 2 do
    kept[#kept + 1] = f[i]
    kept[#kept + 1] = f[i + 1] or ''
    if f[i] == 'jobId' then named = f[i + 1] end
  end
  kept[#kept + 1] = 'glidemqEntryId'
  kept[#kept + 1] = entryId
  kept[#kept + 1] = 'glidemqReason'
  kept[#kept + 1] = reason
  kept[#kept + 1] = 'glidemqAt'
  kept[#kept + 1] = now
  redis.call('XADD', prefix .. 'quarantine', '*', unpack(kept))
  redis.call('XACK', stream, GROUP, entryId)
  redis.call('XDEL', stream, entryId)
  redis.call('HINCRBY', prefix .. 'meta', 'quarantined', 1)
  emit(events, 'quarantined', named or '', 'entryId', entryId, 'reason', reason)
  if named and validCustomId(named) then
    local jobKey = prefix .. 'job:' .. named
    local h = redis.call('HMGET', jobKey, 'state', 'sid')
    if h[1] and not isTerminal(h[1]) and h[1] ~= 'active' and (not h[2] or h[2] == entryId) then
      redis.call('HSET', jobKey, 'state', 'failed', 'failedReason', reason, 'finishedOn', now)
      redis.call('ZADD', prefix .. 'failed', now, named)
      countMetric(prefix .. 'metrics:failed', now, 1)
      emit(events, 'failed', named, 'failedReason', reason)
    end
  end
end

-- A fetched job of a budgeted flow (bk: its budget hash) whose budget is exceeded: fails with
-- the budget's reason (its parents hear of it) or, in pause mode, is parked as suspended and
-- listed in bk:held for glidemq_setFlowBudget. Returns whether it was.
local function budgetStops(prefix, stream, events, entryId, jobId, jobKey, bk, now, emitEvents)
  local b = redis.call('HMGET', bk, 'exceeded', 'mode')
  if not b[1] or b[1] == '' then return false end
  redis.call('XACK', stream, GROUP, entryId)
  redis.call('XDEL', stream, entryId)
  redis.call('HDEL', jobKey, 'sid')
  if b[2] == 'pause' then
    redis.call('ZADD', prefix .. 'suspended', '+inf', jobId)
    redis.call('HSET', jobKey, 'state', 'suspended', 'suspendReason', b[1], 'suspendUntil', '')
    redis.call('SADD', bk .. ':held', jobRef(prefix, jobId))
    if emitEvents then emit(events, 'suspended', jobId, 'reason', b[1]) end
  else
    countMetric(prefix .. 'metrics:failed', now, 1)
    redis.call('HSET', jobKey, 'state', 'failed', 'failedReason', b[1], 'finishedOn', now)
    redis.call('ZADD', prefix .. 'failed', now, jobId)
    emit(events, 'failed', jobId, 'failedReason', b[1])
    flowNotify(prefix, jobKey, jobId, 'failed', b[1], now)
  end
  return true
end

-- moved: where the ids of quarantined entries are listed (or nil).
local function activate(prefix, stream, entries, now, out, emitEvents, events, moved)
  for _, e in ipairs(entries) do
    local entryId, f = e[1], e[2]
    local jobId = entryJobId(f)
    local jobKey = jobId and (prefix .. 'job:' .. jobId)
    local h = jobKey and redis.call('HMGET', jobKey, 'state', 'groupKey', 'budget')
    local state = h and h[1]
    if f and not jobId then
      quarantine(prefix, stream, events, entryId, f, now)
      if moved then moved[#moved + 1] = entryId end
    elseif not state or isTerminal(state) or state == 'active' or state == 'group-waiting'
        or state == 'rate-limited' then
      -- Orphan entry (job removed, finished or parked): drop it so it is not redelivered.
      redis.call('XACK', stream, GROUP, entryId)
      redis.call('XDEL', stream, entryId)
    elseif h[3] and budgetStops(prefix, stream, events, entryId, jobId, jobKey, h[3], now,
        emitEvents) then
      -- failed or parked by its flow's budget
    elseif h[2] and not admitGroupJob(prefix, stream, entryId, jobId, jobKey, h[2], now,
        emitEvents, events) then
      -- parked or dead-lettered by its group
    else
      if h[2] then groupWaiting(prefix, h[2], -1) end
      redis.call('HSET', jobKey, 'state', 'active', 'processedOn', now, 'sid', entryId)
      out[#out + 1] = entryId
      out[#out + 1] = jobId
      out[#out + 1] = redis.call('HGETALL', jobKey)
      if emitEvents then emit(events, 'active', jobId) end
    end
  end
end

local function readEntries(stream, consumer, count)
  local r = redis.call('XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', count, 'STREAMS', stream, '>')
  if r and r[1] then return r[1][2] end
  return {}
end

-- Returns the entries read (-1: the queue is paused) and, when a queue-wide limit stopped
-- the fetch, the ms until it may succeed. lim: the worker's limiter or nil.
local function fetch(prefix, keys, consumer, count, now, emitEvents, out, lim, moved)
  local stream, scheduled, events, meta = keys[1], keys[4], keys[3], keys[5]
  if count <= 0 then return 0, 0 end
  local m = redis.call('HMGET', meta, unpack(META_LIMITS))
  if m[1] == '1' then return -1, 0 end
  local charge
  if lim or m[2] or m[4] or m[5] then
    local wait
    count, wait, charge = queueAllowance(prefix, stream, m, lim, count, now, 0)
    if count <= 0 then return 0, wait end
  end
  local entries = readEntries(stream, consumer, count)
  if #entries < count then
    -- Stream exhausted: admit LIFO jobs, newest first, then prioritized work in priority
    -- order, then read them.
    local short = count - #entries
    local lifo = admitLifo(prefix, stream, short)
    local ids = takeDueBands(scheduled, now, short - lifo)
    if #ids > 0 then moveToStream(prefix, scheduled, ids) end
    if lifo + #ids > 0 then
      local more = readEntries(stream, consumer, short)
      for _, e in ipairs(more) do entries[#entries + 1] = e end
    end
  end
  local before = #out
  activate(prefix, stream, entries, now, out, emitEvents, events, moved)
  if charge then chargeWindows(prefix, charge, (#out - before) / 3, now) end
  return #entries, 0
end

local EVENT_VALUE_MAX = 16384 -- bytes of a return value a 'completed' event carries

-- KEYS: stream, completed, events, scheduled, meta.
-- ARGS: now, consumer, fetchCount, emitEvents, nCompletions,
--       then per completion: jobId, entryId, returnvalue, keepCount, keepAge,
--       then optionally the worker's limiter: max, duration (ms).
-- Returns {statuses, fetched (flat triples), paused, waitMs, quarantined entry ids}; waitMs > 0 when a queue-wide
-- limit (rate, concurrency, Worker.rate_limit) stopped the fetch: ask again after that long. A completion whose entry is no longer
-- pending for the group (the job was reclaimed and handed to another worker) is a no-op
-- reported as 'stale', so a job is never completed twice.
local function completeOne(prefix, stream, completed, events, now, jobId, entryId, rv,
                           keepCount, keepAge, emitEvents)
  if redis.call('XACK', stream, GROUP, entryId) == 0 then return 'stale' end
  redis.call('XDEL', stream, entryId)
  local jobKey = prefix .. 'job:' .. jobId
  if redis.call('EXISTS', jobKey) == 0 then return 'missing' end
  local rttl = leaveActive(prefix, jobKey, jobId, 'completed', rv, now)
  if rttl then
    keepResult(prefix, jobId, rttl, 'state', 'completed', 'returnvalue', rv, 'finishedOn', now)
  end
  if keepCount == 0 then
    deleteJob(prefix, jobId)
  else
    redis.call('HSET', jobKey, 'state', 'completed', 'returnvalue', rv, 'finishedOn', now)
    redis.call('ZADD', completed, now, jobId)
    retain(prefix, completed, now, keepCount, keepAge)
  end
  if emitEvents then
    -- events stay small: a larger value is read from the job
    if #rv <= EVENT_VALUE_MAX then
      emit(events, 'completed', jobId, 'returnvalue', rv)
    else
      emit(events, 'completed', jobId, 'returnvalueBytes', #rv)
    end
  end
  return 'ok'
end

-- Checks completion arguments: n of them from args[i] (jobId, entryId, returnvalue, keepCount,
-- keepAge). Returns an error reply, or nil.
local function checkCompletions(fname, args, i, n)
  for _ = 1, n do
    if not entryIdOk(args[i + 1]) or not int(args[i + 3], -1, MAX_INT)
        or not int(args[i + 4], 0, MAX_INT) then
      return badCall('ERR:BAD_ARGS', fname, 'completion at argument ' .. i)
    end
    i = i + 5
  end
  return nil
end

-- The worker limiter arguments (max, duration), absent or non-negative integers.
local function limiterOk(max, duration)
  return (max == nil or int(max, 0, MAX_INT)) and (duration == nil or int(duration, 0, MAX_INT))
end

-- @wire glidemq_completeAndFetchNext keys=5 args=5..
redis.register_function('glidemq_completeAndFetchNext', function(keys, args)
  local err = shape('glidemq_completeAndFetchNext', keys, args, 5, 5)
  if err then return err end
  local stream, completed, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local now = int(args[1], 0, MAX_TIME)
  local consumer = args[2]
  local fetchCount = int(args[3], 0, MAX_INT)
  local emitEvents = args[4] == '1'
  local n = int(args[5], 0, MAX_INT)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_completeAndFetchNext', 'now') end
  if not fetchCount or not n or consumer == '' or (#args ~= 5 + 5 * n and #args ~= 7 + 5 * n)
      or not limiterOk(args[6 + 5 * n], args[7 + 5 * n]) then
    return badCall('ERR:BAD_ARGS', 'glidemq_completeAndFetchNext', 'arguments')
  end
  err = checkCompletions('glidemq_completeAndFetchNext', args, 6, n)
  if err then return err end
  local statuses = {}
  local done = 0
  local i = 6
  for c = 1, n do
    local jobId, entryId, rv = args[i], args[i + 1], args[i + 2]
    local keepCount, keepAge = tonumber(args[i + 3]), tonumber(args[i + 4])
    i = i + 5
    statuses[c] = completeOne(prefix, stream, completed, events, now, jobId, entryId, rv,
      keepCount, keepAge, emitEvents)
    if statuses[c] == 'ok' then done = done + 1 end
  end
  if done > 0 then countMetric(prefix .. 'metrics:completed', now, done) end
  local out, moved = {}, {}
  local got, wait = fetch(prefix, keys, consumer, fetchCount, now, emitEvents, out,
    limiterArg(args[i], args[i + 1]), moved)
  return {statuses, out, got == -1 and 1 or 0, wait, moved}
end)

-- KEYS: stream, completed, events, scheduled, meta. ARGS: same as completeAndFetchNext with
-- fetchCount 0. Kept as its own name for the documented function list.
-- @wire glidemq_complete keys=5 args=10
redis.register_function('glidemq_complete', function(keys, args)
  local err = shape('glidemq_complete', keys, args, 5, 10, 10)
  if err then return err end
  local stream, completed, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local now = int(args[1], 0, MAX_TIME)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_complete', 'now') end
  err = checkCompletions('glidemq_complete', args, 6, 1)
  if err then return err end
  local status = completeOne(prefix, stream, completed, events, now, args[6], args[7], args[8],
    tonumber(args[9]), tonumber(args[10]), args[4] == '1')
  if status == 'ok' then countMetric(prefix .. 'metrics:completed', now, 1) end
  return status
end)

-- KEYS: stream, completed, events, scheduled, meta. ARGS: now, emitEvents, limiterMax,
-- limiterDuration ('0' '0' without a limiter), then entryId/jobId pairs read by a blocking
-- XREADGROUP. Returns the fetched triples.
-- @wire glidemq_moveToActive keys=5 args=4..
redis.register_function('glidemq_moveToActive', function(keys, args)
  local err = shape('glidemq_moveToActive', keys, args, 5, 4)
  if err then return err end
  local stream = keys[1]
  local prefix = prefixOf(stream, 'stream')
  local now = int(args[1], 0, MAX_TIME)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_moveToActive', 'now') end
  if #args % 2 ~= 0 or not limiterOk(args[3], args[4]) then
    return badCall('ERR:BAD_ARGS', 'glidemq_moveToActive', 'arguments')
  end
  for i = 5, #args, 2 do
    if not entryIdOk(args[i]) then
      return badCall('ERR:BAD_ARGS', 'glidemq_moveToActive', 'entry id at argument ' .. i)
    end
  end
  local entries = {}
  for i = 5, #args, 2 do
    local f = {'id', args[i + 1]}
    if args[i + 1] == '' then
      -- The reader found no job id: see what the entry holds (another producer's is kept).
      local r = redis.call('XRANGE', stream, args[i], args[i])
      if r[1] and not entryJobId(r[1][2]) then
        quarantine(prefix, stream, keys[3], args[i], r[1][2], now)
        f = nil
      end
    end
    if f then entries[#entries + 1] = {args[i], f} end
  end
  local out = {}
  local m = redis.call('HMGET', keys[5], unpack(META_LIMITS))
  local lim = limiterArg(args[3], args[4])
  local allowed, charge = #entries, nil
  if m[1] == '1' then
    allowed = 0
  elseif lim or m[2] or m[4] or m[5] then
    local _
    allowed, _, charge = queueAllowance(prefix, stream, m, lim, #entries, now, #entries)
  end
  if allowed < #entries then
    -- Read by a blocking XREADGROUP after the queue was paused or while a queue-wide limit
    -- was used up by others: hand the jobs over the limit back, unstarted.
    for idx = allowed + 1, #entries do
      local e = entries[idx]
      entries[idx] = nil
      if redis.call('XACK', stream, GROUP, e[1]) == 1 then
        redis.call('XDEL', stream, e[1])
        local jobKey = prefix .. 'job:' .. e[2][2]
        if redis.call('HGET', jobKey, 'state') == 'waiting' then
          redis.call('HSET', jobKey, 'sid', redis.call('XADD', stream, '*', 'id', e[2][2]))
        end
      end
    end
  end
  activate(prefix, stream, entries, now, out, args[2] == '1', keys[3])
  if charge then chargeWindows(prefix, charge, #out / 3, now) end
  return out
end)

---------------------------------------------------------------------------------------------
-- failure, stall, hand-back

local function finalFail(prefix, jobKey, jobId, reason, now, failedSet, keepCount, keepAge, events,
                         emitEvents, deadLetter)
  countMetric(prefix .. 'metrics:failed', now, 1)
  redis.call('HSET', jobKey, 'state', 'failed', 'failedReason', reason, 'finishedOn', now)
  if deadLetter then
    redis.call('HSET', jobKey, 'deadLetter', '1')
    redis.call('ZADD', prefix .. 'dlq', now, jobId)
  elseif keepCount == 0 then
    deleteJob(prefix, jobId)
  else
    redis.call('ZADD', failedSet, now, jobId)
    retain(prefix, failedSet, now, keepCount, keepAge)
  end
  if emitEvents then emit(events, 'failed', jobId, 'failedReason', reason) end
end

-- An at-most-once job (job field atMostOnce) whose run was interrupted (its worker died,
-- stalled, or handed it back on close) never runs again: it is dead-lettered, 'interrupted'.
local function interrupted(prefix, jobKey, jobId, now, events, emitEvents)
  local reason = 'interrupted'
  redis.call('HINCRBY', jobKey, 'attemptsMade', 1)
  local rttl = leaveActive(prefix, jobKey, jobId, 'failed', reason, now)
  if rttl then
    keepResult(prefix, jobId, rttl, 'state', 'failed', 'failedReason', reason, 'finishedOn', now)
  end
  finalFail(prefix, jobKey, jobId, reason, now, prefix .. 'failed', -1, 0, events, emitEvents, true)
end

-- KEYS: stream, failed, events, scheduled, meta.
-- ARGS: now, emitEvents, jobId, entryId, reason, retryDelay (-1: do not retry), keepCount,
--       keepAge, deadLetter ('1' to park final failures in the dead-letter set), stacktrace.
-- Returns 'retry', 'failed' or 'stale'.
-- @wire glidemq_fail keys=5 args=9..10
redis.register_function('glidemq_fail', function(keys, args)
  local err = shape('glidemq_fail', keys, args, 5, 9, 10)
  if err then return err end
  local stream, failedSet, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local now = int(args[1], 0, MAX_TIME)
  local emitEvents = args[2] == '1'
  local jobId, entryId, reason = args[3], args[4], args[5]
  local retryDelay = int(args[6], -1, MAX_DELAY)
  local keepCount, keepAge = int(args[7], -1, MAX_INT), int(args[8], 0, MAX_INT)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_fail', 'now') end
  if not retryDelay then return badCall('ERR:BAD_OPTION', 'glidemq_fail', 'retryDelay') end
  if not keepCount or not keepAge or not entryIdOk(entryId) then
    return badCall('ERR:BAD_ARGS', 'glidemq_fail', 'arguments')
  end
  local deadLetter = args[9] == '1'
  local stack = args[10] or ''
  if redis.call('XACK', stream, GROUP, entryId) == 0 then return 'stale' end
  redis.call('XDEL', stream, entryId)
  local jobKey = prefix .. 'job:' .. jobId
  if redis.call('EXISTS', jobKey) == 0 then return 'missing' end
  local attempts = redis.call('HINCRBY', jobKey, 'attemptsMade', 1)
  local h = redis.call('HMGET', jobKey, 'maxAttempts', 'priority', 'revoked')
  local maxAttempts = tonumber(h[1]) or 0
  if stack ~= '' then redis.call('HSET', jobKey, 'stacktrace', stack) end
  if retryDelay >= 0 and attempts < maxAttempts and h[3] ~= '1' then
    redis.call('HSET', jobKey, 'failedReason', reason)
    leaveActive(prefix, jobKey, jobId, 'retry', reason, now)
    requeue(prefix, jobKey, jobId, tonumber(h[2]) or 0, now + retryDelay, now)
    if emitEvents then emit(events, 'retrying', jobId, 'failedReason', reason, 'attemptsMade', attempts) end
    return 'retry'
  end
  local rttl = leaveActive(prefix, jobKey, jobId, 'failed', reason, now)
  if rttl then
    keepResult(prefix, jobId, rttl, 'state', 'failed', 'failedReason', reason, 'stacktrace', stack,
      'finishedOn', now)
  end
  finalFail(prefix, jobKey, jobId, reason, now, failedSet, keepCount, keepAge, events, emitEvents,
    deadLetter)
  return 'failed'
end)

-- Claims in place up to `count` entries held by `owner`, a consumer known to be dead, whatever
-- their idle time; once it holds nothing more, removes it from the group and the `workers`
-- registry. Returns XAUTOCLAIM's shape: {cursor ('0-0' when done), entries}.
local function claimOwned(stream, prefix, owner, count)
  local ok, pend = pcall(redis.call, 'XPENDING', stream, GROUP, '-', '+', count, owner)
  if not ok then return {'0-0', {}} end
  local ids = {}
  for i, p in ipairs(pend) do ids[i] = p[1] end
  local entries = {}
  if #ids > 0 then entries = redis.call('XCLAIM', stream, GROUP, owner, 0, unpack(ids)) end
  if #ids < count then
    redis.call('XGROUP', 'DELCONSUMER', stream, GROUP, owner)
    redis.call('HDEL', prefix .. 'workers', owner)
    return {'0-0', entries}
  end
  return {ids[#ids], entries}
end

-- Claims for consumer up to `count` pending entries idle longer than minIdle, walking the
-- pending list from cursor, and skips those whose job has a longer lock of its own (job field
-- lockDuration) not yet passed. Returns XAUTOCLAIM's shape: {cursor ('0-0' when done), entries}.
local function claimIdle(stream, prefix, consumer, minIdle, cursor, count)
  local start = (cursor == '0' or cursor == '0-0') and '-' or ('(' .. cursor)
  local ok, pend = pcall(redis.call, 'XPENDING', stream, GROUP, 'IDLE', minIdle, start, '+',
    count)
  if not ok then return {'0-0', {}} end
  local ids = {}
  for _, p in ipairs(pend) do
    local e = redis.call('XRANGE', stream, p[1], p[1])
    local jobId = e[1] and entryJobId(e[1][2])
    local lock = jobId and tonumber(redis.call('HGET', prefix .. 'job:' .. jobId, 'lockDuration'))
    if not lock or tonumber(p[3]) >= lock then ids[#ids + 1] = p[1] end
  end
  local entries = {}
  if #ids > 0 then
    entries = redis.call('XCLAIM', stream, GROUP, consumer, minIdle, unpack(ids))
  end
  return {#pend < count and '0-0' or pend[#pend][1], entries}
end

-- KEYS: stream, failed, events, scheduled, meta.
-- ARGS: now, consumer, minIdleMs, cursor, count, maxStalledCount, emitEvents, keepCount,
--       keepAge, deadLetter, [owner].
-- Claims entries idle longer than minIdleMs (their worker died or hung) and hands each job back
-- to the stream, or fails it once it stalled more than maxStalledCount times. With owner (a
-- dead consumer, e.g. a killed glidemq-run process), takes only what owner holds, at once
-- (minIdleMs and cursor unused), then removes owner; call again until the cursor is '0-0'.
-- Returns {nextCursor, requeued, failed}.
-- @wire glidemq_reclaimStalled keys=5 args=7..11
redis.register_function('glidemq_reclaimStalled', function(keys, args)
  local err = shape('glidemq_reclaimStalled', keys, args, 5, 7, 11)
  if err then return err end
  local stream, failedSet, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local now = int(args[1], 0, MAX_TIME)
  local maxStalled = int(args[6], 0, MAX_INT)
  local emitEvents = args[7] == '1'
  local keepCount, keepAge = int(args[8] or '-1', -1, MAX_INT), int(args[9] or '0', 0, MAX_INT)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_reclaimStalled', 'now') end
  if not maxStalled or not keepCount or not keepAge or args[2] == ''
      or not int(args[3], 0, MAX_INT) or not int(args[5], 1, MAX_INT)
      or not (args[4] == '0' or entryIdOk(args[4])) then
    return badCall('ERR:BAD_ARGS', 'glidemq_reclaimStalled', 'arguments')
  end
  local deadLetter = args[10] == '1'
  local owner = args[11]
  local r
  if owner and owner ~= '' then
    r = claimOwned(stream, prefix, owner, tonumber(args[5]))
  else
    r = claimIdle(stream, prefix, args[2], tonumber(args[3]), args[4], tonumber(args[5]))
  end
  local requeued, failed = 0, 0
  for _, e in ipairs(r[2]) do
    local entryId, f = e[1], e[2]
    if f and not entryJobId(f) then -- not ours: kept aside, then nothing below applies
      quarantine(prefix, stream, events, entryId, f, now)
      f = nil
    end
    redis.call('XACK', stream, GROUP, entryId)
    redis.call('XDEL', stream, entryId)
    local jobId = entryJobId(f)
    local jobKey = jobId and (prefix .. 'job:' .. jobId)
    local state = jobKey and redis.call('HGET', jobKey, 'state')
    if state and not isTerminal(state) then
      local stalls = redis.call('HINCRBY', jobKey, 'stalledCount', 1)
      local j = redis.call('HMGET', jobKey, 'revoked', 'atMostOnce')
      local revoked = j[1] == '1'
      if j[2] == '1' and not revoked and state == 'active' then
        interrupted(prefix, jobKey, jobId, now, events, emitEvents)
        failed = failed + 1
      elseif stalls > maxStalled or revoked then
        redis.call('HINCRBY', jobKey, 'attemptsMade', 1)
        local reason = revoked and 'revoked' or 'job stalled more than allowable limit'
        local rttl = leaveActive(prefix, jobKey, jobId, 'failed', reason, now)
        if rttl then
          keepResult(prefix, jobId, rttl, 'state', 'failed', 'failedReason', reason, 'finishedOn', now)
        end
        finalFail(prefix, jobKey, jobId, reason, now, failedSet, keepCount, keepAge, events,
          emitEvents, deadLetter and not revoked)
        failed = failed + 1
      else
        leaveActive(prefix, jobKey, jobId, 'requeued', nil, now)
        local sid = redis.call('XADD', stream, '*', 'id', jobId)
        redis.call('HSET', jobKey, 'state', 'waiting', 'sid', sid)
        if emitEvents then emit(events, 'stalled', jobId) end
        requeued = requeued + 1
      end
    end
  end
  return {r[1], requeued, failed}
end)

-- KEYS: stream, events. ARGS: consumer, then entryId/jobId pairs; with no pairs, every entry
-- the consumer still holds. Hands unfinished jobs straight back to the stream (a clean
-- shutdown) and removes the consumer when it holds nothing more; an at-most-once job that
-- was running is dead-lettered instead ('interrupted'). Returns the count handed back.
-- @wire glidemq_deferActive keys=2 args=1..
redis.register_function('glidemq_deferActive', function(keys, args)
  local err = shape('glidemq_deferActive', keys, args, 2, 1)
  if err then return err end
  if #args % 2 ~= 1 or args[1] == '' then
    return badCall('ERR:BAD_ARGS', 'glidemq_deferActive', 'arguments')
  end
  for i = 2, #args, 2 do
    if not entryIdOk(args[i]) then
      return badCall('ERR:BAD_ARGS', 'glidemq_deferActive', 'entry id at argument ' .. i)
    end
  end
  local stream, events = keys[1], keys[2]
  local prefix = prefixOf(stream, 'stream')
  local consumer = args[1]
  local pairs_ = {}
  if #args > 1 then
    for i = 2, #args, 2 do pairs_[#pairs_ + 1] = {args[i], args[i + 1]} end
  else
    local ok, pend = pcall(redis.call, 'XPENDING', stream, GROUP, '-', '+', 10000, consumer)
    if ok then
      for _, p in ipairs(pend) do
        local e = redis.call('XRANGE', stream, p[1], p[1])
        local jobId = e[1] and entryJobId(e[1][2])
        pairs_[#pairs_ + 1] = {p[1], jobId or ''}
      end
    end
  end
  local n = 0
  for _, p in ipairs(pairs_) do
    local entryId, jobId = p[1], p[2]
    if jobId == '' then -- another producer's entry is kept aside, not dropped
      local e = redis.call('XRANGE', stream, entryId, entryId)
      if e[1] and not entryJobId(e[1][2]) then
        quarantine(prefix, stream, events, entryId, e[1][2], nil)
      end
    end
    if redis.call('XACK', stream, GROUP, entryId) == 1 then
      redis.call('XDEL', stream, entryId)
      local jobKey = prefix .. 'job:' .. jobId
      local h = redis.call('HMGET', jobKey, 'state', 'sid')
      -- 'waiting' with this entry as its sid: read by the worker but never activated.
      if jobId ~= '' and h[1] == 'active' and redis.call('HGET', jobKey, 'atMostOnce') == '1' then
        local t = redis.call('TIME')
        interrupted(prefix, jobKey, jobId, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
          events, true)
      elseif jobId ~= '' and (h[1] == 'active' or (h[1] == 'waiting' and h[2] == entryId)) then
        leaveActive(prefix, jobKey, jobId, 'requeued', nil, 0)
        local sid = redis.call('XADD', stream, '*', 'id', jobId)
        redis.call('HSET', jobKey, 'state', 'waiting', 'sid', sid)
        emit(events, 'waiting', jobId, 'reason', 'deferred')
        n = n + 1
      end
    end
  end
  if #args == 1 then
    pcall(redis.call, 'XGROUP', 'DELCONSUMER', stream, GROUP, consumer)
    redis.call('HDEL', prefix .. 'workers', consumer) -- Queue.get_workers: closed cleanly
  end
  return n
end)

-- KEYS: stream. ARGS: consumer, then entryId/jobId pairs of the jobs the worker is running.
-- Resets their idle time so they are not reclaimed as stalled. Returns {lost, revoked}: jobs
-- the worker no longer owns and jobs revoked while running.
-- @wire glidemq_heartbeat keys=1 args=1..
redis.register_function('glidemq_heartbeat', function(keys, args)
  local err = shape('glidemq_heartbeat', keys, args, 1, 1)
  if err then return err end
  if #args % 2 ~= 1 or args[1] == '' then
    return badCall('ERR:BAD_ARGS', 'glidemq_heartbeat', 'arguments')
  end
  for i = 2, #args, 2 do
    if not entryIdOk(args[i]) then
      return badCall('ERR:BAD_ARGS', 'glidemq_heartbeat', 'entry id at argument ' .. i)
    end
  end
  local stream = keys[1]
  local prefix = prefixOf(stream, 'stream')
  local ids = {}
  for i = 2, #args, 2 do ids[#ids + 1] = args[i] end
  local owned = {}
  if #ids > 0 then
    -- JUSTID: reset the idle time without counting a delivery or returning the entries.
    ids[#ids + 1] = 'JUSTID'
    local claimed = redis.call('XCLAIM', stream, GROUP, args[1], 0, unpack(ids))
    for _, c in ipairs(claimed) do owned[c] = true end
    -- XCLAIM with min-idle 0 would also take an entry from another consumer; only ids this
    -- worker was given are passed, and an entry handed back to the stream is acked, so it is
    -- not claimable.
  end
  local lost, revoked = {}, {}
  for i = 2, #args, 2 do
    local entryId, jobId = args[i], args[i + 1]
    if not owned[entryId] then
      lost[#lost + 1] = jobId
    elseif redis.call('HGET', prefix .. 'job:' .. jobId, 'revoked') == '1' then
      revoked[#revoked + 1] = jobId
    end
  end
  return {lost, revoked}
end)

-- KEYS: stream, scheduled, events. ARGS: now, jobId, entryId, runAt (ms), emitEvents, step
-- (optional). Moves a running job back to delayed (step jobs, DelayedError) without counting
-- an attempt.
-- @wire glidemq_moveActiveToDelayed keys=3 args=5..6
redis.register_function('glidemq_moveActiveToDelayed', function(keys, args)
  local err = shape('glidemq_moveActiveToDelayed', keys, args, 3, 5, 6)
  if err then return err end
  local stream = keys[1]
  local prefix = prefixOf(stream, 'stream')
  local now, jobId, entryId = int(args[1], 0, MAX_TIME), args[2], args[3]
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_moveActiveToDelayed', 'now') end
  if not entryIdOk(entryId) then
    return badCall('ERR:BAD_ARGS', 'glidemq_moveActiveToDelayed', 'entryId')
  end
  -- a run time further away than the longest delay is refused, before anything is written
  local runAt = int(args[4], 0, now + MAX_DELAY)
  if not runAt then return 'ERR:BAD_OPTION' end
  if redis.call('XACK', stream, GROUP, entryId) == 0 then return 'stale' end
  redis.call('XDEL', stream, entryId)
  local jobKey = prefix .. 'job:' .. jobId
  if redis.call('EXISTS', jobKey) == 0 then return 'missing' end
  leaveActive(prefix, jobKey, jobId, 'delayed', nil, now)
  -- step jobs: the step the next run starts from (args[6], '' keeps the current one)
  if args[6] and args[6] ~= '' then redis.call('HSET', jobKey, 'step', args[6]) end
  local priority = tonumber(redis.call('HGET', jobKey, 'priority')) or 0
  local state = requeue(prefix, jobKey, jobId, priority, runAt, now)
  if args[5] == '1' then emit(keys[3], 'delayed', jobId, 'delay', runAt - now) end
  return state
end)

-- KEYS: stream, meta, events. ARGS: now, delayMs, then optionally jobId, entryId.
-- Worker.rate_limit: no worker of the queue starts a job for delayMs. With a job (a processor
-- raised RateLimitError), that running job goes back to the stream without counting an
-- attempt. Returns 'ok', or for the job 'stale' (no longer this worker's) or 'missing'.
-- @wire glidemq_rateLimit keys=3 args=2..4
redis.register_function('glidemq_rateLimit', function(keys, args)
  local err = shape('glidemq_rateLimit', keys, args, 3, 2, 4)
  if err then return err end
  local stream, meta = keys[1], keys[2]
  local prefix = prefixOf(stream, 'stream')
  local now, delay = int(args[1], 0, MAX_TIME), int(args[2], 0, MAX_DELAY)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_rateLimit', 'now') end
  if not delay then return badCall('ERR:BAD_OPTION', 'glidemq_rateLimit', 'delayMs') end
  if #args == 3 or (args[3] and not entryIdOk(args[4])) then
    return badCall('ERR:BAD_ARGS', 'glidemq_rateLimit', 'arguments')
  end
  if delay > 0 and now + delay > (tonumber(redis.call('HGET', meta, 'limitUntil')) or 0) then
    redis.call('HSET', meta, 'limitUntil', now + delay)
  end
  local jobId, entryId = args[3], args[4]
  if not jobId then return 'ok' end
  if redis.call('XACK', stream, GROUP, entryId) == 0 then return 'stale' end
  redis.call('XDEL', stream, entryId)
  local jobKey = prefix .. 'job:' .. jobId
  if redis.call('EXISTS', jobKey) == 0 then return 'missing' end
  leaveActive(prefix, jobKey, jobId, 'requeued', nil, now)
  redis.call('HSET', jobKey, 'state', 'waiting', 'sid', redis.call('XADD', stream, '*', 'id', jobId))
  emit(keys[3], 'waiting', jobId, 'reason', 'rate-limited')
  return 'ok'
end)

---------------------------------------------------------------------------------------------
-- flows: parents that run after their children (see the flow notes above leaveActive)

-- A new id for a flow job: its custom id, or the next counter value not taken by an existing
-- job nor reserved by a custom id of the same call.
local function flowJobId(prefix, idKey, customId, reserved)
  if customId ~= '' then return customId end
  for _ = 1, 1000 do
    local c = tostring(redis.call('INCR', idKey))
    if not reserved[prefix .. c] and redis.call('EXISTS', prefix .. 'job:' .. c) == 0 then
      return c
    end
  end
  return nil
end

-- Parses and checks one job of a flow; returns the job table, or nil and an error reply.
local function flowSpec(idKey, name, data, opts, delay, priority, maxAttempts, ttl, customId,
                        reserved)
  local j = {prefix = prefixOf(idKey, 'id'), idKey = idKey, name = name, data = data,
    opts = opts or '{}', delay = int(delay, 0, MAX_DELAY), priority = int(priority, 0, MAX_PRIORITY),
    maxAttempts = maxAttempts or '0', ttl = int(ttl == '' and 0 or ttl, 0, MAX_INT),
    customId = customId or '', parents = {}}
  if type(name) ~= 'string' or type(data) ~= 'string' then return nil, 'ERR:BAD_FLOW' end
  if not j.delay or not j.priority or not j.ttl
      or not int(j.maxAttempts == '' and 0 or j.maxAttempts, 0, MAX_INT) then
    return nil, 'ERR:BAD_OPTION'
  end
  if dataTooLarge(data) or #j.opts > MAX_DATA then return nil, 'ERR:PAYLOAD_TOO_LARGE' end
  if j.customId ~= '' then
    if not validCustomId(j.customId) then return nil, 'ERR:INVALID_JOB_ID' end
    local k = j.prefix .. j.customId
    if reserved[k] or redis.call('EXISTS', j.prefix .. 'job:' .. j.customId) == 1 then
      return nil, 'duplicate'
    end
    reserved[k] = true
  end
  return j, nil
end

-- Writes a flow job: a job with children (waits) starts in waiting-children, the others are
-- enqueued. j.pPrefix / j.pid name the first parent, j.extra the others.
local function writeFlowJob(j, now)
  local state, sid = 'waiting-children', nil
  if not j.waits then state, sid = enqueue(j.prefix, j.id, j.priority, now + j.delay, now) end
  local f = {'id', j.id, 'name', j.name, 'data', j.data, 'opts', j.opts, 'timestamp', now,
    'attemptsMade', 0, 'delay', j.delay, 'priority', j.priority, 'maxAttempts', j.maxAttempts,
    'state', state}
  if sid then f[#f + 1] = 'sid'; f[#f + 1] = sid end
  if j.ttl > 0 then f[#f + 1] = 'expireAt'; f[#f + 1] = now + j.ttl end
  if j.pid then
    f[#f + 1] = 'parentId'; f[#f + 1] = j.pid
    f[#f + 1] = 'parentQueue'; f[#f + 1] = string.sub(j.pPrefix, 1, #j.pPrefix - 1)
  end
  if j.extra then f[#f + 1] = 'extraParents'; f[#f + 1] = j.extra end
  if j.budget then f[#f + 1] = 'budget'; f[#f + 1] = j.budget end
  redis.call('HSET', j.prefix .. 'job:' .. j.id, unpack(f))
  if j.waits then redis.call('ZADD', j.prefix .. 'waiting-children', now, j.id) end
  if not string.find(j.opts, '"skipEvents":true', 1, true) then
    emit(j.prefix .. 'events', 'added', j.id, 'name', j.name)
  end
end

-- Whether an existing job can be made to wait for one more child: not finished, and not a
-- waiting job whose stream entry a worker has just read (it is about to run).
local function canHold(pPrefix, pKey)
  local h = redis.call('HMGET', pKey, 'state', 'sid')
  local state = h[1]
  if state == 'waiting' then
    if not h[2] then return true end
    local ok, p = pcall(redis.call, 'XPENDING', pPrefix .. 'stream', GROUP, h[2], h[2], 1)
    return not (ok and #p > 0)
  end
  return state == 'waiting-children' or state == 'active' or state == 'delayed'
    or state == 'prioritized'
end

-- Makes a job checked by canHold wait for its children: one not started yet leaves the stream
-- or the scheduled set; a running one keeps running (moveToWaitingChildren is its move).
local function hold(pPrefix, pKey, pid)
  local h = redis.call('HMGET', pKey, 'state', 'sid')
  if h[1] == 'waiting' then
    if h[2] then redis.call('XDEL', pPrefix .. 'stream', h[2]) end
  elseif h[1] == 'delayed' or h[1] == 'prioritized' then
    redis.call('ZREM', pPrefix .. 'scheduled', pid)
  else
    return
  end
  redis.call('HSET', pKey, 'state', 'waiting-children')
  redis.call('HDEL', pKey, 'sid')
  redis.call('ZADD', pPrefix .. 'waiting-children', clockMs(), pid)
  emit(pPrefix .. 'events', 'waiting-children', pid)
end

-- Records (pPrefix, pid) as a parent of an existing job.
local function linkChild(cPrefix, cKey, pPrefix, pid)
  local h = redis.call('HMGET', cKey, 'parentId', 'parentQueue', 'extraParents')
  if not h[1] then
    redis.call('HSET', cKey, 'parentId', pid, 'parentQueue', string.sub(pPrefix, 1, #pPrefix - 1))
    return
  end
  if h[1] == pid and parentPrefixOf(cPrefix, h[2]) == pPrefix then return end
  local pref = jobRef(pPrefix, pid)
  if h[3] then
    for other in string.gmatch(h[3], '[^\n]+') do
      if other == pref then return end
    end
    redis.call('HSET', cKey, 'extraParents', h[3] .. '\n' .. pref)
  else
    redis.call('HSET', cKey, 'extraParents', pref)
  end
end

-- Whether the job (prefix, id) waits, directly or through others, for the job `target` (a
-- reference). nil when more than `limit` jobs would have to be visited.
local function waitsFor(prefix, id, target, limit)
  local todo, seen, head = {{prefix, id}}, {}, 1
  while head <= #todo do
    local p, i = todo[head][1], todo[head][2]
    head = head + 1
    for _, m in ipairs(redis.call('SMEMBERS', p .. 'deps:' .. i)) do
      if m == target then return true end
      if not seen[m] then
        seen[m] = true
        if #todo >= limit then return nil end
        local mp, mi = splitRef(m)
        if mp then todo[#todo + 1] = {mp, mi} end
      end
    end
  end
  return false
end

-- KEYS: the `id` key of every queue the flow uses.
-- ARGS: now, n, attachTo ('' or the reference of an existing job the flow's roots become
--       children of), then per job: queue (1-based index into KEYS), name, data, opts, delay,
--       priority, maxAttempts, ttl, customJobId, nParents, then nParents 1-based indices of
--       earlier jobs of this call that wait for it (parents come before their children).
-- The compact form glidemq's FlowProducer uses for every flow, tree and DAG: one call, all or
-- nothing. Returns the job ids in order; {'duplicate', index} when a custom id is taken; or an
-- 'ERR:...' string. Nothing but id counters is written unless it succeeds.
-- @wire glidemq_addTree keys=1.. args=3..
redis.register_function('glidemq_addTree', function(keys, args)
  local err = shape('glidemq_addTree', keys, args, nil, 3)
  if err then return err end
  for _, k in ipairs(keys) do
    if string.sub(k, -3) ~= ':id' then return badCall('ERR:BAD_KEYS', 'glidemq_addTree', k) end
  end
  local now, n, attach = int(args[1], 0, MAX_TIME), int(args[2], 0, MAX_INT), args[3]
  if not now then return 'ERR:BAD_TIMESTAMP' end
  if not n then return 'ERR:BAD_FLOW' end
  local jobs, reserved = {}, {}
  local i = 4
  for j = 1, n do
    local idKey = keys[int(args[i], 1, #keys) or 0]
    if not idKey or i + 9 > #args then return 'ERR:BAD_FLOW' end
    local job, err = flowSpec(idKey, args[i + 1], args[i + 2], args[i + 3], args[i + 4],
      args[i + 5], args[i + 6], args[i + 7], args[i + 8], reserved)
    if err == 'duplicate' then return {'duplicate', j} end
    if err then return err end
    local np = int(args[i + 9], 0, MAX_INT)
    if not np or i + 9 + np > #args then return 'ERR:BAD_FLOW' end
    for k = 1, np do
      local p = tonumber(args[i + 9 + k])
      if not p or p < 1 or p >= j then return 'ERR:BAD_FLOW' end
      job.parents[k] = p
      jobs[p].waits = true
    end
    i = i + 10 + np
    jobs[j] = job
  end
  if i ~= #args + 1 then return 'ERR:BAD_FLOW' end
  -- a budget rides in the root's opts (FlowProducer.add(budget=...))
  local budget
  if n > 0 and string.find(jobs[1].opts, '"budget"', 1, true) then
    local ok, o = pcall(cjson.decode, jobs[1].opts)
    if ok and type(o) == 'table' and o.budget ~= nil then
      local mt, mc, mode, bad = budgetSpec(o.budget)
      if bad then return badCall('ERR:BAD_ARGS', 'glidemq_addTree', bad) end
      budget = {mt, mc, mode}
    end
  end
  local aPrefix, aId, aKey
  if attach ~= '' then
    aPrefix, aId = splitRef(attach)
    if not aPrefix then return 'ERR:BAD_FLOW' end
    aKey = aPrefix .. 'job:' .. aId
    if redis.call('EXISTS', aKey) == 0 then return 'ERR:PARENT_NOT_FOUND' end
    if not canHold(aPrefix, aKey) then return 'ERR:PARENT_STATE' end
  end
  -- ids first (counters only), so a failure here leaves no partial flow
  for j = 1, n do
    local job = jobs[j]
    job.id = flowJobId(job.prefix, job.idKey, job.customId, reserved)
    if not job.id then return 'ERR:ID_EXHAUSTED' end
    reserved[job.prefix .. job.id] = true
  end
  local ids = {}
  if budget then
    local bk = jobs[1].prefix .. 'budget:' .. jobs[1].id
    redis.call('DEL', bk, bk .. ':held')
    redis.call('HSET', bk, 'maxTokens', budget[1], 'maxCost', budget[2], 'mode', budget[3],
      'tokens', 0, 'cost', 0, 'exceeded', '')
    for j = 1, n do jobs[j].budget = bk end
  end
  for j = 1, n do
    local job = jobs[j]
    local first = jobs[job.parents[1] or 0]
    if first then
      job.pPrefix, job.pid = first.prefix, first.id
      if #job.parents > 1 then
        local extra = {}
        for k = 2, #job.parents do
          local p = jobs[job.parents[k]]
          extra[#extra + 1] = jobRef(p.prefix, p.id)
        end
        job.extra = table.concat(extra, '\n')
      end
    elseif aPrefix then
      job.pPrefix, job.pid = aPrefix, aId
    end
    writeFlowJob(job, now)
    local ref = jobRef(job.prefix, job.id)
    for k = 1, #job.parents do
      local p = jobs[job.parents[k]]
      redis.call('SADD', p.prefix .. 'deps:' .. p.id, ref)
    end
    if not first and aPrefix then redis.call('SADD', aPrefix .. 'deps:' .. aId, ref) end
    ids[j] = job.id
  end
  if aPrefix then hold(aPrefix, aKey, aId) end
  return ids
end)

-- KEYS: a flow's budget hash (budget:{rootId} in the root's queue). ARGS: now, maxTokens,
-- maxCost (0: no cap), mode (fail|pause). Sets the caps and mode; when the totals are within
-- them (or the mode is fail) the jobs the budget parked go back to their queues. Returns how
-- many went back, or -1 when the flow has no budget (nothing written).
-- @wire glidemq_setFlowBudget keys=1 args=4
redis.register_function('glidemq_setFlowBudget', function(keys, args)
  local fname = 'glidemq_setFlowBudget'
  local err = shape(fname, keys, args, 1, 4, 4)
  if err then return err end
  local now = int(args[1], 0, MAX_TIME)
  if not now then return badCall('ERR:BAD_TIMESTAMP', fname, 'now') end
  local mt, mc, mode = int(args[2], 0, MAX_INT), num(args[3], 0, MAX_COST), args[4]
  if not mt then return badCall('ERR:BAD_ARGS', fname, 'maxTokens') end
  if not mc then return badCall('ERR:BAD_ARGS', fname, 'maxCost') end
  if mode ~= 'fail' and mode ~= 'pause' then return badCall('ERR:BAD_ARGS', fname, 'mode') end
  local bk = keys[1]
  if string.find(bk, ':budget:', 1, true) == nil then
    return badCall('ERR:BAD_KEYS', fname, 'not a budget key')
  end
  local b = redis.call('HMGET', bk, 'tokens', 'cost')
  if not b[1] then return -1 end
  local reason = budgetReason(tonumber(b[1]) or 0, tonumber(b[2]) or 0, mt, mc)
  redis.call('HSET', bk, 'maxTokens', mt, 'maxCost', mc, 'mode', mode, 'exceeded', reason or '')
  if reason and mode == 'pause' then return 0 end
  local n = 0
  for _, ref in ipairs(redis.call('SMEMBERS', bk .. ':held')) do
    local p, id = splitRef(ref)
    if p then
      local jobKey = p .. 'job:' .. id
      local h = redis.call('HMGET', jobKey, 'state', 'priority')
      if h[1] == 'suspended' then
        redis.call('ZREM', p .. 'suspended', id)
        redis.call('HSET', jobKey, 'suspendReason', '')
        requeue(p, jobKey, id, tonumber(h[2]) or 0, now, now)
        n = n + 1
      end
    end
  end
  redis.call('DEL', bk .. ':held')
  return n
end)

-- KEYS: id, stream, scheduled, events of the parent's queue, then the same four per child.
-- ARGS: parent: name, data, opts, timestamp, delay, priority, maxAttempts, numChildren,
--       customJobId; per child: name, data, opts, delay, priority, maxAttempts, queuePrefix,
--       parentQueue, customJobId; then numExtraDeps and that many references of existing jobs
--       the parent waits for too.
-- The glide-mq wire form. Returns JSON [parentId, childId, ...] or ["duplicate"], or an
-- 'ERR:...' string; nothing but id counters is written unless it succeeds.
-- @wire glidemq_addFlow keys=1.. args=9..
redis.register_function('glidemq_addFlow', function(keys, args)
  local err = shape('glidemq_addFlow', keys, args, nil, 9)
  if err then return err end
  local now = int(args[4], 0, MAX_TIME)
  local nc = int(args[8], 0, MAX_INT)
  if not now then return 'ERR:BAD_TIMESTAMP' end
  if not nc then return 'ERR:BAD_FLOW' end
  if #keys ~= 4 + 4 * nc then
    return badCall('ERR:BAD_KEYS', 'glidemq_addFlow', 'takes 4 + 4 per child keys')
  end
  local nx = int(args[10 + nc * 9] or '0', 0, MAX_INT)
  if not nx or (#args ~= 9 + nc * 9 and #args ~= 10 + nc * 9 + nx) then
    return badCall('ERR:BAD_ARGS', 'glidemq_addFlow', 'wrong number of arguments')
  end
  local function ttlOf(opts)
    local ok, o = pcall(cjson.decode, opts or '')
    if ok and type(o) == 'table' then return tonumber(o.ttl) or 0 end
    return 0
  end
  local reserved = {}
  local parent, err = flowSpec(keys[1], args[1], args[2], args[3], args[5], args[6], args[7],
    ttlOf(args[3]), args[9], reserved)
  if err == 'duplicate' then return cjson.encode({'duplicate'}) end
  if err then return err end
  local children = {}
  for c = 1, nc do
    local b = 9 + (c - 1) * 9
    local child
    child, err = flowSpec(keys[4 + (c - 1) * 4 + 1], args[b + 1], args[b + 2], args[b + 3],
      args[b + 4], args[b + 5], args[b + 6], ttlOf(args[b + 3]), args[b + 9], reserved)
    if err == 'duplicate' then return cjson.encode({'duplicate'}) end
    if err then return err end
    children[c] = child
  end
  local e = 9 + nc * 9 + 1
  local extra, done = {}, {}
  for x = 1, tonumber(args[e]) or 0 do
    local ref = args[e + x]
    local xPrefix, xId = splitRef(ref or '')
    if not xPrefix then return 'ERR:BAD_FLOW' end
    local h = redis.call('HMGET', xPrefix .. 'job:' .. xId, 'state', 'returnvalue')
    if not h[1] then return 'ERR:DEP_NOT_FOUND' end
    if h[1] == 'failed' then return 'ERR:DEP_FAILED' end
    if h[1] == 'completed' then
      done[#done + 1] = {ref, h[2] or 'null'}
    else
      extra[#extra + 1] = {xPrefix, xId, ref}
    end
  end
  parent.id = flowJobId(parent.prefix, parent.idKey, parent.customId, reserved)
  if not parent.id then return cjson.encode({'ERR:ID_EXHAUSTED'}) end
  reserved[parent.prefix .. parent.id] = true
  for _, child in ipairs(children) do
    child.id = flowJobId(child.prefix, child.idKey, child.customId, reserved)
    if not child.id then return cjson.encode({'ERR:ID_EXHAUSTED'}) end
    reserved[child.prefix .. child.id] = true
  end
  parent.waits = nc > 0 or #extra > 0
  writeFlowJob(parent, now)
  local pKey = parent.prefix .. 'job:' .. parent.id
  local depsKey = parent.prefix .. 'deps:' .. parent.id
  for _, d in ipairs(done) do redis.call('HSET', pKey, 'cv:' .. d[1], d[2]) end
  local out = {parent.id}
  for _, child in ipairs(children) do
    child.pPrefix, child.pid = parent.prefix, parent.id
    writeFlowJob(child, now)
    redis.call('SADD', depsKey, jobRef(child.prefix, child.id))
    out[#out + 1] = child.id
  end
  for _, x in ipairs(extra) do
    linkChild(x[1], x[1] .. 'job:' .. x[2], parent.prefix, parent.id)
    redis.call('SADD', depsKey, x[3])
  end
  return cjson.encode(out)
end)

-- KEYS: the child's job hash, the parent's job hash. ARGS: childId, parentId.
-- Makes an existing job also wait for an existing child (a further parent of a DAG node, or a
-- dependency added later). Returns 'ok'; 'exists' (already a dependency); 'completed' (the
-- child had finished: its value is recorded, nothing to wait for); or ERR:CHILD_NOT_FOUND,
-- ERR:PARENT_NOT_FOUND, ERR:PARENT_STATE, ERR:CHILD_FAILED, ERR:CYCLE, ERR:TOO_LARGE.
-- @wire glidemq_registerParent keys=2 args=2
redis.register_function('glidemq_registerParent', function(keys, args)
  local err = shape('glidemq_registerParent', keys, args, 2, 2, 2)
  if err then return err end
  local cKey, pKey = keys[1], keys[2]
  local cid, pid = args[1], args[2]
  local cSuffix, pSuffix = 'job:' .. cid, 'job:' .. pid
  if string.sub(cKey, -#cSuffix) ~= cSuffix or string.sub(pKey, -#pSuffix) ~= pSuffix then
    return 'ERR:BAD_FLOW'
  end
  local cPrefix = string.sub(cKey, 1, #cKey - #cSuffix)
  local pPrefix = string.sub(pKey, 1, #pKey - #pSuffix)
  local ch = redis.call('HMGET', cKey, 'state', 'returnvalue')
  if not ch[1] then return 'ERR:CHILD_NOT_FOUND' end
  local pstate = redis.call('HGET', pKey, 'state')
  if not pstate then return 'ERR:PARENT_NOT_FOUND' end
  if isTerminal(pstate) then return 'ERR:PARENT_STATE' end
  local cref = jobRef(cPrefix, cid)
  local depsKey = pPrefix .. 'deps:' .. pid
  if redis.call('SISMEMBER', depsKey, cref) == 1 then return 'exists' end
  if ch[1] == 'failed' then return 'ERR:CHILD_FAILED' end
  if ch[1] == 'completed' then
    redis.call('HSET', pKey, 'cv:' .. cref, ch[2] or 'null')
    return 'completed'
  end
  if cKey == pKey then return 'ERR:CYCLE' end
  local cycle = waitsFor(cPrefix, cid, jobRef(pPrefix, pid), 10000)
  if cycle == nil then return 'ERR:TOO_LARGE' end
  if cycle then return 'ERR:CYCLE' end
  if not canHold(pPrefix, pKey) then return 'ERR:PARENT_STATE' end
  linkChild(cPrefix, cKey, pPrefix, pid)
  redis.call('SADD', depsKey, cref)
  hold(pPrefix, pKey, pid)
  return 'ok'
end)

-- KEYS: stream, scheduled, events. ARGS: jobId, entryId, now.
-- A running job whose children are not all done stops running and waits for them; it runs
-- again when the last one finishes. Returns {status, detail}: 'waiting-children'; 'continue'
-- when nothing is pending (the job stays active); 'failed' with the reason when a child's
-- failure fails this job; 'stale' (the worker no longer owns it) or 'missing'.
-- @wire glidemq_moveToWaitingChildren keys=3 args=3
redis.register_function('glidemq_moveToWaitingChildren', function(keys, args)
  local err = shape('glidemq_moveToWaitingChildren', keys, args, 3, 3, 3)
  if err then return err end
  local stream, events = keys[1], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local jobId, entryId, now = args[1], args[2], int(args[3], 0, MAX_TIME)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_moveToWaitingChildren', 'now') end
  if not entryIdOk(entryId) then
    return badCall('ERR:BAD_ARGS', 'glidemq_moveToWaitingChildren', 'entryId')
  end
  local jobKey = prefix .. 'job:' .. jobId
  local h = redis.call('HMGET', jobKey, 'state', 'sid', 'childFailed')
  if not h[1] then return {'missing', ''} end
  if h[1] ~= 'active' or h[2] ~= entryId then return {'stale', ''} end
  if h[3] then return {'failed', h[3]} end
  if redis.call('EXISTS', prefix .. 'deps:' .. jobId) == 0 then return {'continue', ''} end
  if redis.call('XACK', stream, GROUP, entryId) == 0 then return {'stale', ''} end
  redis.call('XDEL', stream, entryId)
  leaveActive(prefix, jobKey, jobId, 'waiting-children', nil, now)
  redis.call('HSET', jobKey, 'state', 'waiting-children')
  redis.call('HDEL', jobKey, 'sid')
  redis.call('ZADD', prefix .. 'waiting-children', now, jobId)
  emit(events, 'waiting-children', jobId)
  return {'waiting-children', ''}
end)

---------------------------------------------------------------------------------------------
-- queue control

-- KEYS: meta, events.
-- @wire glidemq_pause keys=2 args=0
redis.register_function('glidemq_pause', function(keys, args)
  local err = shape('glidemq_pause', keys, args, 2, 0, 0)
  if err then return err end
  redis.call('HSET', keys[1], 'paused', '1')
  redis.call('XADD', keys[2], 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'event', 'paused')
  return 1
end)

-- @wire glidemq_resume keys=2 args=0
redis.register_function('glidemq_resume', function(keys, args)
  local err = shape('glidemq_resume', keys, args, 2, 0, 0)
  if err then return err end
  redis.call('HSET', keys[1], 'paused', '0')
  redis.call('XADD', keys[2], 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'event', 'resumed')
  return 1
end)

---------------------------------------------------------------------------------------------
-- single-job operations. KEYS for all of them: stream, scheduled, events.

local function jobState(jobKey)
  return redis.call('HMGET', jobKey, 'state', 'sid', 'priority')
end

-- Takes a not-yet-running job out of wherever it waits.
local function unlinkWaiting(prefix, stream, scheduled, jobId, state, sid)
  if state == 'waiting' then
    if sid then redis.call('XDEL', stream, sid) end
  elseif state == 'delayed' or state == 'prioritized' then
    redis.call('ZREM', scheduled, jobId)
  elseif state == 'waiting-children' then
    redis.call('ZREM', prefix .. 'waiting-children', jobId)
  end
end

-- ARGS: jobId. Returns 1 removed, 0 not found, 'ERR:ACTIVE' when a worker is running it.
-- @wire glidemq_removeJob keys=3 args=1
redis.register_function('glidemq_removeJob', function(keys, args)
  local err = shape('glidemq_removeJob', keys, args, 3, 1, 1)
  if err then return err end
  local stream, scheduled, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local jobId = args[1]
  local jobKey = prefix .. 'job:' .. jobId
  local h = jobState(jobKey)
  local state = h[1]
  -- a job known only by its cached result (its record is gone) is removed by dropping that
  if not state then return redis.call('DEL', prefix .. 'result:' .. jobId) end
  if state == 'active' then return 'ERR:ACTIVE' end
  -- flows: parents stop waiting for a job removed before it finished; a parent's set goes
  if not isTerminal(state) then flowNotify(prefix, jobKey, jobId, 'removed', nil, nil) end
  redis.call('DEL', prefix .. 'deps:' .. jobId)
  redis.call('DEL', prefix .. 'result:' .. jobId)
  forgetJob(prefix, jobKey, jobId, clockMs())
  unlinkWaiting(prefix, stream, scheduled, jobId, state, h[2])
  redis.call('ZREM', prefix .. 'completed', jobId)
  redis.call('ZREM', prefix .. 'failed', jobId)
  redis.call('ZREM', prefix .. 'dlq', jobId)
  deleteJob(prefix, jobId)
  emit(events, 'removed', jobId)
  return 1
end)

-- ARGS: jobId, now. A job not yet running is failed at once with reason 'revoked'; a running
-- job is flagged and its worker aborts it. Returns 'revoked', 'flagged', 0 or 'ERR:FINISHED'.
-- @wire glidemq_revoke keys=3 args=2
redis.register_function('glidemq_revoke', function(keys, args)
  local err = shape('glidemq_revoke', keys, args, 3, 2, 2)
  if err then return err end
  local stream, scheduled, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local jobId, now = args[1], int(args[2], 0, MAX_TIME)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_revoke', 'now') end
  local jobKey = prefix .. 'job:' .. jobId
  local h = jobState(jobKey)
  local state = h[1]
  if not state then return 0 end
  if isTerminal(state) then return 'ERR:FINISHED' end
  redis.call('HSET', jobKey, 'revoked', '1')
  if state == 'active' then
    emit(events, 'revoked', jobId, 'state', 'active')
    return 'flagged'
  end
  forgetJob(prefix, jobKey, jobId, now)
  unlinkWaiting(prefix, stream, scheduled, jobId, state, h[2])
  local rttl = redis.call('HGET', jobKey, 'rttl')
  if rttl then
    keepResult(prefix, jobId, rttl, 'state', 'failed', 'failedReason', 'revoked', 'finishedOn', now)
  end
  flowNotify(prefix, jobKey, jobId, 'failed', 'revoked', now)
  finalFail(prefix, jobKey, jobId, 'revoked', now, prefix .. 'failed', -1, 0, events, true, false)
  return 'revoked'
end)

-- ARGS: jobId, priority, now. Returns the new state or 'ERR:STATE' / 0.
-- @wire glidemq_changePriority keys=3 args=3
redis.register_function('glidemq_changePriority', function(keys, args)
  local err = shape('glidemq_changePriority', keys, args, 3, 3, 3)
  if err then return err end
  local stream, scheduled = keys[1], keys[2]
  local prefix = prefixOf(stream, 'stream')
  local jobId, priority, now = args[1], int(args[2], 0, MAX_PRIORITY), int(args[3], 0, MAX_TIME)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_changePriority', 'now') end
  if not priority then return 'ERR:BAD_OPTION' end
  local jobKey = prefix .. 'job:' .. jobId
  local h = jobState(jobKey)
  local state = h[1]
  if not state then return 0 end
  if state ~= 'delayed' and state ~= 'waiting' and state ~= 'prioritized' then
    return 'ERR:STATE'
  end
  redis.call('HSET', jobKey, 'priority', priority)
  if state == 'delayed' then
    -- it waits in band 0 by its run time and enters its band when due
    local old = tonumber(redis.call('ZSCORE', scheduled, jobId))
    if old and old >= SHIFT then -- placed by an older library inside its band
      local runAt = old - math.floor(old / SHIFT) * SHIFT
      redis.call('ZADD', scheduled, delayedScore(scheduled, runAt), jobId)
    end
    return 'delayed'
  elseif state == 'waiting' or state == 'prioritized' then
    unlinkWaiting(prefix, stream, scheduled, jobId, state, h[2])
    return requeue(prefix, jobKey, jobId, priority, now, now)
  end
  return 'ERR:STATE'
end)

-- ARGS: jobId, delay (ms from now), now. Only for delayed jobs.
-- @wire glidemq_changeDelay keys=3 args=3
redis.register_function('glidemq_changeDelay', function(keys, args)
  local err = shape('glidemq_changeDelay', keys, args, 3, 3, 3)
  if err then return err end
  local stream, scheduled = keys[1], keys[2]
  local prefix = prefixOf(stream, 'stream')
  local jobId, delay, now = args[1], int(args[2], 0, MAX_DELAY), int(args[3], 0, MAX_TIME)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_changeDelay', 'now') end
  if not delay then return 'ERR:BAD_OPTION' end
  local jobKey = prefix .. 'job:' .. jobId
  local h = jobState(jobKey)
  if not h[1] then return 0 end
  if h[1] ~= 'delayed' then return 'ERR:STATE' end
  redis.call('ZREM', scheduled, jobId)
  redis.call('HSET', jobKey, 'delay', delay)
  return requeue(prefix, jobKey, jobId, tonumber(h[3]) or 0, now + delay, now)
end)

-- ARGS: jobId, now. Makes a delayed job runnable now.
-- @wire glidemq_promoteJob keys=3 args=2
redis.register_function('glidemq_promoteJob', function(keys, args)
  local err = shape('glidemq_promoteJob', keys, args, 3, 2, 2)
  if err then return err end
  local stream, scheduled = keys[1], keys[2]
  local prefix = prefixOf(stream, 'stream')
  local jobId, now = args[1], int(args[2], 0, MAX_TIME)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_promoteJob', 'now') end
  local jobKey = prefix .. 'job:' .. jobId
  local h = jobState(jobKey)
  if not h[1] then return 0 end
  if h[1] ~= 'delayed' then return 'ERR:STATE' end
  redis.call('ZREM', scheduled, jobId)
  redis.call('HSET', jobKey, 'delay', 0)
  local state = requeue(prefix, jobKey, jobId, tonumber(h[3]) or 0, now, now)
  emit(keys[3], 'promoted', jobId)
  return state
end)

-- ARGS: jobId, emitEvents, then field/value pairs. Updates fields of an existing job (data,
-- progress) and, for progress, emits a progress event. Returns 1, or 0 when the job is gone.
-- @wire glidemq_updateJob keys=1 args=4..
redis.register_function('glidemq_updateJob', function(keys, args)
  local err = shape('glidemq_updateJob', keys, args, 1, 4)
  if err then return err end
  if #args % 2 ~= 0 then return badCall('ERR:BAD_ARGS', 'glidemq_updateJob', 'field without a value') end
  for i = 3, #args, 2 do
    if (args[i] == 'data' and dataTooLarge(args[i + 1])) or #args[i + 1] > MAX_GZ_DATA then
      return badCall('ERR:PAYLOAD_TOO_LARGE', 'glidemq_updateJob', args[i])
    end
  end
  local prefix = prefixOf(keys[1], 'events')
  local jobId = args[1]
  local jobKey = prefix .. 'job:' .. jobId
  if redis.call('EXISTS', jobKey) == 0 then return 0 end
  local fv = {}
  for i = 3, #args do fv[#fv + 1] = args[i] end
  redis.call('HSET', jobKey, unpack(fv))
  if args[2] == '1' then
    for i = 1, #fv, 2 do
      if fv[i] == 'progress' then emit(keys[1], 'progress', jobId, 'data', fv[i + 1]) end
    end
  end
  return 1
end)

-- KEYS: job hash, its log list. ARGS: lines. Appends to the log of an existing job only, so
-- a removed job gets no orphan log. Returns the log's new length, or 0 when the job is gone.
-- @wire glidemq_log keys=2 args=1..
redis.register_function('glidemq_log', function(keys, args)
  local err = shape('glidemq_log', keys, args, 2, 1)
  if err then return err end
  if redis.call('EXISTS', keys[1]) == 0 then return 0 end
  return redis.call('RPUSH', keys[2], unpack(args))
end)

---------------------------------------------------------------------------------------------
-- bulk operations

-- KEYS: stream, scheduled, events.
-- ARGS: now, source ('failed' | 'completed' | 'dlq'), count, then optional explicit job ids.
-- Moves finished jobs back to waiting with a fresh attempt count. Returns how many moved.
-- @wire glidemq_retryJobs keys=3 args=3..
redis.register_function('glidemq_retryJobs', function(keys, args)
  local err = shape('glidemq_retryJobs', keys, args, 3, 3)
  if err then return err end
  local stream, scheduled, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local now, source, count = int(args[1], 0, MAX_TIME), args[2], int(args[3], 0, MAX_INT)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_retryJobs', 'now') end
  if not count or (source ~= 'failed' and source ~= 'completed' and source ~= 'dlq') then
    return badCall('ERR:BAD_ARGS', 'glidemq_retryJobs', 'source or count')
  end
  local setKey = prefix .. source
  local ids = {}
  if #args > 3 then
    for i = 4, #args do ids[#ids + 1] = args[i] end
  else
    ids = redis.call('ZRANGE', setKey, 0, count - 1)
  end
  local n = 0
  for _, jobId in ipairs(ids) do
    if redis.call('ZREM', setKey, jobId) == 1 then
      local jobKey = prefix .. 'job:' .. jobId
      local priority = tonumber(redis.call('HGET', jobKey, 'priority')) or 0
      redis.call('HSET', jobKey, 'attemptsMade', 0, 'stalledCount', 0)
      redis.call('HDEL', jobKey, 'finishedOn', 'processedOn', 'returnvalue', 'failedReason',
        'deadLetter', 'revoked', 'stacktrace', 'expireAt')
      redis.call('DEL', prefix .. 'result:' .. jobId) -- the cached outcome is stale now
      requeue(prefix, jobKey, jobId, priority, now, now)
      emit(events, 'waiting', jobId, 'reason', 'retried')
      n = n + 1
    end
  end
  return n
end)

-- KEYS: stream, scheduled, events. ARGS: cursor (stream id), limit, includeDelayed.
-- Removes waiting (and prioritized; with includeDelayed also delayed) jobs, leaving running
-- ones alone. Returns {removed, nextCursor or '0' when done}.
-- @wire glidemq_drain keys=3 args=3
redis.register_function('glidemq_drain', function(keys, args)
  local err = shape('glidemq_drain', keys, args, 3, 3, 3)
  if err then return err end
  local stream, scheduled, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local cursor, limit, withDelayed = args[1], int(args[2], 1, MAX_INT), args[3] == '1'
  if not limit or not (cursor == '-' or entryIdOk(cursor)
      or (string.sub(cursor, 1, 1) == '(' and entryIdOk(string.sub(cursor, 2)))) then
    return badCall('ERR:BAD_ARGS', 'glidemq_drain', 'cursor or limit')
  end
  local removed = 0
  local now = clockMs()
  if cursor == '-' then
    -- first call: LIFO, group-waiting and rate-limited jobs first, so none is woken into the
    -- stream behind the cursor while the stream is walked
    for _, jobId in ipairs(takeParked(prefix, now)) do
      flowNotify(prefix, prefix .. 'job:' .. jobId, jobId, 'removed', nil, nil)
      deleteJob(prefix, jobId)
      removed = removed + 1
    end
  end
  local entries = redis.call('XRANGE', stream, cursor, '+', 'COUNT', limit)
  for _, e in ipairs(entries) do
    local f = e[2]
    local jobId = entryJobId(f)
    if jobId then
      local jobKey = prefix .. 'job:' .. jobId
      if redis.call('HGET', jobKey, 'state') == 'waiting' then
        redis.call('XDEL', stream, e[1])
        flowNotify(prefix, jobKey, jobId, 'removed', nil, nil)
        forgetJob(prefix, jobKey, jobId, now)
        deleteJob(prefix, jobId)
        removed = removed + 1
      end
    end
  end
  local nextCursor = '0'
  if #entries == limit then nextCursor = '(' .. entries[#entries][1] end
  if nextCursor == '0' then
    local members = redis.call('ZRANGE', scheduled, 0, -1)
    for _, jobId in ipairs(members) do
      local jobKey = prefix .. 'job:' .. jobId
      local state = redis.call('HGET', jobKey, 'state')
      if state == 'prioritized' or (withDelayed and state == 'delayed') or not state then
        redis.call('ZREM', scheduled, jobId)
        if state then
          flowNotify(prefix, jobKey, jobId, 'removed', nil, nil)
          forgetJob(prefix, jobKey, jobId, now)
        end
        deleteJob(prefix, jobId)
        removed = removed + 1
      end
    end
    redis.call('XADD', events, 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'event', 'drained')
  end
  return {removed, nextCursor}
end)

-- KEYS: stream, scheduled, events. ARGS: state, olderThan (ms timestamp), limit.
-- Removes up to limit jobs in a finished set (completed, failed, dlq) finished before
-- olderThan, or waiting / delayed jobs enqueued before it. Returns the removed ids.
-- @wire glidemq_clean keys=3 args=3
redis.register_function('glidemq_clean', function(keys, args)
  local err = shape('glidemq_clean', keys, args, 3, 3, 3)
  if err then return err end
  local stream, scheduled, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local state, olderThan, limit = args[1], int(args[2], -MAX_INT, MAX_INT), int(args[3], 0, MAX_INT)
  if not olderThan or not limit then
    return badCall('ERR:BAD_ARGS', 'glidemq_clean', 'olderThan or limit')
  end
  local removed = {}
  if state == 'completed' or state == 'failed' or state == 'dlq' then
    local setKey = prefix .. state
    local ids = redis.call('ZRANGEBYSCORE', setKey, '-inf', olderThan, 'LIMIT', 0, limit)
    for _, jobId in ipairs(ids) do
      redis.call('ZREM', setKey, jobId)
      deleteJob(prefix, jobId)
      removed[#removed + 1] = jobId
    end
  elseif state == 'delayed' or state == 'prioritized' then
    -- read 1000 at a time: a call that reaches its limit early never loads the whole set
    local pos = 0
    while #removed < limit do
      local ids = redis.call('ZRANGE', scheduled, pos, pos + 999)
      for _, jobId in ipairs(ids) do
        if #removed >= limit then break end
        local jobKey = prefix .. 'job:' .. jobId
        local h = redis.call('HMGET', jobKey, 'state', 'timestamp')
        if h[1] == state and (tonumber(h[2]) or 0) < olderThan then
          redis.call('ZREM', scheduled, jobId)
          flowNotify(prefix, jobKey, jobId, 'removed', nil, nil)
          forgetJob(prefix, jobKey, jobId, clockMs())
          deleteJob(prefix, jobId)
          removed[#removed + 1] = jobId
          pos = pos - 1  -- the set shrank under the cursor
        end
        pos = pos + 1
      end
      if #ids < 1000 then break end
    end
  elseif state == 'waiting' then
    local from = '-'
    while #removed < limit do
      local entries = redis.call('XRANGE', stream, from, '+', 'COUNT', 1000)
      for _, e in ipairs(entries) do
        if #removed >= limit then break end
        local f = e[2]
        local jobId = entryJobId(f)
        if jobId then
          local jobKey = prefix .. 'job:' .. jobId
          local h = redis.call('HMGET', jobKey, 'state', 'timestamp')
          if h[1] == 'waiting' and (tonumber(h[2]) or 0) < olderThan then
            redis.call('XDEL', stream, e[1])
            flowNotify(prefix, jobKey, jobId, 'removed', nil, nil)
            forgetJob(prefix, jobKey, jobId, clockMs())
            deleteJob(prefix, jobId)
            removed[#removed + 1] = jobId
          end
        end
      end
      if #entries < 1000 then break end
      from = '(' .. entries[#entries][1]
    end
  else
    return redis.error_reply('ERR glidemq: clean: unknown state ' .. tostring(state))
  end
  if #removed > 0 then
    redis.call('XADD', events, 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'event', 'cleaned',
      'count', #removed, 'state', state)
  end
  return removed
end)

-- KEYS: stream, meta. ARGS: cursor, force ('1'). Deletes every key of the queue, a batch per
-- call. Refuses while jobs are running unless forced. Returns the next SCAN cursor ('0': done).
-- @wire glidemq_obliterate keys=2 args=2
redis.register_function('glidemq_obliterate', function(keys, args)
  local err = shape('glidemq_obliterate', keys, args, 2, 2, 2)
  if err then return err end
  local stream = keys[1]
  local prefix = prefixOf(stream, 'stream')
  local cursor, force = args[1], args[2] == '1'
  if not int(cursor, 0, 2 ^ 64) then return badCall('ERR:BAD_ARGS', 'glidemq_obliterate', 'cursor') end
  if cursor == '0' and not force then
    local ok, pending = pcall(redis.call, 'XPENDING', stream, GROUP)
    if ok and tonumber(pending[1]) > 0 then return 'ERR:ACTIVE' end
  end
  local r = redis.call('SCAN', cursor, 'MATCH', prefix .. '*', 'COUNT', 1000)
  for _, k in ipairs(r[2]) do redis.call('DEL', k) end
  return r[1]
end)

---------------------------------------------------------------------------------------------
-- job schedulers (glidemq/scheduler.py): schedulers hash, field = name, value = JSON entry.
-- The entry is written whole by the client; these functions compare it by SHA-1 so that a
-- stale reader changes nothing.

local function setEntry(key, name, entry)
  if entry == '' then
    redis.call('HDEL', key, name)
  else
    redis.call('HSET', key, name, entry)
  end
end

-- KEYS: schedulers. ARGS: name, expectedSha1 ('' = must not exist), entry ('' deletes).
-- Returns 1 when written, 0 when the stored entry is not the expected one.
-- @wire glidemq_setScheduler keys=1 args=3
redis.register_function('glidemq_setScheduler', function(keys, args)
  local err = shape('glidemq_setScheduler', keys, args, 1, 3, 3)
  if err then return err end
  local cur = redis.call('HGET', keys[1], args[1])
  if args[2] == '' then
    if cur then return 0 end
  elseif not cur or redis.sha1hex(cur) ~= args[2] then
    return 0
  end
  setEntry(keys[1], args[1], args[3])
  return 1
end)

-- KEYS: schedulers, id, stream, scheduled, events.
-- ARGS: name, expectedSha1, newEntry ('' removes the scheduler after this run), then the 17
-- addJob arguments and lifo. Fires one due run: only if the entry is still the one the caller
-- read, so of all the workers that saw the same due run, exactly one adds its job.
-- Returns {'fired', addJob reply} or {'skip', ''}.
-- @wire glidemq_fireScheduler keys=5 args=20..21
redis.register_function('glidemq_fireScheduler', function(keys, args)
  local err = shape('glidemq_fireScheduler', keys, args, 5, 20, 21)
  if err then return err end
  -- malformed job arguments leave the entry as it is
  local bad, v = checkAdd(args, 4)
  if bad then return badCall(bad, 'glidemq_fireScheduler', 'job arguments') end
  local cur = redis.call('HGET', keys[1], args[1])
  if not cur or redis.sha1hex(cur) ~= args[2] then return {'skip', ''} end
  local jobId = addJobCore(keys[2], keys[5], args, 4, v)
  setEntry(keys[1], args[1], args[3])
  return {'fired', jobId}
end)

---------------------------------------------------------------------------------------------
-- search (glidemq/queries.py)

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
    local v, kind, want = d and d[f[1]], f[2], f[3]
    if kind == 't' then
      -- matched above
    elseif kind == 's' then
      if v ~= want then return false end
    elseif kind == 'n' then
      if type(v) ~= 'number' or v ~= tonumber(want) then return false end
    elseif kind == 'b' then
      if v ~= (want == '1') then return false end
    elseif kind ~= 'z' or v ~= cjson.null then
      return false
    end
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
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local total = redis.call('ZCARD', scheduled)
  local delayed = redis.call('ZCOUNT', scheduled, 0, SHIFT - 1)
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
  delayed = total - prioritized + rateLimited
  local m = redis.call('HMGET', prefix .. 'meta', 'paused', 'groupWaiting')
  local paused = m[1] == '1' and 1 or 0
  local groupWaiting = tonumber(m[2]) or 0
  local parked = redis.call('LLEN', prefix .. 'list') + groupWaiting
  return {redis.call('XLEN', stream) - active + parked, active, delayed, prioritized,
    redis.call('ZCARD', prefix .. 'completed'), redis.call('ZCARD', prefix .. 'failed'),
    redis.call('ZCARD', prefix .. 'dlq'), paused, redis.call('ZCARD', prefix .. 'waiting-children'),
    groupWaiting, rateLimited}
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
