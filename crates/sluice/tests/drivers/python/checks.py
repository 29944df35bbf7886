"""Drives sluice with a real Python MySQL driver and checks what an application would see.

Usage: checks.py pymysql|connector, with SLUICE_PORT (sluice's read/write-splitting port) and
PRIMARY_PORT (the primary, directly) in the environment. Server 1 is the primary, servers 2
and 3 are replicas; user app/app.

Covers: routing of autocommit reads and transactions (commit, rollback), session variables,
character sets and the current schema across replicas, parameterized queries (client-side for
both drivers, and server-side prepared statements for mysql-connector-python) with all common
column types, temporary tables, user variables, LAST_INSERT_ID with a concurrent session,
multi-statements, large and partly read results, a 20 MB BLOB (also sent as long data by
mysql-connector-python), a duplicate-key error, and (mysql-connector-python) resetting a
session as its connection pool does.

Prints `OK <check>` per check; on the first failure prints `FAIL <check>: ...` and exits 1.
CHECKS=name,name in the environment runs only those checks (after `setup`).
"""

import datetime
import hashlib
import io
import os
import random
import sys
import time
import traceback
from decimal import Decimal

DRIVER = sys.argv[1] if len(sys.argv) > 1 else ""
SLUICE_PORT = int(os.environ["SLUICE_PORT"])
PRIMARY_PORT = int(os.environ["PRIMARY_PORT"])
HOST = "127.0.0.1"
DB = "pydrv_" + DRIVER
OTHER_DB = "pydrv_" + DRIVER + "_other"
MAX_PACKET = 64 * 1024 * 1024
PRIMARY_ID = 1
REPLICA_IDS = {2, 3}


class CheckFailed(Exception):
    pass


# --- Driver differences, kept in one place ------------------------------------------------

if DRIVER == "pymysql":
    import pymysql
    import pymysql.cursors
    from pymysql.constants import CLIENT

    DriverError = pymysql.err.MySQLError
    # PyMySQL has no server-side prepared statements: parameters are always interpolated.
    CURSOR_KINDS = ["text"]

    def connect(
        port=SLUICE_PORT, database=DB, autocommit=True, multi_statements=False, collation=None
    ):
        """autocommit=None keeps the driver's default."""
        options = dict(
            host=HOST,
            port=port,
            user="app",
            password="app",
            database=database,
            charset="utf8mb4",
            max_allowed_packet=MAX_PACKET,
        )
        if autocommit is not None:
            options["autocommit"] = autocommit
        if multi_statements:
            options["client_flag"] = CLIENT.MULTI_STATEMENTS
        if collation is not None:
            options["collation"] = collation
        return pymysql.connect(**options)

    def error_code(err):
        return err.args[0]

    def select_db(conn, name):
        conn.select_db(name)  # COM_INIT_DB

    def begin(conn):
        conn.begin()  # BEGIN

    def new_cursor(conn, kind="text"):
        assert kind == "text"
        return conn.cursor()

    def streaming_cursor(conn):
        """A cursor that reads rows from the network as they are fetched."""
        return conn.cursor(pymysql.cursors.SSCursor)

    def discard_rest(conn, cur):
        cur.close()  # reads and drops the remaining rows

elif DRIVER == "connector":
    import mysql.connector
    from mysql.connector.constants import ClientFlag

    DriverError = mysql.connector.Error
    # "prepared" uses the binary protocol (COM_STMT_PREPARE / COM_STMT_EXECUTE).
    CURSOR_KINDS = ["text", "prepared"]

    def connect(
        port=SLUICE_PORT, database=DB, autocommit=True, multi_statements=False, collation=None
    ):
        """autocommit=None keeps the driver's default."""
        options = dict(
            host=HOST,
            port=port,
            user="app",
            password="app",
            charset="utf8mb4",
            use_pure=True,
            # The connector enables multi-statements by default; keep it explicit.
            client_flags=[] if multi_statements else [-ClientFlag.MULTI_STATEMENTS],
        )
        if database is not None:
            options["database"] = database
        if autocommit is not None:
            options["autocommit"] = autocommit
        if collation is not None:
            options["collation"] = collation
        return mysql.connector.connect(**options)

    def error_code(err):
        return err.errno

    def select_db(conn, name):
        conn.cmd_init_db(name)  # COM_INIT_DB

    def begin(conn):
        conn.start_transaction()  # START TRANSACTION

    def new_cursor(conn, kind="text"):
        return conn.cursor(prepared=(kind == "prepared"))

    def streaming_cursor(conn):
        """A cursor that reads rows from the network as they are fetched."""
        return conn.cursor(buffered=False)

    def discard_rest(conn, cur):
        conn.consume_results()
        cur.close()

else:
    sys.exit("usage: checks.py pymysql|connector")


# --- Helpers ------------------------------------------------------------------------------


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


def expect_eq(actual, expected, what):
    if actual != expected:
        raise CheckFailed("%s: got %r, expected %r" % (what, actual, expected))


def normalize(value):
    """Drivers return binary strings as bytes or bytearray; compare them as bytes."""
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def rows(cur, sql, params=None):
    if params is None:
        cur.execute(sql)
    else:
        cur.execute(sql, params)
    return [tuple(normalize(v) for v in row) for row in cur.fetchall()]


