"""glidemq's server library run in this process: Lua 5.1 (as in Valkey), with `redis.call`,
`redis.pcall`, `redis.error_reply`, `redis.sha1hex`, `redis.register_function` and `cjson`
answered here, and replies converted both ways as the server converts them.

So the in-memory server runs the very functions a Valkey server runs: one implementation of
every state change, whichever server holds the data.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

from lupa import lua51  # type: ignore[import-untyped]

from .data import CommandError, Status

__all__ = ["LuaLibrary"]

Execute = Callable[[list[bytes]], Any]

_PRELUDE = r"""
local py_call, py_sha1, py_encode, py_decode, py_register = ...
local NULL = setmetatable({}, {__tostring = function() return 'cjson.null' end})
local function call(...)
  local ok, r = py_call(...)
  if not ok then error({err = r}, 0) end
  return r
end
redis = {
  call = call,
  pcall = function(...)
    local ok, r = py_call(...)
    if not ok then return {err = r} end
    return r
  end,
  error_reply = function(msg) return {err = msg} end,
  status_reply = function(msg) return {ok = msg} end,
  sha1hex = py_sha1,
  log = function() end,
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  register_function = function(a, b)
    if type(a) == 'table' then py_register(a.function_name, a.callback, a.flags)
    else py_register(a, b, nil) end
  end,
}
server = redis
cjson = {
  null = NULL,
  encode = function(v) return py_encode(v) end,
  decode = function(s)
    local ok, v = py_decode(s)
    if not ok then error(v, 0) end
    return v
  end,
}
return NULL, function(fn, keys, args)
  local ok, r = pcall(fn, keys, args)
  if ok then return true, r end
  if type(r) == 'table' and r.err then return false, r.err end
  return false, 'ERR ' .. tostring(r)
end
"""


def _arg(value: Any) -> bytes:
    """A Lua value given to redis.call, as the server turns it into an argument."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bool):
        raise CommandError("ERR Lua redis lib command arguments must be strings or integers")
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        if value == int(value) and abs(value) < 2**63:
            return str(int(value)).encode()
        return repr(value).encode()
    raise CommandError("ERR Lua redis lib command arguments must be strings or integers")


class LuaLibrary:
    """One loaded library: its functions by name, called with keys and arguments."""

    def __init__(self, source: str, execute: Execute) -> None:
        self.execute = execute
        self.functions: dict[bytes, Any] = {}
        self.read_only: set[bytes] = set()
        self.runtime = lua51.LuaRuntime(encoding=None, unpack_returned_tuples=True)
        self.null, self._run = self.runtime.execute(
            _PRELUDE, self._call, self._sha1, self._encode, self._decode, self._register
        )
        body = source.split("\n", 1)[1] if source.startswith("#!") else source
        try:
            self.runtime.execute(body)
        except lua51.LuaError as exc:
            raise CommandError(f"ERR Error compiling function: {exc}") from None

    # -- what the library calls --------------------------------------------------------

    def _register(self, name: bytes, callback: Any, flags: Any) -> None:
        self.functions[name] = callback
        if flags is not None and b"no-writes" in list(flags.values()):
            self.read_only.add(name)

    def _call(self, *args: Any) -> tuple[bool, Any]:
        try:
            reply = self.execute([_arg(a) for a in args])
        except CommandError as exc:
            return False, str(exc).encode()
        return True, self._to_lua(reply)

    @staticmethod
    def _sha1(value: bytes) -> bytes:
        return hashlib.sha1(value).hexdigest().encode()

    # -- conversions -------------------------------------------------------------------

    def _to_lua(self, reply: Any) -> Any:
        if reply is None:
            return False
        if isinstance(reply, Status):
            return self.runtime.table_from({b"ok": reply.encode()})
        if isinstance(reply, list | set | tuple):
            return self.runtime.table_from([self._to_lua(x) for x in reply])
        return reply

    def from_lua(self, value: Any) -> Any:
        """A function's return value as the server replies it."""
        if value is None or value is False:
            return None
        if value is True:
            return 1
        if isinstance(value, int | float):
            return int(value)
        if isinstance(value, bytes):
            return value
        if lua51.lua_type(value) != "table":
            return None
        err = value[b"err"]
        if err is not None:
            raise CommandError(err.decode(errors="replace"))
        ok = value[b"ok"]
        if ok is not None:
            return Status(ok.decode(errors="replace"))
        out = []
        i = 1
        while (item := value[i]) is not None:
            out.append(self.from_lua(item))
            i += 1
        return out

    def _decode(self, text: Any) -> tuple[bool, Any]:
        try:
            data = json.loads(text)
        except (ValueError, TypeError) as exc:
            return False, f"Expected value but found invalid token: {exc}".encode()
        return True, self._json_to_lua(data)

    def _json_to_lua(self, value: Any) -> Any:
        if value is None:
            return self.null
        if isinstance(value, str):
            return value.encode()
        if isinstance(value, list):
            return self.runtime.table_from([self._json_to_lua(v) for v in value])
        if isinstance(value, dict):
            return self.runtime.table_from(
                {k.encode(): self._json_to_lua(v) for k, v in value.items()}
            )
        return value

    def _encode(self, value: Any) -> bytes:
        return json.dumps(self._lua_to_json(value), separators=(",", ":")).encode()

    def _lua_to_json(self, value: Any) -> Any:
        if isinstance(value, bytes):
            return value.decode(errors="replace")
        if isinstance(value, float) and value == int(value) and not math.isinf(value):
            return int(value)
        if value is None or isinstance(value, bool | int | float):
            return value
        if value == self.null:
            return None
        if lua51.lua_type(value) != "table":
            raise CommandError(f"ERR Cannot serialise {lua51.lua_type(value)}")
        items = list(value.items())
        if items and all(isinstance(k, int | float) for k, _ in items):
            keys = sorted(int(k) for k, _ in items)
            if keys == list(range(1, len(keys) + 1)):
                return [self._lua_to_json(value[k]) for k in keys]
        return {
            (k.decode(errors="replace") if isinstance(k, bytes) else str(k)): self._lua_to_json(v)
            for k, v in items
        }

    # -- calling -----------------------------------------------------------------------

    def fcall(self, name: bytes, keys: list[bytes], args: list[bytes], *, read_only: bool) -> Any:
        """Run function `name` as FCALL (FCALL_RO when `read_only`) would."""
        fn = self.functions.get(name)
        if fn is None:
            raise CommandError("ERR Function not found")
        if read_only and name not in self.read_only:
            raise CommandError("ERR Can not execute a script with write flag using *_ro command.")
        ok, value = self._run(
            fn, self.runtime.table_from(list(keys)), self.runtime.table_from(list(args))
        )
        if not ok:
            raise CommandError(value.decode(errors="replace"))
        return self.from_lua(value)

    def names(self) -> list[bytes]:
        return list(self.functions)
