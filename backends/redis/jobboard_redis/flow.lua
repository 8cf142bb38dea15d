-- jobboard redis://, continued from board.lua and wake.lua (one library): flow control (docs/flow-control.md).
-- A permit is a claim: 'gr:<g>' is the set of the group's claimed jobs, kept by every claim of a grouped job
-- (limit or not) and by every end of one, in the same call (do_claim, consume, abandon, to_trash, reap,
-- unclaim). Other keys:
-- 'lim' hash: group -> '<concurrency>|<sequence 1/0>|<rate count>|<rate period ms>' ('' for none);
-- 'pz' hash: paused job name -> '1' (the name '': the whole board);
-- 'gm:<g>' zset: the group's jobs on the board, scored by id (a sequence's posting order);
-- 'hg:<g>' zset (order scores): unclaimed jobs parked because the group's limit held them back, out of
-- 'ready' and 'rn:<name>' until a permit may be free (refill); 'hn:<name>': the same for a paused name;
-- 'rl:<g>' zset: the group's grant times (ms; member: the call's us clock ':' the job), a sliding window log;
-- 'rdue' zset: group -> when its rate's next permit is due (ms), for a group with jobs parked by its rate;
-- 'hk' set: the parkings (hg:/hn: keys) that may hold jobs, for passed_over (one found empty leaves).
-- A claim parks what it finds held back and goes on with the next job: each job is parked once per refill,
-- so a group at its limit costs no scan. A board with no limit and no pause pays one EXISTS per claim call.

local function limit_of(g)
  LIMITS = LIMITS or {}
  local cached = LIMITS[g]
  if cached ~= nil then return cached end
  local raw = redis.call('HGET', P .. 'lim', g)
  local lim = false
  if raw then
    local conc, seq, count, period = string.match(raw, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
    lim = {conc = tonumber(conc), seq = seq == '1', count = tonumber(count), period = tonumber(period)}
  end
  LIMITS[g] = lim
  return lim
end

-- Grants of g's rate now in its window, and when the next one is due (ms from now; 0 if one is free).
local function rate_state(g, lim)
  local from = '(' .. (now() - lim.period)
  local used = redis.call('ZCOUNT', P .. 'rl:' .. g, from, '+inf')
  if used < lim.count then return lim.count - used, 0 end
  local oldest = redis.call('ZRANGEBYSCORE', P .. 'rl:' .. g, from, '+inf', 'WITHSCORES', 'LIMIT', used - lim.count, 1)
  return 0, math.max(1, math.ceil(tonumber(oldest[2]) + lim.period - now()))
end

-- The first of g's jobs on the board (a sequence's head); an id whose job is gone or malformed (set aside)
-- leaves gm:<g> when met.
local function head_of(g)
  for _ = 1, 100 do
    local head = redis.call('ZRANGE', P .. 'gm:' .. g, 0, 0)[1]
    if not head or get(head, {'st'}) then return head end
    redis.call('ZREM', P .. 'gm:' .. g, head)
  end
  return nil
end

-- Why job j (fields name, g) is held back: nil, or 'paused' / 'concurrency' / 'sequence' / 'rate' and for a
-- rate the ms until its next permit.
held = function(j)
  if not flowing() then return nil end
  local paused = paused_names()
  if paused[''] or paused[j.name] then return 'paused' end
  if j.g == '' then return nil end
  local lim = limit_of(j.g)
  if not lim then return nil end
  local running = (lim.conc or lim.seq) and redis.call('SCARD', P .. 'gr:' .. j.g) or 0
  if lim.conc and running >= lim.conc then return 'concurrency' end
  if lim.seq and (running > 0 or head_of(j.g) ~= j.id) then return 'sequence' end
  if lim.count then
    local free, due = rate_state(j.g, lim)
    if free == 0 then return 'rate', due end
  end
  return nil
end

-- g's rate has its next permit due at ms t.
local function due_at(g, t) redis.call('ZADD', P .. 'rdue', 'LT', t, g) end

