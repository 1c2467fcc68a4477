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
# head's epoch and checkpoint version as read, the new epoch, the rewind (a JSON object, its
# seq, through_seq and hidden left out: they are the list's now), the checkpoint kept
# (payload, "" for none) and its version, ttl_ms, base. Moves the entries after the kept one
# from the list to the rewound list ("SEQ REWIND_SEQ RECORD"), those appended since the read
# included, only if the epoch (nothing removed or rewritten), the checkpoint version and the
# kept message's place are as read. Returns {1} when they changed (nothing written), else
# {0, rewind seq, how many moved}.
REWIND: Final = script(
    "rewind",
    r"""
local head = redis.call('HMGET', KEYS[4], 'e', 'c')
if (head[1] or '') ~= ARGV[3] or tonumber(head[2] or '0') ~= tonumber(ARGV[4]) then
  return {1}
end
local at = tonumber(ARGV[1])
if entry_seq(redis.call('LINDEX', KEYS[1], at) or '') ~= tonumber(ARGV[2]) then return {1} end
local moving = redis.call('LRANGE', KEYS[1], at + 1, -1)
local through = entry_seq(moving[#moving])
counter(KEYS[7], ARGV[10], KEYS[8], KEYS[1])
local rseq = redis.call('HINCRBY', KEYS[7], 'q', 1)
for _, moved in ipairs(moving) do
  local cut = string.find(moved, ' ', 1, true)
  redis.call('RPUSH', KEYS[2], string.sub(moved, 1, cut) .. fmt(rseq) .. string.sub(moved, cut))
end
redis.call('LTRIM', KEYS[1], 0, at)
local made = string.sub(ARGV[6], 1, -2) .. ',"through_seq":' .. fmt(through) .. ',"hidden":'
  .. fmt(#moving) .. '}'
redis.call('RPUSH', KEYS[3], fmt(rseq) .. ' ' .. made)
redis.call('HSET', KEYS[4], 'e', ARGV[5])
if ARGV[7] ~= '' then
  redis.call('SET', KEYS[5], ARGV[7])
  redis.call('HSET', KEYS[6], ARGV[8], ARGV[7])
  redis.call('HSET', KEYS[4], 'c', ARGV[8])
end
local ttl = tonumber(ARGV[9])
if ttl > 0 then
  for k = 1, 6 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
return {0, rseq, #moving}
""",
)
