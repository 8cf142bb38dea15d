-- jobboard redis://, continued from board.lua (one library): links between the partitions of a board spread
-- over a Redis Cluster (jobboard_redis/spread/backend.py, spread/links.py). A dependent lives in one partition and
-- each of its dependencies in its own; a script touches one partition only, so a link across two is made
-- and kept by calls on each side, every one idempotent:
--   post (the dependent, counting every dependency in 'pend', pending in 'lkp'), then link on each other
--   partition (the dependency's 'dents' names the dependent) and linked; or, if a dependency is gone, unpost
--   and unlink; a pending dependent older than the retry window is linked by a sweep (its poster died);
--   a consume or trash of a dependency with a dependent elsewhere writes to its partition's outbox in the
--   same call (board.lua), and a board forwards each entry with deliver or cascade, then removes it.

-- The dependent d (another partition's) waits for dependency id: 'nodep' if id is not on the board.
function ops.link(id, d)
  if redis.call('EXISTS', jk(id)) == 0 then return reply('nodep', {id}) end
  redis.call('SADD', P .. 'dents:' .. id, d)
  return reply('ok')
end

function ops.unlink(id, d)
  redis.call('SREM', P .. 'dents:' .. id, d)
  return reply('ok')
end

-- A dependent posted here whose dependency elsewhere was gone before it was linked: removed again, with
-- its key (if it still names it), its post's nonce record and its links to this partition's dependencies;
-- 'linked' if its links were all made meanwhile (by a sweep): it stays.
function ops.unpost(id, post_nonce, ...)
  if not redis.call('ZSCORE', P .. 'lkp', id) then  -- linked by a sweep, or undone already (a resent call)
    return reply(redis.call('EXISTS', jk(id)) == 1 and 'linked' or 'ok')
  end
  redis.call('ZREM', P .. 'lkp', id)
  redis.call('HDEL', P .. 'lkn', id)
  local j = get(id)
  if not j or j.st ~= 'w' then return reply('ok') end
  unindex(j)
  redis.call('DEL', jk(id), P .. 'res:' .. id, P .. 'n:' .. post_nonce)
  if j.key ~= '' and redis.call('GET', P .. 'k:' .. j.key) == id then redis.call('DEL', P .. 'k:' .. j.key) end
  for _, dep in ipairs({...}) do redis.call('SREM', P .. 'dents:' .. dep, id) end
  ev('trashed', id, 'a dependency was gone before it was linked: not posted')
  return reply('ok')
end

-- An outbox entry forwarded: dependency dep (another partition's) consumed with result. Once per dependency.
function ops.deliver(d, dep, result)
  local dj = get(d)
  if dj and dj.st == 'w' and redis.call('HEXISTS', P .. 'res:' .. d, dep) == 0 then deliver(d, dj, dep, result) end
  return reply('ok')
end

-- An outbox entry forwarded: a dependency (another partition's) trashed, so is the dependent d.
function ops.cascade(d, why, retention)
  local j = get(d)
  if j and j.st == 'w' then to_trash(j, why, tonumber(retention)) end
  return reply('ok')
end

-- Every link of the dependent id across partitions made: no longer pending.
function ops.linked(id)
  redis.call('ZREM', P .. 'lkp', id)
  redis.call('HDEL', P .. 'lkn', id)
  return reply('ok')
end

-- Dependents posted here more than ms ago whose links were not all made (their poster died, or is very
-- late): {id, its post's nonce, ...}, 50 at most.
function ops.unlinked(ms)
  local out = {}
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'lkp', '-inf', now() - tonumber(ms), 'LIMIT', 0, 50)) do
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', P .. 'lkn', id) or ''
  end
  return reply('ok', out)
end
