"""The Lua scripts of the Redis store: each write to a session is one atomic script.

Redis runs a script alone, so a script sees and leaves a session consistent (messages, ids,
head, checkpoint, records, agents, sequence). Every key a script touches shares the session's
hash tag, so on a Cluster it runs on one node; the user's session index lives in another slot
(``{U}``) and is passed as two extra keys only on a single server, where scripts may touch
any key. On a Cluster the store updates the index with :data:`INDEX` in a second call (see
:mod:`storage.stores.redis.layout`).

Shared conventions:
- a list entry is ``"SEQ RECORD"`` (``storage.codec``), a record entry ``"SEQ JSON"``;
- reads return a list's entries joined by ``"\n"`` in one bulk string: JSON never holds a raw
  newline, and one string parses far faster in redis-py than an array of a thousand;
- times are integer microseconds since the Unix epoch (``at`` arguments, head fields);
- a session's index *version* grows with every change of the session (``bump``): the
  server's ``TIME`` in µs, or the previous version + 1 when writes outpace the clock. The
  index keeps, per session, the version of the state it shows and takes only newer ones, so
  index updates sent in any order converge on the newest state.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = [
    "ACQUIRE_LEASE",
    "DELETE",
    "FETCH",
    "DELETE_SESSION",
    "FETCH_SESSION",
    "FETCH_SINCE",
    "INDEX",
    "LIST_AGENTS",
    "LOAD_CHECKPOINT",
    "RELEASE_LEASE",
    "REPLACE",
    "SAVE",
    "SAVE_CHECKPOINT",
    "SAVE_RECORD",
    "SESSION_INFO",
    "Script",
]


class Script:
    """A Lua script run with EVALSHA (loaded on NOSCRIPT, e.g. after a restart or failover)."""

    __slots__ = ("name", "sha", "source")

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def __repr__(self) -> str:
        return f"Script({self.name})"


# Helpers prepended to every script (Lua 5.1; numbers are doubles, exact below 2^53).
_PRELUDE: Final = r"""
local function fmt(n) return string.format('%.0f', n) end

-- The session's next index version (see the module docstring).
local function bump(skey)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local v = tonumber(redis.call('HGET', skey, 'v') or '0') + 1
  if now > v then v = now end
  redis.call('HSET', skey, 'v', fmt(v))
  return v
end

-- Newest message time over the session's agents (0 when none holds a message).
local function session_last(base, akey)
  local last = 0
  for _, agent in ipairs(redis.call('SMEMBERS', akey)) do
    local t = redis.call('HGET', base .. 'h:' .. agent, 't')
    if t and tonumber(t) > last then last = tonumber(t) end
  end
  return last
end

-- The user's index: x = ZSET session -> last activity (µs), y = HASH session -> version.
-- v == 0 registers the session if absent (before a Cluster write); otherwise the state
-- (exists, score) of version v replaces an older one.
local function index(x, y, member, v, score, exists, ttl)
  if v == 0 then
    if redis.call('ZSCORE', x, member) == false then
      redis.call('ZADD', x, fmt(score), member)
    end
  else
    local cur = tonumber(redis.call('HGET', y, member) or '-1')
    if v > cur then
      if exists then
        redis.call('ZADD', x, fmt(score), member)
        redis.call('HSET', y, member, fmt(v))
      else
        redis.call('ZREM', x, member)
        redis.call('HDEL', y, member)
      end
    end
  end
  if ttl > 0 then
    redis.call('PEXPIRE', x, ttl)
    redis.call('PEXPIRE', y, ttl)
  end
end

local function entry_seq(entry) return tonumber(string.match(entry, '^(%d+) ')) end

-- The newest entries of a list, enough of them to reach back to a seq <= after (or all).
local function tail_rows(lkey, after)
  local len = redis.call('LLEN', lkey)
  local k = 16
  while true do
    if k >= len then return redis.call('LRANGE', lkey, 0, -1) end
    local rows = redis.call('LRANGE', lkey, -k, -1)
    if entry_seq(rows[1]) <= after then return rows end
    k = k * 4
  end
