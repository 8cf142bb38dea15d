-- jobboard redis:// : every state change of a board is one call of this Redis function (FCALL).
-- keys[1] = the board's key prefix "jb:{<root>}:"; args = operation, nonce ('' for none), the
-- operation's arguments. The clock is the server's TIME (read once, when first needed); a write's nonce
-- records that it was applied (resolves lost replies). A nonce starting with '!' is a retry (the client
-- resends after a lost reply): only then can the write have applied already, so only a retry looks its
-- nonce up. Replies: {status, data, events}, events flat: {stream id, kind, job, detail, ...}.
-- post.lua, settle.lua, wake.lua, flow.lua, links.lua, keep.lua and sessions.lua (sessions, entities, the
-- dispatch) follow this file in the same library, in that order (client.py joins them). The library is
-- loaded once (FUNCTION LOAD): the per-call state below is set by the dispatch at the start of each call
-- (Redis runs one call at a time).
local P, OP, NONCE, RETRY, NOW, NOW_US, EV, ALIVE
-- wake.lua: wake(name, n) wakes up to n boards waiting for work of that name; notice(sess, id) tells a
-- session's board that its claim of job id ended by another's call. CALLER: the calling board's session
-- (a settle's), which needs no notice. WAITING: how many boards wait (read once per call, when needed).
local wake, notice, CALLER, WAITING
-- flow.lua: flow control. FLOW: whether any limit or pause is stored (one EXISTS per call, when needed).
-- PAUSED: the paused names (name -> true; '' the board), read when needed; LIMITS: the limits read in this call.
-- HELD: why the jobs a claim of this call passed over were held back (why -> true; nil: none), told to the
-- client after the events ('held:<why>,...': flow.lua passed_over, the dispatch).
local FLOW, PAUSED, LIMITS, HELD
local NONE = {}  -- PAUSED when nothing is (never written)
local held, park, refill, flow_due, granted, ended, left, admitted, passed_over
local function flowing()
  if FLOW == nil then FLOW = redis.call('EXISTS', P .. 'lim', P .. 'pz') > 0 end
  return FLOW
end
local function paused_names()
  if PAUSED == nil then
    PAUSED = NONE
    if flowing() then
      local names = redis.call('HKEYS', P .. 'pz')
      if #names > 0 then PAUSED = {} end
      for _, name in ipairs(names) do PAUSED[name] = true end
    end
  end
  return PAUSED
end

local function now()
  if not NOW then
    local t = redis.call('TIME')
    NOW_US = tonumber(t[1]) * 1000000 + tonumber(t[2])
    NOW = math.floor(NOW_US / 1000)
  end
  return NOW
end

-- The server's clock in microseconds (the same reading as now()): no two calls share one.
local function now_us() now() return NOW_US end
local MAXLEN = 100000
-- 'err': the last failed attempt's error (msgpack; absent until an abandon or trash with one).
-- 'nd': the number of dependencies the job was posted with (absent on jobs posted before it was added).
-- 'g': the job's flow-control group (absent: none).
local FIELDS = {'name', 'sc', 'st', 'gen', 'att', 'maxa', 'owner', 'sess', 'pend', 'nb', 'key', 'keep', 'err', 'nd', 'g'}
-- A claim reads the posting in the same HMGET.
local CLAIM_FIELDS = {'name', 'sc', 'st', 'gen', 'att', 'maxa', 'owner', 'sess', 'pend', 'nb', 'key', 'keep', 'err', 'nd',
  'p', 'g'}
-- The hot paths read only what they use: each field read costs the bridge a string and the job's
-- table an entry (an HMGET of 15 fields cost 2.1 us against 1.0 for 7, and building the table
-- about as much again). 'sc' and 'st' are always read: get() tells a malformed hash by them.
-- claim_next: its head job, claimed or (exhausted: read again in full) trashed.
local NEXT_FIELDS = {'name', 'sc', 'st', 'gen', 'att', 'maxa', 'err', 'nd', 'p', 'g'}
-- consume: the fence and what settling reads.
local CONSUME_FIELDS = {'sc', 'st', 'gen', 'owner', 'sess', 'keep', 'key', 'nd', 'g'}

local function ev(kind, job, detail)
  job, detail = job or '', detail or ''
  local n = #EV
  EV[n + 1] = redis.call('XADD', P .. 'ev', 'MAXLEN', '~', MAXLEN, '*', 'k', kind, 'j', job, 'd', detail)
  EV[n + 2] = kind; EV[n + 3] = job; EV[n + 4] = detail
end

local function jk(id) return P .. 'job:' .. id end

-- A partition of a board spread over a Redis Cluster (jobboard_redis/spread.py) cannot touch another
-- partition's keys: a dependent in another partition (its id mod K is not this partition's k) is told of
-- its dependency's consume or trash through this partition's outbox 'out', which the boards forward
-- (links.lua). OUTBOX: this call wrote there (the dispatch says so at the end of the reply's events).
local OUTBOX
local function foreign(id)
  local k, n = string.match(P, '#jbp(%d+)/(%d+)/%d+}:$')
  return k ~= nil and (tonumber(id) or 0) % tonumber(n) ~= tonumber(k)
end
local function outbox(kind, dependent, dep, payload)
  redis.call('RPUSH', P .. 'out', cmsgpack.pack({kind, dependent, dep, payload}))
  OUTBOX = true
end
local function internal(name) return string.sub(name, 1, 9) == 'jobboard.' end
local function reply(status, data) return {status, data or {}, EV} end
-- A nonce ends with ':<ms to remember it>' (the client's retry window, doubled, plus 10 s).
local function done(value)
  if NONCE == '' then return end
  redis.call('SET', P .. 'n:' .. NONCE, value, 'PX', tonumber(string.match(NONCE, ':(%d+)$')) or 60000)
end

-- The job's fields, or nil when it is not on the board; false when its key is not a job hash.
local function get(id, fields)
  fields = fields or FIELDS
  local raw = redis.pcall('HMGET', jk(id), unpack(fields))
  if type(raw) ~= 'table' or raw.err then return false end
  if not raw[1] then
    if redis.call('EXISTS', jk(id)) == 1 then return false end
    return nil
  end
  local j = {id = id}
  for i, f in ipairs(fields) do j[f] = raw[i] or '' end
  if j.sc == '' or j.st == '' then return false end
  if (j.att and j.att ~= '' and not tonumber(j.att)) or (j.maxa and j.maxa ~= '' and not tonumber(j.maxa)) then
    return false  -- counts no board wrote: malformed (set aside)
  end
  return j
end

local function ready_add(j)
  if not internal(j.name) then redis.call('ZADD', P .. 'ready', j.sc, j.id) end
  redis.call('ZADD', P .. 'rn:' .. j.name, j.sc, j.id)
end

local function unindex(j)
  redis.call('ZREM', P .. 'ready', j.id)
  redis.call('ZREM', P .. 'rn:' .. j.name, j.id)
  redis.call('ZREM', P .. 'delayed', j.id)
  redis.call('ZREM', P .. 'all', j.id)
  if j.sess ~= '' then redis.call('SREM', P .. 'claims:' .. j.sess, j.id) end
  if j.g and j.g ~= '' then left(j) end
end

local function quarantine(id)
  for _, z in ipairs({'ready', 'delayed', 'all'}) do redis.call('ZREM', P .. z, id) end
  redis.call('SADD', P .. 'bad', id)
end

-- Whether key's record is in another partition of a spread board (CRC16(key) mod K: spread/keys.py).
local function key_elsewhere(key)
  local k, n = string.match(P, '#jbp(%d+)/(%d+)/%d+}:$')
  if not k then return false end
  local crc = 0  -- CRC-16/XMODEM, as Redis Cluster's
  for i = 1, #key do
    crc = bit.bxor(crc, bit.lshift(string.byte(key, i), 8))
    for _ = 1, 8 do crc = bit.lshift(crc, 1); if crc >= 0x10000 then crc = bit.bxor(crc, 0x11021) end end
  end
  return crc % tonumber(n) ~= tonumber(k)
end

-- A settled job's key keeps finding it for the retention (ms); its record is kept as long (in another partition:
-- told through the outbox, with the next forwarding or sweep; links.lua key_settled).
local function settle_key(j, record, retention)
  if j.key == '' then return end
  if key_elsewhere(j.key) then redis.call('RPUSH', P .. 'out', cmsgpack.pack({'key', j.key, j.id, tostring(retention)})) end
  if retention <= 0 then
    redis.call('DEL', P .. 'k:' .. j.key)
  else
    redis.call('PEXPIRE', P .. 'k:' .. j.key, retention)
    if record then redis.call('PEXPIRE', record, retention) end
  end
end

-- Retention (keep.lua collects): what expires at a known time goes in <kind>exp scored by that time (ms);
-- what follows the board's TTL in <kind>def scored by when it was stored. own: the job's TTL in ms
-- ('' or nil: the board's; '0': forever). kind: 'k' kept results, 't' trash entries.
local function index_expiry(kind, id, own)
  if own == nil or own == false or own == '' then
    redis.call('ZADD', P .. kind .. 'def', now(), id)
  elseif tonumber(own) > 0 then
    redis.call('ZADD', P .. kind .. 'exp', now() + tonumber(own), id)
  end
end

-- Move a job and, breadth-first, its dependents to the trash (each once: a dependent reached along two
-- paths, as in a diamond, is queued by the first).
local function to_trash(j, reason, retention)
  local queue, head, queued = {{j, reason}}, 1, {[j.id] = true}
  while queue[head] do
    local job, why = queue[head][1], queue[head][2]
    head = head + 1
    if job.st == 'c' then notice(job.sess, job.id) end
    unindex(job)
    local tr = P .. 'tr:' .. job.id
    redis.call('DEL', tr)
    redis.call('RENAME', jk(job.id), tr)
    redis.call('HSET', tr, 'reason', why, 'at', now(), 'st', 't', 'owner', '', 'sess', '')
    redis.call('ZADD', P .. 'trash', redis.call('INCR', P .. 'tseq'), job.id)
    redis.call('HDEL', tr, 'pg', 'pr')
    index_expiry('t', job.id, redis.call('HGET', tr, 'tttl'))  -- res:<id> stays with it (requeue)
    settle_key(job, nil, retention)
    ev('trashed', job.id, why)
    for _, d in ipairs(redis.call('SMEMBERS', P .. 'dents:' .. job.id)) do
      local because = 'dependency ' .. job.id .. ' (' .. job.name .. ') was trashed: ' .. why
      if foreign(d) then outbox('trash', d, job.id, because) else
        local dj = get(d)
        if dj and dj.st == 'w' and not queued[d] then
          queued[d] = true
          queue[#queue + 1] = {dj, because}
        end
      end
    end
    redis.call('DEL', P .. 'dents:' .. job.id)
  end
end

local function exhausted(j) return j.maxa ~= '' and tonumber(j.att) >= tonumber(j.maxa) end

-- ALIVE: the session found alive earlier in this call (consume_next checks its session twice).
local function session_alive(sess)
  if sess == ALIVE then return true end
  local deadline = redis.call('ZSCORE', P .. 'sessions', sess)
  if deadline and tonumber(deadline) >= now() then ALIVE = sess return true end
  return false
end

-- The results delivered to a job: none when it was posted without dependencies.
local function results(id, nd)
  if nd == '0' then return {} end
  return redis.call('HGETALL', P .. 'res:' .. id)
end

local function claim_data(id)
  local f = redis.call('HMGET', jk(id), 'p', 'att', 'gen', 'err', 'nd')
  return {id, f[1], f[2], f[3], results(id, f[5] or ''), f[4] or ''}
end

-- j: read with CLAIM_FIELDS. popped: the index it was taken from with ZPOPMIN ('ready' or 'rn'), if any.
-- The claim's nonce is kept in the hash ('cn'): a retried claim finds it among the session's claims.
-- The generation is the server's clock in microseconds, or one more than the job's if that is later: it
-- keeps increasing where the job's own count would start over (a restart without persistence reusing ids,
-- a failover that lost claims), so a claim from before cannot settle a later one. (Calls run one at a time
-- and take microseconds each, so no two read the same time.)
local function do_claim(j, owner, sess, popped)
  if j.st == 'd' then redis.call('ZREM', P .. 'delayed', j.id) end
  if popped ~= 'ready' then redis.call('ZREM', P .. 'ready', j.id) end
  if popped ~= 'rn' then redis.call('ZREM', P .. 'rn:' .. j.name, j.id) end
  local gen = string.format('%.0f', math.max((tonumber(j.gen) or 0) + 1, now_us()))
  local att = (tonumber(j.att) or 0) + 1
  redis.call('HSET', jk(j.id), 'gen', gen, 'att', att, 'st', 'c', 'owner', owner, 'sess', sess, 'nb', '', 'cn', NONCE)
  redis.call('SADD', P .. 'claims:' .. sess, j.id)
  if j.g ~= '' then granted(j, popped) end
  ev('claimed', j.id, owner)
  return reply('ok', {j.id, j.p, att, gen, results(j.id, j.nd), j.err})
end

-- Make due delayed jobs ready; the milliseconds until the next one is due (-1: none).
local function promote_delayed()
  local next = redis.call('ZRANGE', P .. 'delayed', 0, 0, 'WITHSCORES')
  if #next == 0 then return -1 end
  if tonumber(next[2]) > now() then return tonumber(next[2]) - now() end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'delayed', '-inf', now(), 'LIMIT', 0, 100)) do
    redis.call('ZREM', P .. 'delayed', id)
    local j = get(id)
    if j and j.st == 'd' then
      redis.call('HSET', jk(id), 'st', 'u', 'nb', '')
      ready_add(j)
      wake(j.name, 1)
    end
  end
  next = redis.call('ZRANGE', P .. 'delayed', 0, 0, 'WITHSCORES')
  if #next == 0 then return -1 end
  return math.max(0, tonumber(next[2]) - now())
