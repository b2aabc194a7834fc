-- Kyoto Tycoon play_script fixtures for Kura's tests (serve_scr.rs, script/kt_tests.rs).
-- Written for Kura; each procedure does what Kyoto Tycoon's example/ktscrex.lua (0.9.56)
-- shows a procedure doing, or exercises a method of its Lua binding (myscript.cc,
-- kyototycoon-doc.lua). Inputs arrive without the RPC's "_"; outputs get it back.

kt = __kyototycoon__
db = kt.db

-- ktscrex.lua: log once at start-up, from the first worker.
if kt.thid == 0 then
   kt.log("system", "ktscr.lua loaded")
end

-- ktscrex.lua "echo": the input comes back as the output.
function echo(inmap, outmap)
   for k, v in pairs(inmap) do
      outmap[k] = v
   end
   return kt.RVSUCCESS
end

-- ktscrex.lua "report": the module's fields.
function report(inmap, outmap)
   outmap.version = kt.VERSION
   outmap.thid = kt.thid
   outmap.ndbs = #kt.dbs
   outmap.same = tostring(kt.dbs[1] == kt.db)
   local names = {}
   for name, _ in pairs(kt.dbs) do
      if type(name) == "string" then names[#names + 1] = name end
   end
   outmap.names = table.concat(names, ",")
   return kt.RVSUCCESS
end

-- ktscrex.lua "log".
function log(inmap, outmap)
   if not inmap.message then return kt.RVEINVALID end
   kt.log(inmap.kind or "info", inmap.message)
   return kt.RVSUCCESS
end

-- ktscrex.lua "set", "get", "remove": RVEINVALID without a key, RVELOGIC on no record.
function set(inmap, outmap)
   if not inmap.key or not inmap.value then return kt.RVEINVALID end
   if not db:set(inmap.key, inmap.value, inmap.xt) then
      outmap.code = db:error():code()
      return kt.RVEINTERNAL
   end
   return kt.RVSUCCESS
end

function get(inmap, outmap)
   if not inmap.key then return kt.RVEINVALID end
   local value, xt = db:get(inmap.key)
   if not value then
      if db:error():code() == kt.Error.NOREC then return kt.RVELOGIC end
      return kt.RVEINTERNAL
   end
   outmap.value = value
   outmap.xt = xt
   return kt.RVSUCCESS
end

function remove(inmap, outmap)
   if not inmap.key then return kt.RVEINVALID end
   if not db:remove(inmap.key) then
      if db:error():code() == kt.Error.NOREC then return kt.RVELOGIC end
      return kt.RVEINTERNAL
   end
   return kt.RVSUCCESS
end

-- ktscrex.lua "increment": a decimal counter through accept and a visitor function.
function increment(inmap, outmap)
   local key, num = inmap.key, inmap.num
   if not key or not num then return kt.RVEINVALID end
   local function visit(rkey, rvalue, rxt)
      num = (tonumber(rvalue) or 0) + num
      return num
   end
   if not db:accept(key, visit) then return kt.RVEINTERNAL end
   outmap.num = num
   return kt.RVSUCCESS
end

-- Kyoto Cabinet's own binary counter (db:increment) and compare-and-swap.
function counter(inmap, outmap)
   local n = db:increment(inmap.key, inmap.num)
   if not n then return kt.RVELOGIC end
   outmap.num = n
   return kt.RVSUCCESS
end

function cas(inmap, outmap)
   if db:cas(inmap.key, inmap.oval, inmap.nval) then return kt.RVSUCCESS end
   outmap.error = tostring(db:error())
   return kt.RVELOGIC
end

-- ktscrex.lua "upcase" (a visitor table) and "survive" (a new expiration time).
function upcase(inmap, outmap)
   local v = kt.Visitor:new()
   function v:visit_full(key, value, xt) return string.upper(value) end
   function v:visit_empty(key) return kt.Visitor.NOP end
   if not db:accept(inmap.key, v) then return kt.RVEINTERNAL end
   return kt.RVSUCCESS
end

function survive(inmap, outmap)
   local function visit(key, value, xt)
      if not value then return kt.Visitor.NOP end
      outmap.old_xt = xt
      return value, 3600
   end
   if not db:accept(inmap.key, visit) then return kt.RVEINTERNAL end
   return kt.RVSUCCESS
end

-- The match methods: the keys found, as "1", "2", … in order.
function match(inmap, outmap)
   local keys
   if inmap.prefix then
      keys = db:match_prefix(inmap.prefix)
   elseif inmap.regex then
      keys = db:match_regex(inmap.regex)
   else
      keys = db:match_similar(inmap.origin, tonumber(inmap.range or 1))
   end
   if not keys then return kt.RVEINTERNAL end
   for i = 1, #keys do outmap[tostring(i)] = keys[i] end
   outmap.n = #keys
   return kt.RVSUCCESS
end

-- ktscrex.lua "list": a cursor walk from the first record (keys and values in the output).
function list(inmap, outmap)
   local cur = db:cursor()
   cur:jump()
   local n = 0
   while true do
      local key, value = cur:get(true)
      if not key then break end
      outmap[key] = value
      n = n + 1
   end
   cur:disable()
   outmap.n = n
   return kt.RVSUCCESS
end

-- A backward walk (ordered kinds), and db:pairs().
function backward(inmap, outmap)
   local cur = db:cursor()
   if not cur:jump_back() then
      outmap.error = tostring(cur:error())
      return kt.RVENOIMPL
   end
   local keys = {}
   repeat
      keys[#keys + 1] = cur:get_key()
   until not cur:step_back()
   outmap.keys = table.concat(keys, ",")
   return kt.RVSUCCESS
end

function walk(inmap, outmap)
   local n = 0
   for k, v in db:pairs() do
      outmap[k] = v
      n = n + 1
   end
   outmap.n = n
   return kt.RVSUCCESS
end

-- iterate with a visitor: values with a prefix are removed, the others doubled.
function sweep(inmap, outmap)
   local v = kt.Visitor:new()
   local before, after = false, false
   function v:visit_before() before = true end
   function v:visit_full(key, value, xt)
      if string.sub(key, 1, #inmap.prefix) == inmap.prefix then return kt.Visitor.REMOVE end
      return value .. value
   end
   function v:visit_after() after = true end
   if not db:iterate(v) then return kt.RVEINTERNAL end
   outmap.hooks = tostring(before) .. "," .. tostring(after)
   return kt.RVSUCCESS
end

-- ktscrex.lua "countwords": a word count with mapreduce.
function countwords(inmap, outmap)
   local function map(key, value, emit)
      local words = kt.split(value, " ")
      for i = 1, #words do
         local word = string.lower(kt.regex(words[i], "[ .?!:;]", ""))
         if #word > 0 and not emit(word, "") then return false end
      end
      return true
   end
   local function reduce(key, iter)
      local count = 0
      while iter() do count = count + 1 end
      outmap[key] = count
      return true
   end
   if not db:mapreduce(map, reduce, nil, kt.DB.XNOLOCK) then return kt.RVEINTERNAL end
   return kt.RVSUCCESS
end

-- A transaction that writes two records then aborts (returns false), or raises.
function transfer(inmap, outmap)
   local ok = db:transaction(function()
      db:set(inmap.from, "0")
      db:set(inmap.to, "all")
      db:remove("gone")
      return inmap.commit == "yes"
   end)
   outmap.ok = tostring(ok)
   return kt.RVSUCCESS
end

function transfer_error(inmap, outmap)
   db:transaction(function()
      db:set(inmap.from, "0")
      error("transfer refused")
   end)
   return kt.RVSUCCESS
end

-- Bulk methods.
function bulk(inmap, outmap)
   outmap.set = db:set_bulk({ b1 = "x", b2 = "y", b3 = "z" })
   local got = db:get_bulk({ "b1", "b2", "nope" })
   outmap.got = (got.b1 or "") .. (got.b2 or "") .. tostring(got.nope)
   outmap.removed = db:remove_bulk({ "b1", "b3", "nope" })
   outmap.check = db:check("b2")
   outmap.count = db:count()
   return kt.RVSUCCESS
end

-- Failures a client must see: a Lua error with its line, a runaway loop, a bad argument.
function fail(inmap, outmap)
   error("deliberate failure")
end

function spin(inmap, outmap)
   while true do end
end

function badarg(inmap, outmap)
   db:set({}, "x")
   return kt.RVSUCCESS
end

-- Whatever status the caller asks for (kt.RV… by name).
function status(inmap, outmap)
   outmap.ignored = "yes"
   return kt[inmap.rv]
end

-- A write whose failure is reported rather than raised: db:error()'s code.
function tryset(inmap, outmap)
   outmap.ok = tostring(db:set(inmap.key, inmap.value))
   outmap.code = db:error():code()
   return kt.RVSUCCESS
end

-- Cursor writes (keys a, b, c, d in a tree): set_value with step, accept, remove, seize.
function curops(inmap, outmap)
   local cur = db:cursor()
   cur:jump("a")
   cur:set_value("A", nil, true)          -- a = A, now on b
   cur:accept(function(k, v) return v .. "!" end, true, true)  -- b = b!, now on c
   cur:remove()                           -- c removed, now on d
   local k, v = cur:seize()               -- d seized
   outmap.seized = k .. "=" .. v
   outmap.after = tostring(cur:get_key())
   outmap.code = cur:error():code()
   outmap.db = tostring(cur:db() == kt.db)
   return kt.RVSUCCESS
end

-- A cursor kept in a global between calls: each call reads a record and steps on.
function nextrec(inmap, outmap)
   if not kept or inmap.restart then
      kept = db:cursor()
      kept:jump()
   end
   local k, v = kept:get(true)
   outmap.key = tostring(k)
   return kt.RVSUCCESS
end

-- db:copy (confined to --backup-dir) and db:synchronize with a postprocessor.
function copyto(inmap, outmap)
   outmap.copied = tostring(db:copy(inmap.dest))
   outmap.error = tostring(db:error())
   local seen = ""
   outmap.synced = tostring(db:synchronize(false, function(path, count, size)
      seen = path .. ":" .. count
      return true
   end))
   outmap.seen = seen
   return kt.RVSUCCESS
end
