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

-- Held jobs. A worker may take jobs beyond the ones it starts at once (it holds them) and
-- start them later without asking, so it tells the server which start, by the calls it makes
-- anyway and always before the run begins: how many of the jobs a fetch takes start at once,
-- and a start report (completeAndFetchNext) of held jobs about to start; a later call
-- confirms each start once the run is under way. Job fields, each naming the entry the job
-- was activated under: heldEntry, its worker has not started it (stall recovery hands it
-- back uncharged); unsureEntry, its start was recorded and not confirmed yet. A worker that
-- dies then leaves it unknown whether the job got to run (recorded just before the death, or
-- behind the job that caused it): that reclaim is not charged either, but counted in
-- unsureReclaims, and the job becomes suspect. A suspect's start is recorded alone, as it
-- is about to run, with no other suspect running beside it in its worker; a stall of such a
-- run before it was confirmed is charged with the unsure ones before it. So a job that kills
-- its worker whenever it starts still fails after maxStalledCount + 1 runs, and the jobs
-- beside it are not charged for its deaths (60_fail_stall.lua). Calls without the start
-- arguments record every start as it happens.

-- The start of a job activated now: nil (recorded as it happens), 'unsureEntry' or
-- 'heldEntry'. startNow: how many of the fetch's jobs start at once (nil: all, as they
-- happen); taken: its place among the jobs the fetch activated; suspect: job field suspect.
local function startMark(startNow, taken, suspect)
  if not startNow then return nil end
  if taken <= startNow and not suspect then return 'unsureEntry' end
  return 'heldEntry'
end

-- A start report: the held job under entryId is about to start.
local function startReported(prefix, entryId, jobId)
  local jobKey = prefix .. 'job:' .. jobId
  if redis.call('HGET', jobKey, 'heldEntry') ~= entryId then return end
  redis.call('HDEL', jobKey, 'heldEntry')
  redis.call('HSET', jobKey, 'unsureEntry', entryId)
end

-- A start confirmed: the job under entryId is running.
local function startConfirmed(prefix, entryId, jobId)
  local jobKey = prefix .. 'job:' .. jobId
  if redis.call('HGET', jobKey, 'unsureEntry') == entryId then
    redis.call('HDEL', jobKey, 'unsureEntry')
  end
end

-- A fetch whose token its worker already gave up on (glidemq_forgetFetch ran first: this call
-- was on its way on a connection the worker had replaced): the entries it read go back to the
-- stream untouched, as new entries of their jobs. Returns whether it was so.
local function forgotten(prefix, stream, entries, consumer, tok)
  if redis.call('HEXISTS', prefix .. 'forgot', consumer .. ' ' .. tok) == 0 then return false end
  for _, e in ipairs(entries) do
    local entryId, jobId = e[1], entryJobId(e[2])
    redis.call('XACK', stream, GROUP, entryId)
    redis.call('XDEL', stream, entryId)
    local jobKey = jobId and (prefix .. 'job:' .. jobId)
    if jobKey and redis.call('HGET', jobKey, 'sid') == entryId then
      redis.call('HSET', jobKey, 'sid', redis.call('XADD', stream, '*', 'id', jobId))
    end
  end
  return true
end

