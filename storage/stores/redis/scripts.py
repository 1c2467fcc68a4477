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
  index updates sent in any order converge on the newest state;
- a session's ``t`` (and its index score) is its last activity: raised by every save, never
  lowered while the session holds messages (deleting or replacing one of its conversations
  keeps it), forgotten when it holds none;
- heads, the session hash and the index are derived from the entries: a field that is not a
  number reads as missing, a lost sequence counter is rebuilt from the session's entries
  (:func:`counter`), and a write that finds its key's head missing or unreadable rebuilds it
  (a new epoch) and says so, so the store recounts its times (never a failed write).
"""

from __future__ import annotations

from typing import Final

from storage.stores.redis.lua import Script, script
from storage.stores.redis.scripts_travel import REWIND, REWIND_KEYS, TIMELINE

__all__ = [
    "ACQUIRE_LEASE",
    "DELETE",
    "DELETE_KEYS",
    "FETCH",
    "DELETE_SESSION",
    "FETCH_SESSION",
    "FETCH_SINCE",
    "INDEX",
    "LIST_AGENTS",
    "LOAD_CHECKPOINT",
    "RELEASE_LEASE",
    "REPAIR_HEAD",
    "REPLACE",
    "REPLACE_KEYS",
    "REWIND",
    "REWIND_KEYS",
    "SAVE",
    "SAVE_CHECKPOINT",
    "SAVE_KEYS",
    "SAVE_RECORD",
    "SAVE_RECORD_KEYS",
    "SESSION_INFO",
    "Script",
    "TIMELINE",
    "UPGRADE_FORMAT",
]


#: The key names :data:`SAVE` takes first (``KeyNames`` fields), then the index's.
SAVE_KEYS: Final = (
    "messages",
    "ids",
    "head",
    "agents",
    "session",
    "checkpoint",
    "records",
    "rewound",
    "rewinds",
    "versions",
)

# KEYS: m, i, h, a, s, c, r, z, k, v [, x, y]. ARGV: ttl_ms, agent, new epoch, expected version ("":
# none), session member, base, then (id, record, at_us) per message.
# Returns {1} on a version conflict (nothing written), else {0, {1-based indexes stored},
# index version (0: nothing stored), session last activity µs, derived data rebuilt (0/1)}.
SAVE: Final = script(
    "save",
    r"""
local head = redis.call('HMGET', KEYS[3], 'e', 'l', 'n', 'f', 't')
local epoch = head[1]
local last = tonumber(head[2] or '0')
local n = tonumber(head[3] or '0')
local first = head[4] and tonumber(head[4])
local newest = head[5] and tonumber(head[5])
local rebuilt = 0
local held = redis.call('LLEN', KEYS[1])
if held > 0 and (not epoch or epoch == '' or not last or last == 0 or not n
    or (head[4] and not first) or (head[5] and not newest)) then
  -- A head lost or unreadable while the key holds messages: rebuilt from the list, in a
  -- new epoch (the checkpoint is void); the store recounts the times afterwards.
  epoch = ARGV[3]
  last = entry_seq(redis.call('LINDEX', KEYS[1], -1)) or 0
  n = held
  first, newest = nil, nil
  redis.call('DEL', KEYS[3], KEYS[6], KEYS[10])
  rebuilt = 1
elseif held == 0 then
  last, n, first, newest = 0, 0, nil, nil
end
if ARGV[4] ~= '' and ((epoch or '') .. '.' .. fmt(last)) ~= ARGV[4] then
  return {1}
