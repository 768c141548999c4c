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

-- The slot at `pos` for an entry of `kind` named `name`: the entry recorded there (nil when
-- free) and, when the write must not happen, the reply that says why: {'nondeterminism', raw}
-- (another entry is recorded there), {'recorded', raw} (this one is already final) or
-- {'history-full', max}.
local function historySlot(jobKey, pos, name, kind)
  if pos > MAX_STEPS then return nil, {'history-full', tostring(MAX_STEPS)} end
  local raw = redis.call('HGET', jobKey, 'wf:' .. pos)
  if not raw then return nil, nil end
  local m = readMeta(raw)
  if m.n ~= name or m.k ~= kind then return nil, {'nondeterminism', raw} end
  if m.s == 'done' or m.s == 'failed' or m.s == 'timeout' then return nil, {'recorded', raw} end
  return m, nil
end

-- Writes entry m (and its result, '' for none) at pos, keeping wfLen and wfBytes; with
-- `check`, refuses ({'too-large', bytes}, nothing written) a history past MAX_HISTORY_BYTES.
-- Call it with check first and without once the call decided to go on, so the refusal
-- comes before any other write.
local function putEntry(jobKey, pos, m, result, check)
  local meta = stepMeta(m)
  local h = redis.call('HMGET', jobKey, 'wfLen', 'wfBytes', 'wf:' .. pos, 'wr:' .. pos)
  local bytes = (tonumber(h[2]) or 0) - #(h[3] or '') - #(h[4] or '') + #meta + #result
  if check then
    if bytes > MAX_HISTORY_BYTES then return {'too-large', tostring(bytes)} end
    return nil
  end
  redis.call('HSET', jobKey, 'wf:' .. pos, meta, 'wfBytes', bytes,
    'wfLen', math.max(tonumber(h[1]) or 0, pos))
  if result ~= '' then
    redis.call('HSET', jobKey, 'wr:' .. pos, result)
  elseif h[4] then
    redis.call('HDEL', jobKey, 'wr:' .. pos)
  end
  return nil
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
-- data, or 'timeout'. Returns a refusal as putEntry does (nothing written) or nil.
local function endWait(jobKey, pos, s, data, now)
  pos = tonumber(pos) or 0
  local m = readMeta(redis.call('HGET', jobKey, 'wf:' .. pos)) or {}
  m.k, m.s, m.t1 = 'event', s, now
  local refused = putEntry(jobKey, pos, m, data, true)
  if refused then return refused end
  putEntry(jobKey, pos, m, data, false)
  redis.call('HDEL', jobKey, 'wfWait', 'wfEvent')
  return nil
end

-- A failed workflow sent back to run (retryJobs): a step that failed for good as its last
-- entry runs again, with fresh attempts; every other entry stays as it was.
local function reopenLastStep(jobKey)
  local len = tonumber(redis.call('HGET', jobKey, 'wfLen'))
  if not len then return end
  local m = readMeta(redis.call('HGET', jobKey, 'wf:' .. len))
  if m and m.k == 'step' and m.s == 'failed' then
    m.s, m.a = 'retrying', 0
    putEntry(jobKey, len, m, '', false)
  end
end
