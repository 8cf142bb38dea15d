-- jobboard redis://, continued from board.lua (one library): links between the partitions of a board spread
-- over a Redis Cluster (jobboard_redis/spread/backend.py, spread/links.py), and its idempotency keys (at the
-- end: spread/keys.py). A dependent lives in one partition and each of its dependencies in its own; a script
-- touches one partition only, so a link across two is made and kept by calls on each side, every one idempotent:
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
  if redis.call('ZREM', P .. 'kh', id) == 1 then  -- a held keyed post's: its release answers 'dropped'
    redis.call('SET', P .. 'dropped:' .. id, '1', 'PX', tonumber(string.match(post_nonce, ':(%d+)$')) or 60000)
  end
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

-- Idempotency keys across partitions (spread/keys.py). The record 'k:<key>' of the key's partition (CRC16(key)
-- mod K) is the key's one arbiter; it may name a job of another partition (its group's). Such a job is posted
-- held there (post_held: waiting, one more in 'pend', its id in 'kh' scored by post time), then named by the
-- record (key_take), then released; a held job the record does not name is dropped (drop_held): a held job is
-- never claimable, so no job runs whose key names another; a dropped job leaves 'dropped:<id>' for a while, so
-- that its poster's release tells "dropped: post again" from "released, then run and gone: done". 'kf' (the
-- key's partition): keys whose record names a job elsewhere, scored by when to check that job is still on the
-- board (keys_due; a record naming a job gone is removed, key_swap); a settle of such a job tells the key's
-- partition through the outbox (board.lua settle_key; key_settled), the check is the backstop.

-- Job id as a keyed post answers it ('keyed' and its record), or nil when nothing of it is left. retention
-- (ms, for a key of another partition): a trash entry older than that is gone for the key, as on one slot
-- (where the key's record expires then), unless a requeue of it is under way ('rq', requeue_mark); nil: any.
local function keyed_reply(id, retention)
  for _, record in ipairs({jk(id), P .. 'gone:' .. id, P .. 'tr:' .. id}) do
    local f = redis.call('HMGET', record, 'p', 'att', 'nb', 'err', 'at', 'rq')
    if f[1] and retention and f[5] and now() - tonumber(f[5]) >= tonumber(retention)
      and not (f[6] and tonumber(f[6]) > now()) then return nil end
    if f[1] then return reply('keyed', {id, f[1], f[2], f[3] or '', f[4] or ''}) end
  end
  return nil
end

function ops.keyed(id, retention) return keyed_reply(id, retention) or reply('none') end

-- As post, the job written held ('keyed': a job of this partition holds the key here, not held again; its
-- reply says whether it is held, '1' or '0', after the job's fields).
function ops.post_held(...)
  if RETRY then
    local id = redis.call('GET', P .. 'n:' .. NONCE)
    if id then return reply('ok', {id}) end
  end
  local r = ops.post(...)
  if r[1] == 'keyed' then r[2][6] = redis.call('ZSCORE', P .. 'kh', r[2][1]) and '1' or '0' end
  if r[1] ~= 'ok' then return r end
  local id = r[2][1]
  local j = get(id, {'name', 'sc', 'st'})
  if j.st == 'u' then
    redis.call('ZREM', P .. 'ready', id)
    redis.call('ZREM', P .. 'rn:' .. j.name, id)
  elseif j.st == 'd' then
    redis.call('ZREM', P .. 'delayed', id)
  end
  redis.call('HSET', jk(id), 'st', 'w')
  redis.call('HINCRBY', jk(id), 'pend', 1)
  redis.call('ZADD', P .. 'kh', now(), id)
  return r
end

-- Held job id, named by its key's record: claimable (or delayed, or waiting for its dependencies); a job not
-- held stays as it is; a held job trashed meanwhile (cancelled) no longer waits for its key there (requeue).
-- 'ok'; 'dropped' if it was dropped (drop_held: its post is to be made again); 'gone' if nothing of it is
-- left otherwise (released, then settled and expired: its post is done).
function ops.release(id)
  if redis.call('EXISTS', P .. 'dropped:' .. id) == 1 then return reply('dropped') end
  local held = redis.call('ZREM', P .. 'kh', id) == 1
  local j = held and get(id)
  if held and not j and redis.call('EXISTS', P .. 'tr:' .. id) == 1 then
    redis.call('HINCRBY', P .. 'tr:' .. id, 'pend', -1)
  end
  if j and j.st == 'w' and redis.call('HINCRBY', jk(id), 'pend', -1) <= 0 then
    if j.nb ~= '' and tonumber(j.nb) > now() then
      redis.call('HSET', jk(id), 'st', 'd')
      redis.call('ZADD', P .. 'delayed', j.nb, id)
    else
      redis.call('HSET', jk(id), 'st', 'u')
      ready_add(j)
    end
    wake(j.name, 1)
    ev('ready', id, 'its key confirmed')
  end
  return reply(keyed_reply(id) and 'ok' or 'gone')
end

-- Held job id, whose key's record names another job: removed as if never posted ('kept' if it is not held:
-- released, never held, or no longer waiting: cancelled and requeued meanwhile); 'dropped:<id>' stays for
-- keep_ms (release answers 'dropped'). A job depended on meanwhile goes to the trash with its dependents; one
-- trashed meanwhile (cancelled) stays there, no longer waiting for its key.
function ops.drop_held(id, retention, keep_ms)
  if redis.call('ZREM', P .. 'kh', id) == 0 then return reply('kept') end
  redis.call('SET', P .. 'dropped:' .. id, '1', 'PX', tonumber(keep_ms) or 60000)
  local j = get(id)
  if not j then
    if redis.call('EXISTS', P .. 'tr:' .. id) == 1 then redis.call('HINCRBY', P .. 'tr:' .. id, 'pend', -1) end
    return reply('ok')
  end
  if j.st ~= 'w' then return reply('kept') end
  redis.call('ZREM', P .. 'lkp', id)
  redis.call('HDEL', P .. 'lkn', id)
  if redis.call('EXISTS', P .. 'dents:' .. id) == 1 then
    to_trash(j, 'not posted: its key names another job', tonumber(retention))
    return reply('ok')
  end
  unindex(j)
  redis.call('DEL', jk(id), P .. 'res:' .. id)
  if j.key ~= '' and redis.call('GET', P .. 'k:' .. j.key) == id then redis.call('DEL', P .. 'k:' .. j.key) end
  ev('trashed', id, 'not posted: its key names another job')
  return reply('ok')
end

-- Jobs held longer than ms (their poster died between its calls, or is very late): {id, key, ...}, 50 at most
-- (a job cancelled meanwhile: its trash entry's key, which its key's record is to name as on one slot).
function ops.held_keys(ms)
  local out = {}
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'kh', '-inf', now() - tonumber(ms), 'LIMIT', 0, 50)) do
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', jk(id), 'key') or redis.call('HGET', P .. 'tr:' .. id, 'key') or ''
  end
  return reply('ok', out)
