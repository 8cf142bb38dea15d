-- jobboard redis://, continued from board.lua (one library): waking ONE waiting board per job made claimable,
-- and telling a claim's owner that another board's call ended its claim (docs/backends/redis.md, "The fleet").
-- P wait: hash, session -> registration id of a board waiting for work (one registration per board), and
-- '<session>:l' -> the lists its entries are in ('wn', 'wn:<name>'; joined by '\0').
-- P wn (work of any name), P wn:<name>: lists of '<session>|<registration>', oldest first. A registration's
-- entries leave every list when it ends (woken, left with work, registered again for other names, closed),
-- so the lists hold live registrations only. A reaped (crashed) board's are dropped when met.
-- P wk:<session>: the session's notices, popped by its board (BLMPOP): 'w<name>' (work of that name may be
-- claimable: one per wake) and 'l<job id>' (your claim of that job ended by another board's call).

local function split(joined)
  local out = {}
  for part in string.gmatch(joined, '[^%z]+') do out[#out + 1] = part end
  return out
end

-- End session sess's registration (f: its HMGET of reg and lists, read by the caller): out of every list but
-- `except` (the one it was popped from), out of the hash.
local function unlist(sess, f, except)
  local entry = sess .. '|' .. f[1]
  for _, list in ipairs(split(f[2] or '')) do
    if list ~= except then redis.call('LREM', P .. list, 0, entry) end
  end
  redis.call('HDEL', P .. 'wait', sess, sess .. ':l')
end

-- The oldest live registration in list, ended; nil when none.
local function pop_waiter(list)
  while true do
    local entry = redis.call('LPOP', P .. list)
    if not entry then return nil end
    local sess, reg = string.match(entry, '^(.*)|([^|]*)$')
    local f = sess and redis.call('HMGET', P .. 'wait', sess, sess .. ':l')
    if f and f[1] == reg then
      unlist(sess, f, list)
      return sess
    end
  end
end

-- Up to n jobs of name became claimable (or delayed: the board woken learns when they are due): wake as many
-- waiting boards, those waiting for that name first. One HLEN a call when no board waits.
wake = function(name, n)
  if WAITING == nil then WAITING = redis.call('HLEN', P .. 'wait') / 2 end
  if WAITING < 1 then return end
  local lists = {'wn:' .. name, 'wn'}
  if internal(name) then lists[2] = nil end  -- a board waiting for any name does not take internal jobs
  for _, list in ipairs(lists) do
    while n > 0 and WAITING >= 1 do
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
  redis.call('LTRIM', P .. 'wk:' .. sess, -1000, -1)  -- a board that never watches does not pile them up
end

-- A board waits: register it (once; again after it was woken) for any name (any = '1') and for names.
local function register(sess, reg, any, names)
  local f = redis.call('HMGET', P .. 'wait', sess, sess .. ':l')
  if f[1] == reg or not session_alive(sess) then return end
  if f[1] then unlist(sess, f) end  -- registered for other names
  local lists = {}
  if any == '1' then lists[1] = 'wn' end
  for _, name in ipairs(names) do lists[#lists + 1] = 'wn:' .. name end
  redis.call('HSET', P .. 'wait', sess, reg, sess .. ':l', table.concat(lists, '\0'))
  for _, list in ipairs(lists) do redis.call('RPUSH', P .. list, sess .. '|' .. reg) end
end

-- The board of session sess waits no more (it left with work, or its session ended).
local function unregister(sess)
  local f = redis.call('HMGET', P .. 'wait', sess, sess .. ':l')
  if f[1] then unlist(sess, f) end
end

-- A session ends: it waits no more and its notices go.
local function unwait(sess)
  unregister(sess)
  redis.call('DEL', P .. 'wk:' .. sess)
end

-- The claimable jobs (up to limit, in claim order; names: only those) with their rows, and the ms until the
-- next delayed job is due (-1: none). The calling board (sess, registration reg, any + nreg names it waits for)
-- is registered as waiting when none was found, or when others of its callers still wait (others = '1');
-- else its registration is ended: it leaves with work.
function ops.peek(limit, sess, reg, others, any, nreg, ...)
  local rest, regnames, names = {...}, {}, {}
  for i, name in ipairs(rest) do
    if i <= tonumber(nreg) then regnames[#regnames + 1] = name else names[#names + 1] = name end
  end
  local wait_ms = promote()
  local found = {}
  for _ = 1, 100 do  -- flow control parks what it holds back (flow.lua): look again while it did
    local seen = {}
    if #names == 0 then
      seen = redis.call('ZRANGE', P .. 'ready', 0, tonumber(limit) - 1)
    else
      local heads = {}
      for _, name in ipairs(names) do
        local head = redis.call('ZRANGE', P .. 'rn:' .. name, 0, tonumber(limit) - 1, 'WITHSCORES')
        for i = 1, #head, 2 do heads[#heads + 1] = {tonumber(head[i + 1]), head[i]} end
      end
      table.sort(heads, function(a, b) return a[1] < b[1] end)
      for i = 1, math.min(#heads, tonumber(limit)) do seen[i] = heads[i][2] end
    end
    found = admitted(seen)
    if #found > 0 or #found == #seen or paused_names()[''] then break end
  end
  if flowing() then wait_ms = promote() end  -- a rate's next permit, if one was parked
  if #found == 0 or others == '1' then
    register(sess, reg, any, regnames)
  else
    unregister(sess)
  end
  local rows = {}
  for i, id in ipairs(found) do
    local row = redis.pcall('HMGET', jk(id), 'p', 'att', 'nb', 'err')
    rows[i] = (type(row) == 'table' and not row.err) and row or {}
  end
  return reply('ok', {wait_ms, found, rows})
end
