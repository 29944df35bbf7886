"""Drives sluice's PostgreSQL listener with psycopg 3 and asyncpg, and checks what an
application would see.

Usage: pg_checks.py [psycopg|asyncpg]   (no argument: both drivers)

Environment: PGHOST (default 127.0.0.1), SLUICE_PORT (sluice's PostgreSQL listener),
PRIMARY_PORT and REPLICA_PORT (the servers, directly), PGUSER, PGPASSWORD, PGDATABASE, and
PREFIX: every table, schema, channel and advisory lock key is derived from it, so that other
programs can run against the same servers at the same time. CHECKS=substring,substring runs
only the checks whose name contains one of them (the set-up always runs).

Covers, per driver: routing of autocommit reads (replica) and transactions (primary), writes
read back on the primary, commit and rollback, session settings replayed on other server
connections (and RESET), temporary tables, advisory locks, LISTEN/NOTIFY, COPY both ways, the
common types as parameters and results (and NULL), a prepared statement executed again on a
different server connection, cancel, errors inside and outside transactions, large results;
psycopg with and without server-side prepared statements, asyncpg with a pool.

Prints `ok <check>` or `FAIL <check>: <reason>` per check, runs every check, and exits 1 if
any failed. Every wait is bounded; a check that does not finish in CHECK_TIMEOUT seconds fails.
"""

import asyncio
import csv
import hashlib
import io
import json
import os
import re
import sys
import threading
import time
import traceback
import uuid
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

HOST = os.environ.get("PGHOST", "127.0.0.1")
SLUICE_PORT = int(os.environ["SLUICE_PORT"])
PRIMARY_PORT = int(os.environ["PRIMARY_PORT"])
REPLICA_PORT = int(os.environ["REPLICA_PORT"])
USER = os.environ.get("PGUSER", "app")
PASSWORD = os.environ.get("PGPASSWORD", "app")
DATABASE = os.environ.get("PGDATABASE", "postgres")
PREFIX = os.environ.get("PREFIX", "py_").lower()
if not re.fullmatch(r"[a-z_][a-z0-9_]{0,30}", PREFIX):
    sys.exit(f"PREFIX must be a short lower-case SQL identifier prefix, not {PREFIX!r}")
ONLY = [s for s in os.environ.get("CHECKS", "").split(",") if s]
DRIVERS = sys.argv[1:] or ["psycopg", "asyncpg"]

CHECK_TIMEOUT = 60.0  # seconds, per check (a hang guard: generous on a busy machine)
TOTAL_BUDGET = 150.0  # seconds, for the whole program: later checks fail when it is spent
HOLD_ATTEMPTS = 3  # see hold_backend
MAX_HOLDERS = 10
STARTED = time.monotonic()
FAILURES = []


class CheckFailed(Exception):
    pass


def expect(cond, message):
    if not cond:
        raise CheckFailed(message)


def expect_eq(got, want, what):
    if got != want:
        raise CheckFailed(f"{what}: got {got!r}, expected {want!r}")


def name(kind):
    """A table, schema or channel name for this program."""
    return f"{PREFIX}{kind}"


def lock_key(tag):
    """An advisory lock key (bigint) derived from PREFIX."""
    digest = hashlib.sha256(f"{PREFIX}/{tag}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def describe(exc):
    if isinstance(exc, CheckFailed):
        text = str(exc)
    else:
        state = getattr(exc, "sqlstate", None)
        message = getattr(exc, "message", None)  # asyncpg's, without its long hints
        if not isinstance(message, str):
            message = str(exc)
        text = f"{type(exc).__name__}{f' [{state}]' if state else ''}: {message}".strip()
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == __file__]
    if frames:
        text += f" (line {frames[-1].lineno})"
    return " ".join(text.split())


def selected(check):
    return not ONLY or check.endswith(".setup") or any(s in check for s in ONLY)


def report(check, error):
    if error is None:
        print(f"ok {check}", flush=True)
    else:
        FAILURES.append(check)
        print(f"FAIL {check}: {error}", flush=True)


def budget(limit=CHECK_TIMEOUT):
    return min(limit, TOTAL_BUDGET - (time.monotonic() - STARTED))


def run_sync(check, fn):
    """Runs fn in a daemon thread so that a hang fails the check instead of the program."""
    if not selected(check):
        return
    timeout = budget()
    if timeout <= 0:
        report(check, "not run: the program's time budget is spent")
        return
    box = {}

    def target():
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported
            box["error"] = describe(e)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        report(check, f"did not finish within {timeout:.0f} s")
    else:
        report(check, box.get("error"))


async def run_async(check, fn):
    if not selected(check):
        return
    timeout = budget()
    if timeout <= 0:
        report(check, "not run: the program's time budget is spent")
        return
    task = asyncio.ensure_future(fn())
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()  # not awaited: a hung driver call may not end
        report(check, f"did not finish within {timeout:.0f} s")
        return
    exc = task.exception()
    report(check, None if exc is None else describe(exc))


def poll(what, fn, timeout=30.0, interval=0.02):
    """Calls fn until it returns a true value; fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise CheckFailed(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# --- Common values --------------------------------------------------------------------------

# (column type, value): the parameter/result types checked for both drivers. The last one is
# the empty array.
TYPE_CASES = [
    ("int2", -32768),
    ("int4", 2147483647),
    ("int8", -9223372036854775808),
    ("float4", 1.5),
    ("float8", 3.141592653589793),
    ("numeric", Decimal("-12345678901234567890.000123456789")),
    ("bool", True),
    ("text", "h\u00e9llo \u2603 \U0001d11e 'q' \"d\" \\ \t\n end"),
    ("varchar", "varchar \u00fcn\u00ef"),
    ("bytea", b"\x00\xff\xfe\x80\x00abc\x00\xc3"),
    ("date", date(2024, 2, 29)),
    ("timestamp", datetime(2024, 2, 29, 23, 59, 58, 123456)),
    ("timestamptz", datetime(2024, 2, 29, 23, 59, 58, 654321, tzinfo=timezone.utc)),
    ("interval", timedelta(days=3, hours=4, minutes=5, seconds=6, microseconds=7)),
    ("uuid", uuid.UUID("12345678-9abc-def0-1234-56789abcdef0")),
    ("json", {"a": [1, 2, None], "b": "x \u2603"}),
    ("jsonb", {"a": [1, 2.5, None], "b": {"c": "\u00e9"}}),
    ("int4[]", [1, None, -3]),
    ("text[]", ["a", None, "c,d", '"q"', "", "NULL", "{x}"]),
    ("int4[]", []),
]
TYPE_COLUMNS = [f"c{i}" for i in range(len(TYPE_CASES))]


def types_table_ddl(table):
    cols = ", ".join(f"{c} {t}" for c, (t, _) in zip(TYPE_COLUMNS, TYPE_CASES))
    return f"CREATE TABLE {table} (id int PRIMARY KEY, {cols})"


def compare_row(got, want, what):
    bad = []
    for i, ((typ, _), g, w) in enumerate(zip(TYPE_CASES, got, want)):
        if g != w or type(g) is not type(w) and w is not None and not isinstance(w, uuid.UUID):
            bad.append(f"c{i} {typ}: got {g!r}, expected {w!r}")
    expect(len(got) == len(want), f"{what}: {len(got)} columns, expected {len(want)}")
    if bad:
        raise CheckFailed(f"{what}: " + "; ".join(bad))


# --- Direct connections to the servers (psycopg, used by both drivers' checks) ----------------

import psycopg  # noqa: E402
from psycopg import errors as pgerr  # noqa: E402
from psycopg.types.json import Json, Jsonb  # noqa: E402


def pconnect(port=SLUICE_PORT, autocommit=True, **kw):
    return psycopg.connect(
        host=HOST,
        port=port,
        user=USER,
        password=PASSWORD,
        dbname=DATABASE,
        autocommit=autocommit,
        connect_timeout=5,
        **kw,
    )


def primary(sql, params=None):
    """Rows of one statement run directly on the primary."""
    with pconnect(PRIMARY_PORT) as c:
        cur = c.execute(sql, params)
        return cur.fetchall() if cur.description else None


def wait_replica(timeout=30.0):
    """Waits until the replica has replayed everything the primary has written so far."""
    lsn = primary("SELECT pg_current_wal_insert_lsn()::text")[0][0]
    with pconnect(REPLICA_PORT) as c:
        poll(
            f"the replica to replay up to {lsn}",
            lambda: c.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)
            ).fetchone()[0],
            timeout,
        )


def find_running(marker, ended=lambda: None, timeout=20.0):
    """(port, pid) of the server backend running a statement whose text contains marker.
    ended() returns a description of how the client's statement ended, or None while it runs."""
    conns = [(p, pconnect(p)) for p in (PRIMARY_PORT, REPLICA_PORT)]
    try:

        def look():
            outcome = ended()
            if outcome is not None:
                raise CheckFailed(f"the statement to cancel ended before it was seen running: {outcome}")
            for port, c in conns:
                # Sleeping, not merely active: a Parse of the text shows it active too, and a
                # cancel then would find the backend reading its next message and do nothing.
                row = c.execute(
                    "SELECT pid FROM pg_stat_activity WHERE state = 'active'"
                    " AND wait_event = 'PgSleep'"
                    " AND pid <> pg_backend_pid() AND position(%s in query) > 0",
                    (marker,),
                ).fetchone()
                if row:
                    return (port, row[0])
            return None

        return poll(f"a server to run the statement marked {marker}", look, timeout)
    finally:
        for _, c in conns:
            c.close()


def still_running(marker):
    """Whether a server still runs a statement whose text contains marker."""
    for port in (PRIMARY_PORT, REPLICA_PORT):
        with pconnect(port) as c:
            if c.execute(
                "SELECT 1 FROM pg_stat_activity WHERE state = 'active'"
                " AND pid <> pg_backend_pid() AND position(%s in query) > 0",
                (marker,),
            ).fetchall():
                return True
    return False


