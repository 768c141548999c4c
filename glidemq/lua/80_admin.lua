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

-- Takes a not-yet-running job out of wherever it waits (a waiting job without a stream
-- entry is a LIFO job in `list`).
local function unlinkWaiting(prefix, stream, scheduled, jobId, state, sid)
  if state == 'waiting' then
    if sid then
      redis.call('XDEL', stream, sid)
    else
      redis.call('LREM', prefix .. 'list', 0, jobId)
    end
  elseif state == 'delayed' or state == 'prioritized' then
    redis.call('ZREM', scheduled, jobId)
  elseif state == 'waiting-children' then
    redis.call('ZREM', prefix .. 'waiting-children', jobId)
  elseif state == 'suspended' then
    redis.call('ZREM', prefix .. 'suspended', jobId)
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

-- States whose job's data may be replaced from outside a run: no worker has the job (it is
-- not active, i.e. neither running nor held) and it has not finished.
local EDITABLE = {waiting = true, delayed = true, prioritized = true, ['group-waiting'] = true,
  ['rate-limited'] = true, ['waiting-children'] = true, suspended = true}

-- ARGS: jobId, data, entryId, consumer. Replaces a job's data, checking its state in the same
-- call. From outside a run (entryId and consumer ''): only while no worker has taken the job
-- (EDITABLE), so a worker that fetched it runs what the edit's caller was told. From the run
-- itself (the entry id and consumer the running job carries): only while that run still holds
-- the job. Returns the job's state; 0 (no such job); 'ERR:ACTIVE' (a worker fetched it:
-- running or held); 'ERR:FINISHED'; 'ERR:STATE' (another state); 'stale' (that run no longer
-- holds it). Nothing is written unless the data is replaced.
-- @wire glidemq_updateData keys=3 args=4
redis.register_function('glidemq_updateData', function(keys, args)
  local fname = 'glidemq_updateData'
  local err = shape(fname, keys, args, 3, 4, 4)
  if err then return err end
  local stream = keys[1]
  local prefix = prefixOf(stream, 'stream')
  local jobId, data, entryId, consumer = args[1], args[2], args[3], args[4]
  if dataTooLarge(data) then return badCall('ERR:PAYLOAD_TOO_LARGE', fname, 'data') end
  if (entryId == '') ~= (consumer == '') or (entryId ~= '' and not entryIdOk(entryId)) then
    return badCall('ERR:BAD_ARGS', fname, 'entryId and consumer')
  end
  local jobKey = prefix .. 'job:' .. jobId
  local h = redis.call('HMGET', jobKey, 'state', 'sid')
  local state = h[1]
  if not state then return 0 end
  if isTerminal(state) then return 'ERR:FINISHED' end
  if entryId ~= '' then
    -- the run's own job: still active on this entry, and the entry still pending for it
    if state ~= 'active' or h[2] ~= entryId then return 'stale' end
    local ok, p = pcall(redis.call, 'XPENDING', stream, GROUP, entryId, entryId, 1, consumer)
    if not ok or #p == 0 then return 'stale' end
  elseif state == 'active' then
    return 'ERR:ACTIVE'
  elseif not EDITABLE[state] then
    return 'ERR:STATE'
  end
  redis.call('HSET', jobKey, 'data', data)
  return state
end)

-- ARGS: jobId, emitEvents, then field/value pairs. Updates fields of an existing job
-- (progress) and, for progress, emits a progress event. Returns 1, or 0 when the job is gone.
-- Not `data`: glidemq_updateData replaces it, with the state check an edit needs.
-- @wire glidemq_updateJob keys=1 args=4..
redis.register_function('glidemq_updateJob', function(keys, args)
  local err = shape('glidemq_updateJob', keys, args, 1, 4)
  if err then return err end
  if #args % 2 ~= 0 then return badCall('ERR:BAD_ARGS', 'glidemq_updateJob', 'field without a value') end
  for i = 3, #args, 2 do
    if args[i] == 'data' then
      return badCall('ERR:BAD_ARGS', 'glidemq_updateJob', 'data is set by glidemq_updateData')
    end
    if #args[i + 1] > MAX_GZ_DATA then
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
-- Moves finished jobs back to waiting with a fresh attempt count (a workflow's last step, if
-- it failed for good, runs again). Returns how many moved.
-- @wire glidemq_retryJobs keys=3 args=3..
redis.register_function('glidemq_retryJobs', function(keys, args)
  local err = shape('glidemq_retryJobs', keys, args, 3, 3)
  if err then return err end
  local stream, events = keys[1], keys[3]
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
        'deadLetter', 'revoked', 'stacktrace', 'expireAt', 'failures')
      redis.call('DEL', prefix .. 'result:' .. jobId) -- the cached outcome is stale now
      reopenLastStep(jobKey)
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
  local prefix
  prefix, err = addKeys('glidemq_fireScheduler', keys, 1,
    {'schedulers', 'id', 'stream', 'scheduled', 'events'})
  if not prefix then return err end
  -- malformed job arguments leave the entry as it is
  local bad, v = checkAdd(args, 4)
  if bad then return badCall(bad, 'glidemq_fireScheduler', 'job arguments') end
  local cur = redis.call('HGET', keys[1], args[1])
  if not cur or redis.sha1hex(cur) ~= args[2] then return {'skip', ''} end
  local jobId = addJobCore(keys[2], keys[5], args, 4, v)
  setEntry(keys[1], args[1], args[3])
  return {'fired', jobId}
end)
