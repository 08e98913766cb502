//! The Lua scripts: each runs atomically on the server, and is sent by its SHA1, with the
//! source sent only when the server's script cache does not have it (`Script::invoke_async`).

use redis::Script;

/// Reads a counter, refusing anything but a token-shaped decimal (`0` or `1..=i64::MAX`
/// without leading zeros), since `INCR` on it must not fail after the lease key is set.
/// Returns the value (or `false` when missing) and an error reply, if any. Numbers stay
/// strings throughout: Lua numbers are doubles and would round tokens above 2^53.
const COUNTER: &str = r#"
local MAX = '9223372036854775807'
local function counter(key)
  local v = redis.call('GET', key)
  if v == false then return false, nil end
  if v ~= '0' and (not string.match(v, '^[1-9]%d*$') or #v > 19 or (#v == 19 and v > MAX)) then
    return nil, redis.error_reply('FENCE_NOT_INTEGER ' .. key .. ' does not hold a token')
  end
  return v, nil
end
-- True when the low 32 bits of v are all ones: the counter has used up its epoch. Exact: each
-- step stays below 2^36, far inside a double's 2^53.
local function used_up(v)
  local low = 0
  for i = 1, #v do low = (low * 10 + string.byte(v, i) - 48) % 4294967296 end
  return low == 4294967295
end
-- Whether the client must re-establish the counter before it issues: mode '1' when it is
-- missing (seeding from floors), mode '2' also when its epoch is used up (epoch tokens).
local function must_reestablish(v, mode)
  if v == false then return mode ~= '0' end
  return mode == '2' and v ~= MAX and used_up(v)
end
-- The history this server's data belongs to: its process (run_id, new at every start, whatever
-- it loaded) and its replication history (master_replid, new at every promotion, the same on a
-- primary and the replicas that follow it). A counter bound to another history may be behind
-- the tokens issued: a failover to a lagging replica, a restart from an older snapshot. Nil
-- and an error reply when the server will not say, or is not a primary.
-- The value of INFO's line `name:value`, found by plain search (a pattern scanned over the
-- whole text costs several times the INFO call itself).
local function field(info, name)
  local at = string.find(info, '\n' .. name .. ':', 1, true)
  if not at then return nil end
  local from = at + #name + 2
  local to = string.find(info, '\r', from, true)
  if not to or to == from then return nil end
  return string.sub(info, from, to - 1)
end
local function history()
  local ok, info = pcall(redis.call, 'INFO', 'server', 'replication')
  if not ok then
    return nil, redis.error_reply('FENCE_NO_HISTORY INFO is not answered in scripts here')
  end
  local run, replid = field(info, 'run_id'), field(info, 'master_replid')
  if not run or not replid then
    return nil, redis.error_reply('FENCE_NO_HISTORY INFO names no run_id or master_replid')
  end
  if field(info, 'role') ~= 'master' then
    return nil, redis.error_reply('FENCE_NOT_PRIMARY this server is a replica')
  end
  return run .. ':' .. replid, nil
end
-- Raises the counter at key (now v) to floor, a token-shaped decimal; never lowers it.
-- Compares decimal strings by length, then text. Returns the counter's value.
local function raise(key, v, floor)
  if v == false or #v < #floor or (#v == #floor and v < floor) then
    redis.call('SET', key, floor)
    return floor
  end
  return v