-- Marks stream entries as active and appends {entryId, jobId, {hash fields...}} triples, flat,
-- to out. moved: where the ids of quarantined entries are listed (or nil). startNow: how many
-- of them start at once (startMark); the worker reads the marks from the fields returned.
-- tok: the fetch's token (job field fetchTok), so that a worker whose call failed without an
-- answer can hand back what it took (glidemq_forgetFetch).
local function activate(prefix, stream, entries, now, out, emitEvents, events, moved, startNow,
                        tok, consumer)
  if tok and #entries > 0 and forgotten(prefix, stream, entries, consumer, tok) then return end
  local taken = 0
  for _, e in ipairs(entries) do
    local entryId, f = e[1], e[2]
    local jobId = entryJobId(f)
    local jobKey = jobId and (prefix .. 'job:' .. jobId)
    local h = jobKey and redis.call('HMGET', jobKey, 'state', 'groupKey', 'budget', 'fairSeq',
      'heldEntry', 'unsureEntry', 'suspect', 'fetchTok')
    local state = h and h[1]
    if f and not jobId then
      quarantine(prefix, stream, events, entryId, f, now)
      if moved then moved[#moved + 1] = entryId end
    elseif not state or isTerminal(state) or state == 'active' or state == 'group-waiting'
        or state == 'rate-limited' then
      -- Orphan entry (job removed, finished or parked): drop it so it is not redelivered.
      redis.call('XACK', stream, GROUP, entryId)
      redis.call('XDEL', stream, entryId)
    elseif not (h[3] and budgetStops(prefix, stream, events, entryId, jobId, jobKey, h[3], now,
        emitEvents)) -- not failed or parked by its flow's budget
        and (not h[2] or admitGroupJob(prefix, stream, entryId, jobId, jobKey, h[2], now,
        emitEvents, events)) then -- nor parked or dead-lettered by its group
      if h[2] then groupWaiting(prefix, h[2], -1) end
      taken = taken + 1
      if h[5] or h[6] then redis.call('HDEL', jobKey, 'heldEntry', 'unsureEntry') end
      local mark = startMark(startNow, taken, h[7])
      local set = {'state', 'active', 'processedOn', now, 'sid', entryId}
      if mark then set[#set + 1] = mark; set[#set + 1] = entryId end
      if tok then
        set[#set + 1] = 'fetchTok'; set[#set + 1] = tok
      elseif h[8] then
        redis.call('HDEL', jobKey, 'fetchTok')
      end
      redis.call('HSET', jobKey, unpack(set))
      out[#out + 1] = entryId
      out[#out + 1] = jobId
      out[#out + 1] = redis.call('HGETALL', jobKey)
      if emitEvents then emit(events, 'active', jobId) end
    end
    if h and h[4] then fairLeave(prefix, h[2], jobId, now) end -- a fair group's next turn
  end
end

local function readEntries(stream, consumer, count)
  local r = redis.call('XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', count, 'STREAMS', stream, '>')
  if r and r[1] then return r[1][2] end
  return {}
end

-- Returns the entries read (-1: the queue is paused) and, when a queue-wide limit stopped
-- the fetch, the ms until it may succeed. lim: the worker's limiter or nil.
local function fetch(prefix, keys, consumer, count, now, emitEvents, out, lim, moved, startNow,
                     tok)
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
  activate(prefix, stream, entries, now, out, emitEvents, events, moved, startNow, tok, consumer)
  if charge then chargeWindows(prefix, charge, (#out - before) / 3) end
  return #entries, 0
end

local EVENT_VALUE_MAX = 16384 -- bytes of a return value a 'completed' event carries

-- One completion: 'ok'; 'stale' when the entry is no longer pending for the group (the job
-- was reclaimed and handed to another worker), so a job is never completed twice; 'missing'.
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

-- KEYS: stream, completed, events, scheduled, meta.
-- ARGS: now, consumer, fetchCount, emitEvents, nCompletions,
--       then per completion: jobId, entryId, returnvalue, keepCount, keepAge,
--       then optionally the worker's limiter: max, duration (ms),
--       then optionally startNow (how many of the jobs fetched start at once; the others are
--       held: see heldEntry; '' for all, each recorded as it happens), nReported, optionally
--       the fetch's token (fetchTok: what glidemq_forgetFetch hands back if the answer never
--       reaches the worker; told apart by the count of arguments, odd with it), then
--       entryId/jobId pairs: the first nReported of held jobs about to start (the start
--       report), the rest of jobs whose run is under way (confirmed starts); both recorded
--       before anything else.
-- Returns {statuses (completeOne's), fetched (flat triples), paused, waitMs, quarantined entry
-- ids}; waitMs > 0 when a queue-wide limit (rate, concurrency, Worker.rate_limit) stopped the
-- fetch: ask again after that long.
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
  -- limiter (2), starts (2), the token (1, optional), pairs (2 each)
  local extra = n and #args - 5 - 5 * n
  if not fetchCount or not n or consumer == '' or not (extra == 0 or extra == 2 or extra >= 4)
      or not limiterOk(args[6 + 5 * n], args[7 + 5 * n]) then
    return badCall('ERR:BAD_ARGS', 'glidemq_completeAndFetchNext', 'arguments')
  end
  err = checkCompletions('glidemq_completeAndFetchNext', args, 6, n)
  if err then return err end
  local startNow, tok
  if extra >= 4 then
    local withTok = extra % 2 == 1
    local r0 = (withTok and 11 or 10) + 5 * n
    local all = args[8 + 5 * n] == ''
    startNow = not all and int(args[8 + 5 * n], 0, MAX_INT)
    local reported = int(args[9 + 5 * n], 0, (#args - r0 + 1) / 2)
    tok = withTok and args[10 + 5 * n]
    if (not startNow and not all) or not reported or tok == '' then
      return badCall('ERR:BAD_ARGS', 'glidemq_completeAndFetchNext', 'starts')
    end
    if all then startNow = nil end
    for r = r0, #args, 2 do
      if not entryIdOk(args[r]) or args[r + 1] == '' then
        return badCall('ERR:BAD_ARGS', 'glidemq_completeAndFetchNext', 'start at argument ' .. r)
      end
    end
    for r = r0, #args, 2 do
      if r < r0 + 2 * reported then
        startReported(prefix, args[r], args[r + 1])
      else
        startConfirmed(prefix, args[r], args[r + 1])
      end
    end
  end
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
    limiterArg(args[i], args[i + 1]), moved, startNow, tok or nil)
  return {statuses, out, got == -1 and 1 or 0, wait, moved}
end)

-- Activates entries a blocking read delivered ({entryId, fields} each, every one naming a
-- job), within the queue's pause and limits: entries over them go back to the stream unstarted.
-- Returns the activated triples, flat.
local function activateRead(prefix, keys, entries, now, emitEvents, lim, startNow, tok, consumer)
  local stream = keys[1]
  local out = {}
  local m = redis.call('HMGET', keys[5], unpack(META_LIMITS))
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
        local jobId = entryJobId(e[2])
        local jobKey = prefix .. 'job:' .. jobId
        if redis.call('HGET', jobKey, 'state') == 'waiting' then
          redis.call('HSET', jobKey, 'sid', redis.call('XADD', stream, '*', 'id', jobId))
        end
      end
    end
  end
  activate(prefix, stream, entries, now, out, emitEvents, keys[3], nil, startNow, tok, consumer)
  if charge then chargeWindows(prefix, charge, #out / 3) end
  return out
end

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
  return activateRead(prefix, keys, entries, now, args[2] == '1', limiterArg(args[3], args[4]))
end)

-- KEYS: stream, completed, events, scheduled, meta. ARGS: consumer, wakeConsumer, count,
-- emitEvents, limiterMax, limiterDuration ('0' '0' without a limiter), and optionally
-- startNow (as for completeAndFetchNext; absent or '': every job starts at once, recorded so)
-- and the fetch's token (as for completeAndFetchNext).
-- Sent right behind a blocking XREADGROUP for wakeConsumer on the same connection, so the
-- server runs it as soon as the read returns: the job of an idle worker starts after one
-- round trip. Moves up to count entries wakeConsumer holds to consumer and activates them as
-- glidemq_moveToActive does, at the server's time; removes wakeConsumer once it holds
-- nothing. Running it twice is harmless (the second finds nothing).
-- Returns {fetched triples (flat), quarantined entry ids}.
-- @wire glidemq_activateWoken keys=5 args=6..8
redis.register_function('glidemq_activateWoken', function(keys, args)
  local err = shape('glidemq_activateWoken', keys, args, 5, 6, 8)
  if err then return err end
  local consumer, wake = args[1], args[2]
  local count = int(args[3], 1, MAX_INT)
  local all = not args[7] or args[7] == ''
  local startNow = not all and int(args[7], 0, MAX_INT)
  if consumer == '' or wake == '' or consumer == wake or not count
      or not limiterOk(args[5], args[6]) or (not all and not startNow) or args[8] == '' then
    return badCall('ERR:BAD_ARGS', 'glidemq_activateWoken', 'arguments')
  end
  local stream = keys[1]
  local prefix = prefixOf(stream, 'stream')
  local ok, r = pcall(redis.call, 'XREADGROUP', 'GROUP', GROUP, wake, 'COUNT', count,
    'STREAMS', stream, '0')
  local read = ok and r and r[1] and r[1][2] or {}
  local now = clockMs()
  local entries, moved = {}, {}
  for _, e in ipairs(read) do
    local entryId, f = e[1], e[2]
    if f == nil or f == false then
      redis.call('XACK', stream, GROUP, entryId) -- deleted since it was read
    elseif not entryJobId(f) then
      quarantine(prefix, stream, keys[3], entryId, f, now)
      moved[#moved + 1] = entryId
    else
      entries[#entries + 1] = {entryId, f}
    end
  end
  if #entries > 0 then
    local claim = {}
    for i, e in ipairs(entries) do claim[i] = e[1] end
    claim[#claim + 1] = 'JUSTID'
    redis.call('XCLAIM', stream, GROUP, consumer, 0, unpack(claim))
  end
  if ok and #read < count then
    pcall(redis.call, 'XGROUP', 'DELCONSUMER', stream, GROUP, wake)
  end
  local out = activateRead(prefix, keys, entries, now, args[4] == '1', limiterArg(args[5], args[6]),
    startNow or nil, args[8], consumer)
  return {out, moved}
end)
