---------------------------------------------------------------------------------------------
-- durable workflows: what a running workflow records (its history: see 15_history.lua)
--
-- Each function acts for one run only: job jobId active under stream entry entryId (not
-- taken over by stall recovery, not finished). It checks the position and name against the
-- history and the caps, then records the entry and any move of the job in the same call.
-- Replies are {status, detail}; 'stale' and 'missing' (not this run's job any more),
-- 'nondeterminism' and 'recorded' (with the entry recorded there), 'history-full' and
-- 'too-large' write nothing.

-- The head every step call shares (ARGS now, jobId, entryId, position, name): the call's
-- values and the job's key, or nil and the reply.
local function stepHead(fname, args, prefix)
  local now, pos = int(args[1], 0, MAX_TIME), int(args[4], 1, MAX_INT)
  if not now then return nil, badCall('ERR:BAD_TIMESTAMP', fname, 'now') end
  if not pos or not entryIdOk(args[3]) then
    return nil, badCall('ERR:BAD_ARGS', fname, 'entryId or position')
  end
  if args[5] == '' or #args[5] > 1024 then return nil, badCall('ERR:BAD_ARGS', fname, 'name') end
  local jobKey = prefix .. 'job:' .. args[2]
  local h = redis.call('HMGET', jobKey, 'state', 'sid')
  if not h[1] then return nil, {'missing', ''} end
  if h[1] ~= 'active' or h[2] ~= args[3] then return nil, {'stale', ''} end
  return {now = now, jobId = args[2], entryId = args[3], pos = pos, name = args[5],
    jobKey = jobKey}, nil
end

-- Ends the run (its entry already acknowledged): the job waits until runAt as a delayed job,
-- as glidemq_moveActiveToDelayed leaves it, without counting an attempt. Its new state.
local function stepDelay(prefix, stream, s, runAt)
  redis.call('XDEL', stream, s.entryId)
  leaveActive(prefix, s.jobKey, s.jobId, 'delayed', nil, s.now)
  local priority = tonumber(redis.call('HGET', s.jobKey, 'priority')) or 0
  return requeue(prefix, s.jobKey, s.jobId, priority, runAt, s.now)
end

-- KEYS: stream, events. ARGS: now, jobId, entryId, position, name, kind (step|now|random),
-- status (done|failed|retrying), attempts, startedAt, result (JSON, '' for none), error,
-- runAt (retrying: when the workflow runs again; else 0), emitEvents.
-- Records a step's outcome (or a value now/random) at `position`. done and failed: the job
-- stays active (the workflow goes on, or fails through glidemq_fail); retrying: the run also
-- ends and the workflow waits until runAt, delayed, without counting an attempt. Returns
-- {'ok', ''}, {state, ''} after retrying, or a refusal (above).
-- @wire glidemq_stepRecord keys=2 args=13
redis.register_function('glidemq_stepRecord', function(keys, args)
  local fname = 'glidemq_stepRecord'
  local err = shape(fname, keys, args, 2, 13, 13)
  if err then return err end
  local stream = keys[1]
  local prefix = prefixOf(stream, 'stream')
  local kind, status = args[6], args[7]
  local attempts, started = int(args[8], 0, MAX_INT), int(args[9], 0, MAX_TIME)
  local runAt = int(args[12], 0, MAX_INT)
  if (kind ~= 'step' and kind ~= 'now' and kind ~= 'random')
      or (status ~= 'done' and status ~= 'failed' and status ~= 'retrying')
      or (kind ~= 'step' and status ~= 'done') or not attempts or not started or not runAt
      or #args[11] > 65536 then
    return badCall('ERR:BAD_ARGS', fname, 'kind, status, attempts, startedAt, error or runAt')
  end
  local s, reply = stepHead(fname, args, prefix)
  if not s then return reply end
  if status == 'retrying' and runAt > s.now + MAX_DELAY then
    return badCall('ERR:BAD_OPTION', fname, 'runAt')
  end
  if #args[10] > MAX_DATA then return {'too-large', tostring(#args[10])} end
  local slot, refused = historySlot(s.jobKey, s.pos, s.name, kind)
  if not slot then return refused end
  local m = {n = s.name, k = kind, s = status, a = attempts, t0 = started, t1 = s.now,
    u = status == 'retrying' and runAt or 0, e = args[11]}
  local plan
  plan, refused = planEntry(slot, m, args[10])
  if not plan then return refused end
  if status ~= 'retrying' then
    writeEntry(s.jobKey, slot, plan, args[10])
    return {'ok', ''}
  end
  if redis.call('XACK', stream, GROUP, s.entryId) == 0 then return {'stale', ''} end
  writeEntry(s.jobKey, slot, plan, args[10])
  local state = stepDelay(prefix, stream, s, runAt)
  if args[13] == '1' then
    emit(keys[2], 'delayed', s.jobId, 'delay', math.max(0, runAt - s.now), 'reason', 'step-retry')
  end
  return {state, ''}
end)

-- KEYS: stream, events. ARGS: now, jobId, entryId, position, name, until (ms), emitEvents.
-- A durable sleep: the run ends and the workflow waits, delayed, until `until` (holding no
-- worker); an `until` already past is recorded as done and the job stays active. Returns
-- {'ok', ''} (past), {state, ''} or a refusal.
-- @wire glidemq_stepSleep keys=2 args=7
redis.register_function('glidemq_stepSleep', function(keys, args)
  local fname = 'glidemq_stepSleep'
  local err = shape(fname, keys, args, 2, 7, 7)
  if err then return err end
  local stream = keys[1]
  local prefix = prefixOf(stream, 'stream')
  local untilMs = int(args[6], 0, MAX_INT)
  if not untilMs then return badCall('ERR:BAD_ARGS', fname, 'until') end
  local s, reply = stepHead(fname, args, prefix)
  if not s then return reply end
  if untilMs > s.now + MAX_DELAY then return badCall('ERR:BAD_OPTION', fname, 'until') end
  local slot, refused = historySlot(s.jobKey, s.pos, s.name, 'sleep')
  if not slot then return refused end
  local had = slot.had
  local m = {n = s.name, k = 'sleep', s = 'sleeping', a = 0, t0 = had and had.t0 or s.now,
    t1 = 0, u = untilMs}
  if untilMs <= s.now then m.s, m.t1 = 'done', s.now end
  local plan
  plan, refused = planEntry(slot, m, '')
  if not plan then return refused end
  if m.s == 'done' then
    writeEntry(s.jobKey, slot, plan, '')
    return {'ok', ''}
  end
  if redis.call('XACK', stream, GROUP, s.entryId) == 0 then return {'stale', ''} end
  writeEntry(s.jobKey, slot, plan, '')
  local state = stepDelay(prefix, stream, s, untilMs)
  if args[7] == '1' then
    emit(keys[2], 'delayed', s.jobId, 'delay', untilMs - s.now, 'reason', 'sleep')
  end
  return {state, ''}
end)

-- KEYS: stream, suspended, events. ARGS: now, jobId, entryId, position, name (the event's),
-- deadline (ms, 0 for none), emitEvents.
-- A wait for an event: one already in the mailbox ends it at once ({'received', data}, the
-- job stays active); a deadline already past ends it as {'timeout', ''}; otherwise the run
-- ends and the workflow is suspended until glidemq_signal delivers the event or the deadline
-- passes (glidemq_expireSuspended then runs it again): {'suspended', ''}. Or a refusal.
-- @wire glidemq_stepWait keys=3 args=7
redis.register_function('glidemq_stepWait', function(keys, args)
  local fname = 'glidemq_stepWait'
  local err = shape(fname, keys, args, 3, 7, 7)
  if err then return err end
  local stream = keys[1]
  local prefix = prefixOf(stream, 'stream')
  local deadline = int(args[6], 0, MAX_INT)
  if not deadline then return badCall('ERR:BAD_ARGS', fname, 'deadline') end
  local s, reply = stepHead(fname, args, prefix)
  if not s then return reply end
  if deadline > s.now + MAX_DELAY then return badCall('ERR:BAD_OPTION', fname, 'deadline') end
  local slot, refused = historySlot(s.jobKey, s.pos, s.name, 'event')
  if not slot then return refused end
  local had = slot.had
  local m = {n = s.name, k = 'event', s = 'waiting', a = 0, t0 = had and had.t0 or s.now,
    t1 = 0, u = deadline}
  local plan
  local seq, rest, data = peekMail(s.jobKey, s.name)
  if seq then
    m.s, m.t1 = 'done', s.now
    plan, refused = planEntry(slot, m, data)
    if not plan then return refused end
    dropMail(s.jobKey, s.name, seq, rest, data)
    writeEntry(s.jobKey, slot, plan, data)
    return {'received', data}
  end
  if deadline > 0 and deadline <= s.now then m.s, m.t1 = 'timeout', s.now end
  plan, refused = planEntry(slot, m, '')
  if not plan then return refused end
  if m.s == 'timeout' then
    writeEntry(s.jobKey, slot, plan, '')
    return {'timeout', ''}
  end
  if redis.call('XACK', stream, GROUP, s.entryId) == 0 then return {'stale', ''} end
  redis.call('XDEL', stream, s.entryId)
  writeEntry(s.jobKey, slot, plan, '')
  local why = 'event ' .. s.name
  parkSuspended(prefix, s.jobKey, s.jobId, keys[2], s.now, why, deadline)
  redis.call('HSET', s.jobKey, 'wfWait', s.pos, 'wfEvent', s.name)
  if args[7] == '1' then emit(keys[3], 'suspended', s.jobId, 'reason', why) end
  return {'suspended', ''}
end)

-- KEYS: stream, events, the `id` key of the child's queue (in the workflow's cluster slot).
-- ARGS: now, jobId, entryId, position, name, childName, data, opts, delay, priority,
-- maxAttempts, ttl, emitEvents.
-- Starts a child job (a flow child of the workflow, as glidemq_addTree writes one) and ends
-- the run: the workflow waits for it in waiting-children and runs again when it finished
-- (its value in cv:<ref>, or with continueParentOnFailure its failure in cf:<ref>).
-- Returns {'waiting-children', childId} or a refusal; a child refused as an add would be is
-- an error reply (ERR:BAD_OPTION, ERR:PAYLOAD_TOO_LARGE, ERR:ID_EXHAUSTED, ...).
-- @wire glidemq_stepChild keys=3 args=13
redis.register_function('glidemq_stepChild', function(keys, args)
  local fname = 'glidemq_stepChild'
  local err = shape(fname, keys, args, 3, 13, 13)
  if err then return err end
  local stream = keys[1]
  local prefix = prefixOf(stream, 'stream')
  if string.sub(keys[3], -3) ~= ':id' then return badCall('ERR:BAD_KEYS', fname, keys[3]) end
  local s, reply = stepHead(fname, args, prefix)
  if not s then return reply end
  local slot, refused = historySlot(s.jobKey, s.pos, s.name, 'child')
  if not slot then return refused end
  if slot.had then return {'recorded', slot.raw} end
  local child, bad = flowSpec(keys[3], args[6], args[7], args[8], args[9], args[10], args[11],
    args[12], '', {})
  if bad then return badCall(bad, fname, 'the child job') end
  child.id = generatedId(child.prefix, child.idKey, nil)
  if not child.id then return badCall('ERR:ID_EXHAUSTED', fname, 'the child job') end
  local ref = jobRef(child.prefix, child.id)
  local m = {n = s.name, k = 'child', s = 'waiting', a = 0, t0 = s.now, t1 = 0, u = 0, c = ref}
  local plan
  plan, refused = planEntry(slot, m, '')
  if not plan then return refused end
  if redis.call('XACK', stream, GROUP, s.entryId) == 0 then return {'stale', ''} end
  redis.call('XDEL', stream, s.entryId)
  child.pPrefix, child.pid = prefix, s.jobId
  writeFlowJob(child, s.now)
  redis.call('SADD', prefix .. 'deps:' .. s.jobId, ref)
  writeEntry(s.jobKey, slot, plan, '')
  leaveActive(prefix, s.jobKey, s.jobId, 'waiting-children', nil, s.now)
  redis.call('HSET', s.jobKey, 'state', 'waiting-children')
  redis.call('HDEL', s.jobKey, 'sid')
  redis.call('ZADD', prefix .. 'waiting-children', s.now, s.jobId)
  if args[13] == '1' then emit(keys[2], 'waiting-children', s.jobId) end
  return {'waiting-children', child.id}
end)
