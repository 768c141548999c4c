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

-- Put a job where a worker will find it: the stream (waiting) or the scheduled set.
local function enqueue(prefix, jobId, priority, runAt, now)
  if runAt > now then
    redis.call('ZADD', prefix .. 'scheduled', priority * SHIFT + runAt, jobId)
    return 'delayed', nil
  elseif priority > 0 then
    -- Offset = enqueue time (never in the future, so runnable now): FIFO within a priority.
    redis.call('ZADD', prefix .. 'scheduled', priority * SHIFT + now, jobId)
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

---------------------------------------------------------------------------------------------
-- version

redis.register_function{function_name = 'glidemq_version', callback = function(keys, args)
  return LIBRARY_VERSION
end, flags = {'no-writes'}}

---------------------------------------------------------------------------------------------
-- add

local UNSUPPORTED = 'ERR:UNSUPPORTED_OPTION'

-- a: argument table, o: index of the first of the 17 addJob arguments.
local function addJobCore(idKey, events, a, o)
  local prefix = prefixOf(idKey, 'id')
  local name, data, opts = a[o], a[o + 1], a[o + 2]
  local now = tonumber(a[o + 3])
  local delay = tonumber(a[o + 4]) or 0
  local priority = tonumber(a[o + 5]) or 0
  local parentId = a[o + 6] or ''
  local maxAttempts = a[o + 7]
  local orderingKey = a[o + 8] or ''
  local ttl = tonumber(a[o + 15]) or 0
  local customId = a[o + 16] or ''
  if now == nil then return 'ERR:BAD_TIMESTAMP' end
  -- Ordering, group and token-bucket options are not enforced by this library version:
  -- refuse them rather than accept a promise that would not be kept.
  if orderingKey ~= '' then return UNSUPPORTED end
  for i = 9, 14 do
    local v = tonumber(a[o + i])
    if v ~= nil and v ~= 0 then return UNSUPPORTED end
  end
  if delay < 0 or priority < 0 or priority > 2097152 then return 'ERR:BAD_OPTION' end

  local jobId
  if customId ~= '' then
    if not validCustomId(customId) then return 'ERR:INVALID_JOB_ID' end
    jobId = customId
    if redis.call('EXISTS', prefix .. 'job:' .. jobId) == 1 then return 'duplicate' end
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

  local jobKey = prefix .. 'job:' .. jobId
  local state, sid = enqueue(prefix, jobId, priority, now + delay, now)
  local fields = {'id', jobId, 'name', name, 'data', data, 'opts', opts, 'timestamp', now,
    'attemptsMade', 0, 'delay', delay, 'priority', priority, 'maxAttempts', maxAttempts,
    'state', state}
  if sid then fields[#fields + 1] = 'sid'; fields[#fields + 1] = sid end
  if parentId ~= '' then fields[#fields + 1] = 'parentId'; fields[#fields + 1] = parentId end
  if ttl > 0 then fields[#fields + 1] = 'expireAt'; fields[#fields + 1] = now + ttl end
  redis.call('HSET', jobKey, unpack(fields))
  if not string.find(opts, '"skipEvents":true', 1, true) then
    emit(events, 'added', jobId, 'name', name)
  end
  return jobId
end

-- KEYS: id, stream, scheduled, events. ARGS: the 17 documented addJob arguments.
redis.register_function('glidemq_addJob', function(keys, args)
  return addJobCore(keys[1], keys[4], args, 1)
end)

-- KEYS: id, stream, scheduled, events. ARGS: now, then per job 8 args: name, data, opts, delay,
-- priority, maxAttempts, ttl, customJobId. The compact form our own producers use: fewer
-- arguments per job cost less on both sides. Returns one addJob reply per job.
redis.register_function('glidemq_addBulk', function(keys, args)
  local now = args[1]
  local out = {}
  local a = {}
  for i = 2, #args, 8 do
    a[1], a[2], a[3], a[4] = args[i], args[i + 1], args[i + 2], now
    a[5], a[6], a[7], a[8] = args[i + 3], args[i + 4], '', args[i + 5]
    a[9], a[10], a[11], a[12], a[13], a[14], a[15] = '', '0', '0', '0', '0', '0', '0'
    a[16], a[17] = args[i + 6], args[i + 7]
    out[#out + 1] = addJobCore(keys[1], keys[4], a, 1)
  end
  return out
end)

-- KEYS: dedup, id, stream, scheduled, events. ARGS: dedupId, ttlMs, mode, then the 17 addJob args.
redis.register_function('glidemq_dedup', function(keys, args)
  local dedupKey = keys[1]
  local dedupId, ttl, mode = args[1], tonumber(args[2]) or 0, args[3]
  local now = tonumber(args[7])
  local prefix = prefixOf(dedupKey, 'dedup')
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
        redis.call('ZREM', keys[4], prevId)
        deleteJob(prefix, prevId)
        emit(keys[5], 'removed', prevId, 'reason', 'debounced')
      elseif prevState and not isTerminal(prevState) then
        return 'skipped'
      end
    else
      return 'ERR:BAD_DEDUP_MODE'
    end
  end
  local jobId = addJobCore(keys[2], keys[5], args, 4)
  if jobId ~= 'duplicate' and string.sub(jobId, 1, 4) ~= 'ERR:' then
    redis.call('HSET', dedupKey, dedupId, jobId .. ':' .. args[7])
  end
  return jobId
end)

---------------------------------------------------------------------------------------------
-- scheduling

-- KEYS: scheduled, stream, events. ARGS: now, limit, prioritizedLimit.
-- Moves due delayed jobs of priority 0 to the stream; moves prioritized jobs only while the
-- stream holds nothing undelivered, so priority order is kept among waiting jobs.
-- Returns {moved, nextDueMs or -1}.
redis.register_function('glidemq_promote', function(keys, args)
  local scheduled = keys[1]
  local prefix = prefixOf(scheduled, 'scheduled')
  local now = tonumber(args[1])
  local limit = tonumber(args[2]) or 1000
  local prioLimit = tonumber(args[3]) or 0
  local due = redis.call('ZRANGEBYSCORE', scheduled, 0, now, 'LIMIT', 0, limit)
  moveToStream(prefix, scheduled, due)
  local moved = #due
  if prioLimit > 0 then
    local ok, pending = pcall(redis.call, 'XPENDING', keys[2], GROUP)
    local active = 0
    if ok then active = tonumber(pending[1]) end
    if redis.call('XLEN', keys[2]) - active <= 0 then
      local ids = takeDueBands(scheduled, now, prioLimit)
      moveToStream(prefix, scheduled, ids)
      moved = moved + #ids
    end
  end
  local nextDue = -1
  local first = redis.call('ZRANGEBYSCORE', scheduled, 0, SHIFT - 1, 'WITHSCORES', 'LIMIT', 0, 1)
  if #first > 0 then nextDue = tonumber(first[2]) end
  return {moved, nextDue}
end)

-- KEYS: scheduled. ARGS: now. Returns {next due time of a delayed job or -1, count in bands >= 1}.
redis.register_function{function_name = 'glidemq_nextDue', callback = function(keys, args)
  local first = redis.call('ZRANGEBYSCORE', keys[1], 0, SHIFT - 1, 'WITHSCORES', 'LIMIT', 0, 1)
  local nextDue = -1
  if #first > 0 then nextDue = tonumber(first[2]) end
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
-- running). One HMGET per call keeps the hot path cheap for plain jobs.

-- Groups and ordering keys: give back the slot the job held. Must be idempotent.
local function releaseGroupSlot(prefix, jobKey, jobId, groupKey, outcome, now)
end

-- Flows: tell the parent a child finished. Only for 'completed' and 'failed'.
local function notifyParent(prefix, jobKey, jobId, parentId, outcome, value, now)
end

local function leaveActive(prefix, jobKey, jobId, outcome, value, now)
  local h = redis.call('HMGET', jobKey, 'parentId', 'groupKey')
  if h[2] then releaseGroupSlot(prefix, jobKey, jobId, h[2], outcome, now) end
  if h[1] and (outcome == 'completed' or outcome == 'failed') then
    notifyParent(prefix, jobKey, jobId, h[1], outcome, value, now)
  end
end

local function activate(prefix, stream, entries, now, out, emitEvents, events)
  for _, e in ipairs(entries) do
    local entryId, f = e[1], e[2]
    local jobId = entryJobId(f)
    local jobKey = jobId and (prefix .. 'job:' .. jobId)
    local state = jobKey and redis.call('HGET', jobKey, 'state')
    if not state or isTerminal(state) or state == 'active' then
      -- Orphan entry (job removed or already finished): drop it so it is not redelivered.
      redis.call('XACK', stream, GROUP, entryId)
      redis.call('XDEL', stream, entryId)
    else
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

local function fetch(prefix, keys, consumer, count, now, emitEvents, out)
  local stream, scheduled, events, meta = keys[1], keys[4], keys[3], keys[5]
  if count <= 0 then return 0 end
  if redis.call('HGET', meta, 'paused') == '1' then return -1 end
  local entries = readEntries(stream, consumer, count)
  if #entries < count then
    -- Stream exhausted: admit prioritized work in priority order, then read it.
    local ids = takeDueBands(scheduled, now, count - #entries)
    if #ids > 0 then
      moveToStream(prefix, scheduled, ids)
      local more = readEntries(stream, consumer, count - #entries)
      for _, e in ipairs(more) do entries[#entries + 1] = e end
    end
  end
  activate(prefix, stream, entries, now, out, emitEvents, events)
  return #entries
end

-- KEYS: stream, completed, events, scheduled, meta.
-- ARGS: now, consumer, fetchCount, emitEvents, nCompletions,
--       then per completion: jobId, entryId, returnvalue, keepCount, keepAge.
-- Returns {statuses, fetched (flat triples), paused}. A completion whose entry is no longer
-- pending for the group (the job was reclaimed and handed to another worker) is a no-op
-- reported as 'stale', so a job is never completed twice.
local function completeOne(prefix, stream, completed, events, now, jobId, entryId, rv,
                           keepCount, keepAge, emitEvents)
  if redis.call('XACK', stream, GROUP, entryId) == 0 then return 'stale' end
  redis.call('XDEL', stream, entryId)
  local jobKey = prefix .. 'job:' .. jobId
  if redis.call('EXISTS', jobKey) == 0 then return 'missing' end
  leaveActive(prefix, jobKey, jobId, 'completed', rv, now)
  if keepCount == 0 then
    deleteJob(prefix, jobId)
  else
    redis.call('HSET', jobKey, 'state', 'completed', 'returnvalue', rv, 'finishedOn', now)
    redis.call('ZADD', completed, now, jobId)
    retain(prefix, completed, now, keepCount, keepAge)
  end
  if emitEvents then emit(events, 'completed', jobId, 'returnvalue', rv) end
  return 'ok'
end

redis.register_function('glidemq_completeAndFetchNext', function(keys, args)
  local stream, completed, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local now = tonumber(args[1])
  local consumer = args[2]
  local fetchCount = tonumber(args[3])
  local emitEvents = args[4] == '1'
  local n = tonumber(args[5])
  local statuses = {}
  local i = 6
  for c = 1, n do
    local jobId, entryId, rv = args[i], args[i + 1], args[i + 2]
    local keepCount, keepAge = tonumber(args[i + 3]), tonumber(args[i + 4])
    i = i + 5
    statuses[c] = completeOne(prefix, stream, completed, events, now, jobId, entryId, rv,
      keepCount, keepAge, emitEvents)
  end
  local out = {}
  local got = fetch(prefix, keys, consumer, fetchCount, now, emitEvents, out)
  return {statuses, out, got == -1 and 1 or 0}
end)

-- KEYS: stream, completed, events, scheduled, meta. ARGS: same as completeAndFetchNext with
-- fetchCount 0. Kept as its own name for the documented function list.
redis.register_function('glidemq_complete', function(keys, args)
  local stream, completed, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local now = tonumber(args[1])
  return completeOne(prefix, stream, completed, events, now, args[6], args[7], args[8],
    tonumber(args[9]), tonumber(args[10]), args[4] == '1')
end)

-- KEYS: stream, completed, events, scheduled, meta. ARGS: now, emitEvents, then entryId/jobId
-- pairs read by a blocking XREADGROUP. Returns the fetched triples.
redis.register_function('glidemq_moveToActive', function(keys, args)
  local stream = keys[1]
  local prefix = prefixOf(stream, 'stream')
  local now = tonumber(args[1])
  local entries = {}
  for i = 3, #args, 2 do
    entries[#entries + 1] = {args[i], {'id', args[i + 1]}}
  end
  local out = {}
  if redis.call('HGET', keys[5], 'paused') == '1' then
    -- Read by a blocking XREADGROUP after the queue was paused: hand the jobs back, unstarted.
    for _, e in ipairs(entries) do
      if redis.call('XACK', stream, GROUP, e[1]) == 1 then
        redis.call('XDEL', stream, e[1])
        local jobKey = prefix .. 'job:' .. e[2][2]
        if redis.call('HGET', jobKey, 'state') == 'waiting' then
          redis.call('HSET', jobKey, 'sid', redis.call('XADD', stream, '*', 'id', e[2][2]))
        end
      end
    end
    return out
  end
  activate(prefix, stream, entries, now, out, args[2] == '1', keys[3])
  return out
end)

---------------------------------------------------------------------------------------------
-- failure, stall, hand-back

local function finalFail(prefix, jobKey, jobId, reason, now, failedSet, keepCount, keepAge, events,
                         emitEvents, deadLetter)
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

-- KEYS: stream, failed, events, scheduled, meta.
-- ARGS: now, emitEvents, jobId, entryId, reason, retryDelay (-1: do not retry), keepCount,
--       keepAge, deadLetter ('1' to park final failures in the dead-letter set), stacktrace.
-- Returns 'retry', 'failed' or 'stale'.
redis.register_function('glidemq_fail', function(keys, args)
  local stream, failedSet, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local now = tonumber(args[1])
  local emitEvents = args[2] == '1'
  local jobId, entryId, reason = args[3], args[4], args[5]
  local retryDelay = tonumber(args[6])
  local keepCount, keepAge = tonumber(args[7]), tonumber(args[8])
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
  leaveActive(prefix, jobKey, jobId, 'failed', reason, now)
  finalFail(prefix, jobKey, jobId, reason, now, failedSet, keepCount, keepAge, events, emitEvents,
    deadLetter)
  return 'failed'
end)

-- KEYS: stream, failed, events, scheduled, meta.
-- ARGS: now, consumer, minIdleMs, cursor, count, maxStalledCount, emitEvents, keepCount,
--       keepAge, deadLetter.
-- Claims entries idle longer than minIdleMs (their worker died or hung) and hands each job back
-- to the stream, or fails it once it stalled more than maxStalledCount times.
-- Returns {nextCursor, requeued, failed}.
redis.register_function('glidemq_reclaimStalled', function(keys, args)
  local stream, failedSet, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local now = tonumber(args[1])
  local maxStalled = tonumber(args[6])
  local emitEvents = args[7] == '1'
  local keepCount, keepAge = tonumber(args[8]) or -1, tonumber(args[9]) or 0
  local deadLetter = args[10] == '1'
  local r = redis.call('XAUTOCLAIM', stream, GROUP, args[2], args[3], args[4], 'COUNT', args[5])
  local requeued, failed = 0, 0
  for _, e in ipairs(r[2]) do
    local entryId, f = e[1], e[2]
    redis.call('XACK', stream, GROUP, entryId)
    redis.call('XDEL', stream, entryId)
    local jobId = entryJobId(f)
    local jobKey = jobId and (prefix .. 'job:' .. jobId)
    local state = jobKey and redis.call('HGET', jobKey, 'state')
    if state and not isTerminal(state) then
      local stalls = redis.call('HINCRBY', jobKey, 'stalledCount', 1)
      local revoked = redis.call('HGET', jobKey, 'revoked') == '1'
      if stalls > maxStalled or revoked then
        redis.call('HINCRBY', jobKey, 'attemptsMade', 1)
        local reason = revoked and 'revoked' or 'job stalled more than allowable limit'
        leaveActive(prefix, jobKey, jobId, 'failed', reason, now)
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
-- shutdown) and removes the consumer when it holds nothing more. Returns the count handed back.
redis.register_function('glidemq_deferActive', function(keys, args)
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
    if redis.call('XACK', stream, GROUP, entryId) == 1 then
      redis.call('XDEL', stream, entryId)
      local jobKey = prefix .. 'job:' .. jobId
      local h = redis.call('HMGET', jobKey, 'state', 'sid')
      -- 'waiting' with this entry as its sid: read by the worker but never activated.
      if jobId ~= '' and (h[1] == 'active' or (h[1] == 'waiting' and h[2] == entryId)) then
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
  end
  return n
end)

-- KEYS: stream. ARGS: consumer, then entryId/jobId pairs of the jobs the worker is running.
-- Resets their idle time so they are not reclaimed as stalled. Returns {lost, revoked}: jobs
-- the worker no longer owns and jobs revoked while running.
redis.register_function('glidemq_heartbeat', function(keys, args)
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

-- KEYS: stream, scheduled, events. ARGS: now, jobId, entryId, runAt (ms), emitEvents.
-- Moves a running job back to delayed (step jobs, DelayedError) without counting an attempt.
redis.register_function('glidemq_moveActiveToDelayed', function(keys, args)
  local stream = keys[1]
  local prefix = prefixOf(stream, 'stream')
  local now, jobId, entryId = tonumber(args[1]), args[2], args[3]
  local runAt = tonumber(args[4])
  if redis.call('XACK', stream, GROUP, entryId) == 0 then return 'stale' end
  redis.call('XDEL', stream, entryId)
  local jobKey = prefix .. 'job:' .. jobId
  if redis.call('EXISTS', jobKey) == 0 then return 'missing' end
  leaveActive(prefix, jobKey, jobId, 'delayed', nil, now)
  local priority = tonumber(redis.call('HGET', jobKey, 'priority')) or 0
  local state = requeue(prefix, jobKey, jobId, priority, runAt, now)
  if args[5] == '1' then emit(keys[3], 'delayed', jobId, 'delay', runAt - now) end
  return state
end)

---------------------------------------------------------------------------------------------
-- queue control

-- KEYS: meta, events.
redis.register_function('glidemq_pause', function(keys, args)
  redis.call('HSET', keys[1], 'paused', '1')
  redis.call('XADD', keys[2], 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'event', 'paused')
  return 1
end)

redis.register_function('glidemq_resume', function(keys, args)
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
  end
end

-- ARGS: jobId. Returns 1 removed, 0 not found, 'ERR:ACTIVE' when a worker is running it.
redis.register_function('glidemq_removeJob', function(keys, args)
  local stream, scheduled, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local jobId = args[1]
  local jobKey = prefix .. 'job:' .. jobId
  local h = jobState(jobKey)
  local state = h[1]
  if not state then return 0 end
  if state == 'active' then return 'ERR:ACTIVE' end
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
redis.register_function('glidemq_revoke', function(keys, args)
  local stream, scheduled, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local jobId, now = args[1], tonumber(args[2])
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
  unlinkWaiting(prefix, stream, scheduled, jobId, state, h[2])
  finalFail(prefix, jobKey, jobId, 'revoked', now, prefix .. 'failed', -1, 0, events, true, false)
  return 'revoked'
end)

-- ARGS: jobId, priority, now. Returns the new state or 'ERR:STATE' / 0.
redis.register_function('glidemq_changePriority', function(keys, args)
  local stream, scheduled = keys[1], keys[2]
  local prefix = prefixOf(stream, 'stream')
  local jobId, priority, now = args[1], tonumber(args[2]), tonumber(args[3])
  local jobKey = prefix .. 'job:' .. jobId
  local h = jobState(jobKey)
  local state = h[1]
  if not state then return 0 end
  if priority < 0 or priority > 2097152 then return 'ERR:BAD_OPTION' end
  redis.call('HSET', jobKey, 'priority', priority)
  if state == 'delayed' then
    local old = tonumber(redis.call('ZSCORE', scheduled, jobId)) or now
    local runAt = old - math.floor(old / SHIFT) * SHIFT
    redis.call('ZADD', scheduled, priority * SHIFT + runAt, jobId)
    return 'delayed'
  elseif state == 'waiting' or state == 'prioritized' then
    unlinkWaiting(prefix, stream, scheduled, jobId, state, h[2])
    return requeue(prefix, jobKey, jobId, priority, now, now)
  end
  return 'ERR:STATE'
end)

-- ARGS: jobId, delay (ms from now), now. Only for delayed jobs.
redis.register_function('glidemq_changeDelay', function(keys, args)
  local stream, scheduled = keys[1], keys[2]
  local prefix = prefixOf(stream, 'stream')
  local jobId, delay, now = args[1], tonumber(args[2]), tonumber(args[3])
  local jobKey = prefix .. 'job:' .. jobId
  local h = jobState(jobKey)
  if not h[1] then return 0 end
  if h[1] ~= 'delayed' then return 'ERR:STATE' end
  redis.call('ZREM', scheduled, jobId)
  redis.call('HSET', jobKey, 'delay', delay)
  return requeue(prefix, jobKey, jobId, tonumber(h[3]) or 0, now + delay, now)
end)

-- ARGS: jobId, now. Makes a delayed job runnable now.
redis.register_function('glidemq_promoteJob', function(keys, args)
  local stream, scheduled = keys[1], keys[2]
  local prefix = prefixOf(stream, 'stream')
  local jobId, now = args[1], tonumber(args[2])
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
redis.register_function('glidemq_updateJob', function(keys, args)
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
redis.register_function('glidemq_log', function(keys, args)
  if redis.call('EXISTS', keys[1]) == 0 then return 0 end
  return redis.call('RPUSH', keys[2], unpack(args))
end)

---------------------------------------------------------------------------------------------
-- bulk operations

-- KEYS: stream, scheduled, events.
-- ARGS: now, source ('failed' | 'completed' | 'dlq'), count, then optional explicit job ids.
-- Moves finished jobs back to waiting with a fresh attempt count. Returns how many moved.
redis.register_function('glidemq_retryJobs', function(keys, args)
  local stream, scheduled, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local now, source, count = tonumber(args[1]), args[2], tonumber(args[3])
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
redis.register_function('glidemq_drain', function(keys, args)
  local stream, scheduled, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local cursor, limit, withDelayed = args[1], tonumber(args[2]), args[3] == '1'
  local removed = 0
  local entries = redis.call('XRANGE', stream, cursor, '+', 'COUNT', limit)
  for _, e in ipairs(entries) do
    local f = e[2]
    local jobId = entryJobId(f)
    if jobId then
      local jobKey = prefix .. 'job:' .. jobId
      if redis.call('HGET', jobKey, 'state') == 'waiting' then
        redis.call('XDEL', stream, e[1])
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
redis.register_function('glidemq_clean', function(keys, args)
  local stream, scheduled, events = keys[1], keys[2], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local state, olderThan, limit = args[1], tonumber(args[2]), tonumber(args[3])
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
    local ids = redis.call('ZRANGE', scheduled, 0, -1)
    for _, jobId in ipairs(ids) do
      if #removed >= limit then break end
      local jobKey = prefix .. 'job:' .. jobId
      local h = redis.call('HMGET', jobKey, 'state', 'timestamp')
      if h[1] == state and (tonumber(h[2]) or 0) < olderThan then
        redis.call('ZREM', scheduled, jobId)
        deleteJob(prefix, jobId)
        removed[#removed + 1] = jobId
      end
    end
  elseif state == 'waiting' then
    local entries = redis.call('XRANGE', stream, '-', '+')
    for _, e in ipairs(entries) do
      if #removed >= limit then break end
      local f = e[2]
      local jobId = entryJobId(f)
      if jobId then
        local jobKey = prefix .. 'job:' .. jobId
        local h = redis.call('HMGET', jobKey, 'state', 'timestamp')
        if h[1] == 'waiting' and (tonumber(h[2]) or 0) < olderThan then
          redis.call('XDEL', stream, e[1])
          deleteJob(prefix, jobId)
          removed[#removed + 1] = jobId
        end
      end
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
redis.register_function('glidemq_obliterate', function(keys, args)
  local stream = keys[1]
  local prefix = prefixOf(stream, 'stream')
  local cursor, force = args[1], args[2] == '1'
  if cursor == '0' and not force then
    local ok, pending = pcall(redis.call, 'XPENDING', stream, GROUP)
    if ok and tonumber(pending[1]) > 0 then return 'ERR:ACTIVE' end
  end
  local r = redis.call('SCAN', cursor, 'MATCH', prefix .. '*', 'COUNT', 1000)
  for _, k in ipairs(r[2]) do redis.call('DEL', k) end
  return r[1]
end)

---------------------------------------------------------------------------------------------
-- reads

-- KEYS: stream, scheduled. Returns {waiting, active, delayed, prioritized, completed, failed,
-- dlq, paused}.
redis.register_function{function_name = 'glidemq_getCounts', callback = function(keys, args)
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
  delayed = total - prioritized
  local paused = redis.call('HGET', prefix .. 'meta', 'paused') == '1' and 1 or 0
  return {redis.call('XLEN', stream) - active, active, delayed, prioritized,
    redis.call('ZCARD', prefix .. 'completed'), redis.call('ZCARD', prefix .. 'failed'),
    redis.call('ZCARD', prefix .. 'dlq'), paused}
end, flags = {'no-writes'}}

-- KEYS: stream, scheduled. ARGS: state, start, stop (inclusive indices). Returns job ids:
-- finished sets newest first, others in the order they would run.
redis.register_function{function_name = 'glidemq_getJobIds', callback = function(keys, args)
  local stream, scheduled = keys[1], keys[2]
  local prefix = prefixOf(stream, 'stream')
  local state, start, stop = args[1], tonumber(args[2]), tonumber(args[3])
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
    local entries = redis.call('XRANGE', stream, '-', '+')
    for _, e in ipairs(entries) do
      local jobId = entryJobId(e[2])
      if jobId and consider(jobId) then return out end
    end
  elseif state == 'delayed' or state == 'prioritized' then
    for _, jobId in ipairs(redis.call('ZRANGE', scheduled, 0, -1)) do
      if consider(jobId) then return out end
    end
  else
    return redis.error_reply('ERR glidemq: getJobIds: unknown state ' .. tostring(state))
  end
  return out
end, flags = {'no-writes'}}
