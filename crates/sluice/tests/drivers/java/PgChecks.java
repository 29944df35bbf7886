// PgJDBC 42.7 through sluice's PostgreSQL listener: read/write splitting (autocommit reads on
// a replica, writes, locks and transactions on the primary), transaction pooling (session
// settings replayed on the next server connection; temporary tables, advisory locks and LISTEN
// pin the session), COPY, server-side prepared statements (prepareThreshold) with parameters
// of all common types re-prepared on whichever server connection serves them, batches,
// CancelRequest (Statement.cancel and setQueryTimeout), errors, portals (setFetchSize) and
// DatabaseMetaData.
//
// Run by the Rust driver test (after setup.sh) in this directory as
//     java -cp 'classes:lib/*' PgChecks [check...]
// with PGHOST, SLUICE_PORT (sluice's PostgreSQL listener), PRIMARY_PORT and REPLICA_PORT (the
// servers, directly), PGUSER, PGPASSWORD, PGDATABASE and PREFIX set. Every table, schema,
// channel and advisory-lock key derives from PREFIX: other driver programs run at the same
// time on the same servers. Prints "ok <check>" or "FAIL <check>: <reason>" per check (details
// on stderr), runs them all, and exits with status 1 if any failed. Check names given as
// arguments run only those checks. PGJDBC_TRACE=1 logs PgJDBC's protocol messages to stderr;
// PGCHECKS_DIRECT=1 runs the checks against the primary directly instead of sluice, reads
// then expected there (to tell a sluice bug from a bug in a check: all pass then but
// prepared_across_backends, which needs sluice's pool).

import java.io.StringReader;
import java.io.StringWriter;
import java.math.BigDecimal;
import java.sql.Array;
import java.sql.BatchUpdateException;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.sql.Types;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.logging.ConsoleHandler;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.zip.CRC32;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;
import org.postgresql.PGStatement;
import org.postgresql.copy.CopyManager;
import org.postgresql.util.PGInterval;

public class PgChecks {
    static final String HOST = env("PGHOST");
    static final String SLUICE_PORT = env("SLUICE_PORT");
    static final String PRIMARY_PORT = env("PRIMARY_PORT");
    static final String REPLICA_PORT = env("REPLICA_PORT");
    static final String USER = env("PGUSER");
    static final String PASSWORD = env("PGPASSWORD");
    static final String DATABASE = env("PGDATABASE");
    /** PREFIX, lower-cased: unquoted identifiers are folded to lower case. */
    static final String P = env("PREFIX").toLowerCase();

    /**
     * Autocommit reads through sluice run on the replica. PGCHECKS_DIRECT=1 (for developing the
     * checks) sends what would go through sluice to the primary directly instead: then reads
     * run there, and prepared_across_backends cannot pass.
     */
    static final boolean DIRECT = "1".equals(System.getenv("PGCHECKS_DIRECT"));
    static final boolean READS = !DIRECT;

    /** A bound on each check (a hang guard; the whole program should take well under 20 s). */
    static final long CHECK_SECONDS = 60;
    /** Checks not started within this many seconds of the start fail as not run. */
    static final long BUDGET_SECONDS = 150;
    /** Read timeout of every connection, so that no statement waits forever. */
    static final String SOCKET_TIMEOUT = "60";

