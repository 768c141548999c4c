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

local SLIDING_MAX = 10000      -- rate limits up to this max keep a sliding log of starts

-- Sliding window: drops starts that left the window from log; returns how many starts the
-- window still allows now, and when none, the ms until the oldest start that blocks leaves
-- it. A start is stamped at the fetch and runs a little later on the worker (whole-ms stamps,
-- dispatch), so it stays in the window for dur plus a guard: 2% of dur, 1 to 20 ms.
-- The log is kept on the server's clock, not the caller's `now`: a call that waited (queued
-- behind a stalled server, slow on the wire, resent after a lost reply) carries an old `now`,
-- and its stamps would leave the window early and let more starts in.
local function rateGuard(dur)
  return math.max(1, math.min(20, math.floor(dur / 50)))
end

local function slidingRoom(log, max, dur)
  local now = clockMs()
  local span = dur + rateGuard(dur)
  redis.call('ZREMRANGEBYSCORE', log, '-inf', now - span)
  local n = redis.call('ZCARD', log)
  if n < max then return max - n, 0 end
  local first = redis.call('ZRANGE', log, n - max, n - max, 'WITHSCORES')
  return 0, math.max(1, tonumber(first[2]) + span - now)
end

-- Records used starts at the server's now in a sliding log; seqKey/seqField number the members.
local function slidingCharge(log, dur, used, seqKey, seqField)
  local now = clockMs()
  local last = redis.call('HINCRBY', seqKey, seqField, used)
  local z = {}
  for i = last - used + 1, last do z[#z + 1] = now; z[#z + 1] = i end
  redis.call('ZADD', log, unpack(z))
  redis.call('PEXPIRE', log, dur + rateGuard(dur))
end

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

local function parkRateLimited(prefix, jobKey, jobId, at)
  redis.call('ZADD', prefix .. 'ratelimited', at, jobId)
  redis.call('HSET', jobKey, 'state', 'rate-limited')
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
  local g = redis.call('HMGET', gk, 'maxConcurrency', 'active', 'reserved', 'weight', 'paused')
  local max, active, reserved = tonumber(g[1]) or 1, tonumber(g[2]) or 0, tonumber(g[3]) or 0
  if unused and reserved > 0 then
    reserved = reserved - 1
    redis.call('HSET', gk, 'reserved', reserved)
  end
  if g[4] then -- a fair group: the slot goes to the next job of its turn
    redis.call('HSET', gk, 'active', math.max(0, active - 1))
    -- without a limit a slot never held a turn back: only jobs leaving the stream make room
    if max < UNLIMITED then fairPump(prefix, k, now) end
    return
  end
  if active <= max and g[5] ~= '1' then
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
  if redis.call('HGET', gk, 'paused') == '1' then return end -- resumeGroup wakes it
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
    'tbLastRefill', 'tbRefillRemainder', 'reserved', 'weight', 'paused')
  local strict, seq, reserved = j[1] and true or false, tonumber(j[2]) or 0, j[3] == '1'
  local fair = g[14] and not strict
  if g[15] == '1' then -- the group is paused: the job waits in its wait set, in its place
    unstream(stream, jobKey, entryId)
    if reserved then -- a slot handed to it goes back; resumeGroup hands slots out again
      redis.call('HDEL', jobKey, 'groupSlot')
      redis.call('HSET', gk, 'active', math.max(0, (tonumber(g[2]) or 0) - 1),
        'reserved', math.max(0, (tonumber(g[13]) or 0) - 1))
    end
    local score = entryScore(entryId)
    if strict then score = seq elseif fair then score = fairScore(jobKey) end
    parkInGroup(prefix, jobKey, jobId, k, score)
    return false
  end
  if fair then
    -- a fair group lets a job into the stream only with a slot for it, so this is rare:
    -- slots taken meanwhile by its jobs that were retried, delayed or recovered
    if (tonumber(g[2]) or 0) >= (tonumber(g[1]) or 1) then
      unstream(stream, jobKey, entryId)
      parkInGroup(prefix, jobKey, jobId, k, fairScore(jobKey))
      return false
    end
  elseif strict then
    if seq > (tonumber(g[3]) or 1) then -- an earlier job of the key has not finished
      unstream(stream, jobKey, entryId)
      parkInGroup(prefix, jobKey, jobId, k, seq)
      return false
    end
  elseif reserved then
    local max, active = tonumber(g[1]) or 1, tonumber(g[2]) or 0
    local held = math.min(tonumber(g[13]) or 0, active) -- reservations, this one included
    if active - held >= max then
      -- The limit went down after this slot was handed out: the running jobs fill the new
      -- one, so the slot is given back and the job parks again, in stream order.
      unstream(stream, jobKey, entryId)
      redis.call('HDEL', jobKey, 'groupSlot')
      redis.call('HSET', gk, 'active', active - 1, 'reserved', math.max(0, held - 1))
      parkInGroup(prefix, jobKey, jobId, k, entryScore(entryId))
      if active - 1 < max then fillSlots(prefix, k, gk, max, active - 1, now) end
      return false
    end
  else
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
    local room, wait = slidingRoom(rlog, rateMax, rateDur)
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
    slidingCharge(rlog, rateDur, 1, gk, 'rateSeq')
  end
  return true
