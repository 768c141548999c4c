---------------------------------------------------------------------------------------------
-- groups: wait sets, fair scheduling across groups, pausing one group
--
-- group:{k}     besides the fields 10_limits lists: weight (set: a fair group), paused ('1':
--               none of its jobs start), maxSize (its limit of jobs not started yet, before
--               the queue's maxWaitingPerKey), fairSeq (numbers a fair group's adds),
--               pinConcurrency / pinRate ('1': set at run time, so adds no longer restate it)
-- groupq:{k}    jobs parked while the group is busy or paused; a fair group's backlog
-- fairin:{k}    the jobs of fair group k waiting in the stream (at most weight of them)
-- fair          the keys of the fair groups
--
-- Fair scheduling. A fair group's job enters the stream only while fewer than weight of the
-- group's jobs wait there and the group has a free slot for it; the others wait in groupq in
-- the order they were added (job field fairSeq). Each time one of them leaves the stream (it
-- starts, parks, or is removed) the next one enters, at the stream's tail, behind the other
-- groups' entries. So workers read the fair groups in turn, weight jobs of each per round,
-- whatever their backlogs and the order the jobs were added in. Delayed, prioritized, retried
-- and recovered jobs of a fair group enter the stream when due, outside the turn.

local UNLIMITED = 1000000000 -- maxConcurrency of a fair group added without a concurrency

-- Counts d more (or fewer) jobs of group k not started yet, never below 0.
local function groupWaiting(prefix, k, d)
  local gk = prefix .. 'group:' .. k
  if redis.call('HINCRBY', gk, 'waiting', d) < 0 then redis.call('HSET', gk, 'waiting', 0) end
end

-- Per-key backpressure: whether key k already holds its maximum of jobs not started yet:
-- the group's own maxSize, else the queue's maxWaitingPerKey (meta field).
local function keyFull(prefix, k)
  local g = redis.call('HMGET', prefix .. 'group:' .. k, 'waiting', 'maxSize')
  local max = tonumber(g[2]) or tonumber(redis.call('HGET', prefix .. 'meta', 'maxWaitingPerKey'))
  if not max then return false end
  return (tonumber(g[1]) or 0) >= max
end

local MAX_WAKE = 1000          -- parked jobs woken per call, bounds the work of one call

-- A stream entry's place in the stream as a sorted-set score: ms * 2048 + seq, exact below
-- 2^53 (ms up to the year 2109); entries past the 2048th of one ms tie.
local function entryScore(entryId)
  local ms, seq = string.match(entryId, '^(%d+)-(%d+)$')
  if not ms then return math.huge end
  return tonumber(ms) * 2048 + math.min(tonumber(seq), 2047)
end

-- A job joins group k's wait set at score; the caller sets its state to 'group-waiting'.
local function enterGroupq(prefix, jobId, k, score)
  redis.call('ZADD', prefix .. 'groupq:' .. k, score, jobId)
  redis.call('HINCRBY', prefix .. 'meta', 'groupWaiting', 1)
end

local function parkInGroup(prefix, jobKey, jobId, k, score)
  enterGroupq(prefix, jobId, k, score)
  redis.call('HSET', jobKey, 'state', 'group-waiting')
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

-- A fair group's job parks at its place in the group's add order.
local function fairScore(jobKey)
  return tonumber(redis.call('HGET', jobKey, 'fairSeq')) or 0
end

-- Whether fair group k may let one more of its jobs into the stream now: not paused, fewer
-- than weight of them there, and a slot for each of them. g: HMGET of weight,
-- maxConcurrency, active, paused; n: jobs of it in the stream.
local function fairRoom(g, n)
  local w = tonumber(g[1])
  if not w or g[4] == '1' then return false end
  return n < w and (tonumber(g[3]) or 0) + n < (tonumber(g[2]) or 1)
end

-- Lets the next jobs of fair group k's backlog into the stream while it has room.
local function fairPump(prefix, k, now)
  local g = redis.call('HMGET', prefix .. 'group:' .. k, 'weight', 'maxConcurrency', 'active',
    'paused')
  if not g[1] then return end
  local inq, gq = prefix .. 'fairin:' .. k, prefix .. 'groupq:' .. k
  local n = redis.call('SCARD', inq)
  for _ = 1, MAX_WAKE do
    if not fairRoom(g, n) then return end
    local head = redis.call('ZRANGE', gq, 0, 0)
    if not head[1] then return end
    if wakeParked(prefix, k, head[1], false, now) then
      redis.call('SADD', inq, head[1])
      n = n + 1
    end
  end
end

-- A job of group k no longer waits in the stream (it started, parked, left the queue): when it
-- was one of a fair group's turn, the next job of the group takes its place. Idempotent.
local function fairLeave(prefix, k, jobId, now)
  if redis.call('SREM', prefix .. 'fairin:' .. k, jobId) == 1 then fairPump(prefix, k, now) end
end

-- A new job of fair group k: whether it waits in the backlog rather than enter the stream
-- (the group has no room, or older jobs wait before it).
local function fairHolds(prefix, k)
  local g = redis.call('HMGET', prefix .. 'group:' .. k, 'weight', 'maxConcurrency', 'active',
    'paused')
  return not fairRoom(g, redis.call('SCARD', prefix .. 'fairin:' .. k))
    or redis.call('ZCARD', prefix .. 'groupq:' .. k) > 0
end

-- Repairs a few fair groups (the promotion loop calls it): a job counted in the stream that is
-- no longer there is uncounted, and the group's backlog moves on. Bounds a missed hand-over
-- to one promotion interval instead of a group that never runs again.
local function fairHeal(prefix, now)
  for _, k in ipairs(redis.call('SRANDMEMBER', prefix .. 'fair', 4)) do
    local inq = prefix .. 'fairin:' .. k
    for _, jobId in ipairs(redis.call('SMEMBERS', inq)) do
      local h = redis.call('HMGET', prefix .. 'job:' .. jobId, 'state', 'groupKey')
      if h[2] ~= k or (h[1] ~= 'waiting' and h[1] ~= 'prioritized') then
        redis.call('SREM', inq, jobId)
      end
    end
    if redis.call('ZCARD', prefix .. 'groupq:' .. k) == 0 and redis.call('SCARD', inq) == 0 then
      redis.call('SREM', prefix .. 'fair', k)
    else
      fairPump(prefix, k, now)
    end
  end
end