    static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            System.err.println("FAIL environment: " + name + " is not set");
            System.exit(2);
        }
        return v;
    }

    /** One named check. */
    interface Check {
        void run() throws Exception;
    }

    public static void main(String[] args) throws Exception {
        if (!P.matches("[a-z_][a-z0-9_]{0,30}")) {
            System.out.println("FAIL environment: PREFIX must be a short SQL identifier, got " + P);
            System.exit(2);
        }
        if ("1".equals(System.getenv("PGJDBC_TRACE"))) {
            Logger log = Logger.getLogger("org.postgresql");
            ConsoleHandler h = new ConsoleHandler();
            h.setLevel(Level.FINEST);
            log.addHandler(h);
            log.setLevel(Level.FINEST);
        }
        Map<String, Check> checks = new LinkedHashMap<>();
        checks.put("read_routing", PgChecks::readRouting);
        checks.put("writes_on_primary", PgChecks::writesOnPrimary);
        checks.put("transactions", PgChecks::transactions);
        checks.put("session_state", PgChecks::sessionState);
        checks.put("temp_tables", PgChecks::tempTables);
        checks.put("advisory_locks", PgChecks::advisoryLocks);
        checks.put("listen_notify", PgChecks::listenNotify);
        checks.put("copy", PgChecks::copy);
        checks.put("prepared_types", PgChecks::preparedTypes);
        checks.put("prepare_threshold", PgChecks::prepareThreshold);
        checks.put("batch", PgChecks::batch);
        checks.put("prepared_across_backends", PgChecks::preparedAcrossBackends);
        checks.put("cancel", PgChecks::cancel);
        checks.put("errors", PgChecks::errors);
        checks.put("large_result", PgChecks::largeResult);
        checks.put("metadata", PgChecks::metadata);

        Set<String> only = new HashSet<>(Arrays.asList(args));
        if (!checks.keySet().containsAll(only)) {
            System.out.println("FAIL arguments: unknown check in " + only + "; known: " + checks.keySet());
            System.exit(2);
        }
        ExecutorService pool = Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r);
            t.setDaemon(true);
            return t;
        });
        int failed = 0;
        long programStart = System.nanoTime();
        for (Map.Entry<String, Check> e : checks.entrySet()) {
            if (!only.isEmpty() && !only.contains(e.getKey())) {
                continue;
            }
            String name = e.getKey();
            long start = System.nanoTime();
            if (start - programStart > BUDGET_SECONDS * 1_000_000_000L) {
                failed++;
                System.out.println("FAIL " + name + ": not run, earlier checks used up the " + BUDGET_SECONDS + " s budget");
                continue;
            }
            java.util.concurrent.atomic.AtomicReference<Thread> runner = new java.util.concurrent.atomic.AtomicReference<>();
            Future<?> f = pool.submit(() -> {
                runner.set(Thread.currentThread());
                e.getValue().run();
                return null;
            });
            String failure = null;
            Throwable cause = null;
            try {
                f.get(CHECK_SECONDS, TimeUnit.SECONDS);
            } catch (TimeoutException t) {
                failure = "no result after " + CHECK_SECONDS + " s";
                Thread th = runner.get();
                if (th != null) {
                    StringBuilder sb = new StringBuilder(name + " stuck at:");
                    for (StackTraceElement s : th.getStackTrace()) {
                        sb.append("\n\tat ").append(s);
                    }
                    System.err.println(sb);
                }
                f.cancel(true);
            } catch (java.util.concurrent.ExecutionException t) {
                cause = t.getCause();
                failure = oneLine(cause);
            }
            long ms = (System.nanoTime() - start) / 1_000_000;
            if (failure == null) {
                System.out.println("ok " + name);
                System.err.printf("%s: %d ms%n", name, ms);
            } else {
                failed++;
                System.out.println("FAIL " + name + ": " + failure);
                if (cause != null) {
                    System.err.println("FAIL " + name + " (" + ms + " ms):");
                    cause.printStackTrace();
                }
            }
            System.out.flush();
        }
        System.exit(failed == 0 ? 0 : 1);
    }

    static String oneLine(Throwable t) {
        String s = t instanceof AssertionError ? String.valueOf(t.getMessage()) : t.toString();
        if (t instanceof SQLException q && q.getSQLState() != null) {
            s = "SQLSTATE " + q.getSQLState() + ": " + s;
        }
        if (t.getCause() != null && t.getCause() != t && !(t instanceof AssertionError)) {
            s += " (caused by " + t.getCause() + ")";
        }
        return s.replaceAll("\\s*\\R\\s*", " ");
    }

    // ---------------------------------------------------------------------------------------
    // Checks
    // ---------------------------------------------------------------------------------------

    /** Autocommit reads run on a replica; a transaction's statements on the primary. */
    static void readRouting() throws Exception {
        try (Connection c = sluice()) {
            for (int i = 0; i < 4; i++) {
                same(READS, bool(c, "SELECT pg_is_in_recovery()"), "pg_is_in_recovery() of autocommit read " + i);
                same(READS, boolText(c, "SELECT pg_is_in_recovery()"),
                        "pg_is_in_recovery() of autocommit Statement read " + i);
            }
            c.setAutoCommit(false);
            Object[] first = row(c, "SELECT pg_is_in_recovery(), pg_backend_pid()");
            same(false, first[0], "pg_is_in_recovery() of a transaction's first statement");
            Object[] second = row(c, "SELECT pg_is_in_recovery(), pg_backend_pid()");
            same(false, second[0], "pg_is_in_recovery() of a transaction's second statement");
            same(first[1], second[1], "pg_backend_pid() of two statements of one transaction");
            c.commit();
            same(false, bool(c, "SELECT pg_is_in_recovery()"), "pg_is_in_recovery() of the next transaction");
            c.rollback();
            c.setAutoCommit(true);
            same(READS, bool(c, "SELECT pg_is_in_recovery()"), "pg_is_in_recovery() of a read after the transactions");

            // A read-only transaction (PgJDBC sends BEGIN READ ONLY) can run on a replica, and
            // keeps its server connection until it ends.
            c.setAutoCommit(false);
            c.setReadOnly(true);
            first = row(c, "SELECT pg_is_in_recovery(), pg_backend_pid(), current_setting('transaction_read_only')");
            same(READS, first[0], "pg_is_in_recovery() in a read-only transaction");
            same("on", first[2], "transaction_read_only in a read-only transaction");
            for (int i = 0; i < 3; i++) {
                second = row(c, "SELECT pg_is_in_recovery(), pg_backend_pid()");
                same(first[1], second[1], "pg_backend_pid() of statement " + i + " of the read-only transaction");
            }
            c.commit();
            c.setReadOnly(false);
            c.setAutoCommit(true);
            same(READS, bool(c, "SELECT pg_is_in_recovery()"), "pg_is_in_recovery() after the read-only transaction");
        }
    }

    /** Autocommit writes through sluice land on the primary (checked on a direct connection). */
    static void writesOnPrimary() throws Exception {
        String t = P + "writes";
        try (Connection c = sluice()) {
            exec(c, "DROP TABLE IF EXISTS " + t);
            exec(c, "CREATE TABLE " + t + " (id int PRIMARY KEY, v text)");
            same(1, update(c, "INSERT INTO " + t + " VALUES (?, ?)", 1, "one"), "rows inserted");
            exec(c, "INSERT INTO " + t + " VALUES (2, 'two')");
            same("one,two", primaryText("SELECT string_agg(v, ',' ORDER BY id) FROM " + t), "rows on the primary");
            same(1, update(c, "UPDATE " + t + " SET v = ? WHERE id = ?", "uno", 1), "rows updated");
            same("uno", primaryText("SELECT v FROM " + t + " WHERE id = 1"), "updated row on the primary");
            same(1, update(c, "DELETE FROM " + t + " WHERE id = ?", 2), "rows deleted");
            same("0", primaryText("SELECT count(*) FROM " + t + " WHERE id = 2"), "deleted row on the primary");

            Object[] r = row(c, "INSERT INTO " + t + " VALUES (?, ?) RETURNING id, v, pg_is_in_recovery()", 3, "three");
            same(List.of(3, "three", false), List.of(r), "INSERT ... RETURNING");
            r = row(c, "WITH n AS (INSERT INTO " + t + " VALUES (?, ?) RETURNING id) SELECT id FROM n", 4, "four");
            same(4, r[0], "data-modifying WITH");
            same("four", primaryText("SELECT v FROM " + t + " WHERE id = 4"), "row of a data-modifying WITH on the primary");
            r = row(c, "SELECT v, pg_is_in_recovery() FROM " + t + " WHERE id = ? FOR UPDATE", 1);
            same(List.of("uno", false), List.of(r), "SELECT ... FOR UPDATE in autocommit");

            // Reads after the writes go back to the replica, which gets the rows once replayed.
            awaitReplica();
            r = row(c, "SELECT string_agg(v, ',' ORDER BY id), pg_is_in_recovery() FROM " + t);
            same(List.of("uno,three,four", READS), List.of(r), "rows read on the replica");
        }
    }

    /** setAutoCommit(false): own rows seen, rollback and commit, savepoints, SQL BEGIN. */
    static void transactions() throws Exception {
        String t = P + "tx";
        try (Connection c = sluice()) {
            exec(c, "DROP TABLE IF EXISTS " + t);
            exec(c, "CREATE TABLE " + t + " (id int PRIMARY KEY, v text)");

            c.setAutoCommit(false);
            update(c, "INSERT INTO " + t + " VALUES (?, ?)", 1, "rolled back");
            same(List.of(1L, false), List.of(row(c, "SELECT count(*), pg_is_in_recovery() FROM " + t + " WHERE id = ?", 1)),
                    "own row inside the transaction");
            same("0", primaryText("SELECT count(*) FROM " + t), "uncommitted row seen on the primary directly");
            c.rollback();
            same("0", primaryText("SELECT count(*) FROM " + t), "rows on the primary after rollback");
            same(0L, num(c, "SELECT count(*) FROM " + t), "rows in the next transaction after rollback");

            update(c, "INSERT INTO " + t + " VALUES (?, ?)", 2, "committed");
            same(1L, num(c, "SELECT count(*) FROM " + t), "own row before commit");
            c.commit();
            same("committed", primaryText("SELECT v FROM " + t + " WHERE id = 2"), "committed row on the primary");

            // A transaction that starts with a read and then writes.
            same(1L, num(c, "SELECT count(*) FROM " + t), "first read of a transaction");
            update(c, "UPDATE " + t + " SET v = ? WHERE id = ?", "updated", 2);
            c.commit();
            same("updated", primaryText("SELECT v FROM " + t + " WHERE id = 2"), "update after a read");

            // Savepoints.
            update(c, "INSERT INTO " + t + " VALUES (?, ?)", 3, "before savepoint");
            Savepoint sp = c.setSavepoint("sp1");
            update(c, "INSERT INTO " + t + " VALUES (?, ?)", 4, "after savepoint");
            c.rollback(sp);
            same(2L, num(c, "SELECT count(*) FROM " + t), "rows after rollback to savepoint");
            c.commit();
            same("2,3", primaryText("SELECT string_agg(id::text, ',' ORDER BY id) FROM " + t), "rows after savepoint commit");
            c.setAutoCommit(true);

            // BEGIN / ROLLBACK / COMMIT sent as SQL in autocommit mode.
            exec(c, "BEGIN");
            update(c, "INSERT INTO " + t + " VALUES (?, ?)", 5, "sql begin");
            same(List.of(1L, false), List.of(row(c, "SELECT count(*), pg_is_in_recovery() FROM " + t + " WHERE id = ?", 5)),
                    "own row after SQL BEGIN");
            exec(c, "ROLLBACK");
            same("0", primaryText("SELECT count(*) FROM " + t + " WHERE id = 5"), "row after SQL ROLLBACK");
            exec(c, "BEGIN");
            update(c, "INSERT INTO " + t + " VALUES (?, ?)", 6, "sql commit");
            exec(c, "COMMIT");
            same("sql commit", primaryText("SELECT v FROM " + t + " WHERE id = 6"), "row after SQL COMMIT");

            awaitReplica();
            same(List.of("2,3,6", READS), List.of(row(c, "SELECT string_agg(id::text, ',' ORDER BY id), pg_is_in_recovery() FROM " + t)),
                    "committed rows read on the replica in autocommit");
        }
    }

    /**
     * A session through sluice and its twin: a direct connection to the replica with the same
     * properties that runs the same statements, and so says what the session should see.
     */
    static final class Twin implements AutoCloseable {
        final Connection s;
        final Connection d;

        Twin(String... props) throws SQLException {
            s = sluice(props);
            d = replica(props);
        }

        void exec(String sql) throws SQLException {
            PgChecks.exec(s, sql);
            PgChecks.exec(d, sql);
        }

        /** Runs `sql` (one row) through sluice and on the twin: the same row. */
        Object[] check(String sql, String what) throws SQLException {
            Object[] want = row(d, sql);
            same(List.of(want), List.of(row(s, sql)), what);
            return want;
        }

        @Override
        public void close() throws SQLException {
            try {
                s.close();
            } finally {
                d.close();
            }
        }
    }

    /** SET / RESET / setSchema / startup parameters follow the session over reads served by other connections. */
    static void sessionState() throws Exception {
        String schema = P + "schema";
        try (Connection c = sluice()) {
            exec(c, "DROP SCHEMA IF EXISTS " + schema + " CASCADE");
            exec(c, "CREATE SCHEMA " + schema);
            exec(c, "CREATE TABLE " + schema + ".marker (v text)");
            exec(c, "INSERT INTO " + schema + ".marker VALUES ('in " + schema + "')");
        }
        awaitReplica();
        String settings = "SELECT current_setting('search_path'), current_setting('TimeZone'),"
                + " current_setting('application_name'), current_setting('statement_timeout'),"
                + " '2020-01-01 00:00:00+00'::timestamptz::text, to_regclass('marker') IS NOT NULL";
        java.util.TimeZone jvmZone = java.util.TimeZone.getDefault();
        Twin a = null;
        Twin b = null;
        Twin t = null;
        try {
            a = new Twin("ApplicationName", P + "startup");
            b = new Twin();
            // PgJDBC sends the JVM's time zone as the TimeZone startup parameter, and (with
            // assumeMinServerVersion) application_name in the startup packet too.
            java.util.TimeZone.setDefault(java.util.TimeZone.getTimeZone("Asia/Tokyo"));
            t = new Twin("ApplicationName", P + "startup2", "assumeMinServerVersion", "15");
            java.util.TimeZone.setDefault(jvmZone);

            Object[] fresh = b.check(settings, "settings of a fresh session");
            same(P + "startup", a.check(settings, "settings of a session with ApplicationName")[2],
                    "application_name from the ApplicationName property");
            Object[] tStart = t.check(settings, "settings of a session with startup parameters");
            same(List.of("Asia/Tokyo", P + "startup2"), List.of(tStart[1], tStart[2]), "startup TimeZone and application_name");

            a.exec("SET search_path TO " + schema + ", public");
            a.exec("SET TimeZone TO 'Asia/Kolkata'");
            a.exec("SET application_name TO '" + P + "a'");
            a.exec("SET statement_timeout TO '7s'");
            b.exec("SET TimeZone TO 'America/New_York'");
            b.exec("SET application_name = '" + P + "b'");
            t.exec("SET search_path = public, " + schema);
            // Reads of the sessions alternate, so that the server connections they get have
            // last served another one.
            for (int i = 0; i < 5; i++) {
                same(List.of(schema + ", public", "Asia/Kolkata", P + "a", "7s", "2020-01-01 05:30:00+05:30", true),
                        List.of(a.check(settings, "settings of session a, read " + i)), "settings of a's twin");
                same(List.of(fresh[0], "America/New_York", P + "b", fresh[3], "2019-12-31 19:00:00-05", false),
                        List.of(b.check(settings, "settings of session b, read " + i)), "settings of b's twin");
                t.check(settings, "settings of session t, read " + i);
                same("in " + schema, text(a.s, "SELECT v FROM marker"), "unqualified table in a's search_path, read " + i);
                same(READS, bool(a.s, "SELECT pg_is_in_recovery()"), "pg_is_in_recovery() of a's read " + i);
            }
            // statement_timeout applies on the server that runs the read.
            Connection as = a.s;
            exec(as, "SET statement_timeout = '200ms'");
            expectError("57014", () -> bool(as, "SELECT pg_sleep(5) IS NULL"), "pg_sleep(5) under statement_timeout 200ms");
            same(READS, bool(as, "SELECT pg_is_in_recovery()"), "read after the statement timeout");
            exec(as, "SET statement_timeout = '7s'");

            // setSchema (PgJDBC runs SET SESSION search_path).
            for (Connection x : List.of(a.s, a.d)) {
                x.setSchema("public");
            }
            same("public", a.s.getSchema(), "getSchema() after setSchema(public)");
            a.check(settings, "settings after setSchema(public)");
            for (Connection x : List.of(a.s, a.d)) {
                x.setSchema(schema);
            }
            for (int i = 0; i < 3; i++) {
                same(schema, a.s.getSchema(), "getSchema() after setSchema, read " + i);
                same("in " + schema, text(a.s, "SELECT v FROM marker"), "unqualified table after setSchema, read " + i);
                a.check(settings, "settings of a after setSchema, read " + i);
                b.check(settings, "settings of b after a's setSchema, read " + i);
            }

            // RESET: back to the startup values.
            a.exec("RESET search_path");
            a.exec("RESET TimeZone");
            a.exec("RESET application_name");
            a.exec("RESET statement_timeout");
            b.exec("RESET ALL");
            t.exec("RESET ALL");
            for (int i = 0; i < 4; i++) {
                a.check(settings, "settings of a after RESET, read " + i);
                b.check(settings, "settings of b after RESET ALL, read " + i);
                same(List.of(tStart), List.of(t.check(settings, "settings of t after RESET ALL, read " + i)),
                        "settings of t's twin after RESET ALL");
            }

            // A SET in a transaction that commits, and one in a transaction that rolls back.
            for (Connection x : List.of(a.s, a.d)) {
                x.setAutoCommit(false);
                exec(x, "SET TimeZone = 'Europe/Paris'");
                x.commit();
                exec(x, "SET statement_timeout = '9s'");
                x.rollback();
                x.setAutoCommit(true);
            }
            for (int i = 0; i < 3; i++) {
                same("Europe/Paris", a.check(settings, "settings of a after the transactions, read " + i)[1],
                        "TimeZone set in a committed transaction");
                b.check(settings, "settings of b, read " + i);
            }
        } finally {
            java.util.TimeZone.setDefault(jvmZone);
            for (Twin x : new Twin[] {a, b, t}) {
                if (x != null) {
                    x.close();
                }
            }
        }
        // A new session inherits nothing.
        try (Twin c = new Twin()) {
            for (int i = 0; i < 3; i++) {
                c.check(settings, "settings of a new session, read " + i);
            }
        }
    }

    /** A temporary table pins the session to its server connection until DISCARD TEMP. */
    static void tempTables() throws Exception {
        String t = P + "tmp";
        try (Connection c = sluice(); Connection other = sluice()) {
            exec(c, "CREATE TEMP TABLE " + t + " (id int PRIMARY KEY, v text)");
            for (int i = 1; i <= 3; i++) {
                update(c, "INSERT INTO " + t + " VALUES (?, ?)", i, "v" + i);
            }
            for (int i = 0; i < 4; i++) {
                same(List.of(3L, false), List.of(row(c, "SELECT count(*), pg_is_in_recovery() FROM " + t)),
                        "temporary table rows, read " + i);
                same(true, bool(other, "SELECT to_regclass('" + t + "') IS NULL"), "temporary table hidden from another session");
            }
            c.setAutoCommit(false);
            update(c, "INSERT INTO " + t + " VALUES (?, ?)", 4, "rolled back");
            same(4L, num(c, "SELECT count(*) FROM " + t), "temporary table rows inside a transaction");
            c.rollback();
            same(3L, num(c, "SELECT count(*) FROM " + t), "temporary table rows after rollback");
            update(c, "INSERT INTO " + t + " VALUES (?, ?)", 4, "committed");
            c.commit();
            c.setAutoCommit(true);
            same("v1,v2,v3,committed", text(c, "SELECT string_agg(v, ',' ORDER BY id) FROM " + t), "temporary table after commit");

            // A temporary table created inside a transaction.
            c.setAutoCommit(false);
            exec(c, "CREATE TEMP TABLE " + t + "2 AS SELECT g FROM generate_series(1, 5) g");
            c.commit();
            c.setAutoCommit(true);
            for (int i = 0; i < 3; i++) {
                same(15L, num(c, "SELECT sum(g) FROM " + t + "2"), "temporary table created in a transaction, read " + i);
            }

            exec(c, "DISCARD TEMP");
            same(true, bool(c, "SELECT to_regclass('" + t + "') IS NULL"), "temporary table after DISCARD TEMP");
            same(READS, bool(c, "SELECT pg_is_in_recovery()"), "autocommit read after DISCARD TEMP");
        }
    }

    /** Session and transaction advisory locks taken through sluice, seen from the primary directly. */
    static void advisoryLocks() throws Exception {
        long key = lockKey();
        try (Connection c = sluice(); Connection other = sluice(); Connection direct = primary()) {
            row(c, "SELECT pg_advisory_lock(?)", key);
            for (int i = 0; i < 3; i++) {
                same(1L, num(c, "SELECT 1"), "statement after pg_advisory_lock");
            }
            same(false, bool(direct, "SELECT pg_try_advisory_lock(" + key + ")"), "direct pg_try_advisory_lock of a held lock");
            same(false, bool(other, "SELECT pg_try_advisory_lock(?)", key), "another session's pg_try_advisory_lock");
            same(true, bool(c, "SELECT pg_advisory_unlock(?)", key), "pg_advisory_unlock through sluice");
            same(true, bool(direct, "SELECT pg_try_advisory_lock(" + key + ")"), "direct pg_try_advisory_lock after unlock");
            same(true, bool(direct, "SELECT pg_advisory_unlock(" + key + ")"), "direct pg_advisory_unlock");

            // pg_try_advisory_lock through sluice, then unlock_all.
            same(true, bool(c, "SELECT pg_try_advisory_lock(?)", key), "pg_try_advisory_lock through sluice");
            same(1L, num(c, "SELECT 1"), "statement after pg_try_advisory_lock");
            same(false, bool(direct, "SELECT pg_try_advisory_lock(" + key + ")"), "direct try of a lock taken with try");
            exec(c, "SELECT pg_advisory_unlock_all()");
            same(true, bool(direct, "SELECT pg_try_advisory_lock(" + key + ")"), "direct try after pg_advisory_unlock_all");
            same(true, bool(direct, "SELECT pg_advisory_unlock(" + key + ")"), "direct unlock after pg_advisory_unlock_all");
            same(READS, bool(c, "SELECT pg_is_in_recovery()"), "autocommit read after pg_advisory_unlock_all");

            // A transaction-level lock ends with its transaction.
            c.setAutoCommit(false);
            row(c, "SELECT pg_advisory_xact_lock(?)", key + 1);
            same(false, bool(direct, "SELECT pg_try_advisory_lock(" + (key + 1) + ")"), "direct try of a held xact lock");
            c.commit();
            c.setAutoCommit(true);
            same(true, bool(direct, "SELECT pg_try_advisory_lock(" + (key + 1) + ")"), "direct try after commit of xact lock");
            same(true, bool(direct, "SELECT pg_advisory_unlock(" + (key + 1) + ")"), "direct unlock of the xact key");
        }
    }

    /** LISTEN through sluice; NOTIFY through sluice and directly; getNotifications(timeout). */
    static void listenNotify() throws Exception {
        String chan = P + "chan";
        try (Connection l = sluice(); Connection n = sluice(); Connection direct = primary()) {
            PGConnection pl = l.unwrap(PGConnection.class);
            exec(l, "LISTEN " + chan);
            exec(n, "NOTIFY " + chan + ", 'one'");
            exec(direct, "SELECT pg_notify('" + chan + "', 'two')");
            List<String> got = awaitNotifications(pl, chan, 2);
            same(List.of("one", "two"), got, "payloads received while idle");

            // A notification sent while the listener runs statements.
            update(n, "SELECT pg_notify(?, ?)", chan, "three");
            same(1L, num(l, "SELECT 1"), "statement of the listening session");
            same(List.of("three"), awaitNotifications(pl, chan, 1), "payload after a statement");

            exec(l, "UNLISTEN *");
            exec(direct, "SELECT pg_notify('" + chan + "', 'after unlisten')");
            PGNotification[] late = pl.getNotifications(300);
            same(0, late == null ? 0 : late.length, "notifications after UNLISTEN *");
            same(READS, bool(l, "SELECT pg_is_in_recovery()"), "autocommit read after UNLISTEN *");
        }
    }

    static List<String> awaitNotifications(PGConnection pl, String chan, int count) throws Exception {
        List<String> got = new ArrayList<>();
        long deadline = System.nanoTime() + 25_000_000_000L;
        while (got.size() < count && System.nanoTime() < deadline) {
            PGNotification[] ns = pl.getNotifications(500);
            if (ns != null) {
                for (PGNotification x : ns) {
                    same(chan, x.getName(), "notification channel");
                    expect(x.getPID() != 0, "notification without a PID");
                    got.add(x.getParameter());
                }
            }
        }
        expect(got.size() >= count, "got %d of %d notifications within 25 s: %s", got.size(), count, got);
        return got;
    }

    /** CopyManager: COPY FROM STDIN (autocommit and in a transaction), COPY TO STDOUT, a bad row. */
    static void copy() throws Exception {
        String t = P + "copy";
        int rows = 5000;
        StringBuilder data = new StringBuilder();
        for (int i = 1; i <= rows; i++) {
            data.append(i).append("\trow ").append(i).append(" é\\tab ✓\t").append(i % 7 == 0 ? "\\N" : i + ".5").append('\n');
        }
        try (Connection c = sluice()) {
            exec(c, "DROP TABLE IF EXISTS " + t);
            exec(c, "CREATE TABLE " + t + " (id int PRIMARY KEY, v text, n numeric)");
            CopyManager cm = c.unwrap(PGConnection.class).getCopyAPI();
            same((long) rows, cm.copyIn("COPY " + t + " (id, v, n) FROM STDIN", new StringReader(data.toString())),
                    "rows copied in");
            same(rows + "," + ((long) rows * (rows + 1) / 2) + "," + (rows / 7),
                    primaryText("SELECT count(*) || ',' || sum(id) || ',' || count(*) FILTER (WHERE n IS NULL) FROM " + t),
                    "copied rows on the primary");
            same("row 7 é\tab ✓", primaryText("SELECT v FROM " + t + " WHERE id = 7"), "copied text on the primary");
            same(1L, num(c, "SELECT 1"), "statement after COPY FROM STDIN");

            awaitReplica();
            StringWriter out = new StringWriter();
            same((long) rows, cm.copyOut("COPY (SELECT id, v, n FROM " + t + " ORDER BY id) TO STDOUT", out), "rows copied out");
            expect(out.toString().equals(data.toString()), "COPY TO STDOUT returned other data (%d chars, sent %d)",
                    out.toString().length(), data.length());
            out = new StringWriter();
            cm.copyOut("COPY " + t + " TO STDOUT", out);
            same(rows, out.toString().split("\n").length, "lines of COPY table TO STDOUT");

            // In a transaction: rolled back, then committed.
            c.setAutoCommit(false);
            same(100L, cm.copyIn("COPY " + t + " FROM STDIN", new StringReader(lines(rows + 1, rows + 100))), "rows copied in a transaction");
            same((long) rows + 100, num(c, "SELECT count(*) FROM " + t), "rows inside the transaction");
            c.rollback();
            same(String.valueOf(rows), primaryText("SELECT count(*) FROM " + t), "rows on the primary after rollback");
            cm.copyIn("COPY " + t + " FROM STDIN", new StringReader(lines(rows + 1, rows + 10)));
            c.commit();
            c.setAutoCommit(true);
            same(String.valueOf(rows + 10), primaryText("SELECT count(*) FROM " + t), "rows on the primary after commit");

            // A bad row fails the COPY; the session goes on.
            expectError("22P02", () -> cm.copyIn("COPY " + t + " FROM STDIN", new StringReader("99999\tx\t1\nnot a number\tx\t1\n")),
                    "COPY with a bad row");
            same(String.valueOf(rows + 10), primaryText("SELECT count(*) FROM " + t), "rows on the primary after the failed COPY");
            same(1L, num(c, "SELECT 1"), "statement after a failed COPY");
        }
    }

    static String lines(int from, int to) {
        StringBuilder sb = new StringBuilder();
        for (int i = from; i <= to; i++) {
            sb.append(i).append("\tx").append(i).append("\t1\n");
        }
        return sb.toString();
    }

    // Typed parameters ----------------------------------------------------------------------

    /** One row of the typed table; null fields are bound with setNull. */
    record Vals(int id, Short i2, Integer i4, Long i8, Float f4, Double f8, BigDecimal num, Boolean bool,
            String text, String varchar, byte[] bytea, LocalDate date, LocalDateTime ts, OffsetDateTime tstz,
            PGInterval interval, UUID uuid, String json, String jsonb, Integer[] intArr, String[] textArr) {

        /** What the fields read back as: jsonb is normalized, timestamptz compared as an instant. */
        List<Object> expected() {
            return Arrays.asList(id, i2, i4, i8, f4, f8, num, bool, text, varchar, bytea, date, ts,
                    tstz == null ? null : tstz.toInstant(), interval, uuid, json, jsonbOut(this), intArr, textArr);
        }
    }

    static final String TYPE_COLUMNS = "id int PRIMARY KEY, i2 smallint, i4 int, i8 bigint, f4 real,"
            + " f8 double precision, num numeric, bool boolean, text text, varchar varchar(40), bytea bytea,"
            + " date date, ts timestamp, tstz timestamptz, iv interval, uuid uuid, json json, jsonb jsonb,"
            + " int_arr int[], text_arr text[]";
    static final int[] NULL_TYPES = {Types.SMALLINT, Types.INTEGER, Types.BIGINT, Types.REAL, Types.DOUBLE,
        Types.NUMERIC, Types.BOOLEAN, Types.VARCHAR, Types.VARCHAR, Types.BINARY, Types.DATE, Types.TIMESTAMP,
        Types.TIMESTAMP_WITH_TIMEZONE, Types.OTHER, Types.OTHER, Types.OTHER, Types.OTHER, Types.ARRAY, Types.ARRAY};
    static final String PARAM_SELECT = "SELECT ?::int, ?::smallint, ?::int, ?::bigint, ?::real, ?::float8, ?::numeric,"
            + " ?::boolean, ?::text, ?::varchar, ?::bytea, ?::date, ?::timestamp, ?::timestamptz, ?::interval,"
            + " ?::uuid, ?::json, ?::jsonb, ?::int[], ?::text[]";

    static List<Vals> typedRows() throws SQLException {
        Vals a = new Vals(1, Short.MIN_VALUE, Integer.MAX_VALUE, Long.MIN_VALUE, 3.25f, -1.7976931348623157E308,
                new BigDecimal("-12345678901234567890.000123456789"), true, "héllo ✓ 'q' \\ \"d\" 日本語 𝄞",
                "varchar ü", new byte[] {0, 1, (byte) 0xff, (byte) 0xc3, 0x28, (byte) 0x80, '\'', '\\', 0},
                LocalDate.of(2024, 2, 29), LocalDateTime.of(2024, 2, 29, 23, 59, 58, 123_456_000),
                OffsetDateTime.of(2024, 2, 29, 23, 59, 58, 654_321_000, ZoneOffset.ofHoursMinutes(5, 30)),
                new PGInterval(1, 2, 3, 4, 5, 6.5), UUID.fromString("0b1e9c7a-5e2f-4c1d-9a3b-7f6e5d4c3b2a"),
                "{\"b\": [1, 2],  \"a\": \"x\"}", "{\"b\": [1, 2],  \"a\": \"x\"}",
                new Integer[] {1, null, -3}, new String[] {"a", null, "b c", "q\"uote", "NULL", "", "{,}"});
        Vals b = new Vals(2, Short.MAX_VALUE, Integer.MIN_VALUE, Long.MAX_VALUE, -0.1f, 0.1,
                new BigDecimal("0"), false, "", "", new byte[0],
                LocalDate.of(1999, 12, 31), LocalDateTime.of(1970, 1, 1, 0, 0, 0, 1_000),
                OffsetDateTime.of(1999, 12, 31, 16, 0, 0, 0, ZoneOffset.ofHours(-8)),
                new PGInterval(0, -3, 0, 0, -1, -2.25), UUID.fromString("00000000-0000-0000-0000-000000000000"),
                "[]", "{}", new Integer[0], new String[0]);
        Vals n = new Vals(3, null, null, null, null, null, null, null, null, null, null, null, null, null, null,
                null, null, null, null, null);
        return List.of(a, b, n);
    }

    static String jsonbOut(Vals v) {
        return switch (v.id()) {
            case 1 -> "{\"a\": \"x\", \"b\": [1, 2]}";
            case 2 -> "{}";
            default -> null;
        };
    }

    /** Binds `v` from parameter `first` on (the id, then the 19 typed columns). */
    static void bind(Connection c, PreparedStatement ps, Vals v) throws SQLException {
        int k = 1;
        ps.setInt(k++, v.id());
        Object[] fields = {v.i2(), v.i4(), v.i8(), v.f4(), v.f8(), v.num(), v.bool(), v.text(), v.varchar(),
            v.bytea(), v.date(), v.ts(), v.tstz(), v.interval(), v.uuid(), v.json(), v.jsonb(), v.intArr(), v.textArr()};
        for (int f = 0; f < fields.length; f++, k++) {
            Object x = fields[f];
            if (x == null) {
                ps.setNull(k, NULL_TYPES[f]);
                continue;
            }
            switch (f) {
                case 0 -> ps.setShort(k, (Short) x);
                case 1 -> ps.setInt(k, (Integer) x);
                case 2 -> ps.setLong(k, (Long) x);
                case 3 -> ps.setFloat(k, (Float) x);
                case 4 -> ps.setDouble(k, (Double) x);
                case 5 -> ps.setBigDecimal(k, (BigDecimal) x);
                case 6 -> ps.setBoolean(k, (Boolean) x);
                case 7, 8 -> ps.setString(k, (String) x);
                case 9 -> ps.setBytes(k, (byte[]) x);
                case 15, 16 -> ps.setObject(k, x, Types.OTHER);
                case 17 -> ps.setArray(k, c.createArrayOf("int4", (Integer[]) x));
                case 18 -> ps.setArray(k, c.createArrayOf("text", (String[]) x));
                default -> ps.setObject(k, x); // LocalDate, LocalDateTime, OffsetDateTime, PGInterval, UUID
            }
        }
    }

    /** The id and 19 typed columns of the current row, as Vals.expected() lists them. */
    static List<Object> readTyped(ResultSet rs) throws SQLException {
        List<Object> out = new ArrayList<>();
        out.add(rs.getInt(1));
        out.add(nullIfWasNull(rs.getShort(2), rs));
        out.add(nullIfWasNull(rs.getInt(3), rs));
        out.add(nullIfWasNull(rs.getLong(4), rs));
        out.add(nullIfWasNull(rs.getFloat(5), rs));
        out.add(nullIfWasNull(rs.getDouble(6), rs));
        out.add(rs.getBigDecimal(7));
        out.add(nullIfWasNull(rs.getBoolean(8), rs));
        out.add(rs.getString(9));
        out.add(rs.getString(10));
        out.add(rs.getBytes(11));
        out.add(rs.getObject(12, LocalDate.class));
        out.add(rs.getObject(13, LocalDateTime.class));
        OffsetDateTime tstz = rs.getObject(14, OffsetDateTime.class);
        out.add(tstz == null ? null : tstz.toInstant());
        out.add(rs.getObject(15));
        out.add(rs.getObject(16));
        out.add(rs.getString(17));
        out.add(rs.getString(18));
        Array ia = rs.getArray(19);
        out.add(ia == null ? null : ia.getArray());
        Array ta = rs.getArray(20);
        out.add(ta == null ? null : ta.getArray());
        return out;
    }

    static Object nullIfWasNull(Object v, ResultSet rs) throws SQLException {
        return rs.wasNull() ? null : v;
    }

    static void sameTyped(Vals v, List<Object> got, String what) {
        List<Object> want = v.expected();
        for (int k = 0; k < want.size(); k++) {
            if (!Objects.deepEquals(want.get(k), got.get(k))) {
                throw new AssertionError(what + ", row " + v.id() + ", column " + (k + 1) + ": expected <"
                        + show(want.get(k)) + "> but got <" + show(got.get(k)) + ">");
            }
        }
    }

    /** Named server-side statements from the first execution (prepareThreshold=1), all common types. */
    static void preparedTypes() throws Exception {
        String t = P + "types";
        List<Vals> rows = typedRows();
        try (Connection c = sluice("prepareThreshold", "1")) {
            exec(c, "DROP TABLE IF EXISTS " + t);
            exec(c, "CREATE TABLE " + t + " (" + TYPE_COLUMNS + ")");

            // Parameters and results of a read (on the replica), executed several times each.
            try (PreparedStatement ps = c.prepareStatement(PARAM_SELECT + ", pg_is_in_recovery()")) {
                for (int round = 0; round < 3; round++) {
                    for (Vals v : rows) {
                        bind(c, ps, v);
                        try (ResultSet rs = ps.executeQuery()) {
                            expect(rs.next(), "no row for the parameter SELECT");
                            sameTyped(v, readTyped(rs), "parameter round trip " + round);
                            same(READS, rs.getBoolean(21), "pg_is_in_recovery() of the parameter SELECT");
                        }
                    }
                }
                expect(ps.unwrap(PGStatement.class).isUseServerPrepare(), "parameter SELECT not server-prepared");
            }

            // Insert through sluice; read back from the primary directly and through sluice.
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO " + t + " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
                    + " ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")) {
                for (Vals v : rows) {
                    bind(c, ps, v);
                    same(1, ps.executeUpdate(), "rows inserted for id " + v.id());
                }
            }
            String select = "SELECT * FROM " + t + " WHERE id = ?";
            try (Connection direct = primary(); PreparedStatement ps = direct.prepareStatement(select)) {
                for (Vals v : rows) {
                    ps.setInt(1, v.id());
                    try (ResultSet rs = ps.executeQuery()) {
                        expect(rs.next(), "row %d not on the primary", v.id());
                        sameTyped(v, readTyped(rs), "typed row read directly on the primary");
                    }
                }
            }
            same("\\x0001ffc32880275c00,\\x,", primaryText("SELECT string_agg(coalesce(bytea::text, ''), ',' ORDER BY id) FROM " + t),
                    "bytea stored on the primary");
            same("{1,NULL,-3}|{a,NULL,\"b c\",\"q\\\"uote\",\"NULL\",\"\",\"{,}\"}",
                    primaryText("SELECT int_arr::text || '|' || text_arr::text FROM " + t + " WHERE id = 1"),
                    "arrays stored on the primary");
            awaitReplica();
            try (PreparedStatement ps = c.prepareStatement(select.replace("*", "*, pg_is_in_recovery()"))) {
                for (int round = 0; round < 3; round++) {
                    for (Vals v : rows) {
                        ps.setInt(1, v.id());
                        try (ResultSet rs = ps.executeQuery()) {
                            expect(rs.next(), "row %d not read through sluice", v.id());
                            sameTyped(v, readTyped(rs), "typed row read through sluice " + round);
                            same(READS, rs.getBoolean(21), "pg_is_in_recovery() of the typed read");
                        }
                    }
                }
            }
        }
    }

    /** The default prepareThreshold (5): the statement becomes a named server statement at the fifth execution. */
    static void prepareThreshold() throws Exception {
        try (Connection c = sluice(); Connection other = sluice();
                PreparedStatement ps = c.prepareStatement("SELECT ?::int + 1, upper(?::text), pg_is_in_recovery()")) {
            for (int i = 0; i < 9; i++) {
                ps.setInt(1, i);
                ps.setString(2, "x" + i);
                try (ResultSet rs = ps.executeQuery()) {
                    expect(rs.next(), "no row at execution %d", i);
                    same(List.of(i + 1, "X" + i, READS), List.of(rs.getInt(1), rs.getString(2), rs.getBoolean(3)),
                            "execution " + i);
                }
                // Another session's statements in between, with their own prepared statement.
                same(i * 2L, num(other, "SELECT ?::bigint * 2", i), "other session's execution " + i);
            }
            expect(ps.unwrap(PGStatement.class).isUseServerPrepare(), "statement not server-prepared after 9 executions");
        }
    }

    /** addBatch/executeBatch, with and without reWriteBatchedInserts, in and out of transactions. */
    static void batch() throws Exception {
        String t = P + "batch";
        try (Connection c = sluice("prepareThreshold", "1"); Connection rw = sluice("reWriteBatchedInserts", "true")) {
            exec(c, "DROP TABLE IF EXISTS " + t);
            exec(c, "CREATE TABLE " + t + " (id int PRIMARY KEY, v text, n numeric)");
            String insert = "INSERT INTO " + t + " (id, v, n) VALUES (?, ?, ?)";
            try (PreparedStatement ps = c.prepareStatement(insert)) {
                addRows(ps, 1, 200);
                int[] counts = ps.executeBatch();
                same(200, counts.length, "batch update counts");
                for (int k : counts) {
                    same(1, k, "update count of a batch row");
                }
            }
            same("200", primaryText("SELECT count(*) FROM " + t), "batch rows on the primary");
            try (PreparedStatement ps = rw.prepareStatement(insert)) {
                addRows(ps, 201, 400);
                int[] counts = ps.executeBatch();
                same(200, counts.length, "rewritten batch update counts");
            }
            same("400," + (400 * 401 / 2) + ",v399", primaryText("SELECT count(*) || ',' || sum(id) || ',' || max(v) FILTER (WHERE id = 399) FROM " + t),
                    "rewritten batch rows on the primary");

            c.setAutoCommit(false);
            try (PreparedStatement ps = c.prepareStatement(insert)) {
                addRows(ps, 401, 450);
                ps.executeBatch();
                same(450L, num(c, "SELECT count(*) FROM " + t), "rows inside the batch transaction");
                c.rollback();
                addRows(ps, 451, 460);
                ps.executeBatch();
                c.commit();
            }
            c.setAutoCommit(true);
            same("410", primaryText("SELECT count(*) FROM " + t), "rows after a rolled-back and a committed batch");

            // A duplicate key in the middle of a batch.
            try (PreparedStatement ps = c.prepareStatement(insert)) {
                addRows(ps, 461, 465);
                addRows(ps, 1, 1);
                addRows(ps, 466, 470);
                try {
                    ps.executeBatch();
                    throw new AssertionError("a batch with a duplicate key succeeded");
                } catch (BatchUpdateException e) {
                    SQLException next = e.getNextException();
                    same("23505", next != null ? next.getSQLState() : e.getSQLState(), "SQLSTATE of the duplicate key");
                }
            }
            same(1L, num(c, "SELECT 1"), "statement after a failed batch");
            // The batch went as one unit up to its Sync: all of it is rolled back.
            same("410", primaryText("SELECT count(*) FROM " + t), "rows after the failed batch");
        }
    }

    static void addRows(PreparedStatement ps, int from, int to) throws SQLException {
        for (int i = from; i <= to; i++) {
            ps.setInt(1, i);
            ps.setString(2, "v" + i);
            ps.setBigDecimal(3, new BigDecimal(i).movePointLeft(2));
            ps.addBatch();
        }
    }

    /**
     * A statement prepared on one replica backend runs again while that backend is held by
     * other sessions' read-only transactions: sluice re-prepares it on another backend.
     */
    static void preparedAcrossBackends() throws Exception {
        List<Connection> holders = new ArrayList<>();
        try (Connection a = sluice("prepareThreshold", "1");
                PreparedStatement ps = a.prepareStatement("SELECT pg_backend_pid(), ?::int, pg_is_in_recovery()")) {
            ps.setInt(1, 41);
            Object[] first = one(ps);
            same(List.of(41, READS), List.of(first[1], first[2]), "first execution");
            expect(ps.unwrap(PGStatement.class).isUseServerPrepare(), "statement not server-prepared");
            int x = (Integer) first[0];

            // Read-only transactions keep their replica backend until they end; the pool gives
            // out idle connections first, so one of them soon holds X.
            boolean held = false;
            List<Object> seen = new ArrayList<>();
            for (int i = 0; i < 10 && !held; i++) {
                Connection h = sluice();
                holders.add(h);
                h.setAutoCommit(false);
                h.setReadOnly(true);
                Object[] r = row(h, "SELECT pg_backend_pid(), pg_is_in_recovery()");
                same(READS, r[1], "pg_is_in_recovery() of read-only transaction " + i);
                seen.add(r[0]);
                held = r[0].equals(x);
            }
            expect(held, "no read-only transaction got backend %d; they got %s", x, seen);

            for (int i = 0; i < 3; i++) {
                ps.setInt(1, 42 + i);
                Object[] again = one(ps);
                same(List.of(42 + i, READS), List.of(again[1], again[2]), "execution " + i + " while backend " + x + " is held");
                expect(!again[0].equals(x), "execution %d ran on backend %d, held by another session", i, x);
            }
            for (Connection h : holders) {
                h.commit();
            }
            ps.setInt(1, 50);
            same(50, one(ps)[1], "execution after the holders committed");
        } finally {
            for (Connection h : holders) {
                h.close();
            }
        }
    }

    static Object[] one(PreparedStatement ps) throws SQLException {
        try (ResultSet rs = ps.executeQuery()) {
            List<Object[]> rows = read(rs);
            expect(rows.size() == 1, "%d rows", rows.size());
            return rows.get(0);
        }
    }

    /** Statement.cancel() from another thread and setQueryTimeout, in and out of a transaction. */
    static void cancel() throws Exception {
        String app = P + "cancel";
        try (Connection c = sluice("ApplicationName", app)) {
            // Autocommit: the statement runs on the replica.
            try (Statement st = c.createStatement()) {
                cancelRunning(st, app, "SELECT pg_sleep(30)", "autocommit pg_sleep(30)");
            }
            same(1L, num(c, "SELECT 1"), "statement after the cancel");

            // A server-prepared statement inside a transaction (on the primary).
            c.setAutoCommit(false);
            same(1L, num(c, "SELECT 1"), "first statement of the transaction");
            try (PreparedStatement ps = c.prepareStatement("SELECT pg_sleep(?)")) {
                ps.unwrap(PGStatement.class).setPrepareThreshold(1);
                ps.setInt(1, 30);
                cancelRunning(ps, app, null, "pg_sleep(?) in a transaction");
            }
            expectError("25P02", () -> num(c, "SELECT 1"), "statement after a cancel inside a transaction");
            c.rollback();
            c.setAutoCommit(true);
            same(1L, num(c, "SELECT 1"), "statement after the rollback");

            // setQueryTimeout: PgJDBC cancels the statement after a second.
            try (Statement st = c.createStatement()) {
                st.setQueryTimeout(1);
                long t0 = System.nanoTime();
                expectError("57014", () -> st.executeQuery("SELECT pg_sleep(30)"), "pg_sleep(30) with setQueryTimeout(1)");
                long ms = (System.nanoTime() - t0) / 1_000_000;
                expect(ms < 25_000, "setQueryTimeout(1) took %d ms", ms);
                st.setQueryTimeout(0);
                try (ResultSet rs = st.executeQuery("SELECT 2")) {
                    expect(rs.next() && rs.getInt(1) == 2, "SELECT 2 after the query timeout");
                }
            }
            same(READS, bool(c, "SELECT pg_is_in_recovery()"), "read after the query timeout");
        }
    }

    /**
     * Runs `sql` (or the PreparedStatement, a pg_sleep of 30 s) on st and cancels it from
     * another thread once a server shows it running (application_name `app`, looked for up to
     * 25 s); expects 57014, which only a cancel gives (the sleep itself ends without error).
     */
    static void cancelRunning(Statement st, String app, String sql, String what) throws Exception {
        Thread canceller = new Thread(() -> {
            try {
                long deadline = System.nanoTime() + 25_000_000_000L;
                while (System.nanoTime() < deadline && !running(app)) {
                    Thread.sleep(50);
                }
                st.cancel();
            } catch (Exception e) {
                e.printStackTrace();
            }
        });
        canceller.setDaemon(true);
        long t0 = System.nanoTime();
        canceller.start();
        expectError("57014", () -> {
            if (sql == null) {
                ((PreparedStatement) st).executeQuery();
            } else {
                st.executeQuery(sql);
            }
        }, what + " cancelled");
        long ms = (System.nanoTime() - t0) / 1_000_000;
        System.out.printf("%s: cancelled after %d ms%n", what, ms);
        canceller.join(30_000);
    }

    /**
     * Whether a pg_sleep of the session named `app` is sleeping on the primary or the replica
     * (sleeping, not merely active: a Parse of the text shows it active too, and a cancel then
     * would find the backend reading its next message and do nothing).
     */
    static boolean running(String app) throws SQLException {
        String sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = ? AND state = 'active'"
                + " AND wait_event = 'PgSleep' AND query LIKE '%pg_sleep%' AND pid <> pg_backend_pid()";
        try (Connection p = primary(); Connection r = replica()) {
            return num(p, sql, app) > 0 || num(r, sql, app) > 0;
        }
    }

    /** Errors leave the session usable; an error in a transaction aborts it until rollback. */
    static void errors() throws Exception {
        try (Connection c = sluice("prepareThreshold", "1")) {
            expectError("42601", () -> exec(c, "SELEC 1"), "syntax error in autocommit");
            same(READS, bool(c, "SELECT pg_is_in_recovery()"), "read after a syntax error");
            expectError("22012", () -> num(c, "SELECT 1 / ?", 0), "division by zero in autocommit");
            same(1L, num(c, "SELECT 1"), "statement after division by zero");

            // A server-prepared statement failing at Bind (bad parameter), then succeeding.
            try (PreparedStatement ps = c.prepareStatement("SELECT ?::int * 2")) {
                ps.setInt(1, 4);
                same(8, one(ps)[0], "prepared statement before a failed execution");
                ps.setString(1, "not a number");
                expectError("22P02", () -> one(ps), "prepared statement with a bad parameter");
                ps.setInt(1, 5);
                same(10, one(ps)[0], "prepared statement after a failed execution");
            }

            c.setAutoCommit(false);
            same(1L, num(c, "SELECT 1"), "first statement of the transaction");
            expectError("42P01", () -> num(c, "SELECT count(*) FROM " + P + "no_such_table"), "missing table in a transaction");
            expectError("25P02", () -> num(c, "SELECT 1"), "statement after an error in a transaction");
            expectError("25P02", () -> num(c, "SELECT 2"), "second statement after an error in a transaction");
            c.rollback();
            same(3L, num(c, "SELECT 3"), "statement after the rollback");
            // An error as the transaction's first statement.
            c.commit();
            expectError("22012", () -> num(c, "SELECT 1 / 0"), "error as a transaction's first statement");
            expectError("25P02", () -> num(c, "SELECT 1"), "statement after the first statement failed");
            c.rollback();
            c.setAutoCommit(true);
            same(READS, bool(c, "SELECT pg_is_in_recovery()"), "autocommit read after the failed transactions");
            same(4L, num(c, "SELECT 4"), "autocommit statement after the failed transactions");
        }
    }

    /** 200,000 rows through a portal fetched 1000 at a time (in a transaction), and all at once. */
    static void largeResult() throws Exception {
        String sql = "SELECT g, repeat('x', 100) FROM generate_series(1, 200000) g";
        long wantSum = 200_000L * 200_001 / 2;
        try (Connection c = sluice()) {
            c.setAutoCommit(false);
            try (PreparedStatement ps = c.prepareStatement(sql)) {
                ps.setFetchSize(1000);
                try (ResultSet rs = ps.executeQuery()) {
                    long n = 0;
                    long sum = 0;
                    while (rs.next()) {
                        n++;
                        sum += rs.getLong(1);
                        if (rs.getString(2).length() != 100) {
                            throw new AssertionError("row " + n + ": length " + rs.getString(2).length());
                        }
                        if (n == 1500) {
                            // Another statement between two fetches of the portal.
                            same(7L, num(c, "SELECT 7"), "statement between fetches");
                        }
                    }
                    same(List.of(200_000L, wantSum), List.of(n, sum), "rows and sum fetched 1000 at a time");
                }
            }
            c.commit();
            c.setAutoCommit(true);
            try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery(sql)) {
                long n = 0;
                long sum = 0;
                while (rs.next()) {
                    n++;
                    sum += rs.getLong(1);
                }
                same(List.of(200_000L, wantSum), List.of(n, sum), "rows and sum without a fetch size");
            }
            same(READS, bool(c, "SELECT pg_is_in_recovery()"), "read after the large results");
        }
    }

    /** DatabaseMetaData: tables, columns, primary keys. */
    static void metadata() throws Exception {
        String t = P + "meta";
        try (Connection c = sluice()) {
            exec(c, "DROP TABLE IF EXISTS " + t);
            exec(c, "CREATE TABLE " + t + " (id serial PRIMARY KEY, name varchar(20) NOT NULL, created timestamptz DEFAULT now())");
            awaitReplica();
            DatabaseMetaData md = c.getMetaData();
            same("PostgreSQL", md.getDatabaseProductName(), "getDatabaseProductName()");
            expect(md.getDatabaseMajorVersion() >= 10, "getDatabaseMajorVersion() %d", md.getDatabaseMajorVersion());
            List<String> tables = new ArrayList<>();
            try (ResultSet rs = md.getTables(null, "public", t, new String[] {"TABLE"})) {
                while (rs.next()) {
                    tables.add(rs.getString("TABLE_SCHEM") + "." + rs.getString("TABLE_NAME") + ":" + rs.getString("TABLE_TYPE"));
                }
            }
            same(List.of("public." + t + ":TABLE"), tables, "getTables()");
            List<String> cols = new ArrayList<>();
            try (ResultSet rs = md.getColumns(null, "public", t, "%")) {
                while (rs.next()) {
                    cols.add(rs.getString("COLUMN_NAME") + ":" + rs.getString("TYPE_NAME") + ":" + rs.getInt("COLUMN_SIZE")
                            + ":" + rs.getInt("NULLABLE"));
                }
            }
            same(List.of("id:serial:10:0", "name:varchar:20:0", "created:timestamptz:35:1"), cols, "getColumns()");
            List<String> pk = new ArrayList<>();
            try (ResultSet rs = md.getPrimaryKeys(null, "public", t)) {
                while (rs.next()) {
                    pk.add(rs.getString("COLUMN_NAME"));
                }
            }
            same(List.of("id"), pk, "getPrimaryKeys()");
            try (ResultSet rs = md.getTables(null, "public", P + "%", new String[] {"TABLE"})) {
                int n = 0;
                while (rs.next()) {
                    n++;
                }
                expect(n >= 1, "getTables() with a pattern found %d tables", n);
            }
            same(READS, bool(c, "SELECT pg_is_in_recovery()"), "read after the metadata calls");
        }
    }

    // ---------------------------------------------------------------------------------------
    // Helpers
    // ---------------------------------------------------------------------------------------

    static Connection connect(String port, String... props) throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", USER);
        p.setProperty("password", PASSWORD);
        p.setProperty("connectTimeout", "10");
        p.setProperty("socketTimeout", SOCKET_TIMEOUT);
        for (int k = 0; k + 1 < props.length; k += 2) {
            p.setProperty(props[k], props[k + 1]);
        }
        return DriverManager.getConnection("jdbc:postgresql://" + HOST + ":" + port + "/" + DATABASE, p);
    }

    /** A connection through sluice, with PgJDBC properties given as name, value, name, value... */
    static Connection sluice(String... props) throws SQLException {
        return connect(DIRECT ? PRIMARY_PORT : SLUICE_PORT, props);
    }

    static Connection primary(String... props) throws SQLException {
        return connect(PRIMARY_PORT, props);
    }

    static Connection replica(String... props) throws SQLException {
        return connect(REPLICA_PORT, props);
    }

    /** Waits (bounded) until the replica has replayed everything written on the primary so far. */
    static void awaitReplica() throws Exception {
        String lsn = primaryText("SELECT pg_current_wal_insert_lsn()::text");
        long deadline = System.nanoTime() + 25_000_000_000L;
        try (Connection r = replica()) {
            while (!bool(r, "SELECT pg_last_wal_replay_lsn() >= ?::pg_lsn", lsn)) {
                expect(System.nanoTime() < deadline, "the replica did not replay %s within 25 s", lsn);
                Thread.sleep(20);
            }
        }
    }

    /** An advisory-lock key of this PREFIX (the next one is used too). */
    static long lockKey() {
        CRC32 crc = new CRC32();
        crc.update(P.getBytes(java.nio.charset.StandardCharsets.UTF_8));
        return 0x51_0000_0000L + crc.getValue() * 2;
    }

    interface Action {
        void run() throws Exception;
    }

    static void expect(boolean ok, String format, Object... args) {
        if (!ok) {
            throw new AssertionError(String.format(format, args));
        }
    }

    static void same(Object expected, Object actual, String what) {
        if (!Objects.deepEquals(expected, actual)) {
            throw new AssertionError(what + ": expected <" + show(expected) + "> but got <" + show(actual) + ">");
        }
    }

    /** Runs `action`, which must fail with this SQLState. */
    static SQLException expectError(String sqlState, Action action, String what) throws Exception {
        try {
            action.run();
        } catch (SQLException e) {
            if (!sqlState.equals(e.getSQLState())) {
                throw new AssertionError(what + ": expected SQLSTATE " + sqlState + " but got " + e.getSQLState()
                        + ": " + e.getMessage(), e);
            }
            return e;
        }
        throw new AssertionError(what + ": expected SQLSTATE " + sqlState + " but it succeeded");
    }

    static String show(Object v) {
        if (v instanceof byte[] b) {
            StringBuilder sb = new StringBuilder("bytea \\x");
            for (byte x : b) {
                sb.append(String.format("%02x", x));
            }
            return sb.toString();
        }
        if (v instanceof Object[] a) {
            return Arrays.deepToString(a);
        }
        if (v instanceof List<?> l) {
            List<String> parts = new ArrayList<>();
            for (Object o : l) {
                parts.add(show(o));
            }
            return parts.toString();
        }
        return v == null ? "null" : v + " (" + v.getClass().getSimpleName() + ")";
    }

    static PreparedStatement prepare(Connection c, String sql, Object... params) throws SQLException {
        PreparedStatement ps = c.prepareStatement(sql);
        for (int k = 0; k < params.length; k++) {
            ps.setObject(k + 1, params[k]);
        }
        return ps;
    }

    static List<Object[]> read(ResultSet rs) throws SQLException {
        ResultSetMetaData md = rs.getMetaData();
        List<Object[]> out = new ArrayList<>();
        while (rs.next()) {
            Object[] r = new Object[md.getColumnCount()];
            for (int k = 0; k < r.length; k++) {
                r[k] = rs.getObject(k + 1);
            }
            out.add(r);
        }
        return out;
    }

    /** The single row of a prepared query. */
    static Object[] row(Connection c, String sql, Object... params) throws SQLException {
        try (PreparedStatement ps = prepare(c, sql, params); ResultSet rs = ps.executeQuery()) {
            List<Object[]> rows = read(rs);
            expect(rows.size() == 1, "%s returned %d rows", sql, rows.size());
            return rows.get(0);
        }
    }

    static long num(Connection c, String sql, Object... params) throws SQLException {
        Object v = row(c, sql, params)[0];
        if (!(v instanceof Number n)) {
            throw new AssertionError(sql + ": not a number: " + show(v));
        }
        return n.longValue();
    }

    static String text(Connection c, String sql, Object... params) throws SQLException {
        Object v = row(c, sql, params)[0];
        return v == null ? null : v.toString();
    }

    static boolean bool(Connection c, String sql, Object... params) throws SQLException {
        Object v = row(c, sql, params)[0];
        if (!(v instanceof Boolean b)) {
            throw new AssertionError(sql + ": not a boolean: " + show(v));
        }
        return b;
    }

    /** The boolean of a query run with Statement.executeQuery (no parameters). */
    static boolean boolText(Connection c, String sql) throws SQLException {
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            expect(rs.next(), "%s returned no row", sql);
            return rs.getBoolean(1);
        }
    }

    /** A prepared statement whose result, if any, is ignored; returns the update count or -1. */
    static int update(Connection c, String sql, Object... params) throws SQLException {
        try (PreparedStatement ps = prepare(c, sql, params)) {
            return ps.execute() ? -1 : ps.getUpdateCount();
        }
    }

    static void exec(Connection c, String sql) throws SQLException {
        try (Statement st = c.createStatement()) {
            st.execute(sql);
        }
    }

    /** The first column of the single row of a query run directly on the primary, as text. */
    static String primaryText(String sql) throws SQLException {
        try (Connection p = primary(); Statement st = p.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            expect(rs.next(), "no row on the primary for %s", sql);
            return rs.getString(1);
        }
    }
}