end
"""


def _script(name: str, body: str) -> Script:
    return Script(name, _PRELUDE + body)


# KEYS: m, i, h, a, s, c, r [, x, y]. ARGV: ttl_ms, agent, new epoch, expected version ("":
# none), session member, then (id, record, at_us) per message.
# Returns {1} on a version conflict (nothing written), else {0, {1-based indexes stored},
# index version (0: nothing stored), session last activity µs}.
SAVE: Final = _script(
    "save",
    r"""
local head = redis.call('HMGET', KEYS[3], 'e', 'l', 'n', 'f', 't')
local epoch = head[1]
local last = tonumber(head[2] or '0')
if ARGV[4] ~= '' and ((epoch or '') .. '.' .. fmt(last)) ~= ARGV[4] then
  return {1}
end
local n = tonumber(head[3] or '0')
local first = head[4] and tonumber(head[4])
local newest = head[5] and tonumber(head[5])
local stored = {}
for k = 6, #ARGV, 3 do
  if redis.call('SADD', KEYS[2], ARGV[k]) == 1 then
    local seq = redis.call('HINCRBY', KEYS[5], 'q', 1)
    redis.call('RPUSH', KEYS[1], seq .. ' ' .. ARGV[k + 1])
    last = seq
    n = n + 1
    local at = tonumber(ARGV[k + 2])
    if not first or at < first then first = at end
    if not newest or at > newest then newest = at end
    stored[#stored + 1] = (k - 3) / 3
  end
end
if #stored == 0 then return {0, stored, 0, 0} end
if not epoch then epoch = ARGV[3] end
redis.call('HSET', KEYS[3], 'e', epoch, 'l', fmt(last), 'n', fmt(n), 'f', fmt(first),
  't', fmt(newest))
redis.call('SADD', KEYS[4], ARGV[2])
local st = tonumber(redis.call('HGET', KEYS[5], 't') or '0')
if newest > st then
  st = newest
  redis.call('HSET', KEYS[5], 't', fmt(st))
end
local v = bump(KEYS[5])
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  for k = 1, 7 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
if KEYS[8] then index(KEYS[8], KEYS[9], ARGV[5], v, st, true, ttl) end
return {0, stored, v, st}
""",
)

# KEYS: m. ARGV: start index (0: all, -N: the newest N). Returns the entries, joined.
FETCH: Final = _script(
    "fetch",
    r"""
return table.concat(redis.call('LRANGE', KEYS[1], ARGV[1], -1), '\n')
""",
)

# KEYS: m, h. ARGV: after. Returns {epoch, last_seq, checkpoint version, entries joined}:
# the entries include every one with seq > after (and maybe a few older ones).
FETCH_SINCE: Final = _script(
    "fetch_since",
    r"""
local head = redis.call('HMGET', KEYS[2], 'e', 'l', 'c')
local last = tonumber(head[2] or '0')
local after = tonumber(ARGV[1])
local rows = {}
if last > after then rows = tail_rows(KEYS[1], after) end
return {head[1] or '', head[2] or '0', head[3] or '0', table.concat(rows, '\n')}
""",
)

# KEYS: agents. ARGV: the session's key base "P:{U:S}:". Returns {agent, entries joined, ...}.
FETCH_SESSION: Final = _script(
    "fetch_session",
    r"""
local out = {}
for _, agent in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  out[#out + 1] = agent
  out[#out + 1] = table.concat(redis.call('LRANGE', ARGV[1] .. 'm:' .. agent, 0, -1), '\n')
end
return out
""",
)

# KEYS: agents. ARGV: base. The agents whose key holds a message (a TTL may have expired a
# key before the session's agents set; a key may hold records only).
LIST_AGENTS: Final = _script(
    "list_agents",
    r"""
local out = {}
for _, agent in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[1] .. 'm:' .. agent) == 1 then
    out[#out + 1] = agent
  end
end
return out
""",
)

# KEYS: agents, s. ARGV: base. Returns {index version, session last µs, {agent, n, f, t, ...}}.
SESSION_INFO: Final = _script(
    "session_info",
    r"""
local out = {}
for _, agent in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local h = redis.call('HMGET', ARGV[1] .. 'h:' .. agent, 'n', 'f', 't')
  if h[1] then
    out[#out + 1] = agent
    out[#out + 1] = h[1]
    out[#out + 1] = h[2]
    out[#out + 1] = h[3]
  end
end
local s = redis.call('HMGET', KEYS[2], 'v', 't')
return {s[1] or '0', s[2] or '0', out}
""",
)

# KEYS: m, i, h, c, r, l, a, s [, x, y]. ARGV: agent, base, session member, ttl_ms.
# Erases one key. Returns {index version (0: nothing existed), session last µs, exists}.
DELETE: Final = _script(
    "delete",
    r"""
local removed = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
removed = removed + redis.call('SREM', KEYS[7], ARGV[1])
if removed == 0 then return {0, 0, 0} end
local v = bump(KEYS[8])
local exists = redis.call('EXISTS', KEYS[7]) == 1
local st = 0
if exists then
  st = session_last(ARGV[2], KEYS[7])
  redis.call('HSET', KEYS[8], 't', fmt(st))
else
  redis.call('DEL', KEYS[8])
end
if KEYS[9] then index(KEYS[9], KEYS[10], ARGV[3], v, st, exists, tonumber(ARGV[4])) end
return {v, st, exists and 1 or 0}
""",
)

# KEYS: a, s [, x, y]. ARGV: base, session member, ttl_ms. Erases the whole session (also
# the counter "P:{U:S}:n" of the layout before checkpoints, records and the index).
# Returns the index version of the (now empty) session.
DELETE_SESSION: Final = _script(
    "delete_session",
    r"""
for _, agent in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local b = ARGV[1]
  redis.call('DEL', b .. 'm:' .. agent, b .. 'i:' .. agent, b .. 'h:' .. agent,
    b .. 'c:' .. agent, b .. 'r:' .. agent, b .. 'l:' .. agent)
end
local v = bump(KEYS[2])
redis.call('DEL', KEYS[1], KEYS[2], ARGV[1] .. 'n')
if KEYS[3] then index(KEYS[3], KEYS[4], ARGV[2], v, 0, false, tonumber(ARGV[3])) end
return v
""",
)

# KEYS: m, i, h, c, r, a, s [, x, y]. ARGV: ttl_ms, agent, new epoch, base, session member,
# then (id, record, at_us) per message. Replaces the key's messages in a new epoch; drops the
# checkpoint; records stay. Returns {index version, session last µs, session exists}.
REPLACE: Final = _script(
    "replace",
    r"""
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
local n, last, first, newest = 0, 0, nil, nil
for k = 6, #ARGV, 3 do
  local seq = redis.call('HINCRBY', KEYS[7], 'q', 1)
  redis.call('SADD', KEYS[2], ARGV[k])
  redis.call('RPUSH', KEYS[1], seq .. ' ' .. ARGV[k + 1])
  last = seq
  n = n + 1
  local at = tonumber(ARGV[k + 2])
  if not first or at < first then first = at end
  if not newest or at > newest then newest = at end
end
if n > 0 then
  redis.call('HSET', KEYS[3], 'e', ARGV[3], 'l', fmt(last), 'n', fmt(n), 'f', fmt(first),
    't', fmt(newest))
  redis.call('SADD', KEYS[6], ARGV[2])
elseif redis.call('EXISTS', KEYS[5]) == 0 then
  redis.call('SREM', KEYS[6], ARGV[2])
end
local v = bump(KEYS[7])
local exists = redis.call('EXISTS', KEYS[6]) == 1
local st = 0
if exists then
  st = session_last(ARGV[4], KEYS[6])
  redis.call('HSET', KEYS[7], 't', fmt(st))
else
  redis.call('DEL', KEYS[7])
end
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  for k = 1, 7 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
if KEYS[8] then index(KEYS[8], KEYS[9], ARGV[5], v, st, exists, ttl) end
return {v, st, exists and 1 or 0}
""",
)

# KEYS: m, h, c. ARGV: expected version, epoch, covers_to, payload, ttl_ms. Compare-and-set.
# Returns 1 when stored.
SAVE_CHECKPOINT: Final = _script(
    "save_checkpoint",
    r"""
local head = redis.call('HMGET', KEYS[2], 'e', 'l', 'c')
if not head[1] or head[1] ~= ARGV[2] then return 0 end
if tonumber(head[3] or '0') ~= tonumber(ARGV[1]) then return 0 end
local covers = tonumber(ARGV[3])
if covers > tonumber(head[2]) then return 0 end
local held = false
for _, entry in ipairs(tail_rows(KEYS[1], covers)) do
  if entry_seq(entry) == covers then held = true break end
end
if not held then return 0 end
redis.call('SET', KEYS[3], ARGV[4])
redis.call('HSET', KEYS[2], 'c', fmt(tonumber(ARGV[1]) + 1))
local ttl = tonumber(ARGV[5])
if ttl > 0 then redis.call('PEXPIRE', KEYS[3], ttl) end
return 1
""",
)

# KEYS: h, c. Returns {epoch or '', checkpoint payload or false}.
LOAD_CHECKPOINT: Final = _script(
    "load_checkpoint",
    r"""
return {redis.call('HGET', KEYS[1], 'e') or '', redis.call('GET', KEYS[2])}
""",
)

# A lease's value is "EXPIRY_MS OWNER"; the key also expires (PX ttl) on the server.
# KEYS: lease. ARGV: owner, ttl_ms, now_ms (-1: the server's clock). Returns 1 when owner
# holds the lease now (taken or extended).
ACQUIRE_LEASE: Final = _script(
    "acquire_lease",
    r"""
local now = tonumber(ARGV[3])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local cur = redis.call('GET', KEYS[1])
if cur then
  local expiry, owner = string.match(cur, '^(%d+) (.*)$')
  if owner ~= ARGV[1] and expiry and tonumber(expiry) > now then return 0 end
end
redis.call('SET', KEYS[1], fmt(now + tonumber(ARGV[2])) .. ' ' .. ARGV[1], 'PX', ARGV[2])
return 1
""",
)

# KEYS: lease. ARGV: owner. Compare-and-delete.
RELEASE_LEASE: Final = _script(
    "release_lease",
    r"""
local cur = redis.call('GET', KEYS[1])
if cur and string.match(cur, '^%d+ (.*)$') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
""",
)

# KEYS: r, a, s [, x, y]. ARGV: id, json, agent, session member, ttl_ms.
# Returns {1, stored entry} when the id is stored already, else {0, seq, index version,
# session last µs}.
SAVE_RECORD: Final = _script(
    "save_record",
    r"""
local got = redis.call('HGET', KEYS[1], ARGV[1])
if got then return {1, got} end
local seq = redis.call('HINCRBY', KEYS[3], 'q', 1)
redis.call('HSET', KEYS[1], ARGV[1], seq .. ' ' .. ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
local v = bump(KEYS[3])
local st = tonumber(redis.call('HGET', KEYS[3], 't') or '0')
local ttl = tonumber(ARGV[5])
if ttl > 0 then
  for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
if KEYS[4] then index(KEYS[4], KEYS[5], ARGV[4], v, st, true, ttl) end
return {0, seq, v, st}
""",
)

# KEYS: x, y. ARGV: session member, version, score µs, exists (0/1), ttl_ms.
# The Cluster's second step of a write (and its registration before one, version 0).
INDEX: Final = _script(
    "index",
    r"""
index(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1',
  tonumber(ARGV[5]))
return 1
""",
)