def cancel_marked(marker):
    """Clean-up after a failed cancel check: cancels the marked statement directly."""
    for port in (PRIMARY_PORT, REPLICA_PORT):
        try:
            with pconnect(port) as c:
                c.execute(
                    "SELECT pg_cancel_backend(pid) FROM pg_stat_activity"
                    " WHERE pid <> pg_backend_pid() AND position(%s in query) > 0",
                    (marker,),
                )
        except Exception:  # noqa: BLE001 - best effort
            pass


def setup_tables(tag):
    """(Re)creates this driver's tables directly on the primary; waits for the replica."""
    t = {
        "items": name(f"{tag}_items"),
        "types": name(f"{tag}_types"),
        "copy": name(f"{tag}_copy"),
        "pool": name(f"{tag}_pool"),
        "seq": name(f"{tag}_seq"),
        "schema": name(f"{tag}_schema"),
        "marker": name(f"{tag}_marker"),
        "temp": name(f"{tag}_temp"),
        "chan": name(f"{tag}_chan"),
    }
    with pconnect(PRIMARY_PORT) as c:
        for key in ("items", "types", "copy", "pool"):
            c.execute(f"DROP TABLE IF EXISTS {t[key]}")
        c.execute(f"DROP SEQUENCE IF EXISTS {t['seq']}")
        c.execute(f"DROP SCHEMA IF EXISTS {t['schema']} CASCADE")
        c.execute(f"CREATE TABLE {t['items']} (id int PRIMARY KEY, v text)")
        c.execute(types_table_ddl(t["types"]))
        c.execute(f"CREATE TABLE {t['copy']} (id int PRIMARY KEY, t text, b bytea, n numeric)")
        c.execute(f"CREATE TABLE {t['pool']} (id int PRIMARY KEY, v text)")
        c.execute(f"CREATE SEQUENCE {t['seq']}")
        c.execute(f"CREATE SCHEMA {t['schema']}")
        c.execute(f"CREATE TABLE {t['schema']}.{t['marker']} (v text)")
        c.execute(f"INSERT INTO {t['schema']}.{t['marker']} VALUES ('in {t['schema']}')")
    wait_replica()
    return t


BIG_QUERY = "SELECT g, repeat('x', 100) FROM generate_series(1, 200000) g"
BIG_ROWS = 200000
BIG_SUM = BIG_ROWS * (BIG_ROWS + 1) // 2


def copy_rows(n):
    return [
        (i, f"row {i}\t\"tab\"\n\\ \u00e9", bytes([i % 256, 0, 255, 10]), Decimal(i) / 8)
        for i in range(n)
    ]


# ==============================================================================================
# psycopg 3
# ==============================================================================================