end

-- The key's record names job id (another partition's), unless it names a job still on the board: 'mine' (named
-- now or before), 'keyed' and the job (one of this partition's), or 'far' and the id it names (another
-- partition's: the caller asks there whether anything of it is left, and replaces it with key_swap if not).
-- check_ms: when to check first that the job is still on the board. nrq: the job's requeues (its next one's
-- count for a requeue), kept beside the record in 'kg:<key>' (the highest named; key_settled).
function ops.key_take(key, id, check_ms, nrq)
  local k, kg, n = P .. 'k:' .. key, P .. 'kg:' .. key, tonumber(nrq or '0') or 0
  local v = redis.call('GET', k)
  if v and v ~= id then
    if foreign(v) then return reply('far', {v}) end
    local found = keyed_reply(v)
    if found then return found end
  end
  if v ~= id then  -- named now
    redis.call('SET', k, id)
    if n > 0 then redis.call('SET', kg, n) else redis.call('DEL', kg) end
  else  -- named again (requeue): kept
    redis.call('PERSIST', k)
    if n > (tonumber(redis.call('GET', kg)) or 0) then redis.call('SET', kg, n) else redis.call('PERSIST', kg) end
  end
  redis.call('ZADD', P .. 'kf', 'NX', now() + tonumber(check_ms), key)
  return reply('mine')
end

-- The key's record, if it still names old (found gone), names new instead ('': removed). 'ok', or 'moved'.
function ops.key_swap(key, old, new, check_ms)
  local k = P .. 'k:' .. key
  if redis.call('GET', k) ~= old then return reply('moved') end
  redis.call('DEL', P .. 'kg:' .. key)
  if new == '' then
    redis.call('DEL', k)
    redis.call('ZREM', P .. 'kf', key)
  else
    redis.call('SET', k, new)
    redis.call('ZADD', P .. 'kf', now() + tonumber(check_ms), key)
  end
  return reply('ok')
