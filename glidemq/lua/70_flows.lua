---------------------------------------------------------------------------------------------
-- flows: parents that run after their children (see the flow notes above leaveActive)

-- A new id for a flow job: its custom id, or the next counter value not taken by an existing
-- job nor reserved by a custom id of the same call.
local function flowJobId(prefix, idKey, customId, reserved)
  if customId ~= '' then return customId end
  return generatedId(prefix, idKey, reserved)
end

-- Parses and checks one job of a flow; returns the job table, or nil and an error reply.
local function flowSpec(idKey, name, data, opts, delay, priority, maxAttempts, ttl, customId,
                        reserved)
  local j = {prefix = prefixOf(idKey, 'id'), idKey = idKey, name = name, data = data,
    opts = opts or '{}', delay = int(delay, 0, MAX_DELAY), priority = int(priority, 0, MAX_PRIORITY),
    maxAttempts = maxAttempts or '0', ttl = int(ttl == '' and 0 or ttl, 0, MAX_INT),
    customId = customId or '', parents = {}}
  if type(name) ~= 'string' or type(data) ~= 'string' or type(j.opts) ~= 'string' then
    return nil, 'ERR:BAD_FLOW'
  end
  if not nameOk(name) then return nil, 'ERR:BAD_NAME' end
  if not j.delay or not j.priority or not j.ttl
      or not int(j.maxAttempts == '' and 0 or j.maxAttempts, 0, MAX_INT) then
    return nil, 'ERR:BAD_OPTION'
  end
  if dataTooLarge(data) or #j.opts > MAX_DATA then return nil, 'ERR:PAYLOAD_TOO_LARGE' end
  j.o = addOpts(j.opts)
  if not j.o then return nil, 'ERR:BAD_OPTION' end
  if j.customId ~= '' then
    if not validCustomId(j.customId) then return nil, 'ERR:INVALID_JOB_ID' end
    local k = j.prefix .. j.customId
    if reserved[k] or redis.call('EXISTS', j.prefix .. 'job:' .. j.customId) == 1 then
      return nil, 'duplicate'
    end
    reserved[k] = true
  end
  return j, nil
end