def one_row(cur, sql, params=None):
    result = rows(cur, sql, params)
    expect(len(result) == 1, "%s: expected one row, got %d" % (sql, len(result)))
    return result[0]


def scalar(cur, sql, params=None):
    return one_row(cur, sql, params)[0]


def server_error(action):
    """Runs `action`; returns the server error code it raised (fails if none)."""
    try:
        action()
    except DriverError as err:
        return error_code(err)
    raise CheckFailed("expected a server error, but the statement succeeded")


def session_info(conn):
    """SHOW SLUICE SESSION as a dict."""
    cur = conn.cursor()
    cur.execute("SHOW SLUICE SESSION")
    names = [d[0] for d in cur.description]
    values = cur.fetchone()
    cur.close()
    return dict(zip(names, values))


def pin_reasons(conn):
    reasons = session_info(conn)["pin_reasons"]
    return set(reasons.split(",")) if reasons else set()


def on_primary(sql, params=None):
    """Runs a statement on a direct connection to the primary; returns all rows."""
    conn = connect(port=PRIMARY_PORT, autocommit=True)
    try:
        return rows(conn.cursor(), sql, params)
    finally:
        conn.close()


def sync_replicas(timeout=60):
    """Waits until both replicas have applied everything the primary has written so far."""
    pos = on_primary("SELECT @@gtid_binlog_pos")[0][0]
    # No schema: sluice checks a login's schema on a replica, which may not have DB yet.
    conn = connect(database=None, autocommit=True)
    cur = conn.cursor()
    caught_up = set()
    deadline = time.time() + timeout
    while caught_up != REPLICA_IDS:
        expect(time.time() < deadline, "replicas did not reach GTID %s" % pos)
        sid, waited = one_row(cur, "SELECT @@server_id, MASTER_GTID_WAIT(%s, 5)", (pos,))
        expect(sid in REPLICA_IDS, "autocommit read ran on server %r" % sid)
        if waited == 0:
            caught_up.add(sid)
    conn.close()


def read_from_both_replicas(cur, sql, params=None, tries=60):
    """Runs an autocommit read whose first column is @@server_id until both replicas have
    answered; returns {server_id: rest of the rows}."""
    answers = {}
    for _ in range(tries):
        result = rows(cur, sql, params)
        sid = result[0][0]
        expect(sid in REPLICA_IDS, "autocommit read ran on server %r: %s" % (sid, sql))
        answers[sid] = [row[1:] for row in result]
        if set(answers) == REPLICA_IDS:
            return answers
    raise CheckFailed("reads never reached both replicas: %r" % sorted(answers))


def all_result_sets(cur, sql):
    """Runs a multi-statement; returns one entry per result: rows, or ('OK', affected rows)."""
    cur.execute(sql)
    results = []
    while True:
        if cur.description is not None:
            results.append([tuple(row) for row in cur.fetchall()])
        else:
            results.append(("OK", cur.rowcount))
        if not cur.nextset():
            return results


# --- Checks -------------------------------------------------------------------------------


def check_setup():
    conn = connect(database=None, autocommit=True)
    cur = conn.cursor()
    for db in (DB, OTHER_DB):
        cur.execute("DROP DATABASE IF EXISTS " + db)
        cur.execute("CREATE DATABASE %s CHARACTER SET utf8mb4" % db)
    cur.execute("CREATE TABLE %s.marker (name VARCHAR(20))" % OTHER_DB)
    cur.execute("INSERT INTO %s.marker VALUES ('other')" % OTHER_DB)
    conn.close()
    sync_replicas()
    expect_eq(on_primary("SELECT name FROM %s.marker" % OTHER_DB), [("other",)], "marker row")


def check_routing():
    # autocommit on: plain reads spread over the replicas.
    conn = connect(autocommit=True)
    cur = conn.cursor()
    seen = {scalar(cur, "SELECT @@server_id") for _ in range(40)}
    expect_eq(seen, REPLICA_IDS, "server ids of 40 autocommit reads")
    expect_eq(session_info(conn)["pinned"], "NO", "pinned after autocommit reads")
    conn.close()

    # The driver's default (autocommit off): every statement is in a transaction, on the primary.
    conn = connect(autocommit=None)
    cur = conn.cursor()
    expect_eq(scalar(cur, "SELECT @@autocommit"), 0, "driver default autocommit")
    for _ in range(5):
        expect_eq(scalar(cur, "SELECT @@server_id"), PRIMARY_ID, "server id with autocommit off")
    # Reading a table starts a transaction, which holds the primary connection.
    expect_eq(
        one_row(cur, "SELECT @@server_id, COUNT(*) FROM %s.marker" % OTHER_DB),
        (PRIMARY_ID, 1),
        "table read with autocommit off",
    )
    info = session_info(conn)
    expect_eq((info["pinned"], info["in_transaction"]), ("YES", "YES"), "session state")
    expect("transaction" in pin_reasons(conn), "pin reasons %r" % info["pin_reasons"])
    conn.close()


