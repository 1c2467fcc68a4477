"""How the Redis store's Lua scripts are made: :class:`Script` (run with EVALSHA) and the
helpers every script starts with (:data:`PRELUDE`; conventions in :mod:`.scripts`)."""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["PRELUDE", "Script", "script"]


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
PRELUDE: Final = r"""
local function fmt(n) return string.format('%.0f', n) end

-- The session's next index version (see storage.stores.redis.scripts).
local function bump(skey)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local v = (tonumber(redis.call('HGET', skey, 'v') or '0') or 0) + 1
  if now > v then v = now end
  redis.call('HSET', skey, 'v', fmt(v))
  return v
end

-- Newest message time over the session's agents (0 when none holds a message).
local function session_last(base, akey)
  local last = 0
  for _, agent in ipairs(redis.call('SMEMBERS', akey)) do
    local t = tonumber(redis.call('HGET', base .. 'h:' .. agent, 't') or '0')
    if t and t > last then last = t end
  end
  return last
end

-- The session's last activity after some of its messages went: kept, unless it holds none.
local function kept_last(skey, base, akey)
  local now = session_last(base, akey)
  if now == 0 then return 0 end
  local before = tonumber(redis.call('HGET', skey, 't') or '0') or 0
  if before > now then return before end
  return now
end

-- After a key of the session lost messages: the session's next index version, whether it
-- still has agents, and its last activity (kept; the session hash goes when none is left).
local function after_removal(skey, base, akey)
  local v = bump(skey)
  local exists = redis.call('EXISTS', akey) == 1
  local st = 0
  if exists then
    st = kept_last(skey, base, akey)
    redis.call('HSET', skey, 't', fmt(st))
  else
    redis.call('DEL', skey)
  end
  return v, exists, st
end

-- Append a message entry to the list ``lkey``, numbered from the session's counter; its seq.
local function push(lkey, skey, record)
  local seq = redis.call('HINCRBY', skey, 'q', 1)
  redis.call('RPUSH', lkey, seq .. ' ' .. record)
  return seq
end

-- The oldest and newest times of a range (nil: empty) widened to ``at``.
local function widen(first, newest, at)
  if not first or at < first then first = at end
  if not newest or at > newest then newest = at end
  return first, newest
end

local function entry_seq(entry) return tonumber(string.match(entry, '^(%d+) ')) end

-- The session's sequence counter, rebuilt (above every entry and record of the session and
-- of the list ``own``) when it is missing from a session that has agents, or not a number.
-- Returns true when it was rebuilt.
local function counter(skey, base, akey, own)
  local q = redis.call('HGET', skey, 'q')
  if q and tonumber(q) then return false end
  if not q and redis.call('EXISTS', akey) == 0 and redis.call('EXISTS', own) == 0 then
    return false
  end
  local top = 0
  local function see(entry)
    local seq = entry and entry_seq(entry)
    if seq and seq > top then top = seq end
  end
  see(redis.call('LINDEX', own, -1))
  for _, agent in ipairs(redis.call('SMEMBERS', akey)) do
    see(redis.call('LINDEX', base .. 'm:' .. agent, -1))
    for _, rec in ipairs(redis.call('HVALS', base .. 'r:' .. agent)) do see(rec) end
  end
  redis.call('HSET', skey, 'q', fmt(top))
  return true
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
    local cur = tonumber(redis.call('HGET', y, member) or '-1') or -1
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


def script(name: str, body: str) -> Script:
    """A script: :data:`PRELUDE`, then ``body``."""
    return Script(name, PRELUDE + body)