end

-- A job leaves the queue without finishing a run (removed, revoked, drained, cleaned,
-- debounced): out of the LIFO list and the wait sets, and its group claim given back.
local function forgetJob(prefix, jobKey, jobId, now)
  local j = redis.call('HMGET', jobKey, 'state', 'sid', 'lifo', 'groupKey', 'orderingKey',
    'orderingSeq', 'groupSlot', 'fairSeq')
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
  if j[8] then fairLeave(prefix, k, jobId, now) end
end

-- The group arguments of addJob (10-15) for a job with ordering key k, and its weight from
-- the job's opts (jo.groupWeight: a fair group; its concurrency 0 means no limit): a table,
-- or an error reply. Cost is checked against the capacity here, before anything is written.
local function groupArgs(a, o, jo)
  local g = {}
  for i, name in ipairs({'concurrency', 'rateMax', 'rateDuration', 'tbCapacity', 'tbRefillRate',
    'cost'}) do
    local raw = a[o + 8 + i]
    local v = 0
    if raw and raw ~= '' then v = int(raw, 0, MAX_INT) end
    if not v then return 'ERR:BAD_OPTION' end
    g[name] = v
  end
  if jo.groupWeight ~= nil then
    g.weight = int(jo.groupWeight, 1, 1000)
    if not g.weight then return 'ERR:BAD_OPTION' end
    if g.concurrency == 0 then g.concurrency = UNLIMITED end
    if g.concurrency == 1 then return 'ERR:BAD_OPTION' end -- an ordering key takes turns anyway
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
    'tbRefillRate', 'weight', 'pinConcurrency', 'pinRate')
  local set, del = {}, {}
  local function put(f, v) set[#set + 1] = f; set[#set + 1] = v end
  -- settings given at run time (setGroup) stay until they are cleared there
  if tonumber(cur[1]) ~= g.concurrency and not cur[7] then put('maxConcurrency', g.concurrency) end
  if g.weight then
    if tonumber(cur[6]) ~= g.weight then put('weight', g.weight) end
    redis.call('SADD', prefix .. 'fair', k)
  elseif cur[6] then
    del[#del + 1] = 'weight'
  end
  -- a rate limit set at run time (pinRate) stays as it is
  if not cur[8] and g.rateMax > 0 then
    if tonumber(cur[2]) ~= g.rateMax then put('rateMax', g.rateMax) end
    if tonumber(cur[3]) ~= g.rateDuration then put('rateDuration', g.rateDuration) end
  elseif not cur[8] and cur[2] then
    for _, f in ipairs({'rateMax', 'rateDuration', 'rateWindowStart', 'rateCount'}) do
      del[#del + 1] = f
    end
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
  local seq
  if g.weight and g.concurrency > 1 then
    seq = redis.call('HINCRBY', gk, 'fairSeq', 1)
    fields[#fields + 1] = 'fairSeq'; fields[#fields + 1] = seq
  end
  return fields, seq
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
        local room, wait = slidingRoom(prefix .. w[5], max, dur)
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

local function chargeWindows(prefix, charge, used)
  if not charge or used <= 0 then return end
  local f = {}
  for _, c in ipairs(charge) do
    if #c == 2 then
      slidingCharge(c[1], c[2], used, prefix .. 'rate', 'seq')
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
    redis.call('DEL', prefix .. 'fairin:' .. k)
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