def check_transaction_commit():
    setup = connect(autocommit=True)
    setup.cursor().execute("CREATE TABLE trx (id INT PRIMARY KEY, v VARCHAR(20))")
    setup.close()

    # Implicit transaction (autocommit off).
    conn = connect(autocommit=False)
    cur = conn.cursor()
    cur.execute("INSERT INTO trx VALUES (1, 'implicit')")
    expect_eq(
        one_row(cur, "SELECT @@server_id, v FROM trx WHERE id = 1"),
        (PRIMARY_ID, "implicit"),
        "own uncommitted write inside the transaction",
    )
    info = session_info(conn)
    expect_eq((info["pinned"], info["in_transaction"]), ("YES", "YES"), "session state")
    expect("transaction" in pin_reasons(conn), "pin reasons %r" % info["pin_reasons"])
    expect_eq(on_primary("SELECT v FROM trx WHERE id = 1"), [], "uncommitted row seen by others")
    conn.commit()
    expect_eq(on_primary("SELECT v FROM trx WHERE id = 1"), [("implicit",)], "committed row")
    conn.close()

    # Explicit transaction with autocommit on; afterwards reads go back to the replicas.
    conn = connect(autocommit=True)
    cur = conn.cursor()
    begin(conn)
    cur.execute("INSERT INTO trx VALUES (2, 'explicit')")
    for _ in range(5):
        expect_eq(
            one_row(cur, "SELECT @@server_id, COUNT(*) FROM trx"),
            (PRIMARY_ID, 2),
            "read inside an explicit transaction",
        )
    conn.commit()
    expect_eq(session_info(conn)["pinned"], "NO", "pinned after COMMIT")
    expect_eq(on_primary("SELECT v FROM trx WHERE id = 2"), [("explicit",)], "committed row")
    seen = {scalar(cur, "SELECT @@server_id") for _ in range(20)}
    expect_eq(seen, REPLICA_IDS, "server ids of autocommit reads after COMMIT")
    conn.close()


def check_transaction_rollback():
    # Explicit transaction.
    conn = connect(autocommit=True)
    cur = conn.cursor()
    begin(conn)
    cur.execute("INSERT INTO trx VALUES (10, 'rolled back')")
    expect_eq(
        one_row(cur, "SELECT @@server_id, v FROM trx WHERE id = 10"),
        (PRIMARY_ID, "rolled back"),
        "own write before ROLLBACK",
    )
    conn.rollback()
    expect_eq(on_primary("SELECT * FROM trx WHERE id = 10"), [], "row after ROLLBACK (primary)")
    expect_eq(
        rows(cur, "SELECT /* sluice:writer */ * FROM trx WHERE id = 10"),
        [],
        "row after ROLLBACK (through sluice)",
    )
    expect_eq(session_info(conn)["pinned"], "NO", "pinned after ROLLBACK")
    conn.close()

    # Implicit transaction (autocommit off), several statements.
    conn = connect(autocommit=False)
    cur = conn.cursor()
    cur.execute("INSERT INTO trx VALUES (11, 'a'), (12, 'b')")
    cur.execute("UPDATE trx SET v = 'changed' WHERE id = 1")
    expect_eq(scalar(cur, "SELECT v FROM trx WHERE id = 1"), "changed", "own update")
    conn.rollback()
    expect_eq(on_primary("SELECT * FROM trx WHERE id IN (11, 12)"), [], "rows after ROLLBACK")
    expect_eq(on_primary("SELECT v FROM trx WHERE id = 1"), [("implicit",)], "update undone")
    conn.close()


def check_session_variables():
    conn = connect(autocommit=True)
    text = conn.cursor()
    text.execute("SET SESSION sql_mode = 'PIPES_AS_CONCAT,STRICT_ALL_TABLES'")
    text.execute("SET time_zone = '+05:30'")
    text.execute("SET SESSION sql_select_limit = 7")
    select_db(conn, OTHER_DB)
    expect_eq(session_info(conn)["pinned"], "NO", "session variables must not pin")

    state = (
        "SELECT @@server_id, @@sql_mode, @@time_zone, @@sql_select_limit,"
        " DATABASE(), 'a' || 'b', FROM_UNIXTIME(0)"
    )
    expected = (
        "PIPES_AS_CONCAT,STRICT_ALL_TABLES",
        "+05:30",
        7,
        OTHER_DB,
        "ab",
        datetime.datetime(1970, 1, 1, 5, 30),
    )
    seen = set()
    for i in range(30):
        row = one_row(text, state)
        seen.add(row[0])
        expect_eq(row[1:], expected, "session state on server %r (read %d)" % (row[0], i))
        limited = rows(text, "SELECT seq FROM seq_1_to_100")
        expect_eq(len(limited), 7, "rows under sql_select_limit")
        # An unqualified table name resolves in the session's schema.
        expect_eq(scalar(text, "SELECT name FROM marker"), "other", "table of the current schema")
    expect_eq(seen, REPLICA_IDS, "server ids of reads with session variables")

    if "prepared" in CURSOR_KINDS:
        prepared = new_cursor(conn, "prepared")
        for i in range(10):
            row = one_row(prepared, "SELECT @@server_id, @@time_zone, FROM_UNIXTIME(%s)", (0,))
            expect_eq(
                row[1:],
                ("+05:30", datetime.datetime(1970, 1, 1, 5, 30)),
                "prepared read on server %r (read %d)" % (row[0], i),
            )

    # Changing them again takes effect everywhere too.
    text.execute("SET time_zone = '-03:00', sql_select_limit = DEFAULT")
    select_db(conn, DB)
    for i in range(20):
        row = one_row(text, "SELECT @@server_id, @@time_zone, FROM_UNIXTIME(0), DATABASE()")
        expect_eq(
            row[1:],
            ("-03:00", datetime.datetime(1969, 12, 31, 21, 0), DB),
            "changed state on server %r (read %d)" % (row[0], i),
        )
        expect_eq(len(rows(text, "SELECT seq FROM seq_1_to_100")), 100, "rows without limit")
    conn.close()