class Psycopg:
    def __init__(self):
        self.t = None

    def setup(self):
        self.t = setup_tables("psy")

    # -- helpers --

    def hold_backend(self, run_once):
        """Makes the client's next autocommit read run on another server connection.

        run_once() runs the client's statement and returns the server backend pid it ran on;
        then READ ONLY transactions are opened through sluice (each holds its replica backend
        until it ends; the pool hands out idle connections first) until one holds that
        backend. Returns (pid, holders); release the holders afterwards. If another program
        holds the backend meanwhile, it starts again with a new run (HOLD_ATTEMPTS times)."""
        seen = []
        for _ in range(HOLD_ATTEMPTS):
            pid = run_once()
            seen.append(pid)
            holders = []
            try:
                for _ in range(MAX_HOLDERS):
                    h = pconnect()
                    holders.append(h)
                    h.execute("BEGIN READ ONLY")
                    got, standby = h.execute("SELECT pg_backend_pid(), pg_is_in_recovery()").fetchone()
                    expect(standby, "a BEGIN READ ONLY transaction did not run on a replica")
                    if got == pid:
                        return pid, holders
            except BaseException:
                self.release(holders)
                raise
            self.release(holders)
        raise CheckFailed(f"none of {MAX_HOLDERS} READ ONLY transactions got the client's backend (tried {seen})")

    @staticmethod
    def release(holders):
        for h in holders:
            try:
                h.execute("ROLLBACK")
            except Exception:  # noqa: BLE001 - closed anyway
                pass
            finally:
                h.close()

    def recovery(self, c, **kw):
        return c.execute("SELECT pg_is_in_recovery()", **kw).fetchone()[0]

    # -- 1 --

    def routing(self):
        with pconnect() as c:
            for i in range(3):
                expect(self.recovery(c) is True, f"autocommit SELECT #{i} did not run on a replica")
            got = c.execute("SELECT pg_is_in_recovery(), %s::int", (5,)).fetchone()
            expect_eq(got, (True, 5), "autocommit SELECT with a parameter")
            got = c.execute("SELECT pg_is_in_recovery(), %s::int", (6,), prepare=True).fetchone()
            expect_eq(got, (True, 6), "autocommit prepared SELECT")
            with c.transaction():
                expect(self.recovery(c) is False, "SELECT in conn.transaction() ran on a replica")
            c.execute("BEGIN")
            expect(self.recovery(c) is False, "SELECT after BEGIN ran on a replica")
            c.execute("COMMIT")
            c.execute("BEGIN READ ONLY")
            expect(self.recovery(c) is True, "SELECT after BEGIN READ ONLY ran on the primary")
            c.execute("COMMIT")
            c.execute("BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY")
            expect(self.recovery(c) is False, "a SERIALIZABLE transaction ran on a replica")
            c.execute("COMMIT")
            expect(self.recovery(c) is True, "autocommit SELECT after transactions")
        with pconnect(autocommit=False) as c:
            expect(self.recovery(c) is False, "SELECT on a non-autocommit connection (implicit BEGIN)")
            c.rollback()

    # -- 2 --

    def writes_on_primary(self):
        items, seq = self.t["items"], self.t["seq"]
        with pconnect() as c:
            c.execute(f"INSERT INTO {items} VALUES (%s, %s)", (1, "one"))
            expect_eq(primary(f"SELECT v FROM {items} WHERE id = 1"), [("one",)], "row on primary")
            got = c.execute(f"UPDATE {items} SET v = %s WHERE id = 1 RETURNING v", ("uno",)).fetchone()
            expect_eq(got, ("uno",), "UPDATE ... RETURNING")
            expect_eq(primary(f"SELECT v FROM {items} WHERE id = 1"), [("uno",)], "updated row on primary")
            got = c.execute(
                f"WITH ins AS (INSERT INTO {items} VALUES (2, 'cte') RETURNING id) SELECT id FROM ins"
            ).fetchone()
            expect_eq(got, (2,), "data-modifying WITH")
            got = c.execute(f"SELECT v FROM {items} WHERE id = 1 FOR UPDATE").fetchone()
            expect_eq(got, ("uno",), "autocommit SELECT ... FOR UPDATE")
            got = c.execute(f"SELECT nextval('{seq}')").fetchone()[0]
            expect_eq(got, 1, "nextval")
            c.cursor().executemany(
                f"INSERT INTO {items} VALUES (%s, %s)", [(100 + i, f"many {i}") for i in range(20)]
            )
            expect_eq(
                primary(f"SELECT count(*), min(v), max(v) FROM {items} WHERE id BETWEEN 100 AND 119"),
                [(20, "many 0", "many 9")],
                "executemany rows on primary",
            )
            with c.pipeline():
                c.execute(f"INSERT INTO {items} VALUES (%s, %s)", (200, "pipe a"))
                c.execute(f"INSERT INTO {items} VALUES (%s, %s)", (201, "pipe b"))
                c.execute(f"DELETE FROM {items} WHERE id = %s", (2,))
            expect_eq(
                primary(f"SELECT id, v FROM {items} WHERE id IN (2, 200, 201) ORDER BY id"),
                [(200, "pipe a"), (201, "pipe b")],
                "pipeline writes on primary",
            )
            # A read whose rows are fetched inside the pipeline (psycopg sends a Flush, not a
            # Sync), then a write before the pipeline's Sync: the read on a replica, the
            # write on the primary, as directly it runs there.
            with c.pipeline() as p:
                got = c.execute("SELECT pg_is_in_recovery(), %s::int", (7,)).fetchone()
                expect_eq(got, (True, 7), "pipeline read fetched before its Sync, on a replica")
                c.execute(f"INSERT INTO {items} VALUES (%s, %s)", (202, "pipe c"))
                got = c.execute("SELECT pg_is_in_recovery(), %s::int", (8,)).fetchone()
                expect_eq(got, (False, 8), "pipeline read after a write, in its transaction")
                c.execute(f"INSERT INTO {items} VALUES (%s, %s)", (203, "pipe d"))
                p.sync()
            expect_eq(
                primary(f"SELECT id, v FROM {items} WHERE id IN (202, 203) ORDER BY id"),
                [(202, "pipe c"), (203, "pipe d")],
                "pipeline write after a fetched read, on primary",
            )
            expect_eq(primary(f"SELECT last_value FROM {seq}"), [(1,)], "sequence on primary")

    # -- 3 --

    def transactions(self):
        items = self.t["items"]
        with pconnect() as c:
            c.execute("BEGIN")
            c.execute(f"INSERT INTO {items} VALUES (%s, %s)", (10, "rolled back"))
            got = c.execute(f"SELECT v FROM {items} WHERE id = %s", (10,)).fetchall()
            expect_eq(got, [("rolled back",)], "own uncommitted row")
            expect_eq(primary(f"SELECT count(*) FROM {items} WHERE id = 10"), [(0,)],
                      "uncommitted row seen by another session")
            c.execute("ROLLBACK")
            expect_eq(c.info.transaction_status, psycopg.pq.TransactionStatus.IDLE, "status after ROLLBACK")
            expect_eq(primary(f"SELECT count(*) FROM {items} WHERE id = 10"), [(0,)], "row after ROLLBACK")

            c.execute("BEGIN")
            c.execute(f"INSERT INTO {items} VALUES (%s, %s)", (11, "committed"))
            got = c.execute(f"SELECT v FROM {items} WHERE id = 11").fetchall()
            expect_eq(got, [("committed",)], "own uncommitted row (simple query)")
            c.execute("COMMIT")
            expect_eq(primary(f"SELECT v FROM {items} WHERE id = 11"), [("committed",)], "row after COMMIT")

            with c.transaction():
                c.execute(f"INSERT INTO {items} VALUES (%s, %s)", (12, "ctx"), prepare=True)
                got = c.execute(f"SELECT v FROM {items} WHERE id = %s", (12,), prepare=True).fetchall()
                expect_eq(got, [("ctx",)], "own row in conn.transaction()")
            expect_eq(primary(f"SELECT v FROM {items} WHERE id = 12"), [("ctx",)], "row after transaction()")

            try:
                with c.transaction():
                    c.execute(f"INSERT INTO {items} VALUES (%s, %s)", (13, "ctx rollback"))
                    raise KeyError("roll back")
            except KeyError:
                pass
            expect_eq(primary(f"SELECT count(*) FROM {items} WHERE id = 13"), [(0,)],
                      "row after transaction() rolled back")
        with pconnect(autocommit=False) as c:
            c.execute(f"INSERT INTO {items} VALUES (%s, %s)", (14, "implicit"))
            expect_eq(c.execute(f"SELECT v FROM {items} WHERE id = 14").fetchall(), [("implicit",)],
                      "own row (non-autocommit)")
            c.commit()
            c.execute(f"INSERT INTO {items} VALUES (%s, %s)", (15, "implicit rollback"))
            c.rollback()
        expect_eq(primary(f"SELECT id FROM {items} WHERE id IN (14, 15)"), [(14,)],
                  "non-autocommit commit/rollback on primary")

    # -- 4 --

    def settings(self, c):
        row = c.execute(
            "SELECT pg_backend_pid(), pg_is_in_recovery(), current_setting('search_path'),"
            " current_setting('TimeZone'), current_setting('application_name'),"
            " current_setting('statement_timeout'), current_setting(%s, true),"
            " '2024-01-01 00:00:00+00'::timestamptz::text",
            (self.custom,),
        ).fetchone()
        show_tz = c.execute("SHOW TimeZone").fetchone()[0]
        show_path = c.execute("SHOW search_path").fetchone()[0]
        return {
            "pid": row[0],
            "standby": row[1],
            "search_path": row[2],
            "TimeZone": row[3],
            "application_name": row[4],
            "statement_timeout": row[5],
            "custom": row[6],
            "ts": row[7],
            "show TimeZone": show_tz,
            "show search_path": show_path,
        }

    def expect_settings(self, got, want, what):
        for k, v in want.items():
            if k == "custom" and v is None:
                # A placeholder variable that was set then RESET reads as '' on the backend
                # that saw it, NULL on one that never did.
                expect(got[k] in (None, ""), f"{what}: {k} = {got[k]!r}, expected unset")
                continue
            expect_eq(got[k], v, f"{what}: {k}")

    def session_state(self):
        schema, marker = self.t["schema"], self.t["marker"]
        self.custom = f"{PREFIX}psy.k"
        with pconnect(PRIMARY_PORT) as d:
            direct = self.settings(d)
        with pconnect() as c:
            initial = self.settings(c)
            base = {k: direct[k] for k in ("search_path", "TimeZone", "application_name",
                                            "statement_timeout", "ts", "show TimeZone")}
            base["custom"] = None
            self.expect_settings(initial, base, "before SET, compared with a direct connection")
            expect(initial["TimeZone"] != "Asia/Kathmandu", "the server's TimeZone is already Asia/Kathmandu")

            c.execute(f"SET search_path TO {schema}, public")
            c.execute("SET TimeZone = 'Asia/Kathmandu'")
            c.execute(f"SET application_name = '{PREFIX}psy_app'")
            c.execute("SET statement_timeout = '45s'; SET " + self.custom + " = 'v1'")
            want = {
                "search_path": f"{schema}, public",
                "show search_path": f"{schema}, public",
                "TimeZone": "Asia/Kathmandu",
                "show TimeZone": "Asia/Kathmandu",
                "application_name": f"{PREFIX}psy_app",
                "statement_timeout": "45s",
                "custom": "v1",
                "ts": "2024-01-01 05:45:00+05:45",
            }
            for i in range(3):
                got = self.settings(c)
                expect(got["standby"], f"autocommit read #{i} did not run on a replica")
                self.expect_settings(got, want, f"autocommit read #{i} after SET")
                expect_eq(c.execute(f"SELECT v FROM {marker}").fetchone()[0], f"in {schema}",
                          "unqualified table through search_path")
            expect_eq(c.info.parameter_status("TimeZone"), "Asia/Kathmandu", "ParameterStatus TimeZone")
            expect_eq(c.info.parameter_status("application_name"), f"{PREFIX}psy_app",
                      "ParameterStatus application_name")
            pid, holders = self.hold_backend(lambda: self.settings(c)["pid"])
            try:
                got = self.settings(c)
                expect(got["pid"] != pid, f"read ran on backend {pid}, which another client holds")
                self.expect_settings(got, want, "read on another server connection after SET")
                got = c.execute("SELECT current_setting(%s)", ("TimeZone",), prepare=True).fetchone()[0]
                expect_eq(got, "Asia/Kathmandu", "prepared current_setting on another connection")
            finally:
                self.release(holders)
            with c.transaction():
                got = self.settings(c)
                expect(not got["standby"], "read in a transaction ran on a replica")
                self.expect_settings(got, want, "read in a transaction (primary) after SET")

            c.execute("RESET search_path")
            c.execute("RESET TimeZone")
            c.execute("RESET application_name; RESET statement_timeout")
            c.execute(f"RESET {self.custom}")
            want = dict(base)
            want["show search_path"] = direct["show search_path"]
            got = self.settings(c)
            self.expect_settings(got, want, "read after RESET")
            pid, holders = self.hold_backend(lambda: self.settings(c)["pid"])
            try:
                got = self.settings(c)
                expect(got["pid"] != pid, f"read ran on backend {pid}, which another client holds")
                self.expect_settings(got, want, "read on another server connection after RESET")
            finally:
                self.release(holders)
            with c.transaction():
                self.expect_settings(self.settings(c), want, "read in a transaction after RESET")
            try:
                c.execute(f"SELECT v FROM {marker}")
                raise CheckFailed("unqualified table still found after RESET search_path")
            except pgerr.UndefinedTable:
                pass
            expect_eq(c.info.parameter_status("TimeZone"), direct["TimeZone"],
                      "ParameterStatus TimeZone after RESET")

    # -- 5 --

    def temp_tables(self):
        tmp = self.t["temp"]
        with pconnect() as c:
            c.execute(f"CREATE TEMP TABLE {tmp} (id int PRIMARY KEY, v text)")
            c.execute(f"INSERT INTO {tmp} VALUES (1, 'a'), (2, 'b')")
            for i in range(3):
                expect_eq(c.execute(f"SELECT count(*) FROM {tmp}").fetchone()[0], 2, f"count #{i}")
            expect_eq(c.execute(f"SELECT v FROM {tmp} WHERE id = %s", (2,), prepare=True).fetchone(),
                      ("b",), "prepared SELECT from the temp table")
            with c.transaction():
                c.execute(f"INSERT INTO {tmp} VALUES (%s, %s)", (3, "c"))
                expect_eq(c.execute(f"SELECT count(*) FROM {tmp}").fetchone()[0], 3, "count in transaction")
            c.execute("BEGIN")
            c.execute(f"INSERT INTO {tmp} VALUES (4, 'd')")
            c.execute("ROLLBACK")
            expect_eq(c.execute(f"SELECT string_agg(v, ',' ORDER BY id) FROM {tmp}").fetchone()[0],
                      "a,b,c", "rows after commit and rollback")
            with pconnect() as other:
                try:
                    other.execute(f"SELECT count(*) FROM {tmp}")
                    raise CheckFailed("another session sees the temp table")
                except pgerr.UndefinedTable:
                    pass
            expect_eq(c.execute(f"SELECT count(*) FROM {tmp}").fetchone()[0], 3, "count after the other session")
            c.execute("DISCARD TEMP")
            try:
                c.execute(f"SELECT count(*) FROM {tmp}")
                raise CheckFailed("temp table still there after DISCARD TEMP")
            except pgerr.UndefinedTable:
                pass
            expect_eq(c.execute("SELECT 1").fetchone()[0], 1, "query after DISCARD TEMP")

    # -- 6 --

    def advisory_locks(self):
        key = lock_key("psy_advisory")
        with pconnect() as c, pconnect(PRIMARY_PORT) as d:
            c.execute("SELECT pg_advisory_lock(%s)", (key,))
            expect_eq(d.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0], False,
                      "direct try-lock while sluice session holds the lock")
            expect(self.recovery(c) is not None, "query while holding the lock")
            expect_eq(d.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0], False,
                      "direct try-lock after another statement of the holder")
            expect_eq(c.execute("SELECT pg_advisory_unlock(%s)", (key,)).fetchone()[0], True,
                      "unlock through sluice")
            expect_eq(d.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0], True,
                      "direct try-lock after unlock")
            d.execute("SELECT pg_advisory_unlock(%s)", (key,))
            # Transaction-level lock: held until the transaction ends.
            with c.transaction():
                c.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
                expect_eq(d.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0], False,
                          "direct try-lock during the holder's transaction")
            expect_eq(d.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0], True,
                      "direct try-lock after the holder's commit")
            d.execute("SELECT pg_advisory_unlock(%s)", (key,))
            # A try-lock through sluice, then the direct session is refused.
            expect_eq(c.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0], True,
                      "try-lock through sluice")
            expect_eq(d.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0], False,
                      "direct try-lock while sluice holds the try-lock")
            c.execute("SELECT pg_advisory_unlock_all()")
            expect_eq(d.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0], True,
                      "direct try-lock after pg_advisory_unlock_all")
            d.execute("SELECT pg_advisory_unlock_all()")

    # -- 7 --

    def listen_notify(self):
        chan = self.t["chan"]

        def receive(c, what):
            got = list(c.notifies(timeout=5, stop_after=1))
            expect(got, f"no notification within 5 s ({what})")
            return got[0]

        with pconnect() as listener, pconnect() as sender:
            listener.execute(f"LISTEN {chan}")
            sender.execute(f"NOTIFY {chan}, 'through sluice \u2603'")
            n = receive(listener, "NOTIFY through sluice")
            expect_eq((n.channel, n.payload), (chan, "through sluice \u2603"), "notification")
            primary("SELECT pg_notify(%s, %s)", (chan, "direct"))
            n = receive(listener, "pg_notify on the primary")
            expect_eq((n.channel, n.payload), (chan, "direct"), "notification")
            sender.execute("SELECT pg_notify(%s, %s)", (chan, "pg_notify through sluice"))
            n = receive(listener, "pg_notify through sluice")
            expect_eq(n.payload, "pg_notify through sluice", "notification")
            expect_eq(listener.execute("SELECT 41 + 1").fetchone()[0], 42, "query on the listener")
            with sender.transaction():
                sender.execute(f"NOTIFY {chan}, 'in a transaction'")
            n = receive(listener, "NOTIFY in a committed transaction")
            expect_eq(n.payload, "in a transaction", "notification")
            listener.execute("UNLISTEN *")
            sender.execute(f"NOTIFY {chan}, 'after unlisten'")
            late = list(listener.notifies(timeout=0.3, stop_after=1))
            expect(not late, f"notification after UNLISTEN *: {late!r}")

    # -- 8 --

    def copy(self):
        table = self.t["copy"]
        rows = copy_rows(1000)
        with pconnect() as c:
            cur = c.cursor()
            with cur.copy(f"COPY {table} (id, t, b, n) FROM STDIN") as cp:
                for r in rows[:500]:
                    cp.write_row(r)
            expect_eq(cur.rowcount, 500, "rows copied (text)")
            with cur.copy(f"COPY {table} (id, t, b, n) FROM STDIN (FORMAT BINARY)") as cp:
                cp.set_types(["int4", "text", "bytea", "numeric"])
                for r in rows[500:]:
                    cp.write_row(r)
            expect_eq(primary(f"SELECT count(*), sum(id), sum(n) FROM {table}"),
                      [(1000, 499500, Decimal(499500) / 8)], "copied rows on primary")
            expect_eq(primary(f"SELECT id, t, b, n FROM {table} WHERE id IN (7, 777) ORDER BY id"),
                      [rows[7], rows[777]], "copied rows on primary")
            wait_replica()
            with cur.copy(f"COPY {table} (id, t, b, n) TO STDOUT") as cp:
                cp.set_types(["int4", "text", "bytea", "numeric"])
                got = sorted(cp.rows())
            expect_eq(len(got), 1000, "rows from COPY TO STDOUT")
            expect(got == rows, "COPY TO STDOUT rows differ from the rows copied in")
            with cur.copy(f"COPY (SELECT id, b FROM {table} WHERE id < 10 ORDER BY id) TO STDOUT (FORMAT BINARY)") as cp:
                cp.set_types(["int4", "bytea"])
                got = list(cp.rows())
            expect_eq(got, [(r[0], r[2]) for r in rows[:10]], "COPY (SELECT) TO STDOUT binary")
            expect_eq(c.execute("SELECT 1").fetchone()[0], 1, "query after COPY")

    # -- 9 --

    def types(self, mode):
        table = self.t["types"]
        prepare = mode != "unprepared"
        binary = mode == "binary"
        ph = "%b" if binary else "%s"
        casts = ", ".join(f"{ph}::{t}" for t, _ in TYPE_CASES)
        query = f"SELECT {casts}"

        def adapt(typ, v):
            if v is None:
                return None
            return Json(v) if typ == "json" else Jsonb(v) if typ == "jsonb" else v

        values = [v for _, v in TYPE_CASES]
        params = [adapt(t, v) for t, v in TYPE_CASES]
        nulls = [None] * len(TYPE_CASES)
        with pconnect() as c:
            cur = c.cursor(binary=binary)
            for i in range(2):
                got = cur.execute(query, params, prepare=prepare).fetchone()
                compare_row(got, values, f"{mode} SELECT #{i}")
                got = cur.execute(query, nulls, prepare=prepare).fetchone()
                compare_row(got, nulls, f"{mode} SELECT of NULLs #{i}")
            base = {"unprepared": 0, "prepared": 10, "binary": 20}[mode]
            ins = f"INSERT INTO {table} (id, {', '.join(TYPE_COLUMNS)}) VALUES ({ph}, {', '.join([ph] * len(TYPE_CASES))})"
            cur.execute(ins, [base + 1] + params, prepare=prepare)
            cur.execute(ins, [base + 2] + nulls, prepare=prepare)
            with c.transaction():
                got = cur.execute(f"SELECT {', '.join(TYPE_COLUMNS)} FROM {table} WHERE id = {ph}",
                                  (base + 1,), prepare=prepare).fetchone()
                compare_row(got, values, f"{mode} row read back through sluice")
        rows = primary(f"SELECT {', '.join(TYPE_COLUMNS)} FROM {table} WHERE id IN (%s, %s) ORDER BY id",
                       (base + 1, base + 2))
        expect_eq(len(rows), 2, "rows on primary")
        compare_row(rows[0], values, f"{mode} row read directly on the primary")
        compare_row(rows[1], nulls, f"{mode} NULL row read directly on the primary")

    # -- 10 --

    def prepared_reuse(self, mode):
        query = "SELECT pg_backend_pid(), %s::int, pg_is_in_recovery()"
        kw = {"prepare": True}
        if mode == "threshold":
            query += " AS threshold"  # another statement text
            kw = {}
        with pconnect() as c:
            expect_eq(c.prepare_threshold, 5, "psycopg's default prepare_threshold")
            for i in range(12):  # the default threshold prepares it at the 5th execution
                row = c.execute(query, (i,), **kw).fetchone()
                expect_eq(row[1:], (i, True), f"execution #{i}")

            def once():
                row = c.execute(query, (999,), **kw).fetchone()
                expect_eq(row[1:], (999, True), "execution before holding its backend")
                return row[0]

            pid, holders = self.hold_backend(once)
            try:
                for i in range(3):
                    row = c.execute(query, (1000 + i,), **kw).fetchone()
                    expect_eq(row[1:], (1000 + i, True), "execution while the first backend is held")
                    expect(row[0] != pid, f"ran on backend {pid}, which another client holds")
            finally:
                self.release(holders)
            with c.transaction():
                row = c.execute(query, (2000,), **kw).fetchone()
                expect_eq(row[1:], (2000, False), "execution in a transaction (primary)")
            for i in range(20):
                row = c.execute(query, (3000 + i,), **kw).fetchone()
                expect_eq(row[1:], (3000 + i, True), "execution after the transaction")

    # -- 11 --

    def cancel(self, method, in_transaction=False):
        marker = name(f"psy_cancel_{method}_{'tx' if in_transaction else 'auto'}")
        fn = getattr(psycopg.Connection, method, None)
        if fn is None:
            raise CheckFailed(f"psycopg {psycopg.__version__} has no Connection.{method}")
        with pconnect() as c:
            if in_transaction:
                c.execute("BEGIN")
                c.execute("SELECT 1")
            box = {}

            def sleeper():
                try:
                    c.execute(f"SELECT pg_sleep(%s), '{marker}'", (30,))
                    box["result"] = "returned"
                except BaseException as e:  # noqa: BLE001
                    box["error"] = e

            th = threading.Thread(target=sleeper, daemon=True)
            th.start()
            try:
                port, _ = find_running(
                    marker,
                    lambda: None if th.is_alive() else box.get("result") or describe(box["error"]),
                )
                if in_transaction:
                    expect_eq(port, PRIMARY_PORT, "server running the statement in a transaction")
                started = time.monotonic()
                getattr(c, method)()
                th.join(25)
                expect(not th.is_alive(), f"pg_sleep(30) still running 25 s after {method}()")
            finally:
                if th.is_alive():
                    cancel_marked(marker)
                    th.join(5)
            err = box.get("error")
            expect(err is not None, f"pg_sleep(30) {box.get('result', 'did not end')} instead of failing")
            expect(isinstance(err, pgerr.QueryCanceled) and err.sqlstate == "57014",
                   f"expected QueryCanceled (57014), got {describe(err)}")
            expect(time.monotonic() - started < 25, "cancel took 25 s or more")
            if in_transaction:
                try:
                    c.execute("SELECT 1")
                    raise CheckFailed("statement after the cancelled one in a transaction succeeded")
                except pgerr.InFailedSqlTransaction:
                    pass
                c.execute("ROLLBACK")
            expect_eq(c.execute("SELECT 1").fetchone()[0], 1, "query after the cancel")
            expect_eq(c.execute("SELECT %s::int", (2,)).fetchone()[0], 2, "extended query after the cancel")
            expect(not still_running(marker), "the statement still runs on a server")

    # -- 12 --

    def errors(self):
        items = self.t["items"]

        def expect_error(c, exc_type, sql, params=None, **kw):
            try:
                c.execute(sql, params, **kw)
            except exc_type:
                return
            except psycopg.Error as e:
                raise CheckFailed(f"{sql!r}: expected {exc_type.__name__}, got {describe(e)}")
            raise CheckFailed(f"{sql!r}: expected {exc_type.__name__}, got no error")

        with pconnect() as c:
            for first in (True, False):
                c.execute("BEGIN")
                if not first:
                    c.execute(f"INSERT INTO {items} VALUES (%s, 'failed tx')", (20,))
                expect_error(c, pgerr.DivisionByZero, "SELECT 1/0")
                expect_eq(c.info.transaction_status, psycopg.pq.TransactionStatus.INERROR, "status")
                expect_error(c, pgerr.InFailedSqlTransaction, "SELECT 1")
                expect_error(c, pgerr.InFailedSqlTransaction, "SELECT %s::int", (1,))
                expect_error(c, pgerr.InFailedSqlTransaction, "SELECT %s::int", (1,), prepare=True)
                c.execute("ROLLBACK")
                expect_eq(c.execute("SELECT 1").fetchone()[0], 1, "query after ROLLBACK")
            expect_eq(primary(f"SELECT count(*) FROM {items} WHERE id = 20"), [(0,)], "row of the failed tx")
            expect_error(c, pgerr.SyntaxError, "SELEC 1")
            expect_eq(c.execute("SELECT 2").fetchone()[0], 2, "query after a syntax error")
            expect_error(c, pgerr.SyntaxError, "SELEC %s", (1,))
            expect_eq(c.execute("SELECT %s::int", (3,)).fetchone()[0], 3, "query after an extended syntax error")
            expect_error(c, pgerr.DivisionByZero, "SELECT 1/%s::int", (0,), prepare=True)
            expect_eq(c.execute("SELECT 1/%s::int", (1,), prepare=True).fetchone()[0], 1,
                      "prepared statement after its own error")
            expect_error(c, pgerr.UndefinedTable, f"SELECT * FROM {name('no_such_table')}")
            c.execute(f"INSERT INTO {items} VALUES (21, 'dup')")
            expect_error(c, pgerr.UniqueViolation, f"INSERT INTO {items} VALUES (%s, 'dup')", (21,))
            with c.transaction():
                c.execute(f"INSERT INTO {items} VALUES (22, 'sp')")
                try:
                    with c.transaction():  # a savepoint
                        c.execute(f"INSERT INTO {items} VALUES (21, 'dup')")
                except pgerr.UniqueViolation:
                    pass
                c.execute(f"INSERT INTO {items} VALUES (23, 'after sp')")
            expect_eq(primary(f"SELECT id FROM {items} WHERE id IN (22, 23) ORDER BY id"), [(22,), (23,)],
                      "rows around a rolled-back savepoint")
        with pconnect(autocommit=False) as c:
            expect_error(c, pgerr.DivisionByZero, "SELECT 1/0")
            expect_error(c, pgerr.InFailedSqlTransaction, "SELECT 1")
            c.rollback()
            expect_eq(c.execute("SELECT 1").fetchone()[0], 1, "query after rollback()")
            c.rollback()

    # -- 14 --

    def large_result(self):
        with pconnect() as c:
            cur = c.execute(BIG_QUERY)
            n = total = 0
            for g, x in cur:
                n += 1
                total += g
                if len(x) != 100:
                    raise CheckFailed(f"row {g}: {len(x)} characters")
            expect_eq((n, total), (BIG_ROWS, BIG_SUM), "rows and sum (client-side cursor)")
            n = total = 0
            for g, _ in c.cursor().stream(BIG_QUERY):
                n += 1
                total += g
            expect_eq((n, total), (BIG_ROWS, BIG_SUM), "rows and sum (cursor.stream)")
            with c.transaction():
                scur = c.cursor(name=name("psy_big"))
                scur.itersize = 10000
                scur.execute(BIG_QUERY)
                n = total = 0
                for g, _ in scur:
                    n += 1
                    total += g
                scur.close()
            expect_eq((n, total), (BIG_ROWS, BIG_SUM), "rows and sum (server-side cursor)")
            expect_eq(c.execute("SELECT 1").fetchone()[0], 1, "query after the large results")

    def run(self):
        p = "psycopg."
        run_sync(p + "setup", self.setup)
        if self.t is None:
            return
        run_sync(p + "routing", self.routing)
        run_sync(p + "writes_on_primary", self.writes_on_primary)
        run_sync(p + "transactions", self.transactions)
        run_sync(p + "session_state", self.session_state)
        run_sync(p + "temp_tables", self.temp_tables)
        run_sync(p + "advisory_locks", self.advisory_locks)
        run_sync(p + "listen_notify", self.listen_notify)
        run_sync(p + "copy", self.copy)
        for mode in ("unprepared", "prepared", "binary"):
            run_sync(p + f"types_{mode}", lambda m=mode: self.types(m))
        for mode in ("prepare_true", "threshold"):
            run_sync(p + f"prepared_reuse_{mode}", lambda m=mode: self.prepared_reuse(m))
        run_sync(p + "cancel", lambda: self.cancel("cancel"))
        run_sync(p + "cancel_safe", lambda: self.cancel("cancel_safe"))
        run_sync(p + "cancel_in_transaction", lambda: self.cancel("cancel", in_transaction=True))
        run_sync(p + "errors", self.errors)
        run_sync(p + "large_result", self.large_result)