end
if counter(KEYS[5], ARGV[6], KEYS[4], KEYS[1]) then rebuilt = 1 end
local st = tonumber(redis.call('HGET', KEYS[5], 't') or '0')
if not st then st = session_last(ARGV[6], KEYS[4]); rebuilt = 1 end
local stored = {}
for k = 7, #ARGV, 3 do
  if redis.call('SADD', KEYS[2], ARGV[k]) == 1 then
    last = push(KEYS[1], KEYS[5], ARGV[k + 1])
    n = n + 1
    first, newest = widen(first, newest, tonumber(ARGV[k + 2]))
    stored[#stored + 1] = (k - 4) / 3
  end
end
if #stored == 0 and rebuilt == 0 then return {0, stored, 0, 0, 0} end
if not epoch or epoch == '' then epoch = ARGV[3] end
redis.call('HSET', KEYS[3], 'e', epoch, 'l', fmt(last), 'n', fmt(n))
if first then redis.call('HSET', KEYS[3], 'f', fmt(first), 't', fmt(newest)) end
if #stored > 0 then redis.call('SADD', KEYS[4], ARGV[2]) end
if newest and newest > st then st = newest end
redis.call('HSET', KEYS[5], 't', fmt(st))
local v = bump(KEYS[5])
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  for k = 1, 10 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
if KEYS[11] then index(KEYS[11], KEYS[12], ARGV[5], v, st, true, ttl) end
return {0, stored, v, st, rebuilt}
""",
)

# KEYS: m. ARGV: start index (0: all, -N: the newest N). Returns the entries, joined.
FETCH: Final = script(
    "fetch",
    r"""
return table.concat(redis.call('LRANGE', KEYS[1], ARGV[1], -1), '\n')
""",
)

# KEYS: m, h. ARGV: after. Returns {epoch, last_seq, checkpoint version, entries joined,
# head unusable (0/1)}: the entries include every one with seq > after (and maybe a few older
# ones); with a head lost or unreadable while the list holds entries, none (rebuild it).
FETCH_SINCE: Final = script(
    "fetch_since",
    r"""
local head = redis.call('HMGET', KEYS[2], 'e', 'l', 'c')
local last = tonumber(head[2] or '0')
if not last or (head[3] and not tonumber(head[3]))
    or ((not head[1] or head[1] == '' or last == 0) and redis.call('EXISTS', KEYS[1]) == 1) then
  return {'', '0', '0', '', 1}
end
local after = tonumber(ARGV[1])
local rows = {}
if last > after then rows = tail_rows(KEYS[1], after) end
return {head[1] or '', head[2] or '0', head[3] or '0', table.concat(rows, '\n'), 0}
""",
)

# KEYS: m, h, c, s, v. ARGV: entries expected, new epoch, last seq, count, first µs, last µs,
# agents set, base. A head rebuilt from its list (by the store, which read the entries): only
# if the list still holds that many entries; a new epoch, the checkpoint and its versions
# dropped; the session's last activity raised to it. Returns 1 when written.
REPAIR_HEAD: Final = script(
    "repair_head",
    r"""
if redis.call('LLEN', KEYS[1]) ~= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[5])
if tonumber(ARGV[1]) == 0 then return 1 end
redis.call('HSET', KEYS[2], 'e', ARGV[2], 'l', ARGV[3], 'n', ARGV[4], 'f', ARGV[5],
  't', ARGV[6], 'c', '0')
counter(KEYS[4], ARGV[8], ARGV[7], KEYS[1])
local st = tonumber(redis.call('HGET', KEYS[4], 't') or '0') or 0
if tonumber(ARGV[6]) > st then redis.call('HSET', KEYS[4], 't', ARGV[6]) end
return 1
""",
)

# KEYS: agents. ARGV: the session's key base "P:{U:S}:". Returns {agent, entries joined,
# rewound entries joined, rewinds joined, ...}.
FETCH_SESSION: Final = script(
    "fetch_session",
    r"""