end
-- Checks the counter at token_key (now v) against the history it is bound to (at bound),
-- with mode, floor, the opening a floor was opened for and this client's proposal of an
-- opening as the client sent them. Returns v as it is to be issued from, or false with the
-- reply to return instead.
-- A counter is lost when it is missing (modes 1 and 2), its epoch used up or it is bound to
-- another history (mode 2). A lost counter takes a floor: in mode 1 any floor the client
-- sends; in mode 2 only the floor opened for the loss's opening, which the first client to find
-- the loss names (here, then its proposal) and every later one is handed, until the counter
-- is re-established: so one loss opens one epoch, and a floor opened for an earlier loss (a
-- late client) is never taken. The reply `SEED <opening>` asks for that floor.
local function settle(token_key, bound, opening_key, v, mode, floor, opened_for, proposal)
  local here = ''
  if mode == '2' then
    local problem
    here, problem = history()
    if problem then return false, problem end
  end
  local lost = must_reestablish(v, mode)
    or (here ~= '' and v ~= false and redis.call('GET', bound) ~= here)
  if not lost then return v, nil end
  if mode ~= '2' then
    if floor == '' then return false, redis.status_reply('SEED') end
    return raise(token_key, v, floor), nil
  end
  local opening = redis.call('GET', opening_key)
  if opening == false or string.sub(opening, 1, #here + 1) ~= here .. '|' then
    opening = here .. '|' .. proposal
    redis.call('SET', opening_key, opening)
  end
  if floor == '' or opened_for ~= opening then
    return false, redis.status_reply('SEED ' .. opening)
  end
  v = raise(token_key, v, floor)
  redis.call('SET', bound, here)
  redis.call('DEL', opening_key)
  return v, nil
end
"#;

/// KEYS: lease, counter, the counter's history, its opening. ARGV: owner, TTL in ms, the
/// re-establish mode (`0`, `1`, `2`), a floor to re-establish a lost counter at (empty for
/// none), the opening that floor was opened for (empty unless mode 2), and this client's
/// proposal of an opening. Returns nil (held), `SEED [<opening>]` (the client must
/// re-establish the counter: send again with a floor for that opening), or the new token.
const ACQUIRE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local v, problem = counter(KEYS[2])
if problem then return problem end
v, problem = settle(KEYS[2], KEYS[3], KEYS[4], v, ARGV[3], ARGV[4], ARGV[5], ARGV[6])
if problem then return problem end
if v == MAX then return redis.error_reply('FENCE_EXHAUSTED ' .. KEYS[2]) end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('INCR', KEYS[2])
return redis.call('GET', KEYS[2])
"#;

/// KEYS: counter, the counter's history, its opening. ARGV: the re-establish mode, a floor to
/// re-establish a lost counter at, the opening it was opened for, this client's proposal.
const NEXT: &str = r#"
local v, problem = counter(KEYS[1])
if problem then return problem end
v, problem = settle(KEYS[1], KEYS[2], KEYS[3], v, ARGV[1], ARGV[2], ARGV[3], ARGV[4])
if problem then return problem end
if v == MAX then return redis.error_reply('FENCE_EXHAUSTED ' .. KEYS[1]) end
redis.call('INCR', KEYS[1])
return redis.call('GET', KEYS[1])
"#;

/// KEYS: counter. Returns the counter (nil when missing).
const CURRENT: &str = r#"
local v, problem = counter(KEYS[1])
if problem then return problem end
return v
"#;

/// KEYS: the counter's history. The history it is bound to (nil for none) and the history of
/// this server.
const HISTORY: &str = r#"
local here, problem = history()
if problem then return problem end
return {redis.call('GET', KEYS[1]), here}
"#;

/// KEYS: counter, the counter's history, its opening. ARGV: the floor to raise the counter to,
/// the re-establish mode (`0` or `2`), a floor to re-establish a lost counter at, the opening it
/// was opened for, this client's proposal. Returns the counter, or `SEED <opening>` as
/// ACQUIRE does.
const ADVANCE: &str = r#"
local v, problem = counter(KEYS[1])
if problem then return problem end
v, problem = settle(KEYS[1], KEYS[2], KEYS[3], v, ARGV[2], ARGV[3], ARGV[4], ARGV[5])
if problem then return problem end
return raise(KEYS[1], v, ARGV[1])
"#;

/// KEYS: lease. ARGV: owner, TTL in ms. 1 if extended, 0 if the owner does not hold it.
const EXTEND: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

/// KEYS: lease. ARGV: owner. 1 if released, 0 if the owner does not hold it.
const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

/// KEYS: lease. The holder and the milliseconds left, in one read (nil and a negative number
/// when nobody holds it).
const STATUS: &str = r#"
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
"#;

/// Every script, compiled (hashed) once.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) next: Script,
    pub(crate) current: Script,
    pub(crate) advance: Script,
    pub(crate) history: Script,
    pub(crate) extend: Script,
    pub(crate) release: Script,
    pub(crate) status: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let with_counter = |body: &str| Script::new(&format!("{COUNTER}{body}"));
        Scripts {
            acquire: with_counter(ACQUIRE),
            next: with_counter(NEXT),
            current: with_counter(CURRENT),
            advance: with_counter(ADVANCE),
            history: with_counter(HISTORY),
            extend: Script::new(EXTEND),
            release: Script::new(RELEASE),
            status: Script::new(STATUS),
        }
    }
}

/// The reply that asks the caller to re-establish the counter (seed it, or open an epoch),
/// followed by the opening of the loss the new floor is for (none unless epochs are used).
pub(crate) const SEED: &str = "SEED";
