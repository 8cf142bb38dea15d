-- jobboard redis://, continued from board.lua (one library): waking ONE waiting board per job made claimable,
-- and telling a claim's owner that another board's call ended its claim (docs/backends/redis.md, "The fleet").
-- P wait: hash, session -> registration id of a board waiting for work (one registration per board).
-- P wn (work of any name), P wn:<name>: lists of '<session>|<registration>', oldest first; an entry whose
-- registration is gone (the board was woken, left with work, or closed) is dropped when met.
-- P wk:<session>: the session's notices, popped by its board (BLMPOP): 'w<name>' (work of that name may be
-- claimable: one per wake) and 'l<job id>' (your claim of that job ended by another board's call).

-- The oldest live registration in list, removed; nil when none.
local function pop_waiter(list)
  while true do
    local entry = redis.call('LPOP', list)
    if not entry then return nil end
    local sess, reg = string.match(entry, '^(.*)|([^|]*)$')
    if sess and redis.call('HGET', P .. 'wait', sess) == reg then
      redis.call('HDEL', P .. 'wait', sess)
      return sess
    end
  end
end

-- Up to n jobs of name became claimable (or delayed: the board woken learns when they are due): wake as many
-- waiting boards, those waiting for that name first. One HLEN a call when no board waits.
wake = function(name, n)
  if WAITING == nil then WAITING = redis.call('HLEN', P .. 'wait') end
  if WAITING == 0 then return end
  local lists = {P .. 'wn:' .. name, P .. 'wn'}
  if internal(name) then lists[2] = nil end  -- a board waiting for any name does not take internal jobs
  for _, list in ipairs(lists) do
    while n > 0 and WAITING > 0 do
      local sess = pop_waiter(list)
      if not sess then break end
      redis.call('RPUSH', P .. 'wk:' .. sess, 'w' .. name)
      WAITING, n = WAITING - 1, n - 1
    end
  end
end

-- The claim of job id held by session sess ended by a call of another board (a cancel, a settle): tell it.
notice = function(sess, id)
  if sess == '' or sess == CALLER or not session_alive(sess) then return end
  redis.call('RPUSH', P .. 'wk:' .. sess, 'l' .. id)
end

-- A board waits: register it (once; again after it was woken) for any name (any = '1') and for names.
local function register(sess, reg, any, names)
  if redis.call('HGET', P .. 'wait', sess) == reg or not session_alive(sess) then return end
  redis.call('HSET', P .. 'wait', sess, reg)
  local entry = sess .. '|' .. reg
  if any == '1' then redis.call('RPUSH', P .. 'wn', entry) end
  for _, name in ipairs(names) do redis.call('RPUSH', P .. 'wn:' .. name, entry) end
end

-- A session ends: it waits no more and its notices go.
local function unwait(sess)
  redis.call('HDEL', P .. 'wait', sess)
  redis.call('DEL', P .. 'wk:' .. sess)
end

-- The claimable jobs (up to limit, in claim order; names: only those) with their rows, and the ms until the
-- next delayed job is due (-1: none). The calling board (sess, registration reg, any + nreg names it waits for)
-- is registered as waiting when none was found, or when others of its callers still wait (others = '1');
-- else its registration (if still reg) is removed: it leaves with work.
function ops.peek(limit, sess, reg, others, any, nreg, ...)
  local rest, regnames, names = {...}, {}, {}
  for i, name in ipairs(rest) do
    if i <= tonumber(nreg) then regnames[#regnames + 1] = name else names[#names + 1] = name end
  end
  local wait_ms = promote()
  local found = {}
  if #names == 0 then
    found = redis.call('ZRANGE', P .. 'ready', 0, tonumber(limit) - 1)
  else
    local seen = {}
    for _, name in ipairs(names) do
      local head = redis.call('ZRANGE', P .. 'rn:' .. name, 0, tonumber(limit) - 1, 'WITHSCORES')
      for i = 1, #head, 2 do seen[#seen + 1] = {tonumber(head[i + 1]), head[i]} end
    end
    table.sort(seen, function(a, b) return a[1] < b[1] end)
    for i = 1, math.min(#seen, tonumber(limit)) do found[i] = seen[i][2] end
  end
  if #found == 0 or others == '1' then
    register(sess, reg, any, regnames)
  elseif redis.call('HGET', P .. 'wait', sess) == reg then
    redis.call('HDEL', P .. 'wait', sess)
  end
  local rows = {}
  for i, id in ipairs(found) do
    local row = redis.pcall('HMGET', jk(id), 'p', 'att', 'nb', 'err')
    rows[i] = (type(row) == 'table' and not row.err) and row or {}
  end
  return reply('ok', {wait_ms, found, rows})
end
