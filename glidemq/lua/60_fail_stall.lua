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

-- The job's failed tries (job field 'failures', a JSON array, the last FAILURES_KEPT of
-- them): each {attempt, at, reason, stack (its first FAILURE_STACK bytes), logs (how many log
-- lines the job had when the try ended, so a reader can tell each try's lines)}.
local FAILURES_KEPT = 5
local FAILURE_STACK = 2000
local function recordFailure(prefix, jobKey, jobId, attempt, reason, stack, now)
  local list = {}
  local raw = redis.call('HGET', jobKey, 'failures')
  if raw then
    local ok, v = pcall(cjson.decode, raw)
    if ok and type(v) == 'table' then list = v end
  end
  list[#list + 1] = {attempt = attempt, at = now, reason = reason or '',
    stack = string.sub(stack or '', 1, FAILURE_STACK),
    logs = redis.call('LLEN', prefix .. 'log:' .. jobId)}
  while #list > FAILURES_KEPT do table.remove(list, 1) end
  redis.call('HSET', jobKey, 'failures', cjson.encode(list))
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
  recordFailure(prefix, jobKey, jobId, attempts, reason, stack, now)
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

-- Claims in place up to `count` entries held by `owner`, a consumer known to be dead, or by
-- its wake consumer (owner .. ':wake'), whatever their idle time; once both hold nothing
-- more, removes them from the group and owner from the `workers` registry. Returns
-- XAUTOCLAIM's shape: {cursor ('0-0' when done), entries}.
local function claimOwned(stream, prefix, owner, count)
  local ids = {}
  for _, who in ipairs({owner, owner .. ':wake'}) do
    if #ids < count then
      local ok, pend = pcall(redis.call, 'XPENDING', stream, GROUP, '-', '+', count - #ids, who)
      if not ok then return {'0-0', {}} end
      for _, p in ipairs(pend) do ids[#ids + 1] = p[1] end
    end
  end
  local entries = {}
  if #ids > 0 then entries = redis.call('XCLAIM', stream, GROUP, owner, 0, unpack(ids)) end
  if #ids < count then
    redis.call('XGROUP', 'DELCONSUMER', stream, GROUP, owner)
    redis.call('XGROUP', 'DELCONSUMER', stream, GROUP, owner .. ':wake')
    redis.call('HDEL', prefix .. 'workers', owner)
    return {'0-0', entries}
  end
  return {ids[#ids], entries}
end

-- Claims for consumer up to `count` pending entries idle longer than minIdle, walking the
-- pending list from cursor, and skips those whose job has a longer lock of its own (job field
-- lockDuration) not yet passed. `late`: how long the call waited before it ran (the server's
-- clock past the caller's `now`): an entry must have been idle the whole lock when the scan was
-- sent, so a scan queued behind a stalled server does not take jobs whose heartbeats wait
-- behind it. Returns XAUTOCLAIM's shape: {cursor ('0-0' when done), entries}.
local function claimIdle(stream, prefix, consumer, minIdle, cursor, count, late)
  minIdle = minIdle + late
  local start = (cursor == '0' or cursor == '0-0') and '-' or ('(' .. cursor)
  local ok, pend = pcall(redis.call, 'XPENDING', stream, GROUP, 'IDLE', minIdle, start, '+',
    count)
  if not ok then return {'0-0', {}} end
  local ids = {}
  for _, p in ipairs(pend) do
    local e = redis.call('XRANGE', stream, p[1], p[1])
    local jobId = e[1] and entryJobId(e[1][2])
    local lock = jobId and tonumber(redis.call('HGET', prefix .. 'job:' .. jobId, 'lockDuration'))
    if not lock or tonumber(p[3]) >= lock + late then ids[#ids + 1] = p[1] end
  end
  local entries = {}
  if #ids > 0 then
    entries = redis.call('XCLAIM', stream, GROUP, consumer, minIdle, unpack(ids))
  end
  return {#pend < count and '0-0' or pend[#pend][1], entries}
end

-- A reclaim that charges no stall (the job was held and never started, or nobody knows
-- whether it got to run: heldEntry / unsureEntry, 50_fetch_complete.lua) happens at most
-- this many times in a job's life; one more fails it. Larger than any max_stalled_count in
-- use, because such a reclaim says nothing against the job: in a kill storm (a random
-- process of a fleet killed every half second) a job lands held in a dying process a few
-- times at most. The bound only stops a job that somehow never gets to start (its mere fetch
-- kills the worker, say) from going round forever.
local MAX_UNCHARGED_RECLAIMS = 20
local STALLED_REASON = 'job stalled more than allowable limit'

-- The claimed entry of an unfinished job whose worker died before its start was recorded as
-- it happened: back to the stream uncharged (an at-most-once job too when it was held), or
-- failed past MAX_UNCHARGED_RECLAIMS. unsure: it may have run; the job is suspect from now on
-- and the next stall of it charges this one too. Returns whether it failed.
local function reclaimUncharged(prefix, jobKey, jobId, now, failedSet, keep, events, emitEvents,
                                deadLetter, unsure)
  redis.call('HDEL', jobKey, 'heldEntry', 'unsureEntry')
  if unsure then
    redis.call('HINCRBY', jobKey, 'unsureReclaims', 1)
    redis.call('HSET', jobKey, 'suspect', '1')
  end
  local n = redis.call('HINCRBY', jobKey, 'unchargedReclaims', 1)
  if n > MAX_UNCHARGED_RECLAIMS then
    local tries = redis.call('HINCRBY', jobKey, 'attemptsMade', 1)
    local reason = 'job was taken ' .. n .. ' times by workers that died before starting it'
    recordFailure(prefix, jobKey, jobId, tries, reason, '', now)
    local rttl = leaveActive(prefix, jobKey, jobId, 'failed', reason, now)
    if rttl then
      keepResult(prefix, jobId, rttl, 'state', 'failed', 'failedReason', reason, 'finishedOn', now)
    end
    finalFail(prefix, jobKey, jobId, reason, now, failedSet, keep[1], keep[2], events,
      emitEvents, deadLetter)
    return true
  end
  leaveActive(prefix, jobKey, jobId, 'requeued', nil, now)
  local sid = redis.call('XADD', prefix .. 'stream', '*', 'id', jobId)
  redis.call('HSET', jobKey, 'state', 'waiting', 'sid', sid)
  if emitEvents then emit(events, 'stalled', jobId) end
  return false
end

-- KEYS: stream, failed, events, scheduled, meta.
-- ARGS: now, consumer, minIdleMs, cursor, count, maxStalledCount, emitEvents, keepCount,
--       keepAge, deadLetter, [owner], [cause].
-- Claims entries idle longer than minIdleMs (their worker died or hung) and hands each job back
-- to the stream, or fails it once it stalled more than maxStalledCount times. Only a run whose
-- start was recorded as it happened counts as a stall: a job its worker held and never
-- started goes back uncharged, and so does one that may not have run (unsureEntry), charged
-- with a later stall of the job before its start was confirmed (MAX_UNCHARGED_RECLAIMS
-- bounds both). With owner (a
-- dead consumer, e.g. a killed glidemq-run process), takes only what owner holds, at once
-- (minIdleMs and cursor unused), then removes owner; call again until the cursor is '0-0'.
-- cause (owner mode): how the owner died, kept in the attempt record (job field failures)
-- and the failure reason of each job it was running. began (owner mode): a JSON array of the
-- entries whose run had begun when the owner died (its supervisor's run ledger; '' or
-- absent: unknown); a recorded start of an entry not in it never ran, so it goes back
-- uncharged and the job is not made suspect.
-- Returns {nextCursor, requeued, failed}; ERR:BAD_ARGS for a began that is not such an array.
-- @wire glidemq_reclaimStalled keys=5 args=7..13
redis.register_function('glidemq_reclaimStalled', function(keys, args)
  local err = shape('glidemq_reclaimStalled', keys, args, 5, 7, 13)
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
  local cause = owner and owner ~= '' and args[12] ~= '' and args[12] or nil
  local began = nil
  if owner and owner ~= '' and args[13] and args[13] ~= '' then
    local ok, list = pcall(cjson.decode, args[13])
    if not ok or type(list) ~= 'table' then
      return badCall('ERR:BAD_ARGS', 'glidemq_reclaimStalled', 'began')
    end
    began = {}
    for k, e in pairs(list) do
      if type(k) ~= 'number' or type(e) ~= 'string' or not entryIdOk(e) then
        return badCall('ERR:BAD_ARGS', 'glidemq_reclaimStalled', 'began')
      end
      began[e] = true
    end
  end
  local r
  if owner and owner ~= '' then
    r = claimOwned(stream, prefix, owner, tonumber(args[5]))
  else
    local late = math.max(0, clockMs() - now)
    r = claimIdle(stream, prefix, args[2], tonumber(args[3]), args[4], tonumber(args[5]), late)
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
    local j = state and not isTerminal(state) and redis.call('HMGET', jobKey, 'revoked',
      'atMostOnce', 'heldEntry', 'attemptsMade', 'unsureEntry', 'unsureReclaims', 'suspect')
    -- a start recorded and not confirmed: unsure, unless the job is suspect (its start was
    -- recorded alone, as it ran: a stall then is its own, charged with the unsure ones), and
    -- charged all the same with maxStalledCount 0 (no stall allowed) or for an at-most-once
    -- job (it may have run: interrupted, below)
    local unconfirmed = j and j[5] == entryId
    -- recorded, and the owner's ledger says the run never began: as if held
    local never = began and unconfirmed and not began[entryId]
    local unsure = unconfirmed and not never and not j[7] and maxStalled > 0 and j[2] ~= '1'
    if cause and j and j[1] ~= '1' and j[3] ~= entryId and not never then
      -- the try that ran (or was about to) when its worker died, and why
      local why = unsure and (cause .. ' (it may not have started)') or cause
      recordFailure(prefix, jobKey, jobId, (tonumber(j[4]) or 0) + 1, why, '', now)
      redis.call('HSET', jobKey, 'failedReason', why)
    end
    if j and j[1] ~= '1' and state == 'active' and (j[3] == entryId or unsure or never) then
      if reclaimUncharged(prefix, jobKey, jobId, now, failedSet, {keepCount, keepAge}, events,
          emitEvents, deadLetter, unsure) then
        failed = failed + 1
      else
        requeued = requeued + 1
      end
    elseif j then
      -- a run known to have started stalled: charged, and a suspect's stall before its start
      -- was confirmed with the unsure ones before it
      local extra = unconfirmed and j[7] and tonumber(j[6]) or 0
      local stalls = redis.call('HINCRBY', jobKey, 'stalledCount', 1 + extra)
      if extra > 0 then redis.call('HDEL', jobKey, 'unsureReclaims') end
      local revoked = j[1] == '1'
      if j[2] == '1' and not revoked and state == 'active' then
        interrupted(prefix, jobKey, jobId, now, events, emitEvents)
        failed = failed + 1
      elseif stalls > maxStalled or revoked then
        local tries = redis.call('HINCRBY', jobKey, 'attemptsMade', 1)
        local reason = revoked and 'revoked' or STALLED_REASON
        if cause and not revoked then reason = reason .. ': ' .. cause end
        if not cause or revoked then recordFailure(prefix, jobKey, jobId, tries, reason, '', now) end
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

-- Hands the {entryId, jobId} pairs back to the stream (deferActive, returnHeld,
-- forgetFetch); `unstarted` as for handBack. Returns the count.
local function handBackPairs(prefix, stream, events, pairs_, unstarted)
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
      local h = redis.call('HMGET', jobKey, 'state', 'sid', 'heldEntry')
      -- 'waiting' with this entry as its sid: read by the worker but never activated.
      if jobId ~= '' and h[1] == 'active' and not unstarted and h[3] ~= entryId -- it ran
          and redis.call('HGET', jobKey, 'atMostOnce') == '1' then
        interrupted(prefix, jobKey, jobId, clockMs(), events, true)
      elseif jobId ~= '' and (h[1] == 'active' or (h[1] == 'waiting' and h[2] == entryId)) then
        leaveActive(prefix, jobKey, jobId, 'requeued', nil, 0)
        local sid = redis.call('XADD', stream, '*', 'id', jobId)
        redis.call('HSET', jobKey, 'state', 'waiting', 'sid', sid)
        emit(events, 'waiting', jobId, 'reason', unstarted and 'returned' or 'deferred')
        n = n + 1
      end
    end
  end
  return n
end

-- Hands entries of a consumer back to the stream: deferActive and returnHeld. `unstarted`:
-- the worker never ran these jobs, so an at-most-once one goes back to waiting as well.
local function handBack(name, keys, args, unstarted)
  if #args % 2 ~= 1 or args[1] == '' then
    return badCall('ERR:BAD_ARGS', name, 'arguments')
  end
  for i = 2, #args, 2 do
    if not entryIdOk(args[i]) then
      return badCall('ERR:BAD_ARGS', name, 'entry id at argument ' .. i)
    end
  end
  local stream, events = keys[1], keys[2]
  local prefix = prefixOf(stream, 'stream')
  local consumer = args[1]
  local pairs_ = {}
  if #args > 1 then
    for i = 2, #args, 2 do pairs_[#pairs_ + 1] = {args[i], args[i + 1]} end
  else -- all it holds, and what a blocking read left under its wake consumer
    for _, who in ipairs({consumer, consumer .. ':wake'}) do
      local ok, pend = pcall(redis.call, 'XPENDING', stream, GROUP, '-', '+', 10000, who)
      if ok then
        for _, p in ipairs(pend) do
          local e = redis.call('XRANGE', stream, p[1], p[1])
          local jobId = e[1] and entryJobId(e[1][2])
          pairs_[#pairs_ + 1] = {p[1], jobId or ''}
        end
      end
    end
  end
  local n = handBackPairs(prefix, stream, events, pairs_, unstarted)
  if #args == 1 then
    pcall(redis.call, 'XGROUP', 'DELCONSUMER', stream, GROUP, consumer)
    pcall(redis.call, 'XGROUP', 'DELCONSUMER', stream, GROUP, consumer .. ':wake')
    redis.call('HDEL', prefix .. 'workers', consumer) -- Queue.get_workers: closed cleanly
  end
  return n
end

-- KEYS: stream, events. ARGS: consumer, then entryId/jobId pairs; with no pairs, every entry
-- the consumer (or its wake consumer, consumer .. ':wake') still holds. Hands unfinished jobs
-- straight back to the stream (a clean shutdown) and, with no pairs, removes both consumers;
-- an at-most-once job that was running is dead-lettered instead ('interrupted'). Returns the
-- count handed back.
-- @wire glidemq_deferActive keys=2 args=1..
redis.register_function('glidemq_deferActive', function(keys, args)
  local err = shape('glidemq_deferActive', keys, args, 2, 1)
  if err then return err end
  return handBack('glidemq_deferActive', keys, args, false)
end)

-- KEYS: stream, events. ARGS: consumer, then at least one entryId/jobId pair. Hands back
-- jobs the worker took but never started (held beyond its concurrency, or fetched while it
-- was closing): like deferActive, but an at-most-once job goes back to waiting too, since it
-- never ran. Returns the count handed back.
-- @wire glidemq_returnHeld keys=2 args=3..
redis.register_function('glidemq_returnHeld', function(keys, args)
  local err = shape('glidemq_returnHeld', keys, args, 2, 3)
  if err then return err end
  return handBack('glidemq_returnHeld', keys, args, true)
end)

-- Tokens of fetches given up on are kept this long, at most this many (the key `forgot`).
local FORGOTTEN_MS = 600000
local MAX_FORGOTTEN = 10000

-- KEYS: stream, events. ARGS: consumer, token, then entry ids to keep. A call that fetched
-- for consumer with this token (job field fetchTok, 50_fetch_complete.lua) failed without an
-- answer, or was answered only by a later try of it (whose entries are those kept): the
-- worker never saw the other jobs it took, so they go back to the stream uncharged, as held
-- jobs do (an at-most-once one too: it never ran). Jobs since taken by stall recovery or
-- finished are left alone. The token is remembered (key `forgot`), so a try of the call
-- still on its way, on a connection the worker has since replaced, takes nothing when it
-- arrives. Returns the count handed back.
-- @wire glidemq_forgetFetch keys=2 args=2..
redis.register_function('glidemq_forgetFetch', function(keys, args)
  local err = shape('glidemq_forgetFetch', keys, args, 2, 2)
  if err then return err end
  local consumer, tok = args[1], args[2]
  if consumer == '' or tok == '' then
    return badCall('ERR:BAD_ARGS', 'glidemq_forgetFetch', 'arguments')
  end
  local keep = {}
  for i = 3, #args do
    if not entryIdOk(args[i]) then
      return badCall('ERR:BAD_ARGS', 'glidemq_forgetFetch', 'entry id at argument ' .. i)
    end
    keep[args[i]] = true
  end
  local stream = keys[1]
  local prefix = prefixOf(stream, 'stream')
  local ok, pend = pcall(redis.call, 'XPENDING', stream, GROUP, '-', '+', 10000, consumer)
  if not ok then return 0 end
  local pairs_ = {}
  for _, p in ipairs(pend) do
    local entryId = p[1]
    local e = not keep[entryId] and redis.call('XRANGE', stream, entryId, entryId)
    local jobId = e and e[1] and entryJobId(e[1][2])
    if jobId then
      local h = redis.call('HMGET', prefix .. 'job:' .. jobId, 'state', 'sid', 'fetchTok')
      if h[1] == 'active' and h[2] == entryId and h[3] == tok then
        pairs_[#pairs_ + 1] = {entryId, jobId}
      end
    end
  end
  -- the failed call may still be on its way (on a connection since replaced): it takes nothing
  local forgot = prefix .. 'forgot'
  if redis.call('HLEN', forgot) >= MAX_FORGOTTEN then redis.call('DEL', forgot) end
  redis.call('HSET', forgot, consumer .. ' ' .. tok, clockMs())
  redis.call('PEXPIRE', forgot, FORGOTTEN_MS)
  return handBackPairs(prefix, stream, keys[2], pairs_, true)
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
