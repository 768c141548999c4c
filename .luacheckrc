-- luacheck settings for the Valkey Function library, glidemq/lua/*.lua. The files are checked
-- as the one text Valkey loads (tools/luacheck_library.py joins them in the order
-- glidemq/client/functions.py lists), so a local defined in one file and used in another is seen.
std = "lua51"
-- What Valkey's Lua gives a function library. KEYS and ARGV are left out on purpose: a
-- function receives its keys and arguments as parameters, and the globals do not exist there.
read_globals = {"redis", "cjson", "cmsgpack", "bit", "struct"}
max_line_length = 120