def check_session_charset():
    """SET NAMES changes four variables; all of them must follow the session."""
    charset_vars = (
        "@@character_set_client, @@character_set_connection, @@character_set_results,"
        " @@collation_connection"
    )
    on_replica = "SELECT @@server_id, " + charset_vars
    on_writer = "SELECT /* sluice:writer */ " + charset_vars

    # The driver's own collation option (it sends SET NAMES ... COLLATE after connecting).
    conn = connect(autocommit=True, collation="utf8mb4_unicode_ci")
    expected = ("utf8mb4", "utf8mb4", "utf8mb4", "utf8mb4_unicode_ci")
    answers = read_from_both_replicas(conn.cursor(), on_replica)
    for sid, got in sorted(answers.items()):
        expect_eq(got, [expected], "collation=utf8mb4_unicode_ci option, on server %d" % sid)
    conn.close()

    cases = [
        (
            "SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci",
            ("utf8mb4", "utf8mb4", "utf8mb4", "utf8mb4_unicode_ci"),
        ),
        ("SET NAMES latin1", ("latin1", "latin1", "latin1", "latin1_swedish_ci")),
        ("SET NAMES utf8mb4 COLLATE utf8mb4_bin", ("utf8mb4", "utf8mb4", "utf8mb4", "utf8mb4_bin")),
    ]
    conn = connect(autocommit=True)
    cur = conn.cursor()
    for statement, expected in cases:
        cur.execute(statement)
        expect_eq(one_row(cur, on_writer), expected, "after %r, on the primary" % statement)
        answers = read_from_both_replicas(cur, on_replica)
        for sid, got in sorted(answers.items()):
            expect_eq(got, [expected], "after %r, on server %d" % (statement, sid))
    # The collation is really in force: utf8mb4_bin compares case-sensitively.
    expect_eq(scalar(cur, "SELECT 'a' = 'A'"), 0, "comparison under utf8mb4_bin")
    conn.close()


# Rows covering the common column types; values chosen to catch truncation, sign, precision,
# charset and escaping mistakes.
TYPES_DDL = (
    "CREATE TABLE %s (id INT PRIMARY KEY, i INT, bi BIGINT, d DECIMAL(30,10), f DOUBLE,"
    " s VARCHAR(100), vb VARBINARY(300), b BLOB, dt DATE, dtm DATETIME(6), tm TIME(6), n INT)"
    " DEFAULT CHARSET=utf8mb4"
)
TYPES_COLUMNS = "id, i, bi, d, f, s, vb, b, dt, dtm, tm, n"
ALL_BYTES = bytes(range(256))
TYPE_ROWS = [
    (
        1,
        2147483647,
        2**32 + 7,
        Decimal("12345678901234567890.0123456789"),
        3.141592653589793,
        "héllo ✓ 🚀",
        ALL_BYTES,
        ALL_BYTES * 4,
        datetime.date(2024, 2, 29),
        datetime.datetime(2024, 2, 29, 23, 59, 58, 123456),
        datetime.timedelta(hours=12, minutes=34, seconds=56, microseconds=789),
        None,
    ),
    (
        2,
        -2147483648,
        -(2**40) - 3,
        Decimal("-0.0000000001"),
        -1.5e300,
        "",
        b"",
        b"\x00",
        datetime.date(1970, 1, 1),
        datetime.datetime(1999, 12, 31, 0, 0, 0, 1),
        datetime.timedelta(0),
        None,
    ),
    (
        3,
        0,
        9223372036854775807,
        Decimal("0.0000000000"),
        0.1 + 0.2,
        "quote ' \" \\ % %s ? -- /* */ ;",
        b"'\\\x00\x1a\"\r\n",
        bytes(reversed(ALL_BYTES)),
        datetime.date(9999, 12, 31),
        datetime.datetime(2038, 1, 19, 3, 14, 8),
        datetime.timedelta(hours=838, minutes=59, seconds=59),
        None,
    ),
    (
        4,
        -1,
        -9223372036854775808,
        Decimal("-99999999999999999999.9999999999"),
        5e-324,
        "日本語 Ελληνικά",
        b"\xff\xfe",
        ALL_BYTES * 64,
        datetime.date(1000, 1, 1),
        datetime.datetime(1000, 1, 1, 0, 0, 0, 0),
        -datetime.timedelta(hours=1, minutes=2, seconds=3),
        None,
    ),
]


