-- Kura's test fixture for Tokyo Tyrant's `ext` (`kura serve --ext`), written for Kura from
-- what Tyrant's ext/senatus.lua, ext/queue.lua and ext/mapreduce.lua do (not copied).
-- Each function is f(key, value) and returns a string (the reply) or nil (the failure).

-- senatus.lua's echo: the key and the value back.
function echo(key, value)
  return key .. "\t" .. value
end

-- senatus.lua's put / get / out: a built-in's result as "ok" or nil.
function put(key, value)
  if not _put(key, value) then return nil end
  return "ok"
end

function get(key)
  return _get(key)
end

-- A counter with a rule (senatus.lua's incr, stored as decimal text): add VALUE to KEY but
-- never past 10; a call that would pass it fails and changes nothing.
function incr(key, value)
  local n = tonumber(value)
  if not n then return nil end
  local sum = (tonumber(_get(key)) or 0) + n
  if sum > 10 then return nil end
  if not _put(key, sum) then return nil end
  return sum
end

-- An atomic compare-and-put: VALUE is "old<TAB>new"; KEY takes new only when it holds old
-- (call it with the record lock).
function cas(key, value)
  local old, new = string.match(value, "^(.-)\t(.*)$")
  if not old then return nil end
  if (_get(key) or "") ~= old then return nil end
  if not _put(key, new) then return nil end
  return "ok"
end

-- Read, take a while, write back: a plain write of KEY in between would be lost without
-- the record lock.
function slowcat(key, value)
  local old = _get(key) or ""
  for i = 1, 5000 do end
  if not _put(key, old .. value) then return nil end
  return "ok"
end

-- queue.lua's mechanism: a sequence number from _adddouble, records KEY<TAB>number.
function enqueue(key, value)
  local id = _adddouble(key, 1)
  if not id then return nil end
  if not _putkeep(string.format("%s\t%012d", key, id), value) then return nil end
  return "ok"
end

function dequeue(key, value)
  local max = tonumber(value) or 1
  local res = ""
  for _, k in ipairs(_fwmkeys(key .. "\t", max)) do
    local v = _get(k)
    if _out(k) and v then res = res .. v .. "\n" end
  end
  return res
end

-- senatus.lua's misc: the function KEY with VALUE's tab-separated fields as its arguments,
-- the results one a line.
function misc(key, value)
  local args = {}
  for field in string.gmatch(value, "[^\t]+") do args[#args + 1] = field end
  local res = _misc(key, args)
  if not res then return nil end
  local out = ""
  for _, r in ipairs(res) do out = out .. r .. "\n" end
  return out
end

-- senatus.lua's stash functions.
function stashput(key, value)
  if not _stashput(key, value) then return nil end
  return "ok"
end

function stashget(key)
  return _stashget(key)
end

-- senatus.lua's user locks.
function lock(key)
  if not _lock(key) then return nil end
  return "ok"
end

function unlock(key)
  if not _unlock(key) then return nil end
  return "ok"
end

-- mapreduce.lua's word count over every record: "word<TAB>count" lines in word order.
function wordcount()
  local lines = {}
  local function mapper(key, value, emit)
    for word in string.gmatch(string.lower(value), "%w+") do emit(word, "") end
    return true
  end
  local function reducer(key, values)
    lines[#lines + 1] = key .. "\t" .. #values
    return true
  end
  if not _mapreduce(mapper, reducer) then return nil end
  return table.concat(lines, "\n")
end

-- A Lua error (its message and this line reach the client and the log).
function boom(key)
  error("boom on " .. key)
end

-- A runaway loop (stopped by --script-timeout).
function spin()
  while true do end
end

-- A write that `--mask put` refuses inside the script.
function maskedput(key, value)
  if not _put(key, value) then return nil end
  return "stored"
end

-- What the server says about itself (senatus.lua's stat, part of it).
function about()
  return _version .. "\t" .. _sid .. "\t" .. _thnum
end

function _begin()
  _log("tt_ext.lua started")
end

function _end()
  _log("tt_ext.lua finished")
end
