-- Kura's test fixture for `--extpc`: the expiry sweeps of Tyrant's ext/senatus.lua (its
-- `expire`, written for Kura, not copied), run on a timer.

-- A table database: remove every record whose column `x` (a unix time) has passed.
function expire()
  local args = { "addcond\0x\0NUMLE\0" .. string.format("%d", os.time()), "out" }
  if not _misc("search", args) then _log("expiration failed") end
end

-- Any other kind: the value is the unix time at which the record expires.
function sweep()
  local now = os.time()
  _foreach(function(key, value)
    local at = tonumber(value)
    if at and at <= now then _out(key) end
    return true
  end)
end
