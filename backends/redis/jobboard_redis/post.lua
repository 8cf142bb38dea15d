-- jobboard redis://, continued from board.lua (one library): posting, one job or many in one call.

-- A new job's hash. Empty fields ('owner', 'sess', 'nb', 'key', 'maxa', 'rttl', 'tttl', 'keep' '0') are not
-- written: every reader takes an absent field for an empty one (fewer fields: a cheaper HSET).
local function write_job(id, posting, name, sc, st, deps, maxa, keep, rttl, tttl, nb, key, g)
  local f = {'p', posting, 'name', name, 'sc', sc, 'st', st, 'gen', 0, 'att', 0, 'pend', deps, 'nd', deps}
  if g ~= '' then
    f[#f + 1] = 'g'; f[#f + 1] = g
    redis.call('ZADD', P .. 'gm:' .. g, id, id)  -- the group's jobs in posting order (flow.lua)
  end
  if maxa ~= '' then f[#f + 1] = 'maxa'; f[#f + 1] = maxa end
  if keep == '1' then f[#f + 1] = 'keep'; f[#f + 1] = keep end
  if rttl ~= '' then f[#f + 1] = 'rttl'; f[#f + 1] = rttl end
  if tttl ~= '' then f[#f + 1] = 'tttl'; f[#f + 1] = tttl end
  if nb ~= '' then f[#f + 1] = 'nb'; f[#f + 1] = nb end
  if key ~= '' then f[#f + 1] = 'key'; f[#f + 1] = key end
  redis.call('HSET', P .. 'job:' .. id, unpack(f))
end

-- n new job ids: the first, the step between them, and the weight of a priority rank in an order score
-- (rank * weight + id). Any board but a spread one: 1, 2, ... (a counter), weight 2^44. A partition of a board
-- spread over a Redis Cluster (prefix 'jb:{<root>#jbp<k>/<K>/<salt>}:', jobboard_redis/spread.py): the server's
-- clock in us since 2020, above the partition's last id, rounded up to k mod K (an id names its partition),
-- so that ids (and ages) follow the order of posts across partitions as far as the masters' clocks agree;
-- weight 2^50 (2^50 us: 35 years; exact in a double).
local function next_ids(n)
  local k, step = string.match(P, '#jbp(%d+)/(%d+)/%d+}:$')
  if not k then return redis.call('INCRBY', P .. 'seq', n) - n + 1, 1, 17592186044416 end
  k, step = tonumber(k), tonumber(step)
  local first = math.max(now_us() - 1577836800000000, tonumber(redis.call('GET', P .. 'seq') or '0') + 1)
  first = first + (k - first) % step
  redis.call('SET', P .. 'seq', string.format('%.0f', first + (n - 1) * step))
  return first, step, 1125899906842624
end

-- delay: milliseconds from the server's now() before the job is claimable ('0': at once).
-- rttl, tttl: the job's own result and trash lifetimes in ms ('': the board's). g: its group ('': none).
function ops.post(rank, name, posting, maxa, keep, key, delay, rttl, tttl, g, ...)
  local deps = {...}
  if RETRY then
    local id = redis.call('GET', P .. 'n:' .. NONCE)
    if id then return reply('ok', {id}) end
  end
  if key ~= '' then
    local id = redis.call('GET', P .. 'k:' .. key)
    if id then
      for _, record in ipairs({jk(id), P .. 'gone:' .. id, P .. 'tr:' .. id}) do
        local f = redis.call('HMGET', record, 'p', 'att', 'nb', 'err')
        if f[1] then return reply('keyed', {id, f[1], f[2], f[3] or '', f[4] or ''}) end
      end
      if foreign(id) then return reply('far', {id}) end  -- a spread board's key of a job elsewhere (links.lua)
    end
  end
  for _, dep in ipairs(deps) do  -- another partition's: linked there after this post (links.lua)
    if not foreign(dep) and redis.call('EXISTS', jk(dep)) == 0 then return reply('nodep', {dep}) end
  end
  local seq, _, weight = next_ids(1)
  local id = string.format('%.0f', seq)
  local sc = string.format('%.0f', tonumber(rank) * weight + seq)
  local nb = (tonumber(delay) > 0) and (now() + tonumber(delay)) or ''
  local st = (#deps > 0) and 'w' or ((nb ~= '') and 'd' or 'u')
  write_job(id, posting, name, sc, st, #deps, maxa, keep, rttl, tttl, nb, key, g)
  redis.call('ZADD', P .. 'all', sc, id)
  if st == 'u' then ready_add({id = id, name = name, sc = sc}) end
  if st == 'd' then redis.call('ZADD', P .. 'delayed', nb, id) end
  if st ~= 'w' then wake(name, 1) end  -- a delayed one: the board woken learns when it is due
  local far = false
  for _, dep in ipairs(deps) do
    if foreign(dep) then far = true else redis.call('SADD', P .. 'dents:' .. dep, id) end
  end
  if far then  -- linked after this call (links.lua): pending until then, for a sweep if its poster dies
    redis.call('ZADD', P .. 'lkp', now(), id)
    redis.call('HSET', P .. 'lkn', id, NONCE)
  end
  if key ~= '' then redis.call('SET', P .. 'k:' .. key, id) end
  done(id)
  ev('posted', id, name)
  return reply('ok', {id})
end

-- Posts without dependency, key or delay, all at once: one INCRBY (next_ids), one HSET per job, one ZADD per
-- index, one 'posted' event per run of consecutive jobs of one name (its job: '<first id>+<count>' when
-- count > 1, which readers expand to one event per job; a spread board's ids are not consecutive: one event
-- per job); one nonce record for the chunk (on its first post's nonce: '<first id>+<count>', and '*<step>'
-- on a spread board). {first id, count, step}.
local function post_simple(a)
  local n = #a / 12
  local first, step, weight = next_ids(n)
  local all, ready, named = {}, {}, {}
  local run_first, run_name = first, a[4]
  local function posted_run(after)  -- runs of consecutive ids only (step 1)
    local count = after - run_first
    ev('posted', count > 1 and (run_first .. '+' .. count) or string.format('%.0f', run_first), run_name)
  end
  for k = 0, n - 1 do
    local b, nid = k * 12, first + k * step
    local id = step > 1 and string.format('%.0f', nid) or nid  -- a spread board's: 15 digits, not 1.5e+14
    local rank, name = a[b + 3], a[b + 4]
    local sc = string.format('%.0f', tonumber(rank) * weight + nid)
    write_job(id, a[b + 5], name, sc, 'u', 0, a[b + 6], a[b + 7], a[b + 10], a[b + 11], '', '', a[b + 12])
    all[#all + 1] = sc; all[#all + 1] = id
    if not internal(name) then ready[#ready + 1] = sc; ready[#ready + 1] = id end
    local rn = named[name]
    if not rn then rn = {}; named[name] = rn end
    rn[#rn + 1] = sc; rn[#rn + 1] = id
    if name ~= run_name or step > 1 then
      if nid > first then posted_run(step > 1 and (run_first + 1) or nid) end
      run_first, run_name = nid, name
    end
  end
  posted_run(step > 1 and (run_first + 1) or (first + n))
  redis.call('ZADD', P .. 'all', unpack(all))
  if #ready > 0 then redis.call('ZADD', P .. 'ready', unpack(ready)) end
  for name, rn in pairs(named) do
    redis.call('ZADD', P .. 'rn:' .. name, unpack(rn))
    wake(name, #rn / 2)
  end
  done(string.format('%.0f', first) .. '+' .. n .. (step > 1 and ('*' .. step) or ''))  -- NONCE: the call's, its first post's
  return reply('range', {first, n, step})
end

-- Whether every group has 11 post arguments (no dependency), no key and no delay; n: the number of groups.
local function simple(a)
  if #a % 12 ~= 0 or #a > 12 * 200 then return false end
  for b = 0, #a - 12, 12 do
    if a[b + 1] ~= '11' or a[b + 8] ~= '' or a[b + 9] ~= '0' then return false end
  end
  return true
end

-- Many posts in one call: groups of (count, nonce, post's arguments...), count = 1 + #arguments.
-- A retried chunk first looks for the record of a chunk posted at once (see post_simple).
function ops.post_many(...)
  local a, i, out = {...}, 1, {}
  if RETRY and #a > 1 then
    local rec = redis.call('GET', P .. 'n:' .. NONCE)
    local first, n, step = string.match(rec or '', '^(%d+)%+(%d+)%*?(%d*)$')
    if first then return reply('range', {tonumber(first), tonumber(n), tonumber(step) or 1}) end
  elseif simple(a) then
    return post_simple(a)
  end
  while i <= #a do
    local n = tonumber(a[i])
    NONCE = a[i + 1]
    local r = ops.post(unpack(a, i + 2, i + n))
    out[#out + 1] = {r[1], r[2]}
    if r[1] == 'nodep' then break end
    i = i + n + 1
  end
  return reply('ok', out)
end