local out = {}
for _, agent in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  out[#out + 1] = agent
  for _, kind in ipairs({'m:', 'z:', 'k:'}) do
    out[#out + 1] = table.concat(redis.call('LRANGE', ARGV[1] .. kind .. agent, 0, -1), '\n')
  end
end
return out
""",
)

# KEYS: agents. ARGV: base. The agents whose key holds a message (a TTL may have expired a
# key before the session's agents set; a key may hold records only).
LIST_AGENTS: Final = script(
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

# KEYS: agents, s. ARGV: base. Returns {index version, session last µs, {agent, n, f, t, ...},
# {agents holding messages whose head is lost or unreadable}}.
SESSION_INFO: Final = script(
    "session_info",
    r"""
local out = {}
local broken = {}
for _, agent in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local h = redis.call('HMGET', ARGV[1] .. 'h:' .. agent, 'n', 'f', 't')
  if tonumber(h[1] or '') and tonumber(h[2] or '') and tonumber(h[3] or '') then
    out[#out + 1] = agent
    out[#out + 1] = h[1]
    out[#out + 1] = h[2]
    out[#out + 1] = h[3]
  elseif redis.call('EXISTS', ARGV[1] .. 'm:' .. agent) == 1 then
    broken[#broken + 1] = agent  -- messages under a lost or unreadable head
  end
end
local s = redis.call('HMGET', KEYS[2], 'v', 't')
return {s[1] or '0', s[2] or '0', out, broken}
""",
)

#: The key names :data:`DELETE` takes first.
DELETE_KEYS: Final = (
    "messages",
    "ids",
    "head",
    "checkpoint",
    "records",
    "lease",
    "agents",
    "session",
    "rewound",
    "rewinds",
    "versions",
)

# KEYS: m, i, h, c, r, l, a, s, z, k, v [, x, y]. ARGV: agent, base, session member, ttl_ms.
# Erases one key. Returns {index version (0: nothing existed), session last µs, exists}.
DELETE: Final = script(
    "delete",
    r"""
local removed = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6],
  KEYS[9], KEYS[10], KEYS[11])
removed = removed + redis.call('SREM', KEYS[7], ARGV[1])
if removed == 0 then return {0, 0, 0} end
local v, exists, st = after_removal(KEYS[8], ARGV[2], KEYS[7])
if KEYS[12] then index(KEYS[12], KEYS[13], ARGV[3], v, st, exists, tonumber(ARGV[4])) end
return {v, st, exists and 1 or 0}
""",
)

# KEYS: a, s [, x, y]. ARGV: base, session member, ttl_ms. Erases the whole session (also
# the counter "P:{U:S}:n" of the layout before checkpoints, records and the index).
# Returns the index version of the (now empty) session.
DELETE_SESSION: Final = script(
    "delete_session",
    r"""
for _, agent in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local b = ARGV[1]
  redis.call('DEL', b .. 'm:' .. agent, b .. 'i:' .. agent, b .. 'h:' .. agent,
    b .. 'c:' .. agent, b .. 'r:' .. agent, b .. 'l:' .. agent, b .. 'z:' .. agent,
    b .. 'k:' .. agent, b .. 'v:' .. agent)
end
local v = bump(KEYS[2])
redis.call('DEL', KEYS[1], KEYS[2], ARGV[1] .. 'n')
if KEYS[3] then index(KEYS[3], KEYS[4], ARGV[2], v, 0, false, tonumber(ARGV[3])) end
return v
""",
)

#: The key names :data:`REPLACE` takes first.
REPLACE_KEYS: Final = (
    "messages",
    "ids",
    "head",
    "checkpoint",
    "records",
    "agents",
    "session",
    "rewound",
    "rewinds",
    "versions",
)

# KEYS: m, i, h, c, r, a, s, z, k, v [, x, y]. ARGV: ttl_ms, agent, new epoch, base, session member,
# expected version ("": none), then (id, record, at_us) per message. Replaces the key's
# messages in a new epoch, only if the key's version (as in SAVE) is the expected one; drops
# the checkpoint; records stay. Returns {1} on a version conflict (nothing written), else
# {0, index version, session last µs, session exists}.
REPLACE: Final = script(
    "replace",
    r"""
if ARGV[6] ~= '' then
  local head = redis.call('HMGET', KEYS[3], 'e', 'l')
  local last = tonumber(head[2] or '0') or 0
  if redis.call('LLEN', KEYS[1]) == 0 then last = 0 end
  if ((head[1] or '') .. '.' .. fmt(last)) ~= ARGV[6] then return {1} end
end
counter(KEYS[7], ARGV[4], KEYS[6], KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[8], KEYS[9], KEYS[10])
local n, last, first, newest = 0, 0, nil, nil
for k = 7, #ARGV, 3 do
  redis.call('SADD', KEYS[2], ARGV[k])
  last = push(KEYS[1], KEYS[7], ARGV[k + 1])
  n = n + 1
  first, newest = widen(first, newest, tonumber(ARGV[k + 2]))
end
if n > 0 then
  redis.call('HSET', KEYS[3], 'e', ARGV[3], 'l', fmt(last), 'n', fmt(n), 'f', fmt(first),
    't', fmt(newest))
  redis.call('SADD', KEYS[6], ARGV[2])
elseif redis.call('EXISTS', KEYS[5]) == 0 then
  redis.call('SREM', KEYS[6], ARGV[2])
end
local v, exists, st = after_removal(KEYS[7], ARGV[4], KEYS[6])
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  for k = 1, 7 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
if KEYS[11] then index(KEYS[11], KEYS[12], ARGV[5], v, st, exists, ttl) end
return {0, v, st, exists and 1 or 0}
""",
)

# KEYS: m, h, c, v. ARGV: expected version, epoch, covers_to, payload, ttl_ms.
# Compare-and-set; the checkpoint kept as its version too. Returns 1 when stored.
SAVE_CHECKPOINT: Final = script(
    "save_checkpoint",
    r"""
local head = redis.call('HMGET', KEYS[2], 'e', 'l', 'c')
if not head[1] or head[1] ~= ARGV[2] then return 0 end
if tonumber(head[3] or '0') ~= tonumber(ARGV[1]) then return 0 end
local covers = tonumber(ARGV[3])
local last = tonumber(head[2] or '')
if not last or covers > last then return 0 end
local held = false
for _, entry in ipairs(tail_rows(KEYS[1], covers)) do
  if entry_seq(entry) == covers then held = true break end
end
if not held then return 0 end
redis.call('SET', KEYS[3], ARGV[4])
redis.call('HSET', KEYS[2], 'c', fmt(tonumber(ARGV[1]) + 1))
redis.call('HSET', KEYS[4], fmt(tonumber(ARGV[1]) + 1), ARGV[4])
local ttl = tonumber(ARGV[5])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[3], ttl)
  redis.call('PEXPIRE', KEYS[4], ttl)
end
return 1
""",
)

# KEYS: h, c. Returns {epoch or '', checkpoint payload or false}.
LOAD_CHECKPOINT: Final = script(
    "load_checkpoint",
    r"""
return {redis.call('HGET', KEYS[1], 'e') or '', redis.call('GET', KEYS[2])}
""",
)

# A lease's value is "EXPIRY_MS OWNER"; the key also expires (PX ttl) on the server.
# KEYS: lease. ARGV: owner, ttl_ms, now_ms (-1: the server's clock). Returns 1 when owner
# holds the lease now (taken or extended).
ACQUIRE_LEASE: Final = script(
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
RELEASE_LEASE: Final = script(
    "release_lease",
    r"""
local cur = redis.call('GET', KEYS[1])
if cur and string.match(cur, '^%d+ (.*)$') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
""",
)

#: The key names :data:`SAVE_RECORD` takes first.
SAVE_RECORD_KEYS: Final = ("records", "agents", "session", "messages")

# KEYS: r, a, s, m [, x, y]. ARGV: id, json, agent, session member, ttl_ms, base.
# Returns {1, stored entry} when the id is stored already, else {0, seq, index version,
# session last µs}.
SAVE_RECORD: Final = script(
    "save_record",
    r"""
local got = redis.call('HGET', KEYS[1], ARGV[1])
if got then return {1, got} end
counter(KEYS[3], ARGV[6], KEYS[2], KEYS[4])
local seq = redis.call('HINCRBY', KEYS[3], 'q', 1)
redis.call('HSET', KEYS[1], ARGV[1], seq .. ' ' .. ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
local v = bump(KEYS[3])
local st = tonumber(redis.call('HGET', KEYS[3], 't') or '0') or 0
local ttl = tonumber(ARGV[5])
if ttl > 0 then
  for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
if KEYS[5] then index(KEYS[5], KEYS[6], ARGV[4], v, st, true, ttl) end
return {0, seq, v, st}
""",
)

# KEYS: the prefix's format key. ARGV: the version to have at least. Raises it (never lowers
# it: a newer chatlayers' version stays). Returns the version now set.
UPGRADE_FORMAT: Final = script(
    "upgrade_format",
    r"""
local now = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if now < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
  now = tonumber(ARGV[1])
end
return now
""",
)

# KEYS: x, y. ARGV: session member, version, score µs, exists (0/1), ttl_ms.
# The Cluster's second step of a write (and its registration before one, version 0).
INDEX: Final = script(
    "index",
    r"""
index(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1',
  tonumber(ARGV[5]))
return 1
""",
)
