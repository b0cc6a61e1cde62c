"""Lua scripts: each one step that Redis runs atomically. Every key is in one hash slot."""

# KEYS: stream, dedup key (the stream again when there is no dedup id), delayed set,
#       the delayed jobs' due times (job ids: what m status tells from retries), the
#       store's version counter, then the store records to create with the job (its
#       status; a tick's slot), as STORE_WRITE creates them
# ARGV: job id, body, window ms, max stream length, has dedup id ("1"/"0"; "2": yes, and
#       a duplicate writes its key's expiry again, a write a WAIT after it then covers),
#       not_after in unix ms ("" for none), due in unix ms ("" for now), the store's
#       channel, then value and ttl ms of each record
# Returns {1, job id} when stored, {0, original job id} for a duplicate, {2, ""} when it
# arrived after its not_after (say, a command Redis ran only once a pause ended).
# A job with a due time waits in the delayed set (as a retry does) until PROMOTE.
ENQUEUE = """
if ARGV[6] ~= '' then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(ARGV[6]) then
    return {2, ''}
  end
end
if ARGV[5] ~= '0' then
  local original = redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[3], 'GET')
  if original then
    if ARGV[5] == '2' then
      redis.call('PEXPIRE', KEYS[2], math.max(1, redis.call('PTTL', KEYS[2])))
    end
    return {0, original}
  end
end
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[4]) then
  if ARGV[5] ~= '0' then redis.call('DEL', KEYS[2]) end
  return redis.error_reply('FRAMEWORK_M_FULL the queue holds its max_len of jobs')
end
if ARGV[7] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[7], '0\\n' .. ARGV[2])
  redis.call('ZADD', KEYS[4], ARGV[7], ARGV[1])
else
  redis.call('XADD', KEYS[1], '*', 'b', ARGV[2], 'a', '0')
end
for i = 6, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    redis.call('HSET', KEYS[i], 'v', redis.call('INCR', KEYS[5]), 'd', ARGV[2 * i - 3])
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i - 2])
    redis.call('PUBLISH', ARGV[8] .. KEYS[i], '')
  end
end
return {1, ARGV[1]}
"""

# Every script that settles or extends a delivery starts with this guard.
# KEYS[1]: stream. ARGV: group, entry id, consumer, times delivered when received.
# Returns 0 when the entry is no longer pending (settled already: nothing to do) and -1
# when its reservation passed to another delivery (reclaimed since): leave it alone.
_HELD = """
local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #held == 0 then return 0 end
if held[1][2] ~= ARGV[3] or tostring(held[1][4]) ~= ARGV[4] then return -1 end
"""

# Acks many deliveries at once, each with the guard above.
# KEYS[1]: stream. ARGV: group, consumer, then entry id and times delivered, per entry.
# Returns one code per entry, as the guard's: 1 acked, 0 settled already, -1 reclaimed.
# At most ACK_MOST entries a call: Lua's unpack() takes a few thousand values.
ACK_MOST = 500
# Script calls in one pipeline at most (the claims of a pass).
PIPELINED_MOST = 500
ACK = """
local codes, acked = {}, {}
for i = 3, #ARGV, 2 do
  local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #held == 0 then
    codes[#codes + 1] = 0
  elseif held[1][2] ~= ARGV[2] or tostring(held[1][4]) ~= ARGV[i + 1] then
    codes[#codes + 1] = -1
  else
    codes[#codes + 1] = 1
    acked[#acked + 1] = ARGV[i]
  end
end
if #acked > 0 then
  redis.call('XACK', KEYS[1], ARGV[1], unpack(acked))
  redis.call('XDEL', KEYS[1], unpack(acked))
end
return codes
"""

# KEYS: stream, delayed set. ARGV[5..]: due ms, attempts so far, body.
RETRY = (
    _HELD
    + """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[6] .. '\\n' .. ARGV[7])
return 1
"""
)

# ARGV[5..]: attempts that count so far, body.
RELEASE = (
    _HELD
    + """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('XADD', KEYS[1], '*', 'b', ARGV[6], 'a', ARGV[5])
return 1
"""
)

# KEYS: stream, dead stream. ARGV[5..]: body, reason, attempts, unix time, max len.
DEAD_LETTER = (
    _HELD
    + """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[9], '*',
           'b', ARGV[5], 'r', ARGV[6], 'n', ARGV[7], 't', ARGV[8])
return 1
"""
)

# Restarts the entry's idle time (JUSTID: the delivery count stays).
EXTEND = (
    _HELD
    + """
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
return 1
"""
)

# KEYS: delayed set, stream, the delayed jobs' due times. ARGV: now ms, most to move.
# Moves due retries and delayed jobs back to the stream; any replica may run it, each
# member moves once. Due times past are dropped: STATS counts the ones ahead only.
PROMOTE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, member in ipairs(due) do
  local cut = string.find(member, '\\n', 1, true)
  local attempts = string.sub(member, 1, cut - 1)
  redis.call('XADD', KEYS[2], '*', 'b', string.sub(member, cut + 1), 'a', attempts)
  redis.call('ZREM', KEYS[1], member)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[1])