def check_parameters(kind):
    # One cursor per statement: a prepared cursor re-prepares whenever its statement changes.
    table = "types_" + kind
    conn = connect(autocommit=True)
    conn.cursor().execute(TYPES_DDL % table)
    placeholders = ", ".join(["%s"] * len(TYPE_ROWS[0]))
    insert = "INSERT INTO %s (%s) VALUES (%s)" % (table, TYPES_COLUMNS, placeholders)
    insert_cur = new_cursor(conn, kind)
    insert_cur.execute(insert, TYPE_ROWS[0])
    insert_cur.executemany(insert, TYPE_ROWS[1:])
    expect_eq(
        on_primary("SELECT COUNT(*), SUM(b = %s) FROM " + table, (ALL_BYTES * 4,)),
        [(4, Decimal(1))],
        "rows on the primary",
    )

    select = "SELECT %s FROM %s WHERE id = %%s" % (TYPES_COLUMNS, table)
    hinted = "SELECT /* sluice:writer */ %s FROM %s WHERE id = %%s" % (TYPES_COLUMNS, table)
    select_cur = new_cursor(conn, kind)
    hinted_cur = new_cursor(conn, kind)
    for expected in TYPE_ROWS:
        row_id = expected[0]
        # Inside a transaction, on the primary.
        begin(conn)
        got = one_row(select_cur, select, (row_id,))
        conn.commit()
        expect_eq(got, expected, "row %d read in a transaction" % row_id)
        # Routed to the primary by a hint.
        got = one_row(hinted_cur, hinted, (row_id,))
        expect_eq(got, expected, "row %d via the writer hint" % row_id)

    # From both replicas, with autocommit on.
    sync_replicas()
    by_server = read_from_both_replicas(
        new_cursor(conn, kind),
        "SELECT @@server_id, %s FROM %s WHERE id > %%s ORDER BY id" % (TYPES_COLUMNS, table),
        (0,),
    )
    for sid, got in sorted(by_server.items()):
        expect_eq(got, TYPE_ROWS, "rows read from server %d" % sid)

    # Parameters echoed back give the same as on a direct connection.
    echo = "SELECT " + ", ".join(["%s"] * len(TYPE_ROWS[0]))
    direct = connect(port=PRIMARY_PORT, autocommit=True)
    echo_cur = new_cursor(conn, kind)
    direct_cur = new_cursor(direct, kind)
    for values in TYPE_ROWS:
        expect_eq(
            one_row(echo_cur, echo, values),
            one_row(direct_cur, echo, values),
            "echoed parameters (row %d) through sluice vs direct" % values[0],
        )
    direct.close()

    # The same statement executed again and again as reads move between the replicas (a
    # prepared statement is prepared on each backend connection that runs it).
    repeat_cur = new_cursor(conn, kind)
    seen = set()
    for i in range(30):
        sid, d, s, b = one_row(
            repeat_cur, "SELECT @@server_id, d, s, b FROM %s WHERE id = %%s" % table, (1,)
        )
        seen.add(sid)
        expect_eq(
            (d, s, b),
            (TYPE_ROWS[0][3], TYPE_ROWS[0][5], TYPE_ROWS[0][7]),
            "repeated read %d on server %r" % (i, sid),
        )
    expect_eq(seen, REPLICA_IDS, "servers of the repeated reads")
    conn.close()


def check_parameters_text():
    check_parameters("text")


def check_parameters_prepared():
    check_parameters("prepared")


def check_temporary_tables():
    for kind in CURSOR_KINDS:
        conn = connect(autocommit=True)
        text = conn.cursor()
        text.execute("CREATE TEMPORARY TABLE tmp (id INT PRIMARY KEY, s VARCHAR(20))")
        insert_cur = new_cursor(conn, kind)
        count_cur = new_cursor(conn, kind)
        first_cur = new_cursor(conn, kind)
        insert_cur.execute("INSERT INTO tmp VALUES (%s, %s)", (1, "één"))
        expect("temporary_tables" in pin_reasons(conn), "temporary table should pin")
        for i in range(2, 22):
            insert_cur.execute("INSERT INTO tmp VALUES (%s, %s)", (i, "row %d" % i))
            count = scalar(count_cur, "SELECT COUNT(*) FROM tmp")
            expect_eq(count, i, "rows in the temporary table")
            first = scalar(first_cur, "SELECT s FROM tmp WHERE id = %s", (1,))
            expect_eq(first, "één", "first row of the temporary table")
        # While pinned for a temporary table, every statement runs on that connection.
        expect_eq(scalar(text, "SELECT @@server_id"), PRIMARY_ID, "server while pinned")
        text.execute("DROP TEMPORARY TABLE tmp")
        expect_eq(session_info(conn)["pinned"], "NO", "pinned after DROP TEMPORARY TABLE")
        code = server_error(lambda: rows(new_cursor(conn, kind), "SELECT COUNT(*) FROM tmp"))
        expect_eq(code, 1146, "error selecting the dropped temporary table (%s cursor)" % kind)
        seen = {scalar(text, "SELECT @@server_id") for _ in range(20)}
        expect_eq(seen, REPLICA_IDS, "server ids after the temporary table is gone")
        conn.close()


