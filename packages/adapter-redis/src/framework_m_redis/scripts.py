"""Lua scripts: each one step that Redis runs atomically. Every key is in one hash slot."""

# KEYS: stream, dedup key (the stream again when there is no dedup id)
# ARGV: job id, body, window ms, max stream length, has dedup id ("1"/"0")
# Returns {1, job id} when stored, {0, original job id} for a duplicate.
ENQUEUE = """
if ARGV[5] == '1' then
  local original = redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[3], 'GET')
  if original then return {0, original} end
end
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[4]) then
  if ARGV[5] == '1' then redis.call('DEL', KEYS[2]) end
  return redis.error_reply('FRAMEWORK_M_FULL the queue holds its max_len of jobs')
end
redis.call('XADD', KEYS[1], '*', 'b', ARGV[2], 'a', '0')
return {1, ARGV[1]}
"""

# KEYS: stream. ARGV: group, entry id.
ACK = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XDEL', KEYS[1], ARGV[2])
"""

# KEYS: stream, delayed set. ARGV: group, entry id, due ms, attempts so far, body.
RETRY = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4] .. '\\n' .. ARGV[5])
"""

# KEYS: stream. ARGV: group, entry id, attempts that count so far, body.
RELEASE = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return redis.call('XADD', KEYS[1], '*', 'b', ARGV[4], 'a', ARGV[3])
"""

# KEYS: stream, dead stream. ARGV: group, entry id, body, reason, attempts, unix time, max len.
DEAD_LETTER = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], '*',
                  'b', ARGV[3], 'r', ARGV[4], 'n', ARGV[5], 't', ARGV[6])
"""

# KEYS: delayed set, stream. ARGV: now ms, most to move.
# Moves due retries back to the stream; any replica may run it, each member moves once.
PROMOTE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, member in ipairs(due) do
  local cut = string.find(member, '\\n', 1, true)
  local attempts = string.sub(member, 1, cut - 1)
  redis.call('XADD', KEYS[2], '*', 'b', string.sub(member, cut + 1), 'a', attempts)
  redis.call('ZREM', KEYS[1], member)
end
return #due
"""
