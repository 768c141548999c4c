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

-- Suspends a job whose run just ended (its entry acknowledged and deleted) until `deadline`
-- (ms, 0 for none); a concurrency slot is given back, an ordering key stays with the job.
local function parkSuspended(prefix, jobKey, jobId, suspended, now, reason, deadline)
  local j = redis.call('HMGET', jobKey, 'groupKey', 'orderingKey', 'orderingSeq', 'groupSlot', 'state')
  if j[1] and j[5] == 'active' then
    releaseHold(prefix, jobKey, j[1], j[2] and true or false, tonumber(j[3]) or 0, j[4] == '1',
      false, now, false)
  end
  redis.call('ZADD', suspended, deadline > 0 and deadline or '+inf', jobId)
  redis.call('HSET', jobKey, 'state', 'suspended', 'suspendReason', reason,
    'suspendUntil', deadline > 0 and deadline or '')
end

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
  parkSuspended(prefix, jobKey, jobId, keys[2], now, args[4], timeout > 0 and (now + timeout) or 0)
  if args[6] == '1' then emit(keys[3], 'suspended', jobId, 'reason', args[4]) end
  return 'suspended'
end)

-- KEYS: stream, suspended, events. ARGS: now, jobId, name, data (JSON), emitEvents.
-- Re-queues a suspended job with the signal appended to its 'signals'. A workflow (opts
-- workflow) gets it as an event instead: suspended in a wait for this name, the wait ends with
-- the data and it runs again; otherwise, while it has not finished, the event is kept in its
-- mailbox for its next wait of that name. Returns the job's new state (a workflow that kept
-- the event: its state as it is), 0 when it does not exist, 'ERR:STATE' when it cannot take
-- the signal (not suspended; or a finished workflow), 'ERR:MAILBOX_FULL' or 'ERR:TOO_LARGE'
-- (the workflow's mailbox or history is full); nothing is written on a refusal.
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
  local h = redis.call('HMGET', jobKey, 'state', 'signals', 'priority', 'wfEvent', 'wfWait')
  if not h[1] then return 0 end
  if h[4] and h[1] == 'suspended' and h[4] == name then
    local refused = endWait(jobKey, h[5], 'done', data, now)
    if refused then return 'ERR:TOO_LARGE' end
    redis.call('ZREM', keys[2], jobId)
    redis.call('HSET', jobKey, 'suspendUntil', '')
    local state = requeue(prefix, jobKey, jobId, tonumber(h[3]) or 0, now, now)
    if args[5] == '1' then emit(keys[3], 'signaled', jobId, 'name', name) end
    return state
  end
  if h[4] or (h[1] ~= 'suspended' and jobOpts(redis.call('HGET', jobKey, 'opts')).workflow == true) then
    if isTerminal(h[1]) then return 'ERR:STATE' end
    if not putMail(jobKey, name, data) then return 'ERR:MAILBOX_FULL' end
    if args[5] == '1' then emit(keys[3], 'signaled', jobId, 'name', name, 'kept', '1') end
    return h[1]
  end
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
-- (failedReason 'suspension timed out: <reason>'); they are kept in the failed set. A workflow
-- whose wait for an event timed out runs again instead (the wait's entry says 'timeout').
-- Returns how many failed.
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
    local h = redis.call('HMGET', jobKey, 'state', 'suspendReason', 'wfWait', 'priority')
    if h[1] == 'suspended' and h[3] then
      -- a workflow's wait for an event: it runs again, and the wait raises its timeout there
      endWait(jobKey, h[3], 'timeout', '', now)
      redis.call('HSET', jobKey, 'suspendUntil', '')
      requeue(prefix, jobKey, jobId, tonumber(h[4]) or 0, now, now)
      emit(keys[2], 'waiting', jobId, 'reason', 'event-timeout')
    elseif h[1] == 'suspended' then
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