def check_user_variables():
    conn = connect(autocommit=True)
    cur = conn.cursor()
    cur.execute("CREATE TABLE uv (id INT AUTO_INCREMENT PRIMARY KEY, v BIGINT, s VARCHAR(20))")
    cur.execute("SET @x = 42, @s = 'héllo ✓'")
    expect("user_variables" in pin_reasons(conn), "user variables should pin")
    for i in range(20):
        expect_eq(one_row(cur, "SELECT @x, @s"), (42, "héllo ✓"), "user variables (read %d)" % i)
    # Reads that do not touch user variables still go to the replicas.
    seen = {scalar(cur, "SELECT @@server_id") for _ in range(20)}
    expect_eq(seen, REPLICA_IDS, "server ids of reads without user variables")

    cur.execute("INSERT INTO uv (v, s) VALUES (@x, @s)")
    expect_eq(
        on_primary("SELECT v, s FROM uv"), [(42, "héllo ✓")], "row inserted from user variables"
    )
    expect_eq(scalar(cur, "SELECT @x := @x + 1"), 43, "assignment in a SELECT")
    expect_eq(scalar(cur, "SELECT @x"), 43, "user variable after the assignment")
    cur.execute("INSERT INTO uv (v, s) SELECT @x * 2, 'doubled'")
    expect_eq(
        on_primary("SELECT v, s FROM uv ORDER BY id"),
        [(42, "héllo ✓"), (86, "doubled")],
        "rows on the primary",
    )
    if "prepared" in CURSOR_KINDS:
        prepared = new_cursor(conn, "prepared")
        for i in range(5):
            expect_eq(scalar(prepared, "SELECT @x + %s", (i,)), 43 + i, "prepared @x + ?")
    # Replicated like any write, so it really went to the primary.
    sync_replicas()
    answers = read_from_both_replicas(cur, "SELECT @@server_id, COUNT(*) FROM uv")
    for sid, got in answers.items():
        expect_eq(got, [(2,)], "rows of uv on server %d" % sid)
    conn.close()


def check_last_insert_id():
    a = connect(autocommit=True)
    b = connect(autocommit=True)
    ca = a.cursor()
    cb = b.cursor()
    ca.execute("CREATE TABLE ids (id BIGINT AUTO_INCREMENT PRIMARY KEY, who VARCHAR(10))")
    ca.execute("CREATE TABLE child (parent BIGINT)")
    for round_no in range(5):
        ca.execute("INSERT INTO ids (who) VALUES ('a')")
        a_id = ca.lastrowid
        cb.execute("INSERT INTO ids (who) VALUES ('b'), ('b')")
        b_id = cb.lastrowid
        expect(b_id > a_id, "round %d: ids a=%r b=%r" % (round_no, a_id, b_id))
        expect_eq(scalar(ca, "SELECT LAST_INSERT_ID()"), a_id, "LAST_INSERT_ID() of session a")
        expect_eq(scalar(cb, "SELECT LAST_INSERT_ID()"), b_id, "LAST_INSERT_ID() of session b")
        # Not the bare form: runs on a replica, still the session's own value.
        sid, value = one_row(ca, "SELECT @@server_id, LAST_INSERT_ID() + 0")
        expect_eq(value, a_id, "LAST_INSERT_ID() + 0 of session a on server %r" % sid)
        ca.execute("INSERT INTO child VALUES (LAST_INSERT_ID())")
        expect_eq(
            on_primary("SELECT who FROM ids WHERE id = %s", (a_id,)), [("a",)], "a's row id"
        )
    expect_eq(
        on_primary("SELECT COUNT(*) FROM child JOIN ids ON ids.id = child.parent AND who = 'a'"),
        [(5,)],
        "children pointing at session a's rows",
    )

    # In a transaction on the driver's default settings.
    c = connect(autocommit=None)
    cc = c.cursor()
    cc.execute("INSERT INTO ids (who) VALUES ('c')")
    c_id = cc.lastrowid
    ca.execute("INSERT INTO ids (who) VALUES ('a')")
    expect_eq(scalar(cc, "SELECT LAST_INSERT_ID()"), c_id, "LAST_INSERT_ID() in a transaction")
    c.commit()
    cb.execute("INSERT INTO ids (who) VALUES ('b')")
    expect_eq(scalar(cc, "SELECT LAST_INSERT_ID()"), c_id, "LAST_INSERT_ID() after COMMIT")

    if "prepared" in CURSOR_KINDS:
        pa = new_cursor(a, "prepared")
        pa.execute("INSERT INTO ids (who) VALUES (%s)", ("pa",))
        pa_id = pa.lastrowid
        cb.execute("INSERT INTO ids (who) VALUES ('b')")
        expect_eq(scalar(pa, "SELECT LAST_INSERT_ID()"), pa_id, "prepared LAST_INSERT_ID()")
        expect_eq(
            on_primary("SELECT who FROM ids WHERE id = %s", (pa_id,)), [("pa",)], "prepared id"
        )
    for conn in (a, b, c):
        conn.close()


