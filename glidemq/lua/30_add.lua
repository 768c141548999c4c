---------------------------------------------------------------------------------------------
-- add

-- The first checks of every add: name, data and opts are strings, the name 1 to MAX_NAME
-- bytes, now a time in ms. Returns an addJob error reply, or nil and now.
local function checkHead(name, data, opts, nowArg)
  if type(name) ~= 'string' or type(data) ~= 'string' or type(opts) ~= 'string' then
    return 'ERR:BAD_OPTION'
  end
  if not nameOk(name) then return 'ERR:BAD_NAME' end
  local now = int(nowArg, 0, MAX_TIME)
  if not now then return 'ERR:BAD_TIMESTAMP' end
  return nil, now
end

-- The last checks of every add: the sizes, opts a JSON object, and the options this library
-- reads from it. Returns an addJob error reply, or nil and the checked values (v for
-- addJobCore) with the given delay, priority and ttl.
local function checkTail(data, opts, now, delay, priority, ttl)
  if dataTooLarge(data) or #opts > MAX_DATA then return 'ERR:PAYLOAD_TOO_LARGE' end
  local jo = addOpts(opts)
  if not jo then return 'ERR:BAD_OPTION' end
  local rttlOk, rttl = optInt(jo.resultTtl)
  local lockOk, lockMs = optInt(jo.lockDuration)
  if not rttlOk or not lockOk then return 'ERR:BAD_OPTION' end
  if rttl == '0' then rttl = nil end -- a result kept for 0 ms is no result cache
  return nil, {now = now, delay = delay, priority = priority, ttl = ttl, rttl = rttl,
    orderingKey = '', customId = '', lockMs = lockMs,
    atMostOnce = jo.atMostOnce == true, skipEvents = jo.skipEvents == true}, jo
end

-- Checks the 17 (+ lifo) addJob arguments at a[o]..a[o + 17] before anything is written.
-- Returns nil and the parsed values, or an addJob error reply.
local function checkAdd(a, o)
  local name, data, opts = a[o], a[o + 1], a[o + 2]
  local bad, now = checkHead(name, data, opts, a[o + 3])
  if bad then return bad end
  -- '' stands for 0 in the optional numbers, as some producers send it
  local delay = int(a[o + 4] == '' and 0 or a[o + 4], 0, MAX_DELAY)
  local priority = int(a[o + 5] == '' and 0 or a[o + 5], 0, MAX_PRIORITY)
  local maxAttempts = int(a[o + 7] == '' and 0 or a[o + 7], 0, MAX_INT)
  local ttl = int(a[o + 15] == '' and 0 or a[o + 15], 0, MAX_INT)
  if not delay or not priority or not maxAttempts or not ttl then return 'ERR:BAD_OPTION' end
  local v, jo
  bad, v, jo = checkTail(data, opts, now, delay, priority, ttl)
  if bad then return bad end
  -- Arguments 10-15 configure the group named by the ordering key; without a key they mean
  -- nothing: refuse them rather than accept a promise that would not be kept.
  local orderingKey = a[o + 8] or ''
  if orderingKey ~= '' then
    local group = groupArgs(a, o, jo)
    if type(group) == 'string' then return group end
    v.group, v.orderingKey = group, orderingKey
  else
    for i = 9, 14 do
      local x = a[o + i]
      if x ~= nil and x ~= '' and tonumber(x) ~= 0 then return 'ERR:BAD_OPTION' end
    end
  end
  local customId = a[o + 16] or ''
  if customId ~= '' and not validCustomId(customId) then return 'ERR:INVALID_JOB_ID' end
  v.customId = customId
  return nil, v
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
    jobId = generatedId(prefix, idKey, nil)
    if jobId == nil then return 'ERR:ID_EXHAUSTED' end
  end
  if group and keyFull(prefix, orderingKey) then return KEY_FULL end

  local jobKey = prefix .. 'job:' .. jobId
  local state, sid, groupFields, fairSeq
  if group then groupFields, fairSeq = joinGroup(prefix, orderingKey, group, now) end
  if lifo then
    redis.call('RPUSH', prefix .. 'list', jobId)
    state = 'waiting'
  elseif fairSeq and delay == 0 and priority == 0 and fairHolds(prefix, orderingKey) then
    -- a fair group's job waits its turn in the group's backlog (05_groups)
    enterGroupq(prefix, jobId, orderingKey, fairSeq)
    state = 'group-waiting' -- written with the job's other fields below
  else
    state, sid = enqueue(prefix, jobId, priority, now + delay, now)
    if fairSeq and sid then redis.call('SADD', prefix .. 'fairin:' .. orderingKey, jobId) end
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
  if groupFields then
    for _, f in ipairs(groupFields) do fields[#fields + 1] = f end
  end
  redis.call('HSET', jobKey, unpack(fields))
  if not v.skipEvents then emit(events, 'added', jobId, 'name', name) end
  return jobId
end

-- KEYS: id, stream, scheduled, events. ARGS: the 17 documented addJob arguments.
-- @wire glidemq_addJob keys=4 args=17..18
redis.register_function('glidemq_addJob', function(keys, args)
  local err = shape('glidemq_addJob', keys, args, 4, 17, 18)
  if err then return err end
  local prefix
  prefix, err = addKeys('glidemq_addJob', keys, 1, {'id', 'stream', 'scheduled', 'events'})
  if not prefix then return err end
  local bad, v = checkAdd(args, 1)
  if bad then return bad end
  local room = waitingRoom(prefix)
  if room and room <= 0 then return QUEUE_FULL end
  return addJobCore(keys[1], keys[4], args, 1, v)
end)

-- KEYS: id (the queue's other keys share its prefix). ARGS: now, name, opts, data,
-- maxAttempts. One job without delay, priority, ttl, custom id, group or LIFO: what most adds
-- are, in a third of addJob's arguments. Replies as addJob (the job id, or an error code).
-- @wire glidemq_add keys=1 args=5
redis.register_function('glidemq_add', function(keys, args)
  local err = shape('glidemq_add', keys, args, 1, 5, 5)
  if err then return err end
  local prefix
  prefix, err = addKeys('glidemq_add', keys, 1, {'id'}, {'stream', 'events'})
  if not prefix then return err end
  local name, opts, data, maxAttempts = args[2], args[3], args[4], args[5]
  local bad, now = checkHead(name, data, opts, args[1])
  if bad then return bad end
  if not int(maxAttempts == '' and 0 or maxAttempts, 0, MAX_INT) then return 'ERR:BAD_OPTION' end
  local v
  bad, v = checkTail(data, opts, now, 0, 0, 0)
  if bad then return bad end
  -- the addJob arguments addJobCore reads (no parent, no LIFO)
  local a = {name, data, opts, args[1], '0', '0', '', maxAttempts}
  local room = waitingRoom(prefix)
  if room and room <= 0 then return QUEUE_FULL end
  return addJobCore(keys[1], prefix .. 'events', a, 1, v)
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
  local prefix
  prefix, err = addKeys('glidemq_addBulk', keys, 1, {'id', 'stream', 'scheduled', 'events'})
  if not prefix then return err end
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
  local room = waitingRoom(prefix)
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
  local prefix
  prefix, err = addKeys('glidemq_dedup', keys, 1, {'dedup', 'id', 'stream', 'scheduled', 'events'})
  if not prefix then return err end
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
  fairHeal(prefix, now)
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
