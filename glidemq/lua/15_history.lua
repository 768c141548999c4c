---------------------------------------------------------------------------------------------
-- durable workflows: a workflow's history and its mailbox, both in its own job hash
--
-- A workflow is a job (opts.workflow = true) whose steps are recorded in its hash, so
-- whatever deletes the job deletes its history too (as with cv:/cf: of flow parents):
--   wf:<n>   the entry at position n, a JSON object the library writes: n name, k kind
--            (step|sleep|event|child|now|random), s status (done|failed|retrying|sleeping|
--            waiting|timeout), a attempts, t0 started, t1 finished, u until (a sleep's end,
--            a wait's deadline; 0 for none), c child reference, e error
--   wr:<n>   its result: the JSON the client sent, or an event's data, stored as it came
--   wfLen    the highest position recorded; wfBytes the bytes of all wf: and wr: fields
--   wfWait, wfEvent   while suspended in a wait for an event: its position and name
-- Events sent before the workflow waits for them wait in its mailbox:
--   evq:<name>  the numbers of the pending events of that name, oldest first, space-separated
--   ev:<seq>    one event's data; evSeq the last number given; evCount, evBytes what is pending

local MAX_STEPS = 1000 -- history positions of one workflow
local MAX_HISTORY_BYTES = 8388608 -- 8 MiB of entries and results
local MAX_MAIL = 100 -- events pending in one mailbox
local MAX_MAIL_BYTES = 4194304 -- 4 MiB of pending events' data

local function fmtInt(v)
  return string.format('%d', tonumber(v) or 0)
end

-- An entry's JSON from its table (built here, never by a re-encode of what was read).
local function stepMeta(m)
  return '{"n":' .. cjson.encode(tostring(m.n or '')) .. ',"k":"' .. m.k .. '","s":"' .. m.s
    .. '","a":' .. fmtInt(m.a) .. ',"t0":' .. fmtInt(m.t0) .. ',"t1":' .. fmtInt(m.t1)
    .. ',"u":' .. fmtInt(m.u) .. ',"c":' .. cjson.encode(tostring(m.c or ''))
    .. ',"e":' .. cjson.encode(tostring(m.e or '')) .. '}'
end

local function readMeta(raw)
  if not raw then return nil end
  local ok, m = pcall(cjson.decode, raw)
  if ok and type(m) == 'table' then return m end
  return {}
end

-- What the history holds at `pos`: the entry's text and table (nil when free), whether it
-- has a result, and what a write there must keep (the history's length and size).
local function readSlot(jobKey, pos)
  local h = redis.call('HMGET', jobKey, 'wf:' .. pos, 'wr:' .. pos, 'wfLen', 'wfBytes')
  return {pos = pos, raw = h[1] or nil, had = h[1] and readMeta(h[1]) or nil,
    res = h[2] and true or false, old = #(h[1] or '') + #(h[2] or ''),
    len = tonumber(h[3]) or 0, bytes = tonumber(h[4]) or 0}
end

-- The slot at `pos` for an entry of `kind` named `name` (readSlot's), or the reply that
-- refuses the write: {'nondeterminism', raw} (another entry is recorded there),
-- {'recorded', raw} (this one is already final) or {'history-full', max}.
local function historySlot(jobKey, pos, name, kind)
  if pos > MAX_STEPS then return nil, {'history-full', tostring(MAX_STEPS)} end
  local slot = readSlot(jobKey, pos)
  local m = slot.had
  if not m then return slot, nil end
  if m.n ~= name or m.k ~= kind then return nil, {'nondeterminism', slot.raw} end
  if m.s == 'done' or m.s == 'failed' or m.s == 'timeout' then
    return nil, {'recorded', slot.raw}
  end
  return slot, nil
end

-- The text of entry m for `slot` and the history's size after it, or nil and a refusal
-- ({'too-large', bytes}) past MAX_HISTORY_BYTES. Nothing is written.
local function planEntry(slot, m, result)
  local meta = stepMeta(m)
  local bytes = slot.bytes - slot.old + #meta + #result
  if bytes > MAX_HISTORY_BYTES then return nil, {'too-large', tostring(bytes)} end
  return {meta = meta, bytes = bytes}, nil
end

-- Writes a planned entry (and its result, '' for none), keeping wfLen and wfBytes.
local function writeEntry(jobKey, slot, plan, result)
  local pos = slot.pos
  redis.call('HSET', jobKey, 'wf:' .. pos, plan.meta, 'wfBytes', plan.bytes,
    'wfLen', math.max(slot.len, pos))
  if result ~= '' then
    redis.call('HSET', jobKey, 'wr:' .. pos, result)
  elseif slot.res then
    redis.call('HDEL', jobKey, 'wr:' .. pos)
  end
end

-- The oldest pending event `name` of the mailbox: its number, the numbers after it, its data.
local function peekMail(jobKey, name)
  local q = redis.call('HGET', jobKey, 'evq:' .. name)
  if not q then return nil end
  local seq, rest = string.match(q, '^(%d+) ?(.*)$')
  if not seq then return nil end
  return seq, rest, redis.call('HGET', jobKey, 'ev:' .. seq) or 'null'
end

local function dropMail(jobKey, name, seq, rest, data)
  redis.call('HDEL', jobKey, 'ev:' .. seq)
  if rest == '' then
    redis.call('HDEL', jobKey, 'evq:' .. name)
  else
    redis.call('HSET', jobKey, 'evq:' .. name, rest)
  end
  redis.call('HINCRBY', jobKey, 'evCount', -1)
  redis.call('HINCRBY', jobKey, 'evBytes', -#data)
end

-- Keeps an event for a workflow that does not wait for it yet; false when the mailbox is
-- full (nothing written).
local function putMail(jobKey, name, data)
  local h = redis.call('HMGET', jobKey, 'evCount', 'evBytes', 'evq:' .. name)
  if (tonumber(h[1]) or 0) >= MAX_MAIL or (tonumber(h[2]) or 0) + #data > MAX_MAIL_BYTES then
    return false
  end
  local seq = tostring(redis.call('HINCRBY', jobKey, 'evSeq', 1))
  redis.call('HSET', jobKey, 'ev:' .. seq, data, 'evq:' .. name, h[3] and (h[3] .. ' ' .. seq) or seq)
  redis.call('HINCRBY', jobKey, 'evCount', 1)
  redis.call('HINCRBY', jobKey, 'evBytes', #data)
  return true
end

-- Ends a workflow's wait for an event (at position pos) with status s: 'done' with the event's
-- data, or 'timeout'. Returns a refusal as planEntry does (nothing written) or nil.
local function endWait(jobKey, pos, s, data, now)
  local slot = readSlot(jobKey, tonumber(pos) or 0)
  local m = slot.had or {}
  m.k, m.s, m.t1 = 'event', s, now
  local plan, refused = planEntry(slot, m, data)
  if not plan then return refused end
  writeEntry(jobKey, slot, plan, data)
  redis.call('HDEL', jobKey, 'wfWait', 'wfEvent')
  return nil
end

-- A failed workflow sent back to run (retryJobs): a step that failed for good as its last
-- entry runs again, with fresh attempts; every other entry stays as it was.
local function reopenLastStep(jobKey)
  local len = tonumber(redis.call('HGET', jobKey, 'wfLen'))
  if not len then return end
  local slot = readSlot(jobKey, len)
  local m = slot.had
  if m and m.k == 'step' and m.s == 'failed' then
    m.s, m.a = 'retrying', 0
    local plan = planEntry(slot, m, '') -- the same size or less: never refused
    if plan then writeEntry(jobKey, slot, plan, '') end
  end
end