end

-- The sooner of two waits in ms (-1: none).
local function sooner(a, b)
  if a < 0 then return b end
  if b < 0 then return a end
  return math.min(a, b)
end

-- Due delayed jobs made ready and groups whose rate permits are due refilled; the ms until the next (-1: none).
local function promote() return sooner(promote_delayed(), flow_due()) end

-- A retried claim that had applied: the session's claim holding its nonce (nil: none, claim now; a claim
-- since released or settled holds it no longer, and nothing was reported to the caller).
local function replayed_claim(sess)
  for _, id in ipairs(redis.call('SMEMBERS', P .. 'claims:' .. sess)) do
    if redis.call('HGET', jk(id), 'cn') == NONCE then return reply('ok', claim_data(id)) end
  end
  return nil
end

-- The claim's job if the claim is current: generation, then owner, then a live session.
local function fenced(id, gen, owner, fields)
  local j = get(id, fields)
  if not j or j.st ~= 'c' or j.gen ~= gen then return nil, 'lost' end
  if j.owner ~= owner then return nil, 'owner' end
  if not session_alive(j.sess) then return nil, 'lost' end
  return j
end

local ops = {}

function ops.claim(owner, sess, retention, id)  -- as claim_next's, then the job
  if RETRY then local r = replayed_claim(sess) if r then return r end end
  if not session_alive(sess) then return reply('nosession') end
  local j = get(id, CLAIM_FIELDS)
  if j == false then quarantine(id) return reply('notfound') end
  if not j then return reply('notfound') end
  if j.st == 'w' then return reply('waiting', {j.pend}) end
  if j.st == 'c' then return reply('claimed', {j.owner}) end
  if j.st == 'd' and j.nb ~= '' and tonumber(j.nb) > now() then return reply('delayed', {j.nb}) end
  local why, due = held(j)
  if why then return reply('held', {why, due or ''}) end
  if j.st == 'd' then redis.call('ZREM', P .. 'delayed', id) end
  if exhausted(j) then
    to_trash(j, 'max attempts exceeded (' .. j.maxa .. ')', tonumber(retention))
    return reply('exhausted')
  end
  return do_claim(j, owner, sess)