def check_multi_statements():
    setup = connect(autocommit=True)
    setup.cursor().execute("CREATE TABLE ms (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
    setup.close()

    conn = connect(autocommit=True, multi_statements=True)
    cur = conn.cursor()
    results = all_result_sets(
        cur,
        "SELECT 1 AS a; SELECT 'two', 2; INSERT INTO ms (v) VALUES (10), (20);"
        " SELECT @@server_id, COUNT(*) FROM ms",
    )
    expect_eq(
        results,
        [[(1,)], [("two", 2)], ("OK", 2), [(PRIMARY_ID, 2)]],
        "result sets of a multi-statement with a write",
    )
    results = all_result_sets(cur, "SELECT @@server_id; SELECT @@server_id")
    expect_eq(len(results), 2, "result sets of a read-only multi-statement")
    expect_eq(results[0], results[1], "both statements ran on the same server")
    # State set in a multi-statement follows the session.
    all_result_sets(cur, "SET time_zone = '+01:00'; SELECT 1")
    for _ in range(10):
        expect_eq(scalar(cur, "SELECT @@time_zone"), "+01:00", "time_zone from a multi-statement")

    # An error in the middle ends the batch; the connection stays usable.
    def failing_batch():
        all_result_sets(cur, "SELECT 1; SELECT * FROM no_such_table; SELECT 3")

    expect_eq(server_error(failing_batch), 1146, "error in a multi-statement")
    expect_eq(scalar(cur, "SELECT 42"), 42, "connection after the failed multi-statement")
    conn.close()
    expect_eq(on_primary("SELECT v FROM ms ORDER BY id"), [(10,), (20,)], "rows on the primary")

    # Without the option the server refuses a multi-statement, as on a direct connection.
    conn = connect(autocommit=True)
    code = server_error(lambda: all_result_sets(conn.cursor(), "SELECT 1; SELECT 2"))
    expect_eq(code, 1064, "multi-statement without CLIENT_MULTI_STATEMENTS")
    conn.close()

    # A session without multi-statements that held a primary connection (user variable) and
    # ended must not leave that connection refusing them for the next session.
    conn = connect(autocommit=True)
    conn.cursor().execute("SET @pinned = 1")
    conn.close()
    time.sleep(0.5)  # the held connection is reset in the background
    for attempt in range(3):
        conn = connect(autocommit=True, multi_statements=True)
        cur = conn.cursor()
        try:
            results = all_result_sets(cur, "SELECT /* sluice:writer */ 1; SELECT 2")
        except DriverError as err:
            raise CheckFailed(
                "attempt %d: multi-statement on the primary after another session without"
                " multi-statements was pinned there and ended: %s" % (attempt, err)
            ) from err
        expect_eq(results, [[(1,)], [(2,)]], "result sets on the primary")
        conn.close()


def check_large_result():
    n = 200000
    query = "SELECT seq, REPEAT('x', 100) FROM seq_1_to_%d" % n
    padding = "x" * 100
    for kind in CURSOR_KINDS:
        conn = connect(autocommit=True)
        cur = new_cursor(conn, kind)
        cur.execute(query)
        count = 0
        total = 0
        for seq, text in cur.fetchall():
            count += 1
            total += seq
            if text != padding:
                raise CheckFailed("row %d: unexpected text %r" % (seq, text[:20]))
        expect_eq((count, total), (n, n * (n + 1) // 2), "row count and sum (%s cursor)" % kind)
        expect_eq(scalar(cur, "SELECT 1"), 1, "connection after the large result")
        conn.close()

    # Read a few rows, stall while the rest waits, then drop it: the session stays usable and
    # other sessions are not held up meanwhile.
    conn = connect(autocommit=True)
    cur = streaming_cursor(conn)
    cur.execute(query)
    expect_eq([row[0] for row in cur.fetchmany(10)], list(range(1, 11)), "first streamed rows")
    other = connect(autocommit=True)
    expect_eq(scalar(other.cursor(), "SELECT 2"), 2, "another session during the stall")
    other.close()
    time.sleep(0.5)
    discard_rest(conn, cur)
    expect_eq(scalar(conn.cursor(), "SELECT 3"), 3, "connection after the dropped rows")
    conn.close()


def check_large_blob():
    """A 20 MB value spans two protocol packets each way."""
    blob = random.Random(7).randbytes(20 * 1024 * 1024)
    digest = hashlib.sha256(blob).hexdigest()
    conn = connect(autocommit=True)
    text = conn.cursor()
    text.execute("CREATE TABLE blobs (id INT PRIMARY KEY, b LONGBLOB)")
    for row_id, kind in enumerate(CURSOR_KINDS, start=1):
        new_cursor(conn, kind).execute("INSERT INTO blobs VALUES (%s, %s)", (row_id, blob))
        expect_eq(
            on_primary("SELECT LENGTH(b), SHA2(b, 256) FROM blobs WHERE id = %s", (row_id,)),
            [(len(blob), digest)],
            "BLOB stored on the primary (%s cursor)" % kind,
        )
        # Read back as text rows only: mysql-connector-python (pure Python) splits a binary
        # protocol row above 16 MB into two rows, on a direct connection too.
        got = scalar(text, "SELECT /* sluice:writer */ b FROM blobs WHERE id = %s", (row_id,))
        expect(got == blob, "BLOB read back from the primary differs (%s cursor)" % kind)
    if "prepared" in CURSOR_KINDS:
        # mysql-connector-python streams a file-like parameter with COM_STMT_SEND_LONG_DATA.
        insert = new_cursor(conn, "prepared")
        insert.execute("INSERT INTO blobs VALUES (%s, %s)", (10, io.BytesIO(blob)))
        expect_eq(
            on_primary("SELECT LENGTH(b), SHA2(b, 256) FROM blobs WHERE id = 10"),
            [(len(blob), digest)],
            "BLOB sent as long data, stored on the primary",
        )
    sync_replicas()
    answers = read_from_both_replicas(
        text, "SELECT @@server_id, b FROM blobs WHERE id = 1", tries=20
    )
    for sid, got in sorted(answers.items()):
        expect(got == [(blob,)], "BLOB read from server %d differs" % sid)
    conn.close()


def check_duplicate_key():
    conn = connect(autocommit=True)
    cur = conn.cursor()
    cur.execute("CREATE TABLE dk (id INT PRIMARY KEY)")
    cur.execute("INSERT INTO dk VALUES (1)")
    for kind in CURSOR_KINDS:
        kcur = new_cursor(conn, kind)
        try:
            kcur.execute("INSERT INTO dk VALUES (%s)", (1,))
            raise CheckFailed("duplicate insert succeeded (%s cursor)" % kind)
        except DriverError as err:
            expect_eq(error_code(err), 1062, "error code (%s cursor)" % kind)
            expect("Duplicate entry '1' for key 'PRIMARY'" in str(err), "message: %s" % err)
        expect_eq(scalar(kcur, "SELECT 1"), 1, "connection after the error (%s cursor)" % kind)
    cur.execute("INSERT INTO dk VALUES (2)")

    # Inside a transaction the error undoes only the statement.
    conn2 = connect(autocommit=False)
    cur2 = conn2.cursor()
    cur2.execute("INSERT INTO dk VALUES (3)")
    expect_eq(server_error(lambda: cur2.execute("INSERT INTO dk VALUES (1)")), 1062, "in trx")
    expect_eq(scalar(cur2, "SELECT COUNT(*) FROM dk"), 3, "rows seen in the transaction")
    conn2.commit()
    expect_eq(on_primary("SELECT id FROM dk ORDER BY id"), [(1,), (2,), (3,)], "rows after COMMIT")
    conn.close()
    conn2.close()


def check_reset_session():
    """mysql-connector-python's pool resets each connection it hands out (COM_RESET_CONNECTION,
    then the given variables)."""
    conn = connect(autocommit=True)
    cur = conn.cursor()
    cur.execute("SET @x = 5")
    cur.execute("SET time_zone = '+02:00'")
    cur.execute("CREATE TEMPORARY TABLE tmp_reset (a INT)")
    prepared = new_cursor(conn, "prepared")
    expect_eq(scalar(prepared, "SELECT %s + 1", (1,)), 2, "prepared statement before the reset")
    conn.reset_session(user_variables={"y": 7}, session_variables={"sql_select_limit": 3})
    cur = conn.cursor()
    for i in range(10):
        expect_eq(
            one_row(cur, "SELECT @x, @y, @@time_zone, @@sql_select_limit"),
            (None, 7, "SYSTEM", 3),
            "session state after the reset (read %d)" % i,
        )
    code = server_error(lambda: rows(cur, "SELECT * FROM tmp_reset"))
    expect_eq(code, 1146, "temporary table after the reset")
    code = server_error(lambda: rows(prepared, "SELECT %s + 1", (1,)))
    expect_eq(code, 1243, "statement prepared before the reset")
    expect_eq(pin_reasons(conn), {"user_variables"}, "pin reasons after the reset")
    conn.close()


CHECKS = [
    ("setup", check_setup),
    ("routing", check_routing),
    ("transaction_commit", check_transaction_commit),
    ("transaction_rollback", check_transaction_rollback),
    ("session_variables", check_session_variables),
    ("session_charset", check_session_charset),
    ("parameters_text", check_parameters_text),
]
if "prepared" in CURSOR_KINDS:
    CHECKS.append(("parameters_prepared", check_parameters_prepared))
CHECKS += [
    ("temporary_tables", check_temporary_tables),
    ("user_variables", check_user_variables),
    ("last_insert_id", check_last_insert_id),
    ("multi_statements", check_multi_statements),
    ("large_result", check_large_result),
    ("large_blob", check_large_blob),
    ("duplicate_key", check_duplicate_key),
]
if DRIVER == "connector":
    CHECKS.append(("reset_session", check_reset_session))


def main():
    only = os.environ.get("CHECKS", "")
    for name, check in CHECKS:
        if only and name != "setup" and name not in only.split(","):
            continue
        started = time.time()
        try:
            check()
        except Exception as err:
            traceback.print_exc()
            print("FAIL %s [%s]: %s" % (name, DRIVER, err), flush=True)
            sys.exit(1)
        print("OK %s (%.1f s)" % (name, time.time() - started), flush=True)


if __name__ == "__main__":
    main()