return #due
"""

# Reads only (see stats.py). KEYS: stream, delayed set, dead stream, delayed jobs' due
# times. ARGV: group, now ms, consumer window ms, the version from which XINFO
# CONSUMERS' idle counts every read attempt (below it consumers is false: nil).
# Returns {ready, reserved, scheduled, dead letters, consumers, delayed}.
STATS = """
local due = redis.call('ZCOUNT', KEYS[2], '-inf', ARGV[2])
local scheduled = redis.call('ZCARD', KEYS[2]) - due
local delayed = math.min(scheduled, redis.call('ZCOUNT', KEYS[4], '(' .. ARGV[2], '+inf'))
local entries = redis.call('XLEN', KEYS[1])
local dead = redis.call('XLEN', KEYS[3])
local summary = redis.pcall('XPENDING', KEYS[1], ARGV[1])
if summary.err then
  if not string.find(summary.err, 'NOGROUP', 1, true) then return redis.error_reply(summary.err) end
  return {entries + due, 0, scheduled, dead, 0, delayed}
end
local reserved = summary[1]
local consumers = false
if (redis.REDIS_VERSION_NUM or 0) >= tonumber(ARGV[4]) then
  consumers = 0
  for _, info in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
    for i = 1, #info - 1, 2 do
      if info[i] == 'idle' and info[i + 1] <= tonumber(ARGV[3]) then consumers = consumers + 1 end
    end
  end
end
return {math.max(0, entries - reserved) + due, reserved, scheduled, dead, consumers, delayed}
"""

# KEYS: the stream, the delayed set. ARGV: the group, the most entries of each to read.
# Returns {entries, delayed}: the stream's entries after the group's last delivered one
# (every entry before the group exists), each {id, {field, value, ...}}; and the delayed
# set's first members with their due times (ms), flat. Read-only.
WAITING = """
local after = '-'
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
if type(groups) == 'table' and not groups.err then
  for _, info in ipairs(groups) do
    local name, last = nil, nil
    for i = 1, #info - 1, 2 do
      if info[i] == 'name' then name = info[i + 1] end
      if info[i] == 'last-delivered-id' then last = info[i + 1] end
    end
    if name == ARGV[1] and last then after = '(' .. last end
  end
end
local entries = redis.call('XRANGE', KEYS[1], after, '+', 'COUNT', ARGV[2])
local delayed = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[2]) - 1, 'WITHSCORES')
return {entries, delayed}
"""

# The store: one hash per record, fields v (the version) and d (the value), expiring by
# PEXPIRE; every version comes from one counter (KEYS[1] below), so none is given twice.
# Every change publishes on the channel of its record (the store's prefix, then the
# record's key), for the watches of that key.

# KEYS: the record hashes. Returns {version, value} per key, or false where there is none.
STORE_READ = """
local out = {}
for i = 1, #KEYS do
  local got = redis.call('HMGET', KEYS[i], 'v', 'd')
  if got[1] then out[i] = {tonumber(got[1]), got[2]} else out[i] = false end
end
return out
"""

# KEYS: the version counter, then one record hash per write.
# ARGV: the channel, then per write: "s" (store) or "d" (delete), the condition ("*": any,
# "": no record, else the version), the value, the ttl ms ("" for none).
# Returns per write the new version (a delete: the version removed), or 0 when refused.
STORE_WRITE = """
local out = {}
for i = 2, #KEYS do
  local a = 4 * (i - 2) + 1
  local op, cond = ARGV[a + 1], ARGV[a + 2]
  local current = redis.call('HGET', KEYS[i], 'v')
  if not (cond == '*' or (cond == '' and not current) or (current and current == cond)) then
    out[#out + 1] = 0
  elseif op == 'd' then
    if current then
      redis.call('DEL', KEYS[i])
      redis.call('PUBLISH', ARGV[1] .. KEYS[i], '')
      out[#out + 1] = tonumber(current)
    else
      out[#out + 1] = 0
    end
  else
    local v = redis.call('INCR', KEYS[1])
    redis.call('HSET', KEYS[i], 'v', v, 'd', ARGV[a + 3])
    if ARGV[a + 4] == '' then
      redis.call('PERSIST', KEYS[i])
    else
      redis.call('PEXPIRE', KEYS[i], ARGV[a + 4])
    end
    redis.call('PUBLISH', ARGV[1] .. KEYS[i], '')
    out[#out + 1] = v
  end
end
return out
"""

# KEYS: the version counter, the record hash whose places are claimed (place n is that
# key, '#' and n: in the same hash slot, named here rather than sent).
# ARGV: the channel prefix, the value, the ttl ms, how many places.
# Returns {the place taken (from 0), version}, or false when every place is held.
STORE_CLAIM = """
local taken = false
for n = 0, tonumber(ARGV[4]) - 1 do
  local held = redis.call('HGET', KEYS[2] .. '#' .. n, 'd')
  if held == ARGV[2] then
    taken = n
    break
  end
  if not held and not taken then taken = n end
end
if not taken then return false end
local place = KEYS[2] .. '#' .. taken
local v = redis.call('INCR', KEYS[1])
redis.call('HSET', place, 'v', v, 'd', ARGV[2])
redis.call('PEXPIRE', place, ARGV[3])
redis.call('PUBLISH', ARGV[1] .. place, '')
return {taken, v}
"""

NAMES = (
    "ENQUEUE",
    "ACK",
    "RETRY",
    "RELEASE",
    "DEAD_LETTER",
    "EXTEND",
    "PROMOTE",
    "STATS",
    "WAITING",
    "STORE_READ",
    "STORE_WRITE",
    "STORE_CLAIM",
)

# Which of the commands in ARGV (one per argument, space-separated) the user may not
# run, keys included; raises where the server has no redis.acl_check_cmd (< 7.0).
DENIED = """
local denied = {}
for i = 1, #ARGV do
  local words = {}
  for word in string.gmatch(ARGV[i], '%S+') do table.insert(words, word) end
  if not redis.acl_check_cmd(unpack(words)) then table.insert(denied, ARGV[i]) end
end
return denied
"""