# ==============================================================================================
# asyncpg
# ==============================================================================================


class Asyncpg:
    def __init__(self):
        import asyncpg

        self.asyncpg = asyncpg
        self.t = None

    async def connect(self, port=SLUICE_PORT, **kw):
        return await self.asyncpg.connect(
            host=HOST,
            port=port,
            user=USER,
            password=PASSWORD,
            database=DATABASE,
            timeout=5,
            command_timeout=15,
            **kw,
        )

    async def setup(self):
        self.t = setup_tables("apg")

    async def hold_backend(self, run_once):
        """As Psycopg.hold_backend; run_once is a coroutine function."""
        seen = []
        for _ in range(HOLD_ATTEMPTS):
            pid = await run_once()
            seen.append(pid)
            holders = []
            try:
                for _ in range(MAX_HOLDERS):
                    h = await self.connect()
                    holders.append(h)
                    await h.execute("BEGIN READ ONLY")
                    got, standby = await h.fetchrow("SELECT pg_backend_pid(), pg_is_in_recovery()")
                    expect(standby, "a BEGIN READ ONLY transaction did not run on a replica")
                    if got == pid:
                        return pid, holders
            except BaseException:
                await self.release(holders)
                raise
            await self.release(holders)
        raise CheckFailed(f"none of {MAX_HOLDERS} READ ONLY transactions got the client's backend (tried {seen})")

    @staticmethod
    async def release(holders):
        for h in holders:
            try:
                await h.execute("ROLLBACK")
            except Exception:  # noqa: BLE001 - closed anyway
                pass
            finally:
                h.terminate()

    # -- 1 --

    async def routing(self):
        c = await self.connect()
        try:
            for i in range(3):
                expect(await c.fetchval("SELECT pg_is_in_recovery()") is True,
                       f"autocommit SELECT #{i} did not run on a replica")
            expect_eq(tuple(await c.fetchrow("SELECT pg_is_in_recovery(), $1::int", 5)), (True, 5),
                      "autocommit SELECT with a parameter")
            async with c.transaction():
                expect(await c.fetchval("SELECT pg_is_in_recovery()") is False,
                       "SELECT in a transaction ran on a replica")
            async with c.transaction(readonly=True):
                expect(await c.fetchval("SELECT pg_is_in_recovery()") is True,
                       "SELECT in a read-only transaction ran on the primary")
            async with c.transaction(isolation="serializable", readonly=True):
                expect(await c.fetchval("SELECT pg_is_in_recovery()") is False,
                       "a SERIALIZABLE transaction ran on a replica")
            async with c.transaction(isolation="repeatable_read"):
                expect(await c.fetchval("SELECT pg_is_in_recovery()") is False,
                       "a REPEATABLE READ read-write transaction ran on a replica")
            expect(await c.fetchval("SELECT pg_is_in_recovery()") is True, "autocommit SELECT after transactions")
        finally:
            await c.close(timeout=5)

    # -- 2 --

    async def writes_on_primary(self):
        items, seq = self.t["items"], self.t["seq"]
        c = await self.connect()
        try:
            status = await c.execute(f"INSERT INTO {items} VALUES ($1, $2)", 1, "one")
            expect_eq(status, "INSERT 0 1", "command status")
            expect_eq(primary(f"SELECT v FROM {items} WHERE id = 1"), [("one",)], "row on primary")
            expect_eq(await c.fetchval(f"UPDATE {items} SET v = $1 WHERE id = 1 RETURNING v", "uno"), "uno",
                      "UPDATE ... RETURNING")
            expect_eq(primary(f"SELECT v FROM {items} WHERE id = 1"), [("uno",)], "updated row on primary")
            got = await c.fetchval(
                f"WITH ins AS (INSERT INTO {items} VALUES (2, 'cte') RETURNING id) SELECT id FROM ins")
            expect_eq(got, 2, "data-modifying WITH")
            expect_eq(await c.fetchval(f"SELECT v FROM {items} WHERE id = $1 FOR UPDATE", 1), "uno",
                      "autocommit SELECT ... FOR UPDATE")
            expect_eq(await c.fetchval("SELECT nextval($1)", seq), 1, "nextval")
            await c.executemany(f"INSERT INTO {items} VALUES ($1, $2)",
                                [(100 + i, f"many {i}") for i in range(20)])
            expect_eq(
                primary(f"SELECT count(*), min(v), max(v) FROM {items} WHERE id BETWEEN 100 AND 119"),
                [(20, "many 0", "many 9")],
                "executemany rows on primary",
            )
            await c.execute(f"DELETE FROM {items} WHERE id = 2; INSERT INTO {items} VALUES (200, 'multi')")
            expect_eq(primary(f"SELECT id FROM {items} WHERE id IN (2, 200)"), [(200,)],
                      "multi-statement simple query on primary")
            # prepare() sends Parse/Describe/Flush and no Sync: the statements after it are
            # routed as they would be without it.
            stmt = await c.prepare(f"SELECT count(*) FROM {items} WHERE id >= $1")
            await c.execute(f"INSERT INTO {items} VALUES (30, 'after prepare')")
            await c.prepare(f"SELECT v FROM {items} WHERE id = $1")
            await c.execute(f"INSERT INTO {items} VALUES ($1, 'after prepare')", 31)
            expect_eq(primary(f"SELECT id FROM {items} WHERE id IN (30, 31) ORDER BY id"), [(30,), (31,)],
                      "rows inserted after prepare() of a SELECT, on primary")
            # The prepared SELECT reads a replica: it has the rows once it has replayed them.
            await asyncio.to_thread(wait_replica)
            expect(await stmt.fetchval(0) >= 2, "the prepared SELECT")
        finally:
            await c.close(timeout=5)

    # -- 3 --

    async def transactions(self):
        items = self.t["items"]
        c = await self.connect()
        try:
            tr = c.transaction()
            await tr.start()
            await c.execute(f"INSERT INTO {items} VALUES ($1, $2)", 10, "rolled back")
            expect_eq(await c.fetchval(f"SELECT v FROM {items} WHERE id = $1", 10), "rolled back",
                      "own uncommitted row")
            expect_eq(primary(f"SELECT count(*) FROM {items} WHERE id = 10"), [(0,)],
                      "uncommitted row seen by another session")
            await tr.rollback()
            expect(not c.is_in_transaction(), "still in a transaction after rollback")
            expect_eq(primary(f"SELECT count(*) FROM {items} WHERE id = 10"), [(0,)], "row after ROLLBACK")

            async with c.transaction():
                await c.execute(f"INSERT INTO {items} VALUES ($1, $2)", 11, "committed")
                expect_eq(await c.fetchval(f"SELECT v FROM {items} WHERE id = $1", 11), "committed",
                          "own uncommitted row")
            expect_eq(primary(f"SELECT v FROM {items} WHERE id = 11"), [("committed",)], "row after COMMIT")

            await c.execute("BEGIN")
            await c.execute(f"INSERT INTO {items} VALUES (12, 'raw')")
            expect_eq(await c.fetchval(f"SELECT v FROM {items} WHERE id = 12"), "raw", "own row after raw BEGIN")
            await c.execute("COMMIT")
            expect_eq(primary(f"SELECT v FROM {items} WHERE id = 12"), [("raw",)], "row after raw COMMIT")

            async with c.transaction():
                await c.execute(f"INSERT INTO {items} VALUES (13, 'outer')")
                try:
                    async with c.transaction():  # savepoint
                        await c.execute(f"INSERT INTO {items} VALUES (14, 'inner')")
                        raise KeyError("roll back the savepoint")
                except KeyError:
                    pass
            expect_eq(primary(f"SELECT id FROM {items} WHERE id IN (13, 14)"), [(13,)],
                      "rows around a rolled-back savepoint")
        finally:
            await c.close(timeout=5)

    # -- 4 --

    async def settings(self, c):
        row = await c.fetchrow(
            "SELECT pg_backend_pid(), pg_is_in_recovery(), current_setting('search_path'),"
            " current_setting('TimeZone'), current_setting('application_name'),"
            " current_setting('statement_timeout'), current_setting($1, true),"
            " '2024-01-01 00:00:00+00'::timestamptz::text, current_setting('DateStyle'),"
            " '2024-02-03'::date::text",
            self.custom,
        )
        return {
            "pid": row[0],
            "standby": row[1],
            "search_path": row[2],
            "TimeZone": row[3],
            "application_name": row[4],
            "statement_timeout": row[5],
            "custom": row[6],
            "ts": row[7],
            "DateStyle": row[8],
            "date": row[9],
            "show TimeZone": await c.fetchval("SHOW TimeZone"),
            "show search_path": await c.fetchval("SHOW search_path"),
        }

    def expect_settings(self, got, want, what):
        Psycopg.expect_settings(None, got, want, what)

    async def session_state(self):
        schema, marker = self.t["schema"], self.t["marker"]
        self.custom = f"{PREFIX}apg.k"
        d = await self.connect(PRIMARY_PORT)
        try:
            direct = await self.settings(d)
        finally:
            await d.close(timeout=5)
        keys = ("search_path", "TimeZone", "application_name", "statement_timeout", "ts",
                "show TimeZone", "DateStyle", "date")
        base = {k: direct[k] for k in keys}
        base["custom"] = None
        c = await self.connect()
        try:
            self.expect_settings(await self.settings(c), base, "before SET, compared with a direct connection")
            await c.execute(f"SET search_path TO {schema}, public")
            await c.execute("SET TimeZone TO 'America/St_Johns'; SET DateStyle = 'SQL, DMY'")
            await c.execute(f"SET application_name = '{PREFIX}apg_app'")
            await c.execute("SET statement_timeout = 46000")
            await c.execute(f"SET {self.custom} TO 'v2'")
            want = {
                "search_path": f"{schema}, public",
                "show search_path": f"{schema}, public",
                "TimeZone": "America/St_Johns",
                "show TimeZone": "America/St_Johns",
                "application_name": f"{PREFIX}apg_app",
                "statement_timeout": "46s",
                "custom": "v2",
                "ts": "31/12/2023 20:30:00 NST",
                "DateStyle": "SQL, DMY",
                "date": "03/02/2024",
            }
            for i in range(3):
                got = await self.settings(c)
                expect(got["standby"], f"autocommit read #{i} did not run on a replica")
                self.expect_settings(got, want, f"autocommit read #{i} after SET")
                expect_eq(await c.fetchval(f"SELECT v FROM {marker}"), f"in {schema}",
                          "unqualified table through search_path")
            expect_eq(c.get_settings().TimeZone, "America/St_Johns", "ParameterStatus TimeZone")
            expect_eq(c.get_settings().application_name, f"{PREFIX}apg_app", "ParameterStatus application_name")

            async def pid_of_read():
                return (await self.settings(c))["pid"]

            pid, holders = await self.hold_backend(pid_of_read)
            try:
                got = await self.settings(c)
                expect(got["pid"] != pid, f"read ran on backend {pid}, which another client holds")
                self.expect_settings(got, want, "read on another server connection after SET")
                # A timestamptz result decoded by asyncpg is the same instant whatever the zone.
                got = await c.fetchval("SELECT '2024-01-01 00:00:00+00'::timestamptz")
                expect_eq(got, datetime(2024, 1, 1, tzinfo=timezone.utc), "timestamptz result")
            finally:
                await self.release(holders)
            async with c.transaction():
                got = await self.settings(c)
                expect(not got["standby"], "read in a transaction ran on a replica")
                self.expect_settings(got, want, "read in a transaction (primary) after SET")

            await c.execute("RESET search_path; RESET TimeZone; RESET DateStyle")
            await c.execute("RESET application_name")
            await c.execute("RESET statement_timeout")
            await c.execute(f"RESET {self.custom}")
            want = dict(base)
            want["show search_path"] = direct["show search_path"]
            got = await self.settings(c)
            self.expect_settings(got, want, "read after RESET")
            pid, holders = await self.hold_backend(pid_of_read)
            try:
                got = await self.settings(c)
                expect(got["pid"] != pid, f"read ran on backend {pid}, which another client holds")
                self.expect_settings(got, want, "read on another server connection after RESET")
            finally:
                await self.release(holders)
            async with c.transaction():
                self.expect_settings(await self.settings(c), want, "read in a transaction after RESET")
            try:
                await c.fetchval(f"SELECT v FROM {marker}")
                raise CheckFailed("unqualified table still found after RESET search_path")
            except self.asyncpg.UndefinedTableError:
                pass
        finally:
            await c.close(timeout=5)

    # -- 5 --

    async def temp_tables(self):
        tmp = self.t["temp"]
        c = await self.connect()
        try:
            await c.execute(f"CREATE TEMP TABLE {tmp} (id int PRIMARY KEY, v text)")
            await c.execute(f"INSERT INTO {tmp} VALUES ($1, $2)", 1, "a")
            await c.executemany(f"INSERT INTO {tmp} VALUES ($1, $2)", [(2, "b")])
            for i in range(3):
                expect_eq(await c.fetchval(f"SELECT count(*) FROM {tmp}"), 2, f"count #{i}")
            stmt = await c.prepare(f"SELECT v FROM {tmp} WHERE id = $1")
            expect_eq(await stmt.fetchval(2), "b", "prepared SELECT from the temp table")
            async with c.transaction():
                await c.execute(f"INSERT INTO {tmp} VALUES (3, 'c')")
                expect_eq(await c.fetchval(f"SELECT count(*) FROM {tmp}"), 3, "count in transaction")
            tr = c.transaction()
            await tr.start()
            await c.execute(f"INSERT INTO {tmp} VALUES (4, 'd')")
            await tr.rollback()
            expect_eq(await c.fetchval(f"SELECT string_agg(v, ',' ORDER BY id) FROM {tmp}"), "a,b,c",
                      "rows after commit and rollback")
            expect_eq(await stmt.fetchval(3), "c", "prepared SELECT again")
            other = await self.connect()
            try:
                try:
                    await other.fetchval(f"SELECT count(*) FROM {tmp}")
                    raise CheckFailed("another session sees the temp table")
                except self.asyncpg.UndefinedTableError:
                    pass
            finally:
                await other.close(timeout=5)
            await c.execute("DISCARD TEMP")
            try:
                await c.fetchval(f"SELECT count(*) FROM {tmp}")
                raise CheckFailed("temp table still there after DISCARD TEMP")
            except self.asyncpg.UndefinedTableError:
                pass
            expect_eq(await c.fetchval("SELECT 1"), 1, "query after DISCARD TEMP")
        finally:
            await c.close(timeout=5)

    # -- 6 --

    async def advisory_locks(self):
        key = lock_key("apg_advisory")
        c = await self.connect()
        try:
            with pconnect(PRIMARY_PORT) as d:
                def direct_try():
                    return d.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]

                await c.execute("SELECT pg_advisory_lock($1)", key)
                expect_eq(direct_try(), False, "direct try-lock while the sluice session holds the lock")
                await c.fetchval("SELECT 1")
                expect_eq(direct_try(), False, "direct try-lock after another statement of the holder")
                expect_eq(await c.fetchval("SELECT pg_advisory_unlock($1)", key), True, "unlock through sluice")
                expect_eq(direct_try(), True, "direct try-lock after unlock")
                d.execute("SELECT pg_advisory_unlock(%s)", (key,))
                async with c.transaction():
                    await c.execute("SELECT pg_advisory_xact_lock($1)", key)
                    expect_eq(direct_try(), False, "direct try-lock during the holder's transaction")
                expect_eq(direct_try(), True, "direct try-lock after the holder's commit")
                d.execute("SELECT pg_advisory_unlock(%s)", (key,))
                await c.execute(f"SELECT pg_advisory_lock({key})")  # simple query
                expect_eq(direct_try(), False, "direct try-lock while the simple-query lock is held")
                await c.execute("SELECT pg_advisory_unlock_all()")
                expect_eq(direct_try(), True, "direct try-lock after pg_advisory_unlock_all")
                d.execute("SELECT pg_advisory_unlock_all()")
        finally:
            await c.close(timeout=5)

    # -- 7 --

    async def listen_notify(self):
        chan = self.t["chan"]
        queue = asyncio.Queue()

        def callback(conn, pid, channel, payload):
            queue.put_nowait((channel, payload))

        async def receive(what):
            try:
                return await asyncio.wait_for(queue.get(), 5)
            except asyncio.TimeoutError:
                raise CheckFailed(f"no notification within 5 s ({what})") from None

        listener = await self.connect()
        sender = await self.connect()
        try:
            await listener.add_listener(chan, callback)
            await sender.execute(f"NOTIFY {chan}, 'through sluice \u2603'")
            expect_eq(await receive("NOTIFY through sluice"), (chan, "through sluice \u2603"), "notification")
            primary("SELECT pg_notify(%s, %s)", (chan, "direct"))
            expect_eq(await receive("pg_notify on the primary"), (chan, "direct"), "notification")
            await sender.execute("SELECT pg_notify($1, $2)", chan, "pg_notify through sluice")
            expect_eq(await receive("pg_notify through sluice"), (chan, "pg_notify through sluice"),
                      "notification")
            expect_eq(await listener.fetchval("SELECT 41 + 1"), 42, "query on the listener")
            async with sender.transaction():
                await sender.execute(f"NOTIFY {chan}, 'in a transaction'")
            expect_eq(await receive("NOTIFY in a committed transaction"), (chan, "in a transaction"),
                      "notification")
            await listener.remove_listener(chan, callback)
            await sender.execute(f"NOTIFY {chan}, 'after unlisten'")
            await asyncio.sleep(0.3)
            expect(queue.empty(), "notification after remove_listener")
        finally:
            await listener.close(timeout=5)
            await sender.close(timeout=5)

    # -- 8 --

    async def copy(self):
        """copy_to_table (COPY FROM STDIN, csv), copy_from_table and copy_from_query."""
        table = self.t["copy"]
        rows = copy_rows(1000)
        c = await self.connect()
        try:
            csv_in = io.StringIO()
            w = csv.writer(csv_in)
            for r in rows:
                w.writerow([r[0], r[1], "\\x" + r[2].hex(), r[3]])
            status = await c.copy_to_table(table, source=io.BytesIO(csv_in.getvalue().encode()),
                                           columns=["id", "t", "b", "n"], format="csv")
            expect_eq(status, "COPY 1000", "copy_to_table status")
            expect_eq(primary(f"SELECT count(*), sum(id), sum(n) FROM {table}"),
                      [(1000, 499500, Decimal(499500) / 8)], "copied rows on primary")
            expect_eq(primary(f"SELECT id, t, b, n FROM {table} WHERE id IN (7, 777) ORDER BY id"),
                      [rows[7], rows[777]], "copied rows on primary")
            wait_replica()
            out = io.BytesIO()
            status = await c.copy_from_table(table, output=out, columns=["id", "t", "b", "n"], format="csv")
            expect_eq(status, "COPY 1000", "copy_from_table status")
            got = sorted(
                (int(r[0]), r[1], bytes.fromhex(r[2][2:]), Decimal(r[3]))
                for r in csv.reader(io.StringIO(out.getvalue().decode()))
            )
            expect(got == rows, "copy_from_table rows differ from the rows copied in")
            out = io.BytesIO()
            status = await c.copy_from_query(f"SELECT id, t FROM {table} WHERE id < $1 ORDER BY id", 10,
                                             output=out, format="csv")
            expect_eq(status, "COPY 10", "copy_from_query status")
            got = [(int(r[0]), r[1]) for r in csv.reader(io.StringIO(out.getvalue().decode()))]
            expect_eq(got, [(r[0], r[1]) for r in rows[:10]], "copy_from_query rows")
            expect_eq(await c.fetchval("SELECT 1"), 1, "query after COPY")
        finally:
            await c.close(timeout=5)

    async def copy_records(self):
        """copy_records_to_table: asyncpg first prepares a SELECT on the table (Parse/Describe/
        Flush, no Sync) to learn the column types, then sends COPY ... FROM STDIN (binary)."""
        table = self.t["copy"]
        rows = [(1000 + r[0], r[1], r[2], r[3]) for r in copy_rows(600)]
        c = await self.connect()
        try:
            status = await c.copy_records_to_table(table, records=rows, columns=["id", "t", "b", "n"])
            expect_eq(status, "COPY 600", "copy_records_to_table status")
            got = primary(f"SELECT id, t, b, n FROM {table} WHERE id >= 1000 ORDER BY id")
            expect(got == rows, f"rows on primary differ from the records copied in ({len(got)} rows)")
            expect_eq(await c.fetchval("SELECT 1"), 1, "query after COPY")
        finally:
            await c.close(timeout=5)

    # -- 9 --

    def apg_values(self, values):
        out = []
        for (typ, _), v in zip(TYPE_CASES, values):
            out.append(json.dumps(v) if typ in ("json", "jsonb") and v is not None else v)
        return out

    def apg_compare(self, got, values, what):
        got = list(got)
        for i, (typ, _) in enumerate(TYPE_CASES):
            if typ in ("json", "jsonb") and got[i] is not None:
                got[i] = json.loads(got[i])
            if typ == "uuid" and got[i] is not None:
                got[i] = uuid.UUID(str(got[i]))
        compare_row(got, values, what)

    async def types(self):
        table = self.t["types"]
        query = "SELECT " + ", ".join(f"${i + 1}::{t}" for i, (t, _) in enumerate(TYPE_CASES))
        values = [v for _, v in TYPE_CASES]
        params = self.apg_values(values)
        nulls = [None] * len(TYPE_CASES)
        c = await self.connect()
        try:
            for i in range(2):
                self.apg_compare(await c.fetchrow(query, *params), values, f"fetchrow #{i}")
                self.apg_compare(await c.fetchrow(query, *nulls), nulls, f"fetchrow of NULLs #{i}")
            stmt = await c.prepare(query)
            for i in range(2):
                self.apg_compare(await stmt.fetchrow(*params), values, f"prepared fetchrow #{i}")
                self.apg_compare(await stmt.fetchrow(*nulls), nulls, f"prepared fetchrow of NULLs #{i}")
            cols = ", ".join(TYPE_COLUMNS)
            ins = f"INSERT INTO {table} (id, {cols}) VALUES ({', '.join(f'${i + 1}' for i in range(len(TYPE_CASES) + 1))})"
            await c.execute(ins, 1, *params)
            await c.executemany(ins, [(2, *nulls)])
            async with c.transaction():
                got = await c.fetchrow(f"SELECT {cols} FROM {table} WHERE id = $1", 1)
                self.apg_compare(got, values, "row read back through sluice")
        finally:
            await c.close(timeout=5)
        rows = primary(f"SELECT {cols} FROM {table} WHERE id IN (1, 2) ORDER BY id")
        expect_eq(len(rows), 2, "rows on primary")
        compare_row(rows[0], values, "row read directly on the primary")
        compare_row(rows[1], nulls, "NULL row read directly on the primary")

    # -- 10 --

    async def prepared_reuse(self):
        query = "SELECT pg_backend_pid(), $1::int, pg_is_in_recovery()"
        c = await self.connect()
        try:
            stmt = await c.prepare(query)
            for i in range(20):
                row = await stmt.fetchrow(i)
                expect_eq(tuple(row[1:]), (i, True), f"execution #{i}")
                row2 = await c.fetchrow(query + " AS cached", i)  # the connection's statement cache
                expect_eq(tuple(row2[1:]), (i, True), f"cached execution #{i}")

            async def run_prepared():
                row = await stmt.fetchrow(999)
                expect_eq(tuple(row[1:]), (999, True), "execution before holding its backend")
                return row[0]

            async def run_cached():
                row = await c.fetchrow(query + " AS cached", 998)
                expect_eq(tuple(row[1:]), (998, True), "cached execution before holding its backend")
                return row[0]

            for what, run_once in (("prepared", run_prepared), ("cached", run_cached)):
                pid, holders = await self.hold_backend(run_once)
                try:
                    for i in range(3):
                        row = await stmt.fetchrow(1000 + i)
                        expect_eq(tuple(row[1:]), (1000 + i, True), f"execution while the {what} one's backend is held")
                        expect(row[0] != pid, f"ran on backend {pid}, which another client holds")
                        row = await c.fetchrow(query + " AS cached", 1000 + i)
                        expect_eq(tuple(row[1:]), (1000 + i, True), f"cached execution while the {what} one's backend is held")
                        expect(row[0] != pid, f"ran on backend {pid}, which another client holds")
                finally:
                    await self.release(holders)
            async with c.transaction():
                row = await stmt.fetchrow(2000)
                expect_eq(tuple(row[1:]), (2000, False), "execution in a transaction (primary)")
            for i in range(20):
                row = await stmt.fetchrow(3000 + i)
                expect_eq(tuple(row[1:]), (3000 + i, True), "execution after the transaction")
            rows = await stmt.fetch(7)
            expect_eq(len(rows), 1, "fetch")
        finally:
            await c.close(timeout=5)

    async def ddl_changes_result(self):
        """DDL changes a cached statement's result type: asyncpg gets PostgreSQL's 0A000 on
        each client's statement, prepares it again and retries, so every client reads the
        new type (a copy another client had prepared again gave the float's bits as an int)."""
        table = name("apg_ddl")
        primary(f"CREATE TABLE {table} (id int, a int4); INSERT INTO {table} VALUES (1, 1), (2, 100)")
        wait_replica()
        query = f"SELECT a FROM {table} WHERE id > $1 ORDER BY id"
        cs = []
        try:
            for _ in range(4):
                cs.append(await self.connect())
            for i, c in enumerate(cs):
                expect_eq([r[0] for r in await c.fetch(query, 0)], [1, 100], f"client {i} before the DDL")
            primary(f"ALTER TABLE {table} ALTER COLUMN a TYPE float4")
            wait_replica()
            for k in range(2):
                for i, c in enumerate(cs):
                    got = [r[0] for r in await c.fetch(query, 0)]
                    expect_eq(got, [1.0, 100.0], f"client {i}, round {k}, after the DDL")
                    expect(all(isinstance(v, float) for v in got), f"client {i}, round {k}: {got!r} are not floats")
        finally:
            for c in cs:
                await c.close(timeout=5)

    # -- 11 --

    async def cancel(self):
        c = await self.connect()
        try:
            for round_ in range(2):
                marker = name(f"apg_cancel_{round_}")
                task = asyncio.ensure_future(c.fetch(f"SELECT pg_sleep($1), '{marker}'", 30.0))
                try:
                    await asyncio.get_running_loop().run_in_executor(
                        None,
                        find_running,
                        marker,
                        lambda: None if not task.done() else repr(task.exception() or task.result()),
                    )
                    started = time.monotonic()
                    try:
                        await asyncio.wait_for(task, 1)
                        raise CheckFailed("pg_sleep(30) returned within 1 s")
                    except asyncio.TimeoutError:
                        pass
                    v = await asyncio.wait_for(c.fetchval("SELECT 7"), 25)
                    expect_eq(v, 7, "query right after the timeout")
                    expect(time.monotonic() - started < 25, "the connection took 25 s or more to be usable")
                    expect_eq(await c.fetchval("SELECT $1::int", 8), 8, "extended query after the cancel")
                    expect(not still_running(marker), "the cancelled statement still runs on a server")
                except asyncio.TimeoutError:
                    raise CheckFailed("the connection was not usable within 25 s after the timeout") from None
                finally:
                    if not task.done():
                        task.cancel()
                    elif not task.cancelled():
                        task.exception()  # retrieved: reported above if it mattered
                    if still_running(marker):
                        cancel_marked(marker)
        finally:
            c.terminate()

    # -- 12 --

    async def errors(self):
        A = self.asyncpg
        items = self.t["items"]

        async def expect_error(exc_type, coro):
            try:
                await coro
            except exc_type:
                return
            except A.PostgresError as e:
                raise CheckFailed(f"expected {exc_type.__name__}, got {describe(e)}")
            raise CheckFailed(f"expected {exc_type.__name__}, got no error")

        c = await self.connect()
        try:
            stmt = await c.prepare("SELECT $1::int + 1")
            for first in (True, False):
                tr = c.transaction()
                await tr.start()
                if not first:
                    await c.execute(f"INSERT INTO {items} VALUES ($1, 'failed tx')", 20)
                await expect_error(A.DivisionByZeroError, c.fetchval("SELECT 1/0"))
                await expect_error(A.InFailedSQLTransactionError, c.fetchval("SELECT 1"))
                await expect_error(A.InFailedSQLTransactionError, c.fetchval("SELECT $1::int", 1))
                await expect_error(A.InFailedSQLTransactionError, stmt.fetchval(1))
                await expect_error(A.InFailedSQLTransactionError, c.execute("SELECT 2"))
                await tr.rollback()
                expect_eq(await c.fetchval("SELECT 1"), 1, "query after ROLLBACK")
                expect_eq(await stmt.fetchval(1), 2, "prepared statement after ROLLBACK")
            expect_eq(primary(f"SELECT count(*) FROM {items} WHERE id = 20"), [(0,)], "row of the failed tx")
            await expect_error(A.PostgresSyntaxError, c.execute("SELEC 1"))
            expect_eq(await c.fetchval("SELECT 2"), 2, "query after a syntax error")
            await expect_error(A.PostgresSyntaxError, c.fetchval("SELEC $1", 1))
            expect_eq(await c.fetchval("SELECT $1::int", 3), 3, "query after an extended syntax error")
            div = await c.prepare("SELECT 1/$1::int")
            await expect_error(A.DivisionByZeroError, div.fetchval(0))
            expect_eq(await div.fetchval(1), 1, "prepared statement after its own error")
            await expect_error(A.UndefinedTableError, c.fetch(f"SELECT * FROM {name('no_such_table')}"))
            await c.execute(f"INSERT INTO {items} VALUES (21, 'dup')")
            await expect_error(A.UniqueViolationError, c.execute(f"INSERT INTO {items} VALUES ($1, 'dup')", 21))
            expect_eq(await c.fetchval("SELECT 4"), 4, "query after the errors")
        finally:
            await c.close(timeout=5)

    # -- 13 --

    async def pool(self):
        table = self.t["pool"]
        pool = await self.asyncpg.create_pool(
            host=HOST, port=SLUICE_PORT, user=USER, password=PASSWORD, database=DATABASE,
            min_size=2, max_size=5, timeout=5, command_timeout=15,
        )
        try:
            async def task(i):
                async with pool.acquire(timeout=15) as con:
                    v = await con.fetchval("SELECT $1::int * 2, pg_is_in_recovery()", i)
                    expect_eq(v, 2 * i, f"task {i}: prepared query")
                    async with con.transaction():
                        await con.execute(f"INSERT INTO {table} VALUES ($1, $2)", i, f"task {i}")
                        got = await con.fetchrow(f"SELECT v, pg_is_in_recovery() FROM {table} WHERE id = $1", i)
                        expect_eq(tuple(got), (f"task {i}", False), f"task {i}: own row in the transaction")
                expect_eq(await pool.fetchval("SELECT $1::text", str(i)), str(i), f"task {i}: pool.fetchval")

            await asyncio.gather(*(task(i) for i in range(50)))
        finally:
            await asyncio.wait_for(pool.close(), 10)
        expect_eq(primary(f"SELECT count(*), sum(id), count(DISTINCT v) FROM {table}"), [(50, 1225, 50)],
                  "rows of the 50 tasks on primary")

    # -- 14 --

    async def large_result(self):
        c = await self.connect()
        try:
            rows = await c.fetch(BIG_QUERY)
            expect_eq((len(rows), sum(r[0] for r in rows)), (BIG_ROWS, BIG_SUM), "fetch: rows and sum")
            expect(all(len(r[1]) == 100 for r in rows), "fetch: a row's text is not 100 characters")
            del rows
            n = total = 0
            async with c.transaction():
                async for r in c.cursor(BIG_QUERY, prefetch=2000):
                    n += 1
                    total += r[0]
                cur = await c.cursor("SELECT g FROM generate_series(1, 10000) g")
                first = await cur.fetch(3)
                await cur.forward(5000)
                nxt = await cur.fetchrow()
            expect_eq((n, total), (BIG_ROWS, BIG_SUM), "cursor iteration: rows and sum")
            expect_eq(([r[0] for r in first], nxt[0]), ([1, 2, 3], 5004), "cursor fetch/forward")
            expect_eq(await c.fetchval("SELECT 1"), 1, "query after the large results")
        finally:
            await c.close(timeout=5)

    async def run(self):
        p = "asyncpg."
        await run_async(p + "setup", self.setup)
        if self.t is None:
            return
        await run_async(p + "routing", self.routing)
        await run_async(p + "writes_on_primary", self.writes_on_primary)
        await run_async(p + "transactions", self.transactions)
        await run_async(p + "session_state", self.session_state)
        await run_async(p + "temp_tables", self.temp_tables)
        await run_async(p + "advisory_locks", self.advisory_locks)
        await run_async(p + "listen_notify", self.listen_notify)
        await run_async(p + "copy", self.copy)
        await run_async(p + "copy_records", self.copy_records)
        await run_async(p + "types", self.types)
        await run_async(p + "prepared_reuse", self.prepared_reuse)
        await run_async(p + "ddl_changes_result", self.ddl_changes_result)
        await run_async(p + "cancel", self.cancel)
        await run_async(p + "errors", self.errors)
        await run_async(p + "pool", self.pool)
        await run_async(p + "large_result", self.large_result)


def main():
    for driver in DRIVERS:
        if driver == "psycopg":
            Psycopg().run()
        elif driver == "asyncpg":
            loop = asyncio.new_event_loop()
            loop.run_until_complete(Asyncpg().run())
            # The loop is not closed: a hung check's task may still be pending.
        else:
            sys.exit(f"unknown driver {driver!r}: use psycopg or asyncpg")
    print(f"{len(FAILURES)} failed, {time.monotonic() - STARTED:.1f} s", file=sys.stderr, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
