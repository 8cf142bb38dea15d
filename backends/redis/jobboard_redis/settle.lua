-- jobboard redis://, continued from board.lua (one library): settles (consume, abandon, trash), cancel, and a
-- dependency's result delivered.

-- Dependency dep's result delivered to the waiting job d (read as dj): readied when it was the last.
local function deliver(d, dj, dep, result)
  redis.call('HSET', P .. 'res:' .. d, dep, result)
  if redis.call('HINCRBY', jk(d), 'pend', -1) <= 0 then
    if dj.nb ~= '' and tonumber(dj.nb) > now() then  -- a delayed post, not due yet
      redis.call('HSET', jk(d), 'st', 'd')
      redis.call('ZADD', P .. 'delayed', dj.nb, d)
    else
      redis.call('HSET', jk(d), 'st', 'u')
      ready_add(dj)
    end
    wake(dj.name, 1)
    ev('ready', d, 'dependencies consumed')
  end
end

-- caller: the settling board's session (its own claim needs no notice).
function ops.consume(id, gen, owner, result, retention, caller)
  if RETRY and redis.call('EXISTS', P .. 'n:' .. NONCE) == 1 then return reply('ok') end
  local j, why = fenced(id, gen, owner, CONSUME_FIELDS)
  if not j then return reply(why) end
  if j.sess ~= caller then notice(j.sess, id) end
  redis.call('ZREM', P .. 'all', id) -- a claimed job is in no other index but its session's claims
  redis.call('SREM', P .. 'claims:' .. j.sess, id)
  if j.g ~= '' then left(j) end
  if j.keep == '1' then
    redis.call('SET', P .. 'kept:' .. id, result)
    index_expiry('k', id, redis.call('HGET', jk(id), 'rttl'))
  end
  for _, d in ipairs(redis.call('SMEMBERS', P .. 'dents:' .. id)) do
    if foreign(d) then outbox('deliver', d, id, result) else
      local dj = get(d)
      if dj and dj.st == 'w' then deliver(d, dj, id, result) end
    end
  end
  -- One DEL: the dependents' set, the results delivered to it (if it had dependencies), the hash (unless kept).
  local gone = {P .. 'dents:' .. id}
  if j.nd ~= '0' then gone[2] = P .. 'res:' .. id end
  local kept = j.key ~= '' and tonumber(retention) > 0
  if not kept then gone[#gone + 1] = jk(id) end
  redis.call('DEL', unpack(gone))
  if kept then
    redis.call('RENAME', jk(id), P .. 'gone:' .. id)
    redis.call('HSET', P .. 'gone:' .. id, 'st', 'done', 'owner', '', 'sess', '')
    settle_key(j, P .. 'gone:' .. id, tonumber(retention))
  else
    settle_key(j, nil, 0)
  end
  done('1')
  ev('consumed', id, owner)
  return reply('ok')
end

-- err: the attempt's error, kept with the job ('' keeps the previous one).
function ops.abandon(id, gen, owner, retry_ms, err, caller)
  if RETRY and redis.call('EXISTS', P .. 'n:' .. NONCE) == 1 then return reply('ok') end
  local j, why = fenced(id, gen, owner)
  if not j then return reply(why) end
  if j.sess ~= caller then notice(j.sess, id) end
  if err and err ~= '' then redis.call('HSET', jk(id), 'err', err) end
  redis.call('SREM', P .. 'claims:' .. j.sess, id)
  local delay = tonumber(retry_ms)
  if delay > 0 then
    redis.call('HSET', jk(id), 'st', 'd', 'owner', '', 'sess', '', 'nb', now() + delay)
    redis.call('ZADD', P .. 'delayed', now() + delay, id)
  else
    redis.call('HSET', jk(id), 'st', 'u', 'owner', '', 'sess', '')
    ready_add(j)
  end
  if j.g ~= '' then ended(j) end
  wake(j.name, 1)
  done('1')
  ev('released', id, 'abandoned by ' .. owner)
  return reply('ok')
end

-- A claim whose job never started (claimed ahead, given back at a worker's stop): on the board at once, as if
-- not made (its attempt uncounted; its generation stays, so the claim settles nothing more), fenced as a settle.
function ops.give_back(id, gen, owner, caller)
  if RETRY and redis.call('EXISTS', P .. 'n:' .. NONCE) == 1 then return reply('ok') end
  local j, why = fenced(id, gen, owner)
  if not j then return reply(why) end
  if j.sess ~= caller then notice(j.sess, id) end
  redis.call('SREM', P .. 'claims:' .. j.sess, id)
  redis.call('HSET', jk(id), 'st', 'u', 'owner', '', 'sess', '', 'att', math.max(0, tonumber(j.att) - 1))
  redis.call('HDEL', jk(id), 'cn')
  ready_add(j)
  if j.g ~= '' then ended(j) end
  wake(j.name, 1)
  done('1')
  ev('released', id, 'released unstarted by ' .. owner)
  return reply('ok')
end

function ops.trash(id, gen, owner, reason, retention, err, caller)
  if RETRY and redis.call('EXISTS', P .. 'n:' .. NONCE) == 1 then return reply('ok') end
  CALLER = caller
  local j, why = fenced(id, gen, owner)
  if not j then return reply(why) end
  if err and err ~= '' then redis.call('HSET', jk(id), 'err', err) end  -- the trash entry keeps it
  to_trash(j, reason, tonumber(retention))
  done('1')
  return reply('ok')
end

-- Whoever holds the job: a claim is revoked in the same write (the job hash, its generation with it,
-- leaves the board: the owner's settle finds no claim; its watch_claim wakes on the notice to its session).
function ops.cancel(id, reason, retention)
  if RETRY and redis.call('EXISTS', P .. 'n:' .. NONCE) == 1 then return reply('ok') end
  local j = get(id)
  if not j then return reply('notfound') end
  to_trash(j, reason, tonumber(retention))
  done('1')
  return reply('ok')
end

-- consume, then claim_next for the same owner (a second nonce for the claim): one round trip.
function ops.consume_next(id, gen, owner, result, retention, sess, claim_nonce, ...)
  local consumed = ops.consume(id, gen, owner, result, retention, sess)
  if consumed[1] ~= 'ok' then return consumed end
  NONCE = claim_nonce
  local claimed = ops.claim_next(owner, sess, retention, ...)
  return {claimed[1], claimed[2], EV}
end
