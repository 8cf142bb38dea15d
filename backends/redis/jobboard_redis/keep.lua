-- jobboard redis:// : progress of running jobs, retention, purge and requeue (after board.lua, same script).

-- A field of a trash entry's hash (false: absent), nil when the key is no hash (another tool's); any other
-- refusal (an ACL's) is raised, never taken for an absent field.
local function trash_field(tr, field)
  local value = redis.pcall('HGET', tr, field)
  if type(value) == 'table' and value.err then
    if string.find(value.err, 'WRONGTYPE', 1, true) then return nil end
    error(value)
  end
  return value
end

-- A trash entry leaves: its hash, the results delivered to it, its key if the key still finds it.
local function drop_trash(id)
  local tr = P .. 'tr:' .. id
  local key = trash_field(tr, 'key')
  if key and key ~= '' and redis.call('GET', P .. 'k:' .. key) == id then redis.call('DEL', P .. 'k:' .. key) end
  redis.call('DEL', tr, P .. 'res:' .. id)
  for _, z in ipairs({'trash', 'tdef', 'texp'}) do redis.call('ZREM', P .. z, id) end
end

local function drop_kept(id)
  redis.call('DEL', P .. 'kept:' .. id)
  redis.call('ZREM', P .. 'kdef', id)
  redis.call('ZREM', P .. 'kexp', id)
end

-- Fenced like a settle; the progress is stored with the claim's generation, so it goes with the claim.
function ops.progress(id, gen, owner, data)
  local j, why = fenced(id, gen, owner)
  if not j then return reply(why) end
  redis.call('HSET', jk(id), 'pg', gen, 'pr', data)
  return reply('ok')
end

-- One collection pass, at most `limit` of each kind: what expired by the server's clock.
-- result_ms / trash_ms: the board's TTLs (0: forever).
function ops.retain(result_ms, trash_ms, limit)
  local count, n = 0, tonumber(limit)
  local function expired(kind, board_ms)
    local due = redis.call('ZRANGEBYSCORE', P .. kind .. 'exp', '-inf', now(), 'LIMIT', 0, n)
    if tonumber(board_ms) > 0 then
      for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. kind .. 'def', '-inf', now() - tonumber(board_ms),
        'LIMIT', 0, n)) do due[#due + 1] = id end
    end
    return due
  end
  for _, id in ipairs(expired('k', result_ms)) do drop_kept(id) count = count + 1 end
  for _, id in ipairs(expired('t', trash_ms)) do drop_trash(id) count = count + 1 end
  return reply('ok', {count})
end

-- Trash entries trashed at least older_ms ago (the trash is in trashing order), at most `limit`.
function ops.purge(older_ms, limit)
  local count = 0
  for _, id in ipairs(redis.call('ZRANGE', P .. 'trash', 0, tonumber(limit) - 1)) do
    local at = tonumber(trash_field(P .. 'tr:' .. id, 'at') or '')
    if at == math.huge then at = nil end  -- not a time a board writes: dropped, not a stop to every purge
    if at and now() - at < tonumber(older_ms) then break end
    drop_trash(id)
    count = count + 1
  end
  return reply('ok', {count})
end

-- Back on the board, unclaimed, with its id and order score; its key finds it again unless taken since. 'nrq'
-- counts its requeues (links.lua key_settled: a settle's entry from before a requeue is stale); its 'rq'
-- mark (requeue_mark) leaves.
function ops.requeue(id, reset)
  if RETRY then
    local done_id = redis.call('GET', P .. 'n:' .. NONCE)
    if done_id then return reply('ok', {id}) end
  end
  local tr = P .. 'tr:' .. id
  if redis.call('EXISTS', tr) == 0 then return reply('notfound') end
  local f = redis.call('HMGET', tr, 'pend', 'name', 'sc', 'key', 'g')
  if tonumber(f[1] or '0') > 0 then return reply('waiting', {f[1]}) end
  if redis.call('EXISTS', jk(id)) == 1 then return reply('conflict') end
  for _, z in ipairs({'trash', 'tdef', 'texp'}) do redis.call('ZREM', P .. z, id) end
  redis.call('RENAME', tr, jk(id))
  redis.call('HDEL', jk(id), 'reason', 'at', 'rq')
  redis.call('HINCRBY', jk(id), 'nrq', 1)
  redis.call('HSET', jk(id), 'st', 'u', 'owner', '', 'sess', '', 'nb', '')
  if reset == '1' then redis.call('HSET', jk(id), 'att', 0) end
  local key = f[4] or ''
  if key ~= '' then
    local holder = redis.call('GET', P .. 'k:' .. key)
    if holder and holder ~= id then
      redis.call('HSET', jk(id), 'key', '')
    else
      redis.call('SET', P .. 'k:' .. key, id)
    end
  end
  redis.call('ZADD', P .. 'all', f[3], id)
  if f[5] and f[5] ~= '' then redis.call('ZADD', P .. 'gm:' .. f[5], id, id) end  -- back at its place (flow.lua)
  ready_add({id = id, name = f[2], sc = f[3]})
  wake(f[2], 1)
  done(id)
  ev('posted', id, f[2])
  return reply('ok', {id})
end
