-- jobboard redis://, continued from board.lua (one library): sessions, entities, the dispatch.

-- Release a dead (or closing) session: its claims go back on the board, its entities vanish.
local function reap(sess, why)
  unwait(sess)
  for _, id in ipairs(redis.call('SMEMBERS', P .. 'claims:' .. sess)) do
    local j = get(id)
    if j and j.st == 'c' and j.sess == sess then
      redis.call('HSET', jk(id), 'st', 'u', 'owner', '', 'sess', '')
      ready_add(j)
      if j.g ~= '' then ended(j) end
      wake(j.name, 1)
      ev('released', id, why .. ' (owner ' .. j.owner .. ')')
    end
  end
  redis.call('DEL', P .. 'claims:' .. sess)
  for _, name in ipairs(redis.call('SMEMBERS', P .. 'sents:' .. sess)) do
    if redis.call('HGET', P .. 'eown', name) == sess then
      redis.call('HDEL', P .. 'ents', name)
      redis.call('HDEL', P .. 'eown', name)
    end
  end
  redis.call('DEL', P .. 'sents:' .. sess)
  redis.call('ZREM', P .. 'sessions', sess)
end

local function reap_expired()
  for _, sess in ipairs(redis.call('ZRANGEBYSCORE', P .. 'sessions', '-inf', '(' .. now(), 'LIMIT', 0, 10)) do
    reap(sess, 'session expired')
  end
  local first = redis.call('ZRANGE', P .. 'sessions', 0, 0, 'WITHSCORES')
  if #first == 0 then return -1 end
  return math.max(0, tonumber(first[2]) - now())
end

-- A claim whose caller gave up before its reply (cancelled, or out of retries): the session's claims that hold
-- the call's nonce (a claim_many's are several) go back on the board as if they had not been made (attempts
-- uncounted; generations stay, so nothing can settle them). 'none': no such claim (never made, or settled or
-- released since).
function ops.unclaim(sess)
  local released = {}
  for _, id in ipairs(redis.call('SMEMBERS', P .. 'claims:' .. sess)) do
    local j = redis.pcall('HGET', jk(id), 'cn') == NONCE and get(id)  -- pcall: a foreign key is no hash
    if j and j.st == 'c' and j.sess == sess then
      redis.call('HSET', jk(id), 'st', 'u', 'owner', '', 'sess', '', 'att', math.max(0, tonumber(j.att) - 1))
      redis.call('HDEL', jk(id), 'cn')
      redis.call('SREM', P .. 'claims:' .. sess, id)
      ready_add(j)
      if j.g ~= '' then ended(j) end
      wake(j.name, 1)
      ev('released', id, 'claim given up before its reply (owner ' .. j.owner .. ')')
      released[#released + 1] = id
    end
  end
  return reply(#released > 0 and 'ok' or 'none', released)
end

function ops.open(sess, timeout_ms) redis.call('ZADD', P .. 'sessions', now() + tonumber(timeout_ms), sess) return reply('ok', {now()}) end

function ops.beat(sess, timeout_ms)
  local alive = session_alive(sess)
  local next_ms = reap_expired()
  if not alive then return reply('expired', {next_ms}) end
  redis.call('ZADD', P .. 'sessions', 'XX', now() + tonumber(timeout_ms), sess)
  return reply('ok', {reap_expired()})
end

function ops.close(sess) reap(sess, 'board closed') return reply('ok') end

function ops.register(sess, name, metadata)
  if not session_alive(sess) then return reply('nosession') end
  redis.call('HSET', P .. 'ents', name, metadata)
  redis.call('HSET', P .. 'eown', name, sess)
  redis.call('SADD', P .. 'sents:' .. sess, name)
  return reply('ok')
end

function ops.unregister(sess, name)
  if redis.call('HGET', P .. 'eown', name) == sess then
    redis.call('HDEL', P .. 'ents', name)
    redis.call('HDEL', P .. 'eown', name)
    redis.call('SREM', P .. 'sents:' .. sess, name)
  end
  return reply('ok')
end

local function dispatch(keys, args)
  P, OP, NONCE, NOW, EV, ALIVE, CALLER, WAITING, OUTBOX = keys[1], args[1], args[2], nil, {}, nil, nil, nil, nil
  FLOW, PAUSED, LIMITS, HELD = nil, nil, nil, nil
  RETRY = string.sub(NONCE, 1, 1) == '!'
  if RETRY then NONCE = string.sub(NONCE, 2) end
  local op = ops[OP]
  if not op then return redis.error_reply('jobboard: unknown operation ' .. tostring(OP)) end
  if RETRY then  -- a write, even when the first attempt had applied: a WAIT after the retry covers that attempt
    redis.call('SET', P .. 'retried', NONCE, 'PX', 1000)
  end
  local r = op(unpack(args, 3))
  if OUTBOX then r[3][#r[3] + 1] = 'out' end  -- one element past the events: the outbox has work
  if HELD then  -- and one more: why the jobs a claim passed over were held back
    local whys = {}
    for why in pairs(HELD) do whys[#whys + 1] = why end
    r[3][#r[3] + 1] = 'held:' .. table.concat(whys, ',')
  end
  return r
end

redis.register_function('JOBBOARD_FUNCTION', dispatch)
