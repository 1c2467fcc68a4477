"""The Lua scripts of the Redis store's time travel: a key's whole record in one snapshot
(:data:`TIMELINE`) and a rewind (:data:`REWIND`). The conventions are those of
:mod:`storage.stores.redis.scripts`, which re-exports them."""

from __future__ import annotations

from typing import Final

from storage.stores.redis.lua import script

__all__ = ["REWIND", "REWIND_KEYS", "TIMELINE"]

# KEYS: m, z, k, h, c. Returns {epoch, last seq, checkpoint version, entries joined, rewound
# entries joined, rewinds joined, checkpoint payload or false, head unusable (0/1)}: the key's
# whole record in one snapshot.
TIMELINE: Final = script(
    "timeline",
    r"""
local head = redis.call('HMGET', KEYS[4], 'e', 'l', 'c')
local last = tonumber(head[2] or '0')
local broken = 0
if not last or (head[3] and not tonumber(head[3]))
    or ((not head[1] or head[1] == '' or last == 0) and redis.call('EXISTS', KEYS[1]) == 1) then
  broken = 1
end
return {head[1] or '', head[2] or '0', head[3] or '0',
  table.concat(redis.call('LRANGE', KEYS[1], 0, -1), '\n'),
  table.concat(redis.call('LRANGE', KEYS[2], 0, -1), '\n'),
  table.concat(redis.call('LRANGE', KEYS[3], 0, -1), '\n'),
  redis.call('GET', KEYS[5]), broken}
""",
)

#: The key names :data:`REWIND` takes.
REWIND_KEYS: Final = (
    "messages",
    "rewound",
    "rewinds",
    "head",
    "checkpoint",
    "versions",
    "session",
    "agents",
)

# KEYS: m, z, k, h, c, v, s, a. ARGV: index of the message kept last (0-based), its seq, the
# list's length and last seq as read, the head's epoch and checkpoint version as read, the new
# epoch, the rewind (JSON, its seq left out), the checkpoint kept (payload, "" for none) and
# its version, ttl_ms, base. Moves the entries after the kept one from the list to the
# rewound list ("SEQ REWIND_SEQ RECORD"), only if the list and head are as read. Returns {1}
# when they changed (nothing written), else {0, rewind seq}.
REWIND: Final = script(
    "rewind",
    r"""
local head = redis.call('HMGET', KEYS[4], 'e', 'c')
if (head[1] or '') ~= ARGV[5] or tonumber(head[2] or '0') ~= tonumber(ARGV[6]) then
  return {1}
end
local at = tonumber(ARGV[1])
if redis.call('LLEN', KEYS[1]) ~= tonumber(ARGV[3]) then return {1} end
if entry_seq(redis.call('LINDEX', KEYS[1], at)) ~= tonumber(ARGV[2]) then return {1} end
if entry_seq(redis.call('LINDEX', KEYS[1], -1)) ~= tonumber(ARGV[4]) then return {1} end
counter(KEYS[7], ARGV[12], KEYS[8], KEYS[1])
local rseq = redis.call('HINCRBY', KEYS[7], 'q', 1)
for _, moved in ipairs(redis.call('LRANGE', KEYS[1], at + 1, -1)) do
  local cut = string.find(moved, ' ', 1, true)
  redis.call('RPUSH', KEYS[2], string.sub(moved, 1, cut) .. fmt(rseq) .. string.sub(moved, cut))
end
redis.call('LTRIM', KEYS[1], 0, at)
redis.call('RPUSH', KEYS[3], fmt(rseq) .. ' ' .. ARGV[8])
redis.call('HSET', KEYS[4], 'e', ARGV[7])
if ARGV[9] ~= '' then
  redis.call('SET', KEYS[5], ARGV[9])
  redis.call('HSET', KEYS[6], ARGV[10], ARGV[9])
  redis.call('HSET', KEYS[4], 'c', ARGV[10])
end
local ttl = tonumber(ARGV[11])
if ttl > 0 then
  for k = 1, 6 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
return {0, rseq}
""",
)