end

function ops.claim_next(owner, sess, retention, ...)
  if RETRY then local r = replayed_claim(sess) if r then return r end end
  if not session_alive(sess) then return reply('nosession') end
  local names = {...}
  local wait_ms, parked, tries, asked, dropped = promote(), false, 0, names, nil
  if flowing() then  -- nothing for the board paused; only the names not paused
    local free, paused = {}, paused_names()
    dropped = {}
    for _, name in ipairs(names) do
      if not paused[name] then free[#free + 1] = name else dropped[#dropped + 1] = name end
    end
    if paused[''] or (#names > 0 and #free == 0) then
      passed_over(nil, asked, dropped)
      return reply('none', {wait_ms})
    end
    names = free
  end
  for _ = 1, 1000 do  -- at most 100 entries set aside or trashed; up to 1000 parked (flow.lua)
    if tries == 100 then break end
    local best, best_sc, popped = nil, nil, nil
    if #names == 0 then  -- the head leaves 'ready' whatever it turns out to be (as below)
      local head = redis.call('ZPOPMIN', P .. 'ready')
      if #head > 0 then best, popped = head[1], 'ready' end
    elseif #names == 1 then
      local head = redis.call('ZPOPMIN', P .. 'rn:' .. names[1])
      if #head > 0 then best, popped = head[1], 'rn' end
    else
      for _, name in ipairs(names) do
        local head = redis.call('ZRANGE', P .. 'rn:' .. name, 0, 0, 'WITHSCORES')
        if #head > 0 and (not best_sc or tonumber(head[2]) < best_sc) then best, best_sc = head[1], tonumber(head[2]) end
      end
    end
    if not best then
      if dropped then passed_over(nil, asked, dropped) end
      return reply('none', {parked and sooner(wait_ms, flow_due()) or wait_ms})
    end
    local j = get(best, NEXT_FIELDS)
    if not j or j.st ~= 'u' then
      if popped ~= 'ready' then redis.call('ZREM', P .. 'ready', best) end
      if popped ~= 'rn' then for _, name in ipairs(names) do redis.call('ZREM', P .. 'rn:' .. name, best) end end
      if j == false then quarantine(best) end
      tries = tries + 1
    else
      local why, due = held(j)  -- before exhausted(): a held-back job is not claimed, so not trashed either
      if why then
        park(j, why, due)  -- out of the way until a permit may be free (flow.lua)
        parked = true
        HELD = HELD or {}
        HELD[why] = true
      elseif exhausted(j) then
        to_trash(get(best), 'max attempts exceeded (' .. j.maxa .. ')', tonumber(retention))
        tries = tries + 1
      else
        if dropped then passed_over(tonumber(j.sc), asked, dropped) end
        return do_claim(j, owner, sess, popped)
      end
    end
  end
  if dropped then passed_over(nil, asked, dropped) end
  return reply(parked and 'again' or 'none', {0})
end

-- Claim-ahead: up to n claims for one owner in one call, each exactly as claim_next's (its own generation,
-- flow control checked job by job against what the claims before it took), in claim_next's order, all
-- under the call's nonce (a retry finds them all; unclaim gives them all back). Reply: 'ok' and the claims
-- ({claim_data...}, best first), or 'none' and {wait_ms} when there was none.
local function replayed_claims(sess)
  local found = {}
  for _, id in ipairs(redis.call('SMEMBERS', P .. 'claims:' .. sess)) do
    local f = redis.call('HMGET', jk(id), 'cn', 'sc')
    if f[1] == NONCE then found[#found + 1] = {tonumber(f[2]) or 0, id} end
  end
  table.sort(found, function(a, b) return a[1] < b[1] end)
  for i, entry in ipairs(found) do found[i] = claim_data(entry[2]) end
  return found
end

function ops.claim_many(owner, sess, retention, n, ...)
  if RETRY then
    local found = replayed_claims(sess)
    if #found > 0 then return reply('ok', found) end
    RETRY = false
  end
  local claims, wait = {}, {0}
  for _ = 1, tonumber(n) + 10 do  -- 'again' (only parked jobs met) tries once more, a few times at most
    local r = ops.claim_next(owner, sess, retention, ...)
    if r[1] == 'ok' then claims[#claims + 1] = r[2]
    elseif r[1] ~= 'again' then
      if r[1] == 'nosession' then return r end
      wait = r[2]
      break
    end
    if #claims == tonumber(n) then break end
  end
  if #claims == 0 then return reply('none', wait) end
  return reply('ok', claims)
end

-- A spread board compares its partitions' heads before claiming (jobboard_redis/spread/claims.py): due
-- delayed jobs are made ready first where there are some.
function ops.promote() return reply('ok', {promote()}) end

function ops.quarantine(id)
  local j = get(id)
  if j then unindex(j) end
  quarantine(id) return reply('ok')
end
