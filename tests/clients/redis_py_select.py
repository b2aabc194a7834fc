"""A pytest plugin for redis-py's own test suite run against a server of ours
(scripts/redis-client-tests.sh loads it with `-p redis_py_select`).

- `--kura-list FILE` (tests/clients/redis-py.txt): each line names a test of the suite
  (`FILE::NAME`, every parametrization of it), a word and a reason. `skip` deselects it;
  `table` puts it in the group run against a table (`.kt`), where Redis hashes live. Every test
  not listed is in the `strings` group.
- `--kura-group strings|table|all`: run that group only (the deselected tests never run).
- `--kura-record FILE`: write, per test, the commands it sent (CLIENT, CONFIG, COMMAND, … with
  their subcommand) and its outcome, as JSON lines. `python redis_py_select.py RECORD` turns such a
  recording made against redis-server into the list file: a test that sends a command Kura does
  not serve is skipped with the reason, one that sends a hash command goes to
  `table`, one that fails against redis-server too is skipped as such.
"""

import fnmatch
import json
import os
import sys

# The commands Kura serves (docs/PROTOCOL-REDIS.md): issue 36's list and the few it adds.
# Subcommands: `CMD SUB`.
STRINGS = set(
    """PING ECHO HELLO AUTH SELECT QUIT GET SET SETNX SETEX PSETEX GETSET GETDEL GETEX MGET MSET
    MSETNX DEL UNLINK EXISTS APPEND STRLEN INCR INCRBY DECR DECRBY INCRBYFLOAT EXPIRE PEXPIRE
    EXPIREAT PEXPIREAT EXPIRETIME PEXPIRETIME TTL PTTL PERSIST TYPE KEYS SCAN DBSIZE FLUSHDB
    FLUSHALL INFO TIME MULTI EXEC DISCARD WATCH UNWATCH""".split()
) | {
    "CLIENT SETNAME",
    "CLIENT GETNAME",
    "CLIENT ID",
    "CLIENT LIST",
    "CLIENT INFO",
    "CLIENT SETINFO",
    "CLIENT NO-EVICT",
    "CLIENT NO-TOUCH",
    "CLIENT HELP",
    "COMMAND",
    "COMMAND LIST",
    "COMMAND COUNT",
    "COMMAND DOCS",
    "COMMAND INFO",
    "CONFIG GET",
    "CONFIG RESETSTAT",
}
# Sent by redis-py at connection set-up; it goes on when the server refuses it ("auto").
TOLERATED = {"CLIENT MAINT_NOTIFICATIONS"}
HASHES = set("HSET HMSET HGET HMGET HDEL HGETALL HEXISTS HLEN HKEYS HVALS HINCRBY".split())
WITH_SUBCOMMAND = {"CLIENT", "CONFIG", "COMMAND", "OBJECT", "MEMORY", "ACL", "CLUSTER", "SCRIPT",
                   "FUNCTION", "MODULE", "SLOWLOG", "LATENCY", "DEBUG", "XINFO", "XGROUP", "HOTKEYS",
                   "PUBSUB", "XCFGSET"}

# Redis's other data types: Kura refuses their commands with Redis's unknown-command error.
FAMILIES = [
    ("lists", "LPUSH RPUSH LPOP RPOP LRANGE LLEN LINDEX LINSERT LREM LSET LTRIM LPUSHX RPUSHX LPOS "
              "LMOVE BLMOVE BLPOP BRPOP BRPOPLPUSH RPOPLPUSH LMPOP BLMPOP LMOVEM BLMOVEM"),
    ("sets", "SADD SCARD SDIFF SDIFFSTORE SINTER SINTERCARD SINTERSTORE SISMEMBER SMEMBERS "
             "SMISMEMBER SMOVE SPOP SRANDMEMBER SREM SUNION SUNIONSTORE SSCAN SDIFFCARD SUNIONCARD"),
    ("sorted sets", "Z* BZ*"),
    ("streams", "X*"),
    ("geo", "GEO*"),
    ("HyperLogLog", "PF*"),
    ("bitmaps", "SETBIT GETBIT BITCOUNT BITOP BITPOS BITFIELD BITFIELD_RO"),
    ("arrays", "AR*"),
]