end

-- Keys due for a check that the job elsewhere their record names is left: {key, id, ...}, 50 at most; a key
-- whose record names no job elsewhere (any more) leaves 'kf'.
function ops.keys_due()
  local out = {}
  for _, key in ipairs(redis.call('ZRANGEBYSCORE', P .. 'kf', '-inf', now(), 'LIMIT', 0, 50)) do
    local v = redis.call('GET', P .. 'k:' .. key)
    if v and foreign(v) then
      out[#out + 1] = key
      out[#out + 1] = v
    else
      redis.call('ZREM', P .. 'kf', key)
    end
  end
  return reply('ok', out)
end

-- A board's sweep of this partition's keys, one call: {held_keys(ms)'s list, keys_due()'s list}.
function ops.key_sweep(ms) return reply('ok', {ops.held_keys(ms)[2], ops.keys_due()[2]}) end

-- Outbox entries forwarded, (key, id, retention, nrq) each: job id (another partition's), which the key's record
-- may name, was settled after nrq requeues ('': any): the record expires after the key's retention (ms; 0: at
-- once), as on one slot, and needs no check. A record naming another job, or none, stays as it is; so does one
-- naming the job after a later requeue ('kg:<key>' above nrq: the entry is late, from a settle before it).
function ops.key_settled(...)
  local a = {...}
  for i = 1, #a - 3, 4 do
    local key, k, kg = a[i], P .. 'k:' .. a[i], P .. 'kg:' .. a[i]
    if redis.call('GET', k) == a[i + 1]
      and (a[i + 3] == '' or tonumber(a[i + 3]) >= (tonumber(redis.call('GET', kg)) or 0)) then
      if tonumber(a[i + 2]) > 0 then
        redis.call('PEXPIRE', k, a[i + 2])
        redis.call('PEXPIRE', kg, a[i + 2])
      else
        redis.call('DEL', k, kg)
      end
      redis.call('ZREM', P .. 'kf', key)
    end
  end
  return reply('ok')
end

-- The first n entries of this partition's outbox, each followed by its job's requeues ('nrq') for a 'key'
-- entry ('' if nothing of the job is left: it cannot be requeued; '' for other entries). Read with the entries:
-- a requeue forwards its job's entries first (spread/keys.py), so the count is the settle's.
function ops.out_read(n)
  local out = {}
  for _, entry in ipairs(redis.call('LRANGE', P .. 'out', 0, tonumber(n) - 1)) do
    local ok, e = pcall(cmsgpack.unpack, entry)  -- a malformed entry: returned as it is, the board skips it
    local nrq = ''
    if ok and type(e) == 'table' and e[1] == 'key' and type(e[3]) == 'string' then
      for _, record in ipairs({P .. 'tr:' .. e[3], P .. 'gone:' .. e[3], jk(e[3])}) do
        if redis.call('EXISTS', record) == 1 then nrq = redis.call('HGET', record, 'nrq') or '0' break end
      end
    end
    out[#out + 1] = entry
    out[#out + 1] = nrq
  end
  return reply('ok', out)
end

-- Outbox entries applied: removed (one of each).
function ops.out_done(...)
  for _, entry in ipairs({...}) do redis.call('LREM', P .. 'out', 1, entry) end
  return reply('ok')
end

-- A requeue of trashed job id is under way (for ms at most): its key finds it until then, however old.
function ops.requeue_mark(id, ms)
  if redis.call('EXISTS', P .. 'tr:' .. id) == 1 then redis.call('HSET', P .. 'tr:' .. id, 'rq', now() + tonumber(ms)) end
  return reply('ok')
end

-- A requeued job id of this partition whose key's record (another partition's) names another job: it loses
-- its key, as on one slot when the key went to another job.
function ops.key_clear(id, key)
  if redis.call('EXISTS', P .. 'tr:' .. id) == 1 then redis.call('HSET', P .. 'tr:' .. id, 'key', '') end
  if redis.call('GET', P .. 'k:' .. key) == id then redis.call('DEL', P .. 'k:' .. key) end
  return reply('ok')
end

-- The key's next check in ms (its job was found on the board).
function ops.key_later(key, ms)
  redis.call('ZADD', P .. 'kf', 'XX', now() + tonumber(ms), key)
  return reply('ok')
end