-- Writes a flow job: a job with children (waits) starts in waiting-children, the others are
-- enqueued. j.pPrefix / j.pid name the first parent, j.extra the others.
local function writeFlowJob(j, now)
  local state, sid = 'waiting-children', nil
  if not j.waits then state, sid = enqueue(j.prefix, j.id, j.priority, now + j.delay, now) end
  local f = {'id', j.id, 'name', j.name, 'data', j.data, 'opts', j.opts, 'timestamp', now,
    'attemptsMade', 0, 'delay', j.delay, 'priority', j.priority, 'maxAttempts', j.maxAttempts,
    'state', state}
  if sid then f[#f + 1] = 'sid'; f[#f + 1] = sid end
  if j.ttl > 0 then f[#f + 1] = 'expireAt'; f[#f + 1] = now + j.ttl end
  if j.pid then
    f[#f + 1] = 'parentId'; f[#f + 1] = j.pid
    f[#f + 1] = 'parentQueue'; f[#f + 1] = string.sub(j.pPrefix, 1, #j.pPrefix - 1)
  end
  if j.extra then f[#f + 1] = 'extraParents'; f[#f + 1] = j.extra end
  if j.budget then f[#f + 1] = 'budget'; f[#f + 1] = j.budget end
  redis.call('HSET', j.prefix .. 'job:' .. j.id, unpack(f))
  if j.waits then redis.call('ZADD', j.prefix .. 'waiting-children', now, j.id) end
  if j.o.skipEvents ~= true then emit(j.prefix .. 'events', 'added', j.id, 'name', j.name) end
end

-- Whether an existing job can be made to wait for one more child: not finished, and not a
-- waiting job whose stream entry a worker has just read (it is about to run).
local function canHold(pPrefix, pKey)
  local h = redis.call('HMGET', pKey, 'state', 'sid')
  local state = h[1]
  if state == 'waiting' then
    if not h[2] then return true end
    local ok, p = pcall(redis.call, 'XPENDING', pPrefix .. 'stream', GROUP, h[2], h[2], 1)
    return not (ok and #p > 0)
  end
  return state == 'waiting-children' or state == 'active' or state == 'delayed'
    or state == 'prioritized'
end

-- Makes a job checked by canHold wait for its children: one not started yet leaves the stream
-- or the scheduled set; a running one keeps running (moveToWaitingChildren is its move).
local function hold(pPrefix, pKey, pid)
  local h = redis.call('HMGET', pKey, 'state', 'sid')
  if h[1] == 'waiting' then
    if h[2] then redis.call('XDEL', pPrefix .. 'stream', h[2]) end
  elseif h[1] == 'delayed' or h[1] == 'prioritized' then
    redis.call('ZREM', pPrefix .. 'scheduled', pid)
  else
    return
  end
  redis.call('HSET', pKey, 'state', 'waiting-children')
  redis.call('HDEL', pKey, 'sid')
  redis.call('ZADD', pPrefix .. 'waiting-children', clockMs(), pid)
  emit(pPrefix .. 'events', 'waiting-children', pid)
end

-- Records (pPrefix, pid) as a parent of an existing job.
local function linkChild(cPrefix, cKey, pPrefix, pid)
  local h = redis.call('HMGET', cKey, 'parentId', 'parentQueue', 'extraParents')
  if not h[1] then
    redis.call('HSET', cKey, 'parentId', pid, 'parentQueue', string.sub(pPrefix, 1, #pPrefix - 1))
    return
  end
  if h[1] == pid and parentPrefixOf(cPrefix, h[2]) == pPrefix then return end
  local pref = jobRef(pPrefix, pid)
  if h[3] then
    for other in string.gmatch(h[3], '[^\n]+') do
      if other == pref then return end
    end
    redis.call('HSET', cKey, 'extraParents', h[3] .. '\n' .. pref)
  else
    redis.call('HSET', cKey, 'extraParents', pref)
  end
end

-- Whether the job (prefix, id) waits, directly or through others, for the job `target` (a
-- reference). nil when more than `limit` jobs would have to be visited.
local function waitsFor(prefix, id, target, limit)
  local todo, seen, head = {{prefix, id}}, {}, 1
  while head <= #todo do
    local p, i = todo[head][1], todo[head][2]
    head = head + 1
    for _, m in ipairs(redis.call('SMEMBERS', p .. 'deps:' .. i)) do
      if m == target then return true end
      if not seen[m] then
        seen[m] = true
        if #todo >= limit then return nil end
        local mp, mi = splitRef(m)
        if mp then todo[#todo + 1] = {mp, mi} end
      end
    end
  end
  return false
end

-- KEYS: the `id` key of every queue the flow uses.
-- ARGS: now, n, attachTo ('' or the reference of an existing job the flow's roots become
--       children of), then per job: queue (1-based index into KEYS), name, data, opts, delay,
--       priority, maxAttempts, ttl, customJobId, nParents, then nParents 1-based indices of
--       earlier jobs of this call that wait for it (parents come before their children).
-- The compact form glidemq's FlowProducer uses for every flow, tree and DAG: one call, all or
-- nothing. Returns the job ids in order; {'duplicate', index} when a custom id is taken; or an
-- 'ERR:...' string. Nothing but id counters is written unless it succeeds.
-- @wire glidemq_addTree keys=1.. args=3..
redis.register_function('glidemq_addTree', function(keys, args)
  local err = shape('glidemq_addTree', keys, args, nil, 3)
  if err then return err end
  for i = 1, #keys do
    local prefix, bad = addKeys('glidemq_addTree', keys, i, {'id'}, {'stream', 'scheduled', 'events'})
    if not prefix then return bad end
  end
  local now, n, attach = int(args[1], 0, MAX_TIME), int(args[2], 0, MAX_INT), args[3]
  if not now then return 'ERR:BAD_TIMESTAMP' end
  if not n then return 'ERR:BAD_FLOW' end
  local jobs, reserved = {}, {}
  local i = 4
  for j = 1, n do
    local idKey = keys[int(args[i], 1, #keys) or 0]
    if not idKey or i + 9 > #args then return 'ERR:BAD_FLOW' end
    local job, bad = flowSpec(idKey, args[i + 1], args[i + 2], args[i + 3], args[i + 4],
      args[i + 5], args[i + 6], args[i + 7], args[i + 8], reserved)
    if bad == 'duplicate' then return {'duplicate', j} end
    if bad then return bad end
    local np = int(args[i + 9], 0, MAX_INT)
    if not np or i + 9 + np > #args then return 'ERR:BAD_FLOW' end
    for k = 1, np do
      local p = tonumber(args[i + 9 + k])
      if not p or p < 1 or p >= j then return 'ERR:BAD_FLOW' end
      job.parents[k] = p
      jobs[p].waits = true
    end
    i = i + 10 + np
    jobs[j] = job
  end
  if i ~= #args + 1 then return 'ERR:BAD_FLOW' end
  -- a budget rides in the root's opts (FlowProducer.add(budget=...))
  local budget
  if n > 0 and jobs[1].o.budget ~= nil then
    local mt, mc, mode, bad = budgetSpec(jobs[1].o.budget)
    if bad then return badCall('ERR:BAD_ARGS', 'glidemq_addTree', bad) end
    budget = {mt, mc, mode}
  end
  local aPrefix, aId, aKey
  if attach ~= '' then
    aPrefix, aId = splitRef(attach)
    if not aPrefix then return 'ERR:BAD_FLOW' end
    aKey = aPrefix .. 'job:' .. aId
    if redis.call('EXISTS', aKey) == 0 then return 'ERR:PARENT_NOT_FOUND' end
    if not canHold(aPrefix, aKey) then return 'ERR:PARENT_STATE' end
  end
  -- ids first (counters only), so a failure here leaves no partial flow
  for j = 1, n do
    local job = jobs[j]
    job.id = flowJobId(job.prefix, job.idKey, job.customId, reserved)
    if not job.id then return 'ERR:ID_EXHAUSTED' end
    reserved[job.prefix .. job.id] = true
  end
  local ids = {}
  if budget then
    local bk = jobs[1].prefix .. 'budget:' .. jobs[1].id
    redis.call('DEL', bk, bk .. ':held')
    redis.call('HSET', bk, 'maxTokens', budget[1], 'maxCost', budget[2], 'mode', budget[3],
      'tokens', 0, 'cost', 0, 'exceeded', '')
    for j = 1, n do jobs[j].budget = bk end
  end
  for j = 1, n do
    local job = jobs[j]
    local first = jobs[job.parents[1] or 0]
    if first then
      job.pPrefix, job.pid = first.prefix, first.id
      if #job.parents > 1 then
        local extra = {}
        for k = 2, #job.parents do
          local p = jobs[job.parents[k]]
          extra[#extra + 1] = jobRef(p.prefix, p.id)
        end
        job.extra = table.concat(extra, '\n')
      end
    elseif aPrefix then
      job.pPrefix, job.pid = aPrefix, aId
    end
    writeFlowJob(job, now)
    local ref = jobRef(job.prefix, job.id)
    for k = 1, #job.parents do
      local p = jobs[job.parents[k]]
      redis.call('SADD', p.prefix .. 'deps:' .. p.id, ref)
    end
    if not first and aPrefix then redis.call('SADD', aPrefix .. 'deps:' .. aId, ref) end
    ids[j] = job.id
  end
  if aPrefix then hold(aPrefix, aKey, aId) end
  return ids
end)

-- KEYS: a flow's budget hash (budget:{rootId} in the root's queue). ARGS: now, maxTokens,
-- maxCost (0: no cap), mode (fail|pause). Sets the caps and mode; when the totals are within
-- them (or the mode is fail) the jobs the budget parked go back to their queues. Returns how
-- many went back, or -1 when the flow has no budget (nothing written).
-- @wire glidemq_setFlowBudget keys=1 args=4
redis.register_function('glidemq_setFlowBudget', function(keys, args)
  local fname = 'glidemq_setFlowBudget'
  local err = shape(fname, keys, args, 1, 4, 4)
  if err then return err end
  local now = int(args[1], 0, MAX_TIME)
  if not now then return badCall('ERR:BAD_TIMESTAMP', fname, 'now') end
  local mt, mc, mode = int(args[2], 0, MAX_INT), num(args[3], 0, MAX_COST), args[4]
  if not mt then return badCall('ERR:BAD_ARGS', fname, 'maxTokens') end
  if not mc then return badCall('ERR:BAD_ARGS', fname, 'maxCost') end
  if mode ~= 'fail' and mode ~= 'pause' then return badCall('ERR:BAD_ARGS', fname, 'mode') end
  local bk = keys[1]
  if string.find(bk, ':budget:', 1, true) == nil then
    return badCall('ERR:BAD_KEYS', fname, 'not a budget key')
  end
  local b = redis.call('HMGET', bk, 'tokens', 'cost')
  if not b[1] then return -1 end
  local reason = budgetReason(tonumber(b[1]) or 0, tonumber(b[2]) or 0, mt, mc)
  redis.call('HSET', bk, 'maxTokens', mt, 'maxCost', mc, 'mode', mode, 'exceeded', reason or '')
  if reason and mode == 'pause' then return 0 end
  local n = 0
  for _, ref in ipairs(redis.call('SMEMBERS', bk .. ':held')) do
    local p, id = splitRef(ref)
    if p then
      local jobKey = p .. 'job:' .. id
      local h = redis.call('HMGET', jobKey, 'state', 'priority')
      if h[1] == 'suspended' then
        redis.call('ZREM', p .. 'suspended', id)
        redis.call('HSET', jobKey, 'suspendReason', '')
        requeue(p, jobKey, id, tonumber(h[2]) or 0, now, now)
        n = n + 1
      end
    end
  end
  redis.call('DEL', bk .. ':held')
  return n
end)

-- KEYS: id, stream, scheduled, events of the parent's queue, then the same four per child.
-- ARGS: parent: name, data, opts, timestamp, delay, priority, maxAttempts, numChildren,
--       customJobId; per child: name, data, opts, delay, priority, maxAttempts, queuePrefix,
--       parentQueue, customJobId; then numExtraDeps and that many references of existing jobs
--       the parent waits for too.
-- The glide-mq wire form. Returns JSON [parentId, childId, ...] or ["duplicate"], or an
-- 'ERR:...' string; nothing but id counters is written unless it succeeds.
-- @wire glidemq_addFlow keys=1.. args=9..
redis.register_function('glidemq_addFlow', function(keys, args)
  local err = shape('glidemq_addFlow', keys, args, nil, 9)
  if err then return err end
  local now = int(args[4], 0, MAX_TIME)
  local nc = int(args[8], 0, MAX_INT)
  if not now then return 'ERR:BAD_TIMESTAMP' end
  if not nc then return 'ERR:BAD_FLOW' end
  if #keys ~= 4 + 4 * nc then
    return badCall('ERR:BAD_KEYS', 'glidemq_addFlow', 'takes 4 + 4 per child keys')
  end
  for i = 1, #keys, 4 do
    local prefix, bad = addKeys('glidemq_addFlow', keys, i, {'id', 'stream', 'scheduled', 'events'})
    if not prefix then return bad end
  end
  local nx = int(args[10 + nc * 9] or '0', 0, MAX_INT)
  if not nx or (#args ~= 9 + nc * 9 and #args ~= 10 + nc * 9 + nx) then
    return badCall('ERR:BAD_ARGS', 'glidemq_addFlow', 'wrong number of arguments')
  end
  local function ttlOf(opts) return tonumber(jobOpts(opts).ttl) or 0 end
  local reserved = {}
  local parent
  parent, err = flowSpec(keys[1], args[1], args[2], args[3], args[5], args[6], args[7],
    ttlOf(args[3]), args[9], reserved)
  if err == 'duplicate' then return cjson.encode({'duplicate'}) end
  if err then return err end
  local children = {}
  for c = 1, nc do
    local b = 9 + (c - 1) * 9
    local child
    child, err = flowSpec(keys[4 + (c - 1) * 4 + 1], args[b + 1], args[b + 2], args[b + 3],
      args[b + 4], args[b + 5], args[b + 6], ttlOf(args[b + 3]), args[b + 9], reserved)
    if err == 'duplicate' then return cjson.encode({'duplicate'}) end
    if err then return err end
    children[c] = child
  end
  local e = 9 + nc * 9 + 1
  local extra, done = {}, {}
  for x = 1, tonumber(args[e]) or 0 do
    local ref = args[e + x]
    local xPrefix, xId = splitRef(ref or '')
    if not xPrefix then return 'ERR:BAD_FLOW' end
    local h = redis.call('HMGET', xPrefix .. 'job:' .. xId, 'state', 'returnvalue')
    if not h[1] then return 'ERR:DEP_NOT_FOUND' end
    if h[1] == 'failed' then return 'ERR:DEP_FAILED' end
    if h[1] == 'completed' then
      done[#done + 1] = {ref, h[2] or 'null'}
    else
      extra[#extra + 1] = {xPrefix, xId, ref}
    end
  end
  parent.id = flowJobId(parent.prefix, parent.idKey, parent.customId, reserved)
  if not parent.id then return cjson.encode({'ERR:ID_EXHAUSTED'}) end
  reserved[parent.prefix .. parent.id] = true
  for _, child in ipairs(children) do
    child.id = flowJobId(child.prefix, child.idKey, child.customId, reserved)
    if not child.id then return cjson.encode({'ERR:ID_EXHAUSTED'}) end
    reserved[child.prefix .. child.id] = true
  end
  parent.waits = nc > 0 or #extra > 0
  writeFlowJob(parent, now)
  local pKey = parent.prefix .. 'job:' .. parent.id
  local depsKey = parent.prefix .. 'deps:' .. parent.id
  for _, d in ipairs(done) do redis.call('HSET', pKey, 'cv:' .. d[1], d[2]) end
  local out = {parent.id}
  for _, child in ipairs(children) do
    child.pPrefix, child.pid = parent.prefix, parent.id
    writeFlowJob(child, now)
    redis.call('SADD', depsKey, jobRef(child.prefix, child.id))
    out[#out + 1] = child.id
  end
  for _, x in ipairs(extra) do
    linkChild(x[1], x[1] .. 'job:' .. x[2], parent.prefix, parent.id)
    redis.call('SADD', depsKey, x[3])
  end
  return cjson.encode(out)
end)

-- KEYS: the child's job hash, the parent's job hash. ARGS: childId, parentId.
-- Makes an existing job also wait for an existing child (a further parent of a DAG node, or a
-- dependency added later). Returns 'ok'; 'exists' (already a dependency); 'completed' (the
-- child had finished: its value is recorded, nothing to wait for); or ERR:CHILD_NOT_FOUND,
-- ERR:PARENT_NOT_FOUND, ERR:PARENT_STATE, ERR:CHILD_FAILED, ERR:CYCLE, ERR:TOO_LARGE.
-- @wire glidemq_registerParent keys=2 args=2
redis.register_function('glidemq_registerParent', function(keys, args)
  local err = shape('glidemq_registerParent', keys, args, 2, 2, 2)
  if err then return err end
  local cKey, pKey = keys[1], keys[2]
  local cid, pid = args[1], args[2]
  local cSuffix, pSuffix = 'job:' .. cid, 'job:' .. pid
  if string.sub(cKey, -#cSuffix) ~= cSuffix or string.sub(pKey, -#pSuffix) ~= pSuffix then
    return 'ERR:BAD_FLOW'
  end
  local cPrefix = string.sub(cKey, 1, #cKey - #cSuffix)
  local pPrefix = string.sub(pKey, 1, #pKey - #pSuffix)
  local ch = redis.call('HMGET', cKey, 'state', 'returnvalue')
  if not ch[1] then return 'ERR:CHILD_NOT_FOUND' end
  local pstate = redis.call('HGET', pKey, 'state')
  if not pstate then return 'ERR:PARENT_NOT_FOUND' end
  if isTerminal(pstate) then return 'ERR:PARENT_STATE' end
  local cref = jobRef(cPrefix, cid)
  local depsKey = pPrefix .. 'deps:' .. pid
  if redis.call('SISMEMBER', depsKey, cref) == 1 then return 'exists' end
  if ch[1] == 'failed' then return 'ERR:CHILD_FAILED' end
  if ch[1] == 'completed' then
    redis.call('HSET', pKey, 'cv:' .. cref, ch[2] or 'null')
    return 'completed'
  end
  if cKey == pKey then return 'ERR:CYCLE' end
  local cycle = waitsFor(cPrefix, cid, jobRef(pPrefix, pid), 10000)
  if cycle == nil then return 'ERR:TOO_LARGE' end
  if cycle then return 'ERR:CYCLE' end
  if not canHold(pPrefix, pKey) then return 'ERR:PARENT_STATE' end
  linkChild(cPrefix, cKey, pPrefix, pid)
  redis.call('SADD', depsKey, cref)
  hold(pPrefix, pKey, pid)
  return 'ok'
end)

-- KEYS: stream, scheduled, events. ARGS: jobId, entryId, now.
-- A running job whose children are not all done stops running and waits for them; it runs
-- again when the last one finishes. Returns {status, detail}: 'waiting-children'; 'continue'
-- when nothing is pending (the job stays active); 'failed' with the reason when a child's
-- failure fails this job; 'stale' (the worker no longer owns it) or 'missing'.
-- @wire glidemq_moveToWaitingChildren keys=3 args=3
redis.register_function('glidemq_moveToWaitingChildren', function(keys, args)
  local err = shape('glidemq_moveToWaitingChildren', keys, args, 3, 3, 3)
  if err then return err end
  local stream, events = keys[1], keys[3]
  local prefix = prefixOf(stream, 'stream')
  local jobId, entryId, now = args[1], args[2], int(args[3], 0, MAX_TIME)
  if not now then return badCall('ERR:BAD_TIMESTAMP', 'glidemq_moveToWaitingChildren', 'now') end
  if not entryIdOk(entryId) then
    return badCall('ERR:BAD_ARGS', 'glidemq_moveToWaitingChildren', 'entryId')
  end
  local jobKey = prefix .. 'job:' .. jobId
  local h = redis.call('HMGET', jobKey, 'state', 'sid', 'childFailed')
  if not h[1] then return {'missing', ''} end
  if h[1] ~= 'active' or h[2] ~= entryId then return {'stale', ''} end
  if h[3] then return {'failed', h[3]} end
  if redis.call('EXISTS', prefix .. 'deps:' .. jobId) == 0 then return {'continue', ''} end
  if redis.call('XACK', stream, GROUP, entryId) == 0 then return {'stale', ''} end
  redis.call('XDEL', stream, entryId)
  leaveActive(prefix, jobKey, jobId, 'waiting-children', nil, now)
  redis.call('HSET', jobKey, 'state', 'waiting-children')
  redis.call('HDEL', jobKey, 'sid')
  redis.call('ZADD', prefix .. 'waiting-children', now, jobId)
  emit(events, 'waiting-children', jobId)
  return {'waiting-children', ''}
end)
