-- The helpers Tokyo Tyrant gives a script beside the database functions (scrext.c: serv_pack,
-- serv_unpack, serv_codec, serv_hash, serv_regex, serv_isect, serv_union, serv_split,
-- serv_sleep, serv_stat, serv_glob, serv_remove, serv_mkdir), each called as `ext` FUNCTION
-- with a key and a value, answering a string. Written for Kura's tests (serve_script_util.rs).

-- _pack: Perl's formats, N and n big-endian, C one byte (scrext.c serv_pack).
function pack(key, value)
  return _pack("NnC", 1, 2, {3})
end

-- _unpack: the client's bytes read as big-endian 32-bit numbers, joined by commas.
function unpack(key, value)
  return table.concat(_unpack(key, value), ",")
end

-- _codec: the key names the codec ("~" in front decodes); nil when it gives nothing.
function codec(key, value)
  return _codec(key, value) or "nil"
end

-- _hash: md5 (hex), md5raw, crc32 (a number).
function hash(key, value)
  return tostring(_hash(key, value))
end

-- _regex: the key is the pattern; the value "STRING" matches, "STRING\tALT" replaces.
function regex(key, value)
  local parts = _split(value, "\t")
  if #parts > 1 then return _regex(parts[1], key, parts[2]) end
  return tostring(_regex(value, key))
end

-- _isect / _union of the comma-separated lists in the key and the value.
function sets(key, value)
  local a, b = _split(key, ","), _split(value, ",")
  return table.concat(_isect(a, b), ",") .. "|" .. table.concat(_union(a, b), ",")
end

-- The file built-ins: the key names one (mkdir, remove, stat, glob), the value its path; a
-- refusal comes back as "error: " and its message.
function fs(key, value)
  local ok, r = pcall(function()
    if key == "mkdir" then return tostring(_mkdir(value)) end
    if key == "remove" then return tostring(_remove(value)) end
    if key == "glob" then return table.concat(_glob(value), ",") end
    local s = _stat(value)
    if not s then return "nil" end
    if s._directory then return "dir" end
    return "file " .. s.size
  end)
  if ok then return r end
  return "error: " .. tostring(r)
end

-- _sleep: the value in seconds.
function sleep(key, value)
  _sleep(tonumber(value))
  return "slept"
end