-- j, held back for why (due: a rate's ms), leaves the claim indexes for its group's (or name's) parking.
park = function(j, why, due)
  redis.call('ZREM', P .. 'ready', j.id)
  redis.call('ZREM', P .. 'rn:' .. j.name, j.id)
  local key = P .. (why == 'paused' and ('hn:' .. j.name) or ('hg:' .. j.g))
  redis.call('ZADD', key, j.sc, j.id)
  redis.call('SADD', P .. 'hk', key)  -- the parkings in use (passed_over; one found empty leaves)
  if why == 'rate' then due_at(j.g, now() + due) end
end

-- The first member of zset key if it is better than score sc (any: nil): its id; false if not; nil if empty.
local function better(key, sc)
  local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #head == 0 then return nil end
  if sc and tonumber(head[2]) >= sc then return false end
  return head[1]
end

-- A claim_next on a flowing board took the job scored sc (nil: none): HELD gains why the jobs parked before
-- (and so not met by it), better than that one and of the names asked (all: {}), are held back now, and
-- 'paused' for jobs of the asked names it left out as paused (dropped). One SMEMBERS and a ZRANGE per parking
-- in use (its best job read when better: the group's best parked job stands for the group).
passed_over = function(sc, asked, dropped)
  local function hold(why) HELD = HELD or {} HELD[why] = true end
  for _, name in ipairs(dropped) do
    if better(P .. 'rn:' .. name, sc) or better(P .. 'hn:' .. name, sc) then hold('paused') end
  end
  if paused_names()[''] then
    if #asked == 0 and better(P .. 'ready', sc) then hold('paused') end
    for _, name in ipairs(asked) do
      if better(P .. 'rn:' .. name, sc) then hold('paused') end
    end
  end
  local wanted = nil
  if #asked > 0 then wanted = {} for _, name in ipairs(asked) do wanted[name] = true end end
  for _, key in ipairs(redis.call('SMEMBERS', P .. 'hk')) do
    local id = better(key, sc)
    if id == nil then redis.call('SREM', P .. 'hk', key)
    elseif id then
      local j = get(id, {'name', 'sc', 'st', 'g'})
      if j and j.st == 'u' and (wanted and wanted[j.name] or (not wanted and not internal(j.name))) then
        local why = held(j)
        if why then hold(why) end
      end
    end
  end
end

-- A parked job back in the claim indexes (one gone meanwhile is dropped, a malformed one set aside).
local function unpark(key, id, sc)
  redis.call('ZREM', key, id)
  local j = get(id, {'name', 'sc', 'st'})
  if j == false then quarantine(id) end
  if j and j.st == 'u' then
    ready_add({id = id, name = j.name, sc = sc})
    wake(j.name, 1)
    return true
  end
  return false
end

-- Parked jobs of g back in the claim indexes, as many as may be granted now (all without a limit).
refill = function(g)
  local key = P .. 'hg:' .. g
  if redis.call('EXISTS', key) == 0 then return end
  local lim, free = limit_of(g), 100
  if not lim then  -- a limit cleared: all of them, 100 at a time
    for _ = 1, 10000 do
      local best = redis.call('ZRANGE', key, 0, 99, 'WITHSCORES')
      if #best == 0 then return end
      for i = 1, #best, 2 do unpark(key, best[i], best[i + 1]) end
    end
    return
  end
  local running = redis.call('SCARD', P .. 'gr:' .. g)
  if lim.conc then free = math.min(free, lim.conc - running) end
  if lim.seq then
    local head = running == 0 and head_of(g)
    local sc = head and redis.call('ZSCORE', key, head)
    if sc then unpark(key, head, sc) end
    return
  end
  local rated = false
  if lim.count and free > 0 then
    local permits, due = rate_state(g, lim)
    if permits == 0 then due_at(g, now() + due) end
    rated = permits < free
    free = math.min(free, permits)
  end
  local back = 0
  while back < free do  -- each round takes what it reads out of the parking: it ends
    local best = redis.call('ZRANGE', key, 0, free - back - 1, 'WITHSCORES')
    if #best == 0 then return end
    for i = 1, #best, 2 do
      if unpark(key, best[i], best[i + 1]) then back = back + 1 end
    end
  end
  -- the rate's permits all went back and jobs are left parked: a timer for the next (when the oldest grant in
  -- the window leaves it), else nothing would put them back (the 'rdue' entry that led here is gone)
  if rated and redis.call('EXISTS', key) == 1 then
    local oldest = redis.call('ZRANGEBYSCORE', P .. 'rl:' .. g, '(' .. (now() - lim.period), '+inf', 'WITHSCORES',
      'LIMIT', 0, 1)
    due_at(g, now() + (#oldest == 0 and lim.period or math.max(1, math.ceil(tonumber(oldest[2]) + lim.period - now()))))
  end
end

-- Groups whose rate's next permit is due: refilled. The ms until the next one (-1: none).
flow_due = function()
  if not flowing() then return -1 end
  local next = redis.call('ZRANGE', P .. 'rdue', 0, 0, 'WITHSCORES')
  if #next == 0 then return -1 end
  if tonumber(next[2]) > now() then return tonumber(next[2]) - now() end
  for _, g in ipairs(redis.call('ZRANGEBYSCORE', P .. 'rdue', '-inf', now(), 'LIMIT', 0, 100)) do
    redis.call('ZREM', P .. 'rdue', g)
    refill(g)
  end
  next = redis.call('ZRANGE', P .. 'rdue', 0, 0, 'WITHSCORES')
  return #next == 0 and -1 or math.max(0, tonumber(next[2]) - now())
end

-- A claim of j granted (do_claim): its permit, and its grant in the group's rate window. popped: the index
-- claim_next took it from (nil: claimed by id, perhaps parked).
granted = function(j, popped)
  redis.call('SADD', P .. 'gr:' .. j.g, j.id)
  if not popped then redis.call('ZREM', P .. 'hg:' .. j.g, j.id) end
  local lim = flowing() and limit_of(j.g)
  if lim and lim.count then
    local log = P .. 'rl:' .. j.g
    redis.call('ZADD', log, now(), string.format('%.0f', now_us()) .. ':' .. j.id)  -- unique (claim_many: several a call)
    redis.call('ZREMRANGEBYRANK', log, 0, -lim.count - 1)  -- the last count grants, as the window needs
    redis.call('PEXPIRE', log, math.ceil(lim.period) + 1000)
  end
end

-- The claim of grouped job j ended (it stays on the board): its permit returns.
ended = function(j)
  if redis.call('SREM', P .. 'gr:' .. j.g, j.id) == 1 and flowing() then refill(j.g) end
end

-- Grouped job j leaves the board (consumed, trashed, cancelled, set aside): its permit if claimed, its place.
left = function(j)
  if j.st == 'c' then redis.call('SREM', P .. 'gr:' .. j.g, j.id) else redis.call('ZREM', P .. 'hg:' .. j.g, j.id) end
  redis.call('ZREM', P .. 'gm:' .. j.g, j.id)
  if flowing() then refill(j.g) end  -- a permit back, or a sequence's next head
end

-- Every waiting board woken (a resume of the board).
local function wake_everyone()
  local flat = redis.call('HGETALL', P .. 'wait')
  for i = 1, #flat, 2 do
    local sess = flat[i]
    if string.sub(sess, -2) ~= ':l' then
      unlist(sess, redis.call('HMGET', P .. 'wait', sess, sess .. ':l'))
      redis.call('RPUSH', P .. 'wk:' .. sess, 'w')
    end
  end
end

-- The ids among found (peek's, in claim order) that nothing holds back; the others are parked.
admitted = function(found)
  if not flowing() then return found end
  if paused_names()[''] then return {} end
  local kept = {}
  for _, id in ipairs(found) do
    local j = get(id, {'name', 'sc', 'st', 'g'})
    local why, due
    if j and j.st == 'u' then why, due = held(j) end
    if why then park(j, why, due) else kept[#kept + 1] = id end
  end
  return kept
end

-- A spread board claimed elsewhere (score sc, '' for none) for the names (none: all): why this partition's
-- parked jobs better than that one are held back, in HELD (the dispatch tells the client). Writes nothing but
-- the parkings found empty leaving 'hk'.
function ops.passed(sc, ...)
  local asked, dropped = {...}, {}
  if flowing() then
    for _, name in ipairs(asked) do if paused_names()[name] then dropped[#dropped + 1] = name end end
    passed_over(tonumber(sc), asked, dropped)
  end
  return reply('ok')
end

function ops.set_limit(g, spec)
  redis.call('HSET', P .. 'lim', g, spec)
  FLOW, LIMITS = nil, nil
  local lim = limit_of(g)
  if lim.count then  -- a longer period: the grants kept as long as they count
    redis.call('PEXPIRE', P .. 'rl:' .. g, math.ceil(lim.period) + 1000, 'GT')
  end
  refill(g)
  return reply('ok')
end

function ops.clear_limit(g)  -- a retried call answers what the first one found (its nonce's record)
  if RETRY then
    local had = redis.call('GET', P .. 'n:' .. NONCE)
    if had then return reply('ok', {tonumber(had)}) end
  end
  local had = redis.call('HDEL', P .. 'lim', g)
  done(tostring(had))
  FLOW, LIMITS = nil, nil
  redis.call('ZREM', P .. 'rdue', g)
  refill(g)
  return reply('ok', {had})
end

-- {group, spec, running, waiting, ...}: waiting counts the group's unclaimed jobs but those waiting for
-- dependencies (one read per job of a limited group: an operator's call).
function ops.limits()
  local flat, out = redis.call('HGETALL', P .. 'lim'), {}
  for i = 1, #flat, 2 do
    local g, waiting = flat[i], 0
    for _, id in ipairs(redis.call('ZRANGE', P .. 'gm:' .. g, 0, -1)) do
      local st = redis.pcall('HGET', jk(id), 'st')
      if st == 'u' or st == 'd' then waiting = waiting + 1 end
    end
    out[#out + 1] = {g, flat[i + 1], redis.call('SCARD', P .. 'gr:' .. g), waiting}
  end
  return reply('ok', out)
end

-- A spread board's pause or resume carries its order (a counter of partition 0, spread/flow.py): one not newer
-- than the last applied to the name ('pzv' hash) changes nothing, so racing calls leave every partition alike.
local function stale(name, order)
  if not order then return false end
  if tonumber(order) <= tonumber(redis.call('HGET', P .. 'pzv', name) or '0') then return true end
  redis.call('HSET', P .. 'pzv', name, order)
  return false
end

-- name '': the whole board.
function ops.pause(name, order)
  if stale(name, order) then return reply('ok') end
  redis.call('HSET', P .. 'pz', name, '1')
  return reply('ok')
end

function ops.resume(name, order)
  if stale(name, order) then return reply('ok') end
  redis.call('HDEL', P .. 'pz', name)
  FLOW, PAUSED = nil, nil
  if name == '' then
    wake_everyone()
    return reply('ok')
  end
  local key = P .. 'hn:' .. name
  for _ = 1, 1000 do  -- every parked job of the name, 100 at a time (an operator's call)
    local best = redis.call('ZRANGE', key, 0, 99, 'WITHSCORES')
    if #best == 0 then break end
    for i = 1, #best, 2 do
      redis.call('ZREM', key, best[i])
      local j = get(best[i], {'name', 'sc', 'st', 'g'})
      if j and j.st == 'u' then ready_add(j) end
    end
    wake(name, #best / 2)
  end
  return reply('ok')
end

function ops.paused()
  local names, board = {}, 0
  for _, name in ipairs(redis.call('HKEYS', P .. 'pz')) do
    if name == '' then board = 1 else names[#names + 1] = name end
  end
  return reply('ok', {board, names})
end
