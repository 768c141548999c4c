---------------------------------------------------------------------------------------------
-- leaving the active state
--
-- Every path that takes a job out of the active state calls leaveActive once, before the job
-- hash can be deleted. outcome: 'completed' and 'failed' (finished for good), 'retry' (failed,
-- will run again), 'requeued' (stalled or handed back), 'delayed' (moved to delayed while
-- running), 'waiting-children' (moved to wait for its children while running; it runs again
-- later, like 'delayed'). One HMGET per call keeps the hot path cheap for plain jobs.

-- Groups and ordering keys: give back the slot the job held. Must be idempotent.
local function releaseGroupSlot(prefix, jobKey, groupKey, outcome, now)
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
  local o = jobOpts(opts)
  if o.ignoreDependencyOnFailure == true then return 'ignore' end
  if o.removeDependencyOnFailure == true then return 'remove' end
  if o.continueParentOnFailure == true then return 'continue' end
  return 'fail'
end

-- The (keepCount, keepAge) a job's own removeOnComplete / removeOnFail (`field` of its opts
-- JSON) asks for, as the worker passes them; nil when the job sets none (the worker's default
-- applies then, which the library does not know).
local function ownRetention(opts, field)
  local v = jobOpts(opts)[field]
  if v == true then return 0, 0 end
  if type(v) == 'number' then return math.max(0, math.floor(v)), 0 end
  if type(v) == 'table' then
    local count, age = tonumber(v.count), tonumber(v.age)
    return count and math.max(0, math.floor(count)) or -1, age and math.max(0, math.floor(age)) or 0
  end
  return nil, nil
end

-- A parent whose last pending child finished: runnable now, or after its own delay (a
-- workflow waiting for a child it started has had its delay: it runs now).
local function wakeParent(pPrefix, pKey, pid, now)
  redis.call('ZREM', pPrefix .. 'waiting-children', pid)
  local h = redis.call('HMGET', pKey, 'priority', 'delay', 'wfLen')
  local delay = h[3] and 0 or (tonumber(h[2]) or 0)
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
      -- readers list the child that failed the parent with its reason (failedBy: which)
      redis.call('HSET', pKey, 'cf:' .. ref, value or '')
      redis.call('HSETNX', pKey, 'failedBy', ref)
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
      now = now or clockMs()
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
  -- Parents failed by a child keep what their own removeOnFail asks for; only now, since the
  -- walk above reads each failed parent's own parents from its hash.
  for j = 2, #work do
    local w = work[j]
    local keepCount, keepAge = ownRetention(redis.call('HGET', w[2], 'opts'), 'removeOnFail')
    if keepCount == 0 then
      deleteJob(w[1], w[3])
      redis.call('ZREM', w[1] .. 'failed', w[3])
    elseif keepCount then
      retain(w[1], w[1] .. 'failed', now, keepCount, keepAge)
    end
  end
end

-- Returns the job's result-cache ttl ('rttl', read in the same HMGET) or false.
local function leaveActive(prefix, jobKey, jobId, outcome, value, now)
  local h = redis.call('HMGET', jobKey, 'parentId', 'groupKey', 'rttl')
  if h[2] then
    releaseGroupSlot(prefix, jobKey, h[2], outcome, now)
    if outcome ~= 'completed' and outcome ~= 'failed' then groupWaiting(prefix, h[2], 1) end
  end
  if h[1] and (outcome == 'completed' or outcome == 'failed') then
    flowNotify(prefix, jobKey, jobId, outcome, value, now)
  end
  return h[3]
end