def family(cmd):
    word = cmd.split()[0]
    for name, pats in FAMILIES:
        if any(fnmatch.fnmatchcase(word, p) for p in pats.split()):
            return name
    return None


def reason_for(cmds):
    """Why a test that sends `cmds` cannot run against Kura, or None."""
    outside = sorted(c for c in cmds if c not in STRINGS | HASHES | TOLERATED)
    if not outside:
        return None
    for c in outside:
        f = family(c)
        if f:
            return f"sends {c}: {f}, a Redis data type Kura refuses (unknown command)"
    c = outside[0]
    word = c.split()[0]
    if word in ("REPLICAOF", "SLAVEOF", "SYNC", "PSYNC", "ROLE", "FAILOVER", "WAIT"):
        return f"sends {c}: Redis replication; Kura's replication is its own (--master)"
    if word in ("EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "SCRIPT", "FUNCTION", "FCALL"):
        return f"sends {c}: Lua scripting is not served"
    if word in ("SUBSCRIBE", "PSUBSCRIBE", "PUBLISH", "PUBSUB", "SSUBSCRIBE", "SPUBLISH"):
        return f"sends {c}: pub/sub is not served"
    if word in ("ACL", "CLUSTER", "MODULE", "READONLY", "READWRITE"):
        return f"sends {c}: {word.lower()} commands are not served"
    if word[0] == "H" and word not in ("HELLO", "HOTKEYS"):
        return f"sends {c}: a hash command Kura does not serve"
    return f"sends {c}: not served (docs/PROTOCOL-REDIS.md)"


def _name(item):
    return f"{os.path.basename(item.fspath)}::{getattr(item, 'originalname', None) or item.name}"


def read_list(path):
    entries = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            test, word, *reason = line.split(None, 2)
            assert word in ("skip", "table"), f"{path}: unknown word {word!r} in: {line}"
            entries[test] = (word, reason[0] if reason else "")
    return entries


def pytest_addoption(parser):
    parser.addoption("--kura-list", default=None, help="tests/clients/redis-py.txt")
    parser.addoption("--kura-group", default="all", choices=["strings", "table", "all"])
    parser.addoption("--kura-record", default=None, help="write commands per test here")


def pytest_collection_modifyitems(config, items):
    path = config.getoption("--kura-list")
    if not path:
        return
    entries = read_list(path)
    group = config.getoption("--kura-group")
    keep, drop, seen = [], [], set()
    for item in items:
        name = _name(item)
        seen.add(name)
        word = entries.get(name, ("strings", ""))[0]
        if word == "skip" or (group != "all" and word != group):
            drop.append(item)
        else:
            keep.append(item)
    stale = sorted(set(entries) - seen)
    if stale:
        raise _usage_error(f"{path} names tests the suite does not have: {stale[:10]}")
    config.hook.pytest_deselected(items=drop)
    items[:] = keep


def _usage_error(msg):
    import pytest

    return pytest.UsageError(msg)


class Recorder:
    def __init__(self, path):
        self.out = open(path, "w")  # open for the session; closed in pytest_unconfigure
        self.current = None
        self.cmds = set()
        self.outcome = "passed"

    def note(self, args):
        if self.current is None or not args:
            return
        first = args[0]
        words = (first.encode() if isinstance(first, str) else bytes(first)).split()
        rest = list(words[1:]) + [a if isinstance(a, (bytes, str)) else b"" for a in args[1:]]
        cmd = words[0].decode(errors="replace").upper()
        if cmd in WITH_SUBCOMMAND and rest:
            sub = rest[0].decode(errors="replace") if isinstance(rest[0], bytes) else rest[0]
            cmd = f"{cmd} {sub.upper()}"
        self.cmds.add(cmd)


_recorder = None


def pytest_configure(config):
    global _recorder
    path = config.getoption("--kura-record", default=None)
    if not path:
        return
    _recorder = Recorder(path)
    import redis.connection

    original = redis.connection.PythonRespSerializer.pack

    def pack(self, *args):
        _recorder.note(args)
        return original(self, *args)

    redis.connection.PythonRespSerializer.pack = pack


def pytest_unconfigure(config):
    if _recorder:
        _recorder.out.close()


def pytest_runtest_logstart(nodeid, location):
    if _recorder:
        _recorder.current = nodeid
        _recorder.cmds = set()
        _recorder.outcome = "passed"


def pytest_runtest_logreport(report):
    if _recorder and (report.failed or (report.when == "call" and report.skipped)):
        if _recorder.outcome == "passed":
            _recorder.outcome = "skipped" if report.skipped else "failed"


def pytest_runtest_logfinish(nodeid, location):
    if _recorder:
        rec = {"test": nodeid, "outcome": _recorder.outcome, "cmds": sorted(_recorder.cmds)}
        _recorder.out.write(json.dumps(rec) + "\n")
        _recorder.out.flush()
        _recorder.current = None


HEADER = """\
# redis-py's own tests (scripts/redis-client-tests.sh, which pins the version): which run where.
# Each line: a test (FILE::NAME, all its parameters), a word, a reason.
#   skip   deselected, for the reason given
#   table  run against `kura serve x.kt`: a Redis hash is a table record, its fields the columns
# A test not listed runs against `kura serve '*'` (strings, expiry, keys, server commands,
# MULTI/EXEC). Made from a recording against redis-server (the commands each test sends):
#   scripts/redis-client-tests.sh --relist
"""

# Decisions the recording cannot make: a command of the list used in a way Kura answers
# differently, each checked against kura serve.
EXPIRY_SECONDS = (
    "Kura keeps an expiry in whole seconds, rounded up: PTTL reads up to 999 ms above the "
    "PX / PEXPIRE given, and the test wants at most that"
)
MANUAL = {
    "test_commands.py::test_select": "sends SELECT 5: one database a server (SELECT 0 only)",
    "test_commands.py::test_client_list_client_id": (
        "CLIENT LIST ID of other connections: Kura's CLIENT LIST shows the calling connection only"
    ),
    "test_commands.py::test_config_get_multi_params": (
        "CONFIG GET of hash-max-listpack-entries: outside the subset CONFIG GET answers"
    ),
    "test_commands.py::test_command": (
        "wants at least 100 commands in COMMAND: Kura lists the few dozen it serves"
    ),
    "test_commands.py::test_command_count": (
        "wants COMMAND COUNT >= 100: Kura counts the few dozen it serves"
    ),
    "test_commands.py::test_command_list": (
        "wants over 300 names from COMMAND LIST: Kura lists the few dozen it serves"
    ),
    "test_commands.py::test_hget_and_hset": (
        "HSET of an empty field name: a hash is a table record, and a column needs a name"
    ),
    "test_pipeline.py::test_exec_error_in_pipeline_truncated": (
        "SETs a string where the hashes are: a table (.kt) holds records of columns only"
    ),
    "test_commands.py::test_pexpire": EXPIRY_SECONDS,
    "test_commands.py::test_pttl": EXPIRY_SECONDS,
    "test_commands.py::test_psetex": EXPIRY_SECONDS,
    "test_commands.py::test_psetex_timedelta": EXPIRY_SECONDS,
    "test_commands.py::test_set_px": EXPIRY_SECONDS,
    "test_commands.py::test_set_px_timedelta": EXPIRY_SECONDS,
}


def make_list(record_path, out=sys.stdout):
    per_test = {}
    with open(record_path) as f:
        for line in f:
            rec = json.loads(line)
            nodeid = rec["test"]
            file_part, *_, name = nodeid.split("::")
            name = name.split("[")[0]
            key = f"{os.path.basename(file_part)}::{name}"
            cmds, outcome = per_test.get(key, (set(), "passed"))
            cmds |= set(rec["cmds"])
            if rec["outcome"] == "failed":
                outcome = "failed"
            per_test[key] = (cmds, outcome)
    out.write(HEADER)
    for key in sorted(per_test):
        cmds, outcome = per_test[key]
        reason = MANUAL.get(key) or reason_for(cmds)
        if reason is None and outcome == "failed":
            reason = "fails against redis-server (Debian's) too"
        if reason:
            out.write(f"{key} skip {reason}\n")
        elif cmds & HASHES:
            out.write(f"{key} table sends {' '.join(sorted(cmds & HASHES))}\n")


if __name__ == "__main__":
    make_list(sys.argv[1])
