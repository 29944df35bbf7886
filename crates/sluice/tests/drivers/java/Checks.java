// MariaDB Connector/J 3.x through sluice with server-side prepared statements
// (useServerPrepStmts=true, so PreparedStatement uses the binary protocol): transactions,
// session variables and schema across replicas, parameters of all common types, temporary
// tables, user variables, LAST_INSERT_ID / generated keys, multi-statements and procedure
// result sets, large (streamed) results, a ~20 MB BLOB, batches, duplicate-key errors, many
// open statements, query timeouts and cancel, LOAD DATA LOCAL INFILE, connection reset (the
// last two through Connector/J's own API, org.mariadb.jdbc.*), warnings, and concurrent
// sessions.
//
// Run by crates/sluice/tests/driver_java.rs with SLUICE_PORT (sluice's read/write-splitting
// port) and PRIMARY_PORT (the primary, directly) set. Prints "OK <check>" per check and exits
// with status 1 at the first failure. Check names given as arguments run only those checks.

import java.io.ByteArrayInputStream;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.sql.BatchUpdateException;
import java.sql.CallableStatement;
import java.sql.Connection;
import java.sql.Date;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.SQLIntegrityConstraintViolationException;
import java.sql.SQLWarning;
import java.sql.Savepoint;
import java.sql.Statement;
import java.sql.Time;
import java.sql.Timestamp;
import java.sql.Types;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Random;
import java.util.Set;
import java.util.TreeSet;
import java.util.zip.CRC32;

public class Checks {
    static final String SLUICE_PORT = env("SLUICE_PORT");
    static final String PRIMARY_PORT = env("PRIMARY_PORT");

    /** One named check. */
    interface Check {
        void run() throws Exception;
    }

    public static void main(String[] args) {
        Map<String, Check> checks = new LinkedHashMap<>();
        checks.put("transactions", Checks::transactions);
        checks.put("session_variables", Checks::sessionVariables);
        checks.put("prepared_types", Checks::preparedTypes);
        checks.put("temporary_tables", Checks::temporaryTables);
        checks.put("user_variables", Checks::userVariables);
        checks.put("last_insert_id", Checks::lastInsertId);
        checks.put("multi_statements", Checks::multiStatements);
        checks.put("large_results", Checks::largeResults);
        checks.put("big_blob", Checks::bigBlob);
        checks.put("batch", Checks::batch);
        checks.put("duplicate_key", Checks::duplicateKey);
        checks.put("many_statements", Checks::manyStatements);
        checks.put("timeout_and_cancel", Checks::timeoutAndCancel);
        checks.put("load_data_local", Checks::loadDataLocal);
        checks.put("connection_reset", Checks::connectionReset);
        checks.put("warnings", Checks::warnings);
        checks.put("concurrent_sessions", Checks::concurrentSessions);

        Set<String> only = new HashSet<>(Arrays.asList(args));
        if (!checks.keySet().containsAll(only)) {
            System.err.println("FAIL unknown check in " + only + "; known: " + checks.keySet());
            System.exit(2);
        }
        startWatchdog(Thread.currentThread());
        for (Map.Entry<String, Check> e : checks.entrySet()) {
            if (!only.isEmpty() && !only.contains(e.getKey())) {
                continue;
            }
            long start = System.nanoTime();
            current = e.getKey();
            currentStart = start;
            try {
                e.getValue().run();
            } catch (Throwable t) {
                System.out.flush();
                System.err.println("FAIL " + e.getKey() + ": " + t);
                t.printStackTrace();
                System.exit(1);
            }
            System.out.printf("OK %s (%d ms)%n", e.getKey(), (System.nanoTime() - start) / 1_000_000);
        }
    }

    static final long WATCHDOG_SECONDS = 90;
    static volatile String current;
    static volatile long currentStart;

    /** Fails with the main thread's stack if one check takes too long (a hang). */
    static void startWatchdog(Thread main) {
        Thread dog = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(1000);
                } catch (InterruptedException e) {
                    return;
                }
                String name = current;
                if (name != null && System.nanoTime() - currentStart > WATCHDOG_SECONDS * 1_000_000_000L) {
                    System.out.flush();
                    System.err.println("FAIL " + name + ": no result after " + WATCHDOG_SECONDS + " s; stuck at:");
                    for (StackTraceElement f : main.getStackTrace()) {
                        System.err.println("\tat " + f);
                    }
                    System.exit(1);
                }
            }
        });
        dog.setDaemon(true);
        dog.start();
    }

    // ---------------------------------------------------------------------------------------
    // Checks
    // ---------------------------------------------------------------------------------------

    /** Commit and rollback; inside a transaction everything runs on the primary. */
    static void transactions() throws Exception {
        try (Connection c = sluice("")) {
            exec(c, "CREATE TABLE tx (id INT PRIMARY KEY, v VARCHAR(20))");

            c.setAutoCommit(false);
            update(c, "INSERT INTO tx VALUES (?, ?)", 1, "kept");
            Object[] r = row(c, "SELECT v, @@server_id FROM tx WHERE id = ?", 1);
            same("kept", r[0], "own write read inside the transaction");
            same(1L, num(r[1]), "@@server_id inside the transaction");
            Map<String, String> s = session(c);
            same("YES", s.get("pinned"), "pinned inside a transaction " + s);
            expect(s.get("pin_reasons").contains("transaction"), "pin_reasons inside a transaction: %s", s);
            same("YES", s.get("in_transaction"), "in_transaction " + s);
            c.commit();
            same(1L, primaryNum("SELECT COUNT(*) FROM test.tx WHERE id = 1"), "committed row on the primary");

            update(c, "INSERT INTO tx VALUES (?, ?)", 2, "discarded");
            r = row(c, "SELECT COUNT(*), @@server_id FROM tx");
            same(2L, num(r[0]), "rows seen inside the second transaction");
            same(1L, num(r[1]), "@@server_id inside the second transaction");
            c.rollback();
            same(0L, primaryNum("SELECT COUNT(*) FROM test.tx WHERE id = 2"), "rolled-back row on the primary");
            same(0L, num(c, "SELECT COUNT(*) FROM tx WHERE id = ?", 2), "rolled-back row in the next transaction");

            // Savepoints.
            update(c, "INSERT INTO tx VALUES (?, ?)", 3, "before savepoint");
            Savepoint sp = c.setSavepoint("sp1");
            update(c, "INSERT INTO tx VALUES (?, ?)", 4, "after savepoint");
            c.rollback(sp);
            c.commit();
            same(1L, primaryNum("SELECT COUNT(*) FROM test.tx WHERE id = 3"), "row before the savepoint");
            same(0L, primaryNum("SELECT COUNT(*) FROM test.tx WHERE id = 4"), "row after the savepoint");
            c.setAutoCommit(true);

            // Explicit START TRANSACTION / COMMIT with prepared statements inside.
            exec(c, "START TRANSACTION");
            update(c, "UPDATE tx SET v = ? WHERE id = ?", "updated", 1);
            r = row(c, "SELECT v, @@server_id FROM tx WHERE id = ?", 1);
            same("updated", r[0], "own update inside START TRANSACTION");
            same(1L, num(r[1]), "@@server_id inside START TRANSACTION");
            exec(c, "COMMIT");
            same("updated", primaryText("SELECT v FROM test.tx WHERE id = 1"), "committed update on the primary");

            // A transaction that starts with a read, and autocommit switched off by SQL:
            // Connector/J follows the server status flags that come back.
            c.setAutoCommit(false);
            r = row(c, "SELECT COUNT(*), @@server_id FROM tx");
            same(1L, num(r[1]), "@@server_id of a transaction's first statement, a read");
            same("YES", session(c).get("in_transaction"), "in_transaction after a read under autocommit=0");
            c.commit();
            c.setAutoCommit(true);
            exec(c, "SET autocommit = 0");
            expect(!c.getAutoCommit(), "getAutoCommit() after SET autocommit = 0");
            same(List.of(1L, 1L), List.of(num(c, "SELECT COUNT(*) FROM tx WHERE id = ?", 1), serverId(c)),
                    "row and @@server_id under SET autocommit = 0");
            exec(c, "COMMIT");
            exec(c, "SET autocommit = 1");
            expect(c.getAutoCommit(), "getAutoCommit() after SET autocommit = 1");

            s = session(c);
            same("NO", s.get("pinned"), "pinned after the transactions " + s);
            same("YES", s.get("autocommit"), "autocommit after setAutoCommit(true) " + s);
            // Autocommit reads are back on the replicas, which get the committed rows only.
            awaitNum(c, 2L, "SELECT COUNT(*) FROM tx WHERE id IN (1, 2, 3) AND v <> 'kept'");
            expect(serverId(c) != 1, "autocommit read after transactions ran on the primary");
        }
    }

    /** Session variables and the current schema follow the session over replicas. */
    static void sessionVariables() throws Exception {
        try (Connection c = sluice("")) {
            exec(c, "SET time_zone = '+05:30'");
            exec(c, "SET sql_mode = 'PIPES_AS_CONCAT,NO_ENGINE_SUBSTITUTION'");
            exec(c, "SET group_concat_max_len = 4321");
            c.setTransactionIsolation(Connection.TRANSACTION_READ_COMMITTED);

            String sql = "SELECT @@server_id, @@time_zone, @@sql_mode, @@group_concat_max_len,"
                    + " @@tx_isolation, 'a' || 'b', UNIX_TIMESTAMP(TIMESTAMP'2024-01-01 00:00:00'),"
                    + " DATABASE()";
            Set<Long> servers = new TreeSet<>();
            for (int i = 0; i < 40; i++) {
                // Alternate binary (prepared) and text protocol.
                Object[] r = i % 2 == 0 ? row(c, sql) : textRow(c, sql);
                String at = " (read " + i + ", server_id " + r[0] + ")";
                servers.add(num(r[0]));
                same("+05:30", r[1], "@@time_zone" + at);
                same("PIPES_AS_CONCAT,NO_ENGINE_SUBSTITUTION", r[2], "@@sql_mode" + at);
                same(4321L, num(r[3]), "@@group_concat_max_len" + at);
                same("READ-COMMITTED", r[4], "@@tx_isolation" + at);
                same("ab", String.valueOf(r[5]), "'a' || 'b' under PIPES_AS_CONCAT" + at);
                same(1704047400L, num(r[6]), "UNIX_TIMESTAMP in +05:30" + at);
                same("test", r[7], "DATABASE()" + at);
            }
            same(new TreeSet<>(List.of(2L, 3L)), servers, "servers that answered 40 autocommit reads");

            // Settings changed through prepared statements (tracked from the execute's OK packet).
            update(c, "SET time_zone = ?", "+02:00");
            update(c, "SET @pv = ?", 77);
            for (int i = 0; i < 10; i++) {
                String tzSql = "SELECT @@time_zone, @@server_id";
                Object[] r = i % 2 == 0 ? row(c, tzSql) : textRow(c, tzSql);
                same("+02:00", r[0], "@@time_zone set by a prepared SET (server_id " + r[1] + ")");
                same(77L, num(c, "SELECT @pv"), "user variable set by a prepared SET");
            }
            update(c, "SET time_zone = ?", "+05:30");

            // The same settings apply to writes on the primary.
            exec(c, "CREATE TABLE sv (id INT PRIMARY KEY, s VARCHAR(10), t DATETIME)");
            update(c, "INSERT INTO sv VALUES (?, 'x' || 'y', FROM_UNIXTIME(0))", 1);
            same("xy", primaryText("SELECT s FROM test.sv"), "PIPES_AS_CONCAT in a write");
            same("1970-01-01 05:30:00", primaryText("SELECT t FROM test.sv"), "time_zone in a write");

            // The current schema (information_schema exists on every server). A statement
            // prepared (at its first execute) before the switch still names the old schema's table.
            awaitReplicas(c, 1L, "SELECT COUNT(*), @@server_id FROM sv");
            PreparedStatement before = c.prepareStatement("SELECT COUNT(*), @@server_id FROM sv");
            before.executeQuery().close();
            c.setCatalog("information_schema");
            servers.clear();
            for (int i = 0; i < 60 && servers.size() < 2; i++) {
                try (ResultSet rs = before.executeQuery()) {
                    Object[] r = only(read(rs), "prepared before setCatalog");
                    same(1L, num(r[0]), "statement prepared in 'test' (server_id " + r[1] + ")");
                    servers.add(num(r[1]));
                }
            }
            same(new TreeSet<>(List.of(2L, 3L)), servers, "servers that ran the statement prepared in 'test'");
            before.close();
            for (int i = 0; i < 10; i++) {
                Object[] r = row(c, "SELECT DATABASE(), COUNT(*) FROM SCHEMATA WHERE SCHEMA_NAME = ?", "test");
                same("information_schema", r[0], "DATABASE() after setCatalog");
                same(1L, num(r[1]), "unqualified table in the new schema");
            }
            c.setCatalog("test");
            for (int i = 0; i < 4; i++) {
                same("test", row(c, "SELECT DATABASE()")[0], "DATABASE() after switching back");
            }
        }
    }

    /** One row of the typed table: its values, and how to bind them. */
    record Typed(int id, int i, long b, BigDecimal d, double f, String s, byte[] vb, byte[] bl,
            LocalDate dt, LocalDateTime dtm, LocalDateTime ts, LocalTime tm, boolean bo,
            boolean legacyTypes, boolean streamVarbinary) {
    }

    static final String TYPED_COLUMNS = "i, b, d, f, s, vb, bl, dt, dtm, ts, tm, bo";
    static final DateTimeFormatter DATETIME6 = DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss.SSSSSS");

    /** PreparedStatement parameters and binary-protocol results of all common types. */
    static void preparedTypes() throws Exception {
        byte[] all = new byte[256];
        for (int k = 0; k < 256; k++) {
            all[k] = (byte) k;
        }
        byte[] reversed = new byte[256];
        for (int k = 0; k < 256; k++) {
            reversed[k] = (byte) (255 - k);
        }
        byte[] allFourTimes = new byte[1024];
        for (int k = 0; k < 1024; k++) {
            allFourTimes[k] = (byte) k;
        }
        List<Typed> rows = List.of(
                // java.sql types (setDate/setTimestamp/setTime); BLOB from setBinaryStream.
                new Typed(1, Integer.MIN_VALUE, 5_000_000_123L,
                        new BigDecimal("12345678901234567890.0123456789"), Math.PI, "héllo ✓ 🚀",
                        all, allFourTimes, LocalDate.of(1999, 12, 31),
                        LocalDateTime.of(2024, 2, 29, 23, 59, 58, 123_456_000),
                        LocalDateTime.of(2021, 6, 15, 12, 34, 56, 654_321_000),
                        LocalTime.of(23, 59, 58), true, true, false),
                // java.time types (setObject); VARBINARY from setBinaryStream.
                new Typed(2, Integer.MAX_VALUE, -5_000_000_123L,
                        new BigDecimal("-99999999999999999999.9999999999"), -1.7976931348623157E308,
                        "Ünïcödé — 日本語 𝄞", reversed, all, LocalDate.of(1000, 1, 1),
                        LocalDateTime.of(9999, 12, 31, 23, 59, 59, 999_999_000),
                        LocalDateTime.of(2000, 1, 1, 0, 0, 0, 1_000),
                        LocalTime.of(0, 0, 0, 1_000), false, false, true),
                // Extremes and empty values.
                new Typed(4, 0, Long.MAX_VALUE, new BigDecimal("-0.0000000001"), -1.5e-300, "",
                        new byte[0], new byte[0], LocalDate.of(2024, 2, 29),
                        LocalDateTime.of(1970, 1, 2, 0, 0, 0, 0),
                        LocalDateTime.of(2037, 12, 31, 23, 59, 59, 0),
                        LocalTime.of(12, 0, 0, 500_000_000), false, false, false));

        try (Connection c = sluice("")) {
            exec(c, "CREATE TABLE types (id INT PRIMARY KEY, i INT, b BIGINT, d DECIMAL(30,10),"
                    + " f DOUBLE, s VARCHAR(50), vb VARBINARY(256), bl BLOB, dt DATE,"
                    + " dtm DATETIME(6), ts TIMESTAMP(6) NULL, tm TIME(6), bo BOOLEAN)"
                    + " DEFAULT CHARSET = utf8mb4");
            try (PreparedStatement ps = c.prepareStatement(
                    "INSERT INTO types (id, " + TYPED_COLUMNS + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")) {
                for (Typed t : rows) {
                    bind(ps, t);
                    same(1, ps.executeUpdate(), "rows inserted for id " + t.id());
                }
                // Every column NULL, through the same statement.
                ps.setInt(1, 3);
                int[] sqlTypes = {Types.INTEGER, Types.BIGINT, Types.DECIMAL, Types.DOUBLE, Types.VARCHAR,
                    Types.VARBINARY, Types.BLOB, Types.DATE, Types.TIMESTAMP, Types.TIMESTAMP, Types.TIME,
                    Types.BOOLEAN};
                for (int k = 0; k < sqlTypes.length; k++) {
                    ps.setNull(k + 2, sqlTypes[k]);
                }
                same(1, ps.executeUpdate(), "rows inserted for the NULL row");
            }

            // Read back from the primary (writer hint), then from the replicas.
            String writerSelect = "SELECT /* sluice:writer */ " + TYPED_COLUMNS + " FROM types WHERE id = ?";
            String select = "SELECT " + TYPED_COLUMNS + ", @@server_id FROM types WHERE id = ?";
            for (Typed t : rows) {
                checkTyped(c, writerSelect, t, "primary");
            }
            checkNullRow(c, writerSelect, "primary");
            awaitReplicas(c, 4L, "SELECT COUNT(*), @@server_id FROM types");
            Set<Long> servers = new TreeSet<>();
            for (int round = 0; round < 6; round++) {
                for (Typed t : rows) {
                    servers.add(checkTyped(c, select, t, "replica"));
                }
                checkNullRow(c, select, "replica");
            }
            expect(!servers.contains(1L), "autocommit reads of the typed rows ran on the primary: %s", servers);

            // What the server stored, read directly from the primary as text.
            for (Typed t : rows) {
                String where = " FROM test.types WHERE id = " + t.id();
                same(hex(t.s().getBytes(StandardCharsets.UTF_8)), primaryText("SELECT HEX(s)" + where),
                        "stored bytes of s, id " + t.id());
                same(hex(t.vb()), primaryText("SELECT HEX(vb)" + where), "stored vb, id " + t.id());
                same(hex(t.bl()), primaryText("SELECT HEX(bl)" + where), "stored bl, id " + t.id());
                same(Long.toString(t.b()), primaryText("SELECT b" + where), "stored b, id " + t.id());
                same(t.d().toPlainString(), primaryText("SELECT d" + where), "stored d, id " + t.id());
                same(t.dt().toString(), primaryText("SELECT dt" + where), "stored dt, id " + t.id());
                same(DATETIME6.format(t.dtm()), primaryText("SELECT dtm" + where), "stored dtm, id " + t.id());
            }
            same(1L, primaryNum("SELECT COUNT(*) FROM test.types WHERE id = 3 AND COALESCE(i, b, d, f, s, vb,"
                    + " bl, dt, dtm, ts, tm, bo) IS NULL"), "stored NULL row");

            // Long data (setBinaryStream) for a read: sent to the replica that runs it.
            for (int k = 0; k < 4; k++) {
                try (PreparedStatement ps = c.prepareStatement("SELECT LENGTH(?), HEX(?), @@server_id")) {
                    ps.setBinaryStream(1, new ByteArrayInputStream(allFourTimes), allFourTimes.length);
                    ps.setBinaryStream(2, new ByteArrayInputStream(all), all.length);
                    try (ResultSet rs = ps.executeQuery()) {
                        Object[] r = only(read(rs), "long data SELECT");
                        same(1024L, num(r[0]), "LENGTH of a streamed parameter");
                        same(hex(all), r[1], "HEX of a streamed parameter");
                        expect(num(r[2]) != 1, "autocommit read with long data ran on the primary");
                    }
                }
            }
            same("NO", session(c).get("pinned"), "pinned after executing with long data");
        }
    }

    static void bind(PreparedStatement ps, Typed t) throws SQLException {
        ps.setInt(1, t.id());
        ps.setInt(2, t.i());
        ps.setLong(3, t.b());
        ps.setBigDecimal(4, t.d());
        ps.setDouble(5, t.f());
        ps.setString(6, t.s());
        if (t.streamVarbinary()) {
            ps.setBinaryStream(7, new ByteArrayInputStream(t.vb()), t.vb().length);
            ps.setBytes(8, t.bl());
        } else {
            ps.setBytes(7, t.vb());
            ps.setBinaryStream(8, new ByteArrayInputStream(t.bl()), t.bl().length);
        }
        if (t.legacyTypes()) {
            ps.setDate(9, Date.valueOf(t.dt()));
            ps.setTimestamp(10, Timestamp.valueOf(t.dtm()));
            ps.setTimestamp(11, Timestamp.valueOf(t.ts()));
            ps.setTime(12, Time.valueOf(t.tm()));
        } else {
            ps.setObject(9, t.dt());
            ps.setObject(10, t.dtm());
            ps.setObject(11, t.ts());
            ps.setObject(12, t.tm());
        }
        ps.setBoolean(13, t.bo());
    }

    /** Reads one typed row and compares every column; returns @@server_id if selected. */
    static long checkTyped(Connection c, String sql, Typed t, String where) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(sql)) {
            ps.setInt(1, t.id());
            try (ResultSet rs = ps.executeQuery()) {
                expect(rs.next(), "typed row %d missing (%s)", t.id(), where);
                String at = " (id " + t.id() + ", " + where + ")";
                same(t.i(), rs.getInt(1), "INT" + at);
                same(t.b(), rs.getLong(2), "BIGINT" + at);
                same(t.d(), rs.getBigDecimal(3), "DECIMAL" + at);
                same(t.f(), rs.getDouble(4), "DOUBLE" + at);
                same(t.s(), rs.getString(5), "VARCHAR" + at);
                same(t.vb(), rs.getBytes(6), "VARBINARY" + at);
                same(t.bl(), rs.getBytes(7), "BLOB" + at);
                same(t.dt(), rs.getObject(8, LocalDate.class), "DATE" + at);
                same(t.dtm(), rs.getObject(9, LocalDateTime.class), "DATETIME(6)" + at);
                same(t.ts(), rs.getObject(10, LocalDateTime.class), "TIMESTAMP(6)" + at);
                same(t.tm(), rs.getObject(11, LocalTime.class), "TIME(6)" + at);
                same(t.bo(), rs.getBoolean(12), "BOOLEAN" + at);
                if (t.legacyTypes()) {
                    same(Date.valueOf(t.dt()), rs.getDate(8), "DATE as java.sql.Date" + at);
                    same(Timestamp.valueOf(t.dtm()), rs.getTimestamp(9), "DATETIME as Timestamp" + at);
                    same(Time.valueOf(t.tm()), rs.getTime(11), "TIME as java.sql.Time" + at);
                }
                long server = rs.getMetaData().getColumnCount() > 12 ? rs.getLong(13) : 0;
                expect(!rs.next(), "more than one row for id %d", t.id());
                return server;
            }
        }
    }

    static void checkNullRow(Connection c, String sql, String where) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(sql)) {
            ps.setInt(1, 3);
            try (ResultSet rs = ps.executeQuery()) {
                expect(rs.next(), "NULL row missing (%s)", where);
                for (int k = 1; k <= 12; k++) {
                    same(null, rs.getObject(k), "column " + k + " of the NULL row (" + where + ")");
                    expect(rs.wasNull(), "wasNull() for column %d (%s)", k, where);
                }
            }
        }
    }

    /** Temporary tables keep working while they exist, and are gone after DROP. */
    static void temporaryTables() throws Exception {
        try (Connection c = sluice("")) {
            exec(c, "CREATE TABLE tt_prices (id INT PRIMARY KEY, price INT)");
            update(c, "INSERT INTO tt_prices VALUES (?, ?)", 3, 30);
            exec(c, "CREATE TEMPORARY TABLE tmp_items (id INT PRIMARY KEY, name VARCHAR(20))");
            Map<String, String> s = session(c);
            expect(s.get("pin_reasons").contains("temporary_tables"), "pin_reasons with a temporary table: %s", s);
            same("tmp_items", s.get("temporary_tables"), "temporary_tables " + s);

            long pinnedServer = serverId(c);
            for (int i = 1; i <= 5; i++) {
                update(c, "INSERT INTO tmp_items VALUES (?, ?)", i, "item" + i);
                for (int k = 0; k < 3; k++) {
                    same((long) i, num(c, "SELECT COUNT(*) FROM tmp_items"), "prepared count after " + i + " inserts");
                    same((long) i, textNum(c, "SELECT COUNT(*) FROM tmp_items"), "text count after " + i + " inserts");
                    same(pinnedServer, serverId(c), "@@server_id while pinned");
                }
            }
            same("item3", row(c, "SELECT name FROM tmp_items WHERE id = ?", 3)[0], "temporary row by id");
            same(30L, num(c, "SELECT p.price FROM tmp_items t JOIN tt_prices p USING (id)"),
                    "temporary table joined with a real one");
            try (Connection other = sluice("")) {
                expectError(1146, "42S02", () -> num(other, "SELECT COUNT(*) FROM tmp_items"), "another session");
            }

            exec(c, "DROP TEMPORARY TABLE tmp_items");
            s = session(c);
            same("NO", s.get("pinned"), "pinned after DROP TEMPORARY TABLE " + s);
            expectError(1146, "42S02", () -> num(c, "SELECT COUNT(*) FROM tmp_items"), "prepared SELECT after DROP");
            expectError(1146, "42S02", () -> textNum(c, "SELECT COUNT(*) FROM tmp_items"), "text SELECT after DROP");
            for (int k = 0; k < 5; k++) {
                expect(serverId(c) != 1, "autocommit read after the temporary table was dropped ran on the primary");
            }
        }
    }

    /** User variables keep their values over repeated reads and work inside writes. */
    static void userVariables() throws Exception {
        try (Connection c = sluice("")) {
            exec(c, "CREATE TABLE uv (id INT AUTO_INCREMENT PRIMARY KEY, v BIGINT)");
            exec(c, "SET @x = 42");
            Map<String, String> s = session(c);
            expect(s.get("pin_reasons").contains("user_variables"), "pin_reasons after SET @x: %s", s);
            for (int k = 0; k < 10; k++) {
                same(42L, num(c, "SELECT @x"), "prepared SELECT @x, read " + k);
                same(42L, textNum(c, "SELECT @x"), "text SELECT @x, read " + k);
            }
            // Reads that do not touch user variables still go to the replicas.
            Set<Long> servers = new TreeSet<>();
            for (int k = 0; k < 30; k++) {
                servers.add(serverId(c));
            }
            same(new TreeSet<>(List.of(2L, 3L)), servers, "servers answering plain reads while @x is set");

            update(c, "INSERT INTO uv (v) VALUES (@x)");
            update(c, "INSERT INTO uv (v) VALUES (@x + ?)", 100);
            exec(c, "SET @x = @x + 1");
            same(42L, num(row(c, "SELECT @y := ? * 2", 21)[0]), "SELECT @y := ? * 2");
            same(42L, num(c, "SELECT @y"), "SELECT @y");
            update(c, "INSERT INTO uv (v) SELECT @x + @y");
            try (PreparedStatement ps = c.prepareStatement("SELECT COUNT(*), SUM(v) INTO @n, @total FROM uv")) {
                ps.execute();
            }
            Object[] r = row(c, "SELECT @n, @total, @x");
            same(List.of(3L, 269L, 43L), List.of(num(r[0]), num(r[1]), num(r[2])), "@n, @total, @x");
            same("42,142,85", primaryText("SELECT GROUP_CONCAT(v ORDER BY id) FROM test.uv"), "rows written with @x");
        }
    }

    /** getGeneratedKeys() and LAST_INSERT_ID() are the session's own. */
    static void lastInsertId() throws Exception {
        try (Connection a = sluice(""); Connection b = sluice("")) {
            exec(a, "CREATE TABLE ai (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT) AUTO_INCREMENT = 5000000000");
            String insert = "INSERT INTO ai (v) VALUES (?)";
            same(5_000_000_000L, insertKey(a, insert, 1), "generated key of a's insert");
            same(5_000_000_001L, insertKey(b, "INSERT INTO ai (v) VALUES (?), (?)", 2, 3),
                    "generated key of b's two-row insert");
            for (int k = 0; k < 3; k++) {
                same(5_000_000_000L, num(a, "SELECT LAST_INSERT_ID()"), "a: prepared LAST_INSERT_ID()");
                same(5_000_000_000L, textNum(a, "SELECT LAST_INSERT_ID()"), "a: text LAST_INSERT_ID()");
                same(5_000_000_001L, num(b, "SELECT LAST_INSERT_ID()"), "b: prepared LAST_INSERT_ID()");
                same(5_000_000_001L, textNum(b, "SELECT LAST_INSERT_ID()"), "b: text LAST_INSERT_ID()");
                Object[] r = row(a, "SELECT LAST_INSERT_ID(), @@server_id");
                same(5_000_000_000L, num(r[0]), "a: LAST_INSERT_ID() with @@server_id " + r[1]);
                expect(num(r[1]) != 1, "autocommit SELECT LAST_INSERT_ID(), @@server_id ran on the primary");
            }
            // Text-protocol insert with generated keys, then b's value is unchanged.
            try (Statement st = a.createStatement()) {
                st.executeUpdate("INSERT INTO ai (v) VALUES (4)", Statement.RETURN_GENERATED_KEYS);
                try (ResultSet keys = st.getGeneratedKeys()) {
                    expect(keys.next(), "no generated key for the text insert");
                    same(5_000_000_003L, keys.getLong(1), "generated key of a's text insert");
                }
            }
            same(5_000_000_001L, num(b, "SELECT LAST_INSERT_ID()"), "b after a's second insert");
            same(5_000_000_003L, num(a, "SELECT LAST_INSERT_ID()"), "a after its second insert");
            // Used inside a write, and inside a transaction.
            exec(a, "CREATE TABLE ai_child (parent BIGINT)");
            update(a, "INSERT INTO ai_child VALUES (LAST_INSERT_ID())");
            same("5000000003", primaryText("SELECT parent FROM test.ai_child"), "LAST_INSERT_ID() inside an INSERT");
            b.setAutoCommit(false);
            long inTrx = insertKey(b, insert, 5);
            same(inTrx, num(b, "SELECT LAST_INSERT_ID()"), "b: LAST_INSERT_ID() inside a transaction");
            b.commit();
            b.setAutoCommit(true);
            insertKey(a, insert, 6);
            same(inTrx, num(b, "SELECT LAST_INSERT_ID()"), "b: LAST_INSERT_ID() after commit and a's insert");
        }
    }

    /** Several result sets from one text query (allowMultiQueries) and from a procedure. */
    static void multiStatements() throws Exception {
        try (Connection c = sluice("&allowMultiQueries=true")) {
            exec(c, "CREATE TABLE ms (v INT)");
            List<Object> results = allResults(c, "SELECT 1 AS one, @@server_id; SELECT 'two' UNION ALL SELECT 'three';"
                    + " INSERT INTO ms VALUES (10), (20); SELECT SUM(v) FROM ms");
            same(4, results.size(), "number of results " + show(results));
            List<Object[]> first = rowsOf(results.get(0));
            same(1L, num(first.get(0)[0]), "first result set");
            same(1L, num(first.get(0)[1]), "@@server_id of a multi-statement with a write");
            same(List.of("two", "three"), column(rowsOf(results.get(1))), "second result set");
            same(2L, results.get(2), "update count of the INSERT");
            same(30L, num(rowsOf(results.get(3)).get(0)[0]), "SUM after the INSERT in the same query");

            results = allResults(c, "SELECT @@server_id; SELECT @@server_id; SELECT COUNT(*) FROM seq_1_to_10");
            same(3, results.size(), "number of results of a read-only multi-statement");
            same(rowsOf(results.get(0)).get(0)[0], rowsOf(results.get(1)).get(0)[0],
                    "@@server_id of two statements in one query");
            same(10L, num(rowsOf(results.get(2)).get(0)[0]), "third result set");

            // A whole transaction in one query, and state set inside a multi-statement.
            results = allResults(c, "START TRANSACTION; INSERT INTO ms VALUES (5);"
                    + " SELECT COUNT(*), @@server_id FROM ms; COMMIT");
            same(4, results.size(), "number of results of a transaction in one query " + show(results));
            same(List.of(3L, 1L), Arrays.stream(rowsOf(results.get(2)).get(0)).map(Checks::num).toList(),
                    "COUNT(*), @@server_id inside the one-query transaction");
            same("NO", session(c).get("pinned"), "pinned after a one-query transaction");
            same(3L, primaryNum("SELECT COUNT(*) FROM test.ms"), "rows on the primary after the one-query transaction");
            results = allResults(c, "SET @m = 5, time_zone = '-03:00'; SELECT @m + 1");
            same(6L, num(rowsOf(results.get(1)).get(0)[0]), "user variable set earlier in the same query");
            for (int k = 0; k < 4; k++) {
                same(5L, num(c, "SELECT @m"), "user variable set in a multi-statement");
                same("-03:00", row(c, "SELECT @@time_zone")[0], "time_zone set in a multi-statement");
            }

            // An error in the middle ends the query; the connection stays usable. (Connector/J
            // 3.5.11 hangs if the next command is a COM_STMT_PREPARE after an error that follows
            // a result set, against MariaDB directly too, so a text query comes first.)
            expectError(1146, "42S02", () -> allResults(c, "SELECT 1; SELECT * FROM no_such_table; SELECT 3"),
                    "multi-statement with an error");
            same(1L, textNum(c, "SELECT 1"), "text query after a failed multi-statement");
            same(1L, num(c, "SELECT 1"), "prepared query after a failed multi-statement");

            // A procedure through the binary protocol: two result sets, then the final status.
            exec(c, "CREATE PROCEDURE two_results(IN n INT) BEGIN SELECT n AS a, @@server_id AS sid;"
                    + " SELECT n + 1 AS b UNION ALL SELECT n + 2; END");
            for (int k = 0; k < 3; k++) {
                try (PreparedStatement ps = c.prepareStatement("CALL two_results(?)")) {
                    ps.setInt(1, 5 + k);
                    List<Object> r = drain(ps, ps.execute());
                    expect(r.size() >= 2, "procedure results: %s", show(r));
                    same(List.of((long) (5 + k), 1L), List.of(num(rowsOf(r.get(0)).get(0)[0]),
                            num(rowsOf(r.get(0)).get(0)[1])), "procedure's first result set");
                    same(List.of((long) (6 + k), (long) (7 + k)),
                            column(rowsOf(r.get(1))).stream().map(Checks::num).toList(),
                            "procedure's second result set");
                }
            }
            same(1L, num(c, "SELECT 1"), "query after CALL");

            // OUT and INOUT parameters (an extra binary result set flagged as OUT parameters).
            exec(c, "CREATE PROCEDURE out_params(IN a INT, OUT b BIGINT, INOUT s VARCHAR(20))"
                    + " BEGIN SET b = a * 1000000000; SET s = CONCAT(s, '✓'); END");
            for (int k = 1; k <= 3; k++) {
                try (CallableStatement cs = c.prepareCall("{call out_params(?, ?, ?)}")) {
                    cs.setInt(1, k);
                    cs.registerOutParameter(2, Types.BIGINT);
                    cs.setString(3, "é" + k);
                    cs.registerOutParameter(3, Types.VARCHAR);
                    cs.execute();
                    same(k * 1_000_000_000L, cs.getLong(2), "OUT parameter, call " + k);
                    same("é" + k + "✓", cs.getString(3), "INOUT parameter, call " + k);
                }
            }
            same(1L, num(c, "SELECT 1"), "query after CALL with OUT parameters");
        }
    }

    static final String SEQ = "SELECT seq, REPEAT('x', 100) FROM seq_1_to_200000";

    /**
     * 200,000 rows of ~110 bytes, buffered and streamed. Connector/J 3.x has no cursor support
     * (no useCursorFetch option, no COM_STMT_FETCH): setFetchSize(n) streams the result set from
     * the socket instead, so that is what is checked here.
     */
    static void largeResults() throws Exception {
        try (Connection c = sluice("")) {
            try (PreparedStatement ps = c.prepareStatement(SEQ)) {
                scanSeq(ps.executeQuery(), "prepared, buffered");
            }
            try (Statement st = c.createStatement()) {
                scanSeq(st.executeQuery(SEQ), "text, buffered");
            }
            try (PreparedStatement ps = c.prepareStatement(SEQ)) {
                ps.setFetchSize(1000);
                scanSeq(ps.executeQuery(), "prepared, fetch size 1000");
                // Closed early: the rest is skipped and the connection stays usable.
                try (ResultSet rs = ps.executeQuery()) {
                    for (int k = 1; k <= 2500; k++) {
                        expect(rs.next(), "streamed row %d missing", k);
                        same((long) k, rs.getLong(1), "streamed seq");
                    }
                }
            }
            try (Statement st = c.createStatement()) {
                st.setFetchSize(1000);
                scanSeq(st.executeQuery(SEQ), "text, fetch size 1000");
            }
            same(1L, num(c, "SELECT 1"), "query after closing a streamed result early");
            Map<String, String> s = session(c);
            same("NO", s.get("pinned"), "pinned after streamed results " + s);
        }
    }

    static void scanSeq(ResultSet rs, String how) throws SQLException {
        String x100 = "x".repeat(100);
        long count = 0;
        long sum = 0;
        CRC32 crc = new CRC32();
        CRC32 expected = new CRC32();
        try (rs) {
            while (rs.next()) {
                count++;
                long seq = rs.getLong(1);
                String s = rs.getString(2);
                if (seq != count || !x100.equals(s)) {
                    throw new AssertionError(how + ": row " + count + " is (" + seq + ", " + s + ")");
                }
                sum += seq;
                crc.update((seq + ":" + s + "\n").getBytes(StandardCharsets.US_ASCII));
                expected.update((count + ":" + x100 + "\n").getBytes(StandardCharsets.US_ASCII));
            }
        }
        same(200_000L, count, how + ": row count");
        same(200_000L * 200_001L / 2, sum, how + ": sum of seq");
        same(expected.getValue(), crc.getValue(), how + ": checksum");
    }

    /** A ~20 MB BLOB (more than one 16 MB packet each way), bound as bytes and as a stream. */
    static void bigBlob() throws Exception {
        byte[] data = new byte[20 * 1024 * 1024];
        new Random(20240229).nextBytes(data);
        for (int k = 0; k < 256; k++) {
            data[k] = (byte) k;
        }
        String sha = hex(MessageDigest.getInstance("SHA-256").digest(data)).toLowerCase();
        try (Connection c = sluice("")) {
            exec(c, "CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB)");
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO big VALUES (?, ?)")) {
                ps.setInt(1, 1);
                ps.setBytes(2, data);
                same(1, ps.executeUpdate(), "insert with setBytes");
                ps.setInt(1, 2);
                ps.setBinaryStream(2, new ByteArrayInputStream(data), data.length);
                same(1, ps.executeUpdate(), "insert with setBinaryStream");
            }
            for (int id = 1; id <= 2; id++) {
                same(data.length + " " + sha,
                        primaryText("SELECT CONCAT(LENGTH(b), ' ', SHA2(b, 256)) FROM test.big WHERE id = " + id),
                        "length and SHA-256 stored on the primary, id " + id);
                same(data, row(c, "SELECT /* sluice:writer */ b FROM big WHERE id = ?", id)[0],
                        "BLOB read from the primary, id " + id);
            }
            awaitReplicas(c, 2L, "SELECT COUNT(*), @@server_id FROM big");
            for (int id = 1; id <= 2; id++) {
                Object[] r = row(c, "SELECT b, @@server_id FROM big WHERE id = ?", id);
                same(data, r[0], "BLOB read from replica " + r[1] + ", id " + id);
            }
            same(1L, num(c, "SELECT 1"), "query after the big BLOBs");
        }
    }

    /** executeBatch() of a prepared INSERT, including a failing row. */
    static void batch() throws Exception {
        try (Connection c = sluice("")) {
            exec(c, "CREATE TABLE bt (id INT PRIMARY KEY, v VARCHAR(20))");
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO bt VALUES (?, ?)")) {
                for (int k = 1; k <= 500; k++) {
                    ps.setInt(1, k);
                    ps.setString(2, "v" + k);
                    ps.addBatch();
                }
                int[] counts = ps.executeBatch();
                same(500, counts.length, "update counts of a 500-row batch");
                for (int n : counts) {
                    expect(n == 1 || n == Statement.SUCCESS_NO_INFO, "batch update counts %s", Arrays.toString(counts));
                }
            }
            same("500 125250", primaryText("SELECT CONCAT(COUNT(*), ' ', SUM(id)) FROM test.bt"),
                    "batch rows on the primary");

            try (PreparedStatement ps = c.prepareStatement("INSERT INTO bt VALUES (?, ?)")) {
                for (int id : new int[] {501, 502, 7, 503}) {
                    ps.setInt(1, id);
                    ps.setString(2, "again");
                    ps.addBatch();
                }
                try {
                    ps.executeBatch();
                    throw new AssertionError("a batch with a duplicate key succeeded");
                } catch (BatchUpdateException e) {
                    same(1062, e.getErrorCode(), "error code of the failed batch: " + e);
                }
            }
            // Without MariaDB's bulk capability (sluice does not announce it) Connector/J sends
            // the executes pipelined and goes on after the failing one, as it does on a direct
            // connection with useBulkStmts=false; its update counts are all EXECUTE_FAILED then.
            same("7:v7,501:again,502:again,503:again",
                    primaryText("SELECT GROUP_CONCAT(id, ':', v ORDER BY id) FROM test.bt"
                            + " WHERE id IN (7, 501, 502, 503)"),
                    "rows on the primary after the failed batch");
            same(1L, num(c, "SELECT 1"), "query after the failed batch");
        }
    }

    /** Duplicate keys fail with 1062 / 23000; the connection and the transaction go on. */
    static void duplicateKey() throws Exception {
        try (Connection c = sluice("")) {
            exec(c, "CREATE TABLE dup (id INT PRIMARY KEY)");
            update(c, "INSERT INTO dup VALUES (?)", 1);
            SQLException e = expectError(1062, "23000", () -> update(c, "INSERT INTO dup VALUES (?)", 1),
                    "prepared INSERT");
            expect(e instanceof SQLIntegrityConstraintViolationException, "exception class %s", e.getClass());
            expect(e.getMessage().contains("Duplicate entry '1' for key 'PRIMARY'"), "message: %s", e.getMessage());
            same(1L, num(c, "SELECT 1"), "prepared query after the error");
            expectError(1062, "23000", () -> exec(c, "INSERT INTO dup VALUES (1)"), "text INSERT");
            same(1L, textNum(c, "SELECT 1"), "text query after the error");

            c.setAutoCommit(false);
            update(c, "INSERT INTO dup VALUES (?)", 2);
            expectError(1062, "23000", () -> update(c, "INSERT INTO dup VALUES (?)", 1), "INSERT in a transaction");
            update(c, "INSERT INTO dup VALUES (?)", 3);
            same(3L, num(c, "SELECT COUNT(*) FROM dup"), "rows seen in the transaction after the error");
            c.commit();
            c.setAutoCommit(true);
            same("1,2,3", primaryText("SELECT GROUP_CONCAT(id ORDER BY id) FROM test.dup"), "rows on the primary");
        }
    }

    /**
     * 400 prepared statements open at once: more than a backend connection caches
     * (stmt_cache_size 256), so sluice closes and re-prepares them on its connections.
     */
    static void manyStatements() throws Exception {
        try (Connection c = sluice("")) {
            List<PreparedStatement> open = new ArrayList<>();
            for (int k = 0; k < 400; k++) {
                open.add(c.prepareStatement("SELECT ? + " + k + ", @@server_id"));
            }
            Set<Long> servers = new TreeSet<>();
            for (int round = 0; round < 3; round++) {
                if (round == 1) {
                    // Connector/J prepares at the first execute.
                    same("400", session(c).get("prepared_statements"), "prepared_statements with 400 open");
                }
                for (int k = 0; k < open.size(); k++) {
                    PreparedStatement ps = open.get(k);
                    ps.setLong(1, 1000L * round);
                    try (ResultSet rs = ps.executeQuery()) {
                        Object[] r = only(read(rs), "statement " + k);
                        same(1000L * round + k, num(r[0]), "statement " + k + ", round " + round);
                        servers.add(num(r[1]));
                    }
                }
            }
            same(new TreeSet<>(List.of(2L, 3L)), servers, "servers that ran the statements");
            for (PreparedStatement ps : open) {
                ps.close();
            }
            // Connector/J keeps up to prepStmtCacheSize (250) of them prepared for reuse.
            long left = Long.parseLong(session(c).get("prepared_statements"));
            expect(left <= 250, "prepared_statements after closing all: %d", left);
            same(7L, num(c, "SELECT ? + 0, @@server_id", 7L), "a statement reused from the driver's cache");
        }
    }

    /** setQueryTimeout (SET STATEMENT max_statement_time=... FOR) and Statement.cancel (KILL QUERY). */
    static void timeoutAndCancel() throws Exception {
        try (Connection c = sluice("")) {
            try (PreparedStatement ps = c.prepareStatement("SELECT SLEEP(?)")) {
                ps.setQueryTimeout(1);
                ps.setInt(1, 5);
                // Error 1969 (max_statement_time exceeded) is the proof: a SLEEP left to run
                // would return 0 after 5 s.
                expectError(1969, "70100", ps::executeQuery, "prepared SLEEP(5) with a 1 s timeout");
            }
            try (Statement st = c.createStatement()) {
                st.setQueryTimeout(1);
                expectError(1969, "70100", () -> st.executeQuery("SELECT SLEEP(5)"),
                        "text SLEEP(5) with a 1 s timeout");
            }
            // The timeout applied to those statements only.
            for (int k = 0; k < 6; k++) {
                same(0L, num(c, "SELECT @@max_statement_time"), "@@max_statement_time after timed-out statements");
            }

            // On the primary, so that the canceller can see it run there: a cancel before the
            // statement starts would interrupt nothing. Seen sleeping, not merely listed: the
            // list also shows the text while sluice prepares it on the server, before it runs.
            try (PreparedStatement ps = c.prepareStatement("SELECT /* sluice:writer */ SLEEP(?)");
                    Connection watcher = primary()) {
                ps.setInt(1, 60);
                Thread canceller = new Thread(() -> {
                    try {
                        String running = "SELECT COUNT(*) FROM information_schema.PROCESSLIST"
                                + " WHERE INFO LIKE 'SELECT /* sluice:writer */ SLEEP(%'"
                                + " AND STATE = 'User sleep'";
                        long deadline = System.nanoTime() + 60_000_000_000L;
                        while (num(watcher, running) == 0 && System.nanoTime() < deadline) {
                            Thread.sleep(20);
                        }
                        ps.cancel();
                    } catch (Exception e) {
                        e.printStackTrace();
                    }
                });
                canceller.start();
                try (ResultSet rs = ps.executeQuery()) {
                    // SLEEP() interrupted by KILL QUERY returns 1 ...
                    expect(rs.next() && rs.getLong(1) == 1, "SLEEP(60) was not interrupted");
                } catch (SQLException e) {
                    // ... or the statement fails with "Query execution was interrupted".
                    same(1317, e.getErrorCode(), "error of the cancelled statement: " + e);
                }
                canceller.join();
            }
            same(1L, num(c, "SELECT 1"), "query after the cancelled one");
        }
    }

    /** LOAD DATA LOCAL INFILE from a stream (org.mariadb.jdbc.Statement#setLocalInfileInputStream). */
    static void loadDataLocal() throws Exception {
        StringBuilder data = new StringBuilder();
        for (int k = 1; k <= 20_000; k++) {
            data.append(k).append('\t').append("ligne ").append(k).append(" é✓\n");
        }
        byte[] bytes = data.toString().getBytes(StandardCharsets.UTF_8);
        try (Connection c = sluice("&allowLocalInfile=true")) {
            exec(c, "CREATE TABLE ld (id INT PRIMARY KEY, s VARCHAR(40)) DEFAULT CHARSET = utf8mb4");
            try (Statement st = c.createStatement()) {
                st.unwrap(org.mariadb.jdbc.Statement.class).setLocalInfileInputStream(new ByteArrayInputStream(bytes));
                String load = "LOAD DATA LOCAL INFILE 'rows.tsv' INTO TABLE ld CHARACTER SET utf8mb4 (id, s)";
                same(20_000, st.executeUpdate(load), "rows loaded");
            }
            same("20000 200010000 ligne 777 é✓",
                    primaryText("SELECT CONCAT(COUNT(*), ' ', SUM(id), ' ', MAX(IF(id = 777, s, NULL))) FROM test.ld"),
                    "loaded rows on the primary");
            same(1L, num(c, "SELECT 1"), "query after LOAD DATA");
        }
    }

    /**
     * Connector/J's reset() (what its pool calls; COM_RESET_CONNECTION with useResetConnection)
     * clears the session's state and unpins it.
     */
    static void connectionReset() throws Exception {
        try (Connection c = sluice("&useResetConnection=true")) {
            exec(c, "SET @x = 1");
            exec(c, "SET time_zone = '+01:00'");
            exec(c, "CREATE TEMPORARY TABLE tmp_reset (a INT)");
            same(1L, num(c, "SELECT @x"), "@x before reset");
            same("YES", session(c).get("pinned"), "pinned before reset");
            c.unwrap(org.mariadb.jdbc.Connection.class).reset();
            Map<String, String> s = session(c);
            same("NO", s.get("pinned"), "pinned after reset " + s);
            same(null, row(c, "SELECT @x")[0], "@x after reset");
            expectError(1146, "42S02", () -> num(c, "SELECT COUNT(*) FROM tmp_reset"), "temporary table after reset");
            for (int k = 0; k < 6; k++) {
                Object[] r = row(c, "SELECT @@time_zone, DATABASE(), @@server_id");
                same("SYSTEM", r[0], "@@time_zone after reset (server_id " + r[2] + ")");
                same("test", r[1], "DATABASE() after reset");
            }
        }
    }

    /** getWarnings() (Connector/J sends SHOW WARNINGS after a statement with warnings) and isValid (COM_PING). */
    static void warnings() throws Exception {
        try (Connection c = sluice("")) {
            for (int k = 0; k < 6; k++) {
                try (PreparedStatement ps = c.prepareStatement("SELECT CAST(? AS SIGNED), @@server_id")) {
                    ps.setString(1, "zz" + k);
                    try (ResultSet rs = ps.executeQuery()) {
                        expect(rs.next(), "no row");
                        same(0L, rs.getLong(1), "CAST('zz') AS SIGNED");
                    }
                    SQLWarning w = ps.getWarnings();
                    expect(w != null, "no warning for CAST('zz%d' AS SIGNED)", k);
                    same(1292, w.getErrorCode(), "warning code: " + w);
                    expect(w.getMessage().contains("'zz" + k + "'"), "warning message: %s", w.getMessage());
                }
                try (Statement st = c.createStatement()) {
                    st.executeQuery("SELECT 1").close();
                    same(null, st.getWarnings(), "warnings of a statement without any");
                }
                expect(c.isValid(2), "isValid()");
            }
        }
    }

    /**
     * Eight sessions at once, each with its own settings, inserts, generated keys and
     * transactions: nothing leaks between sessions sharing backend connections.
     */
    static void concurrentSessions() throws Exception {
        try (Connection c = sluice("")) {
            exec(c, "CREATE TABLE cs (id INT AUTO_INCREMENT PRIMARY KEY, thread INT, n INT)");
        }
        List<Throwable> failures = java.util.Collections.synchronizedList(new ArrayList<>());
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < 8; t++) {
            final int thread = t;
            threads.add(new Thread(() -> {
                try (Connection c = sluice("")) {
                    String tz = String.format("+0%d:00", thread);
                    exec(c, "SET time_zone = '" + tz + "', group_concat_max_len = " + (1000 + thread));
                    long own = 0;
                    for (int i = 0; i < 60; i++) {
                        boolean trx = i % 10 == 9;
                        c.setAutoCommit(!trx);
                        long key = insertKey(c, "INSERT INTO cs (thread, n) VALUES (?, ?)", thread, i);
                        own++;
                        same(key, num(c, "SELECT LAST_INSERT_ID()"), "thread " + thread + ": LAST_INSERT_ID()");
                        Object[] r = row(c, "SELECT @@time_zone, @@group_concat_max_len, @@server_id");
                        same(tz, r[0], "thread " + thread + ": @@time_zone (server_id " + r[2] + ")");
                        same(1000L + thread, num(r[1]), "thread " + thread + ": @@group_concat_max_len");
                        if (trx) {
                            same(own, num(c, "SELECT COUNT(*) FROM cs WHERE thread = ?", thread),
                                    "thread " + thread + ": own rows inside a transaction");
                            same(1L, num(r[2]), "thread " + thread + ": @@server_id inside a transaction");
                            c.commit();
                        }
                    }
                    c.setAutoCommit(true);
                } catch (Throwable e) {
                    failures.add(e);
                }
            }));
        }
        for (Thread th : threads) {
            th.start();
        }
        for (Thread th : threads) {
            th.join();
        }
        if (!failures.isEmpty()) {
            AssertionError e = new AssertionError(failures.size() + " of 8 sessions failed; first: " + failures.get(0));
            e.initCause(failures.get(0));
            throw e;
        }
        same("480 8", primaryText("SELECT CONCAT(COUNT(*), ' ', COUNT(DISTINCT thread)) FROM test.cs"),
                "rows on the primary");
    }

    // ---------------------------------------------------------------------------------------
    // Helpers
    // ---------------------------------------------------------------------------------------

    static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            System.err.println("FAIL setup: environment variable " + name + " is not set");
            System.exit(2);
        }
        return v;
    }

    /** A connection through sluice; `options` is appended to the URL ("&name=value..."). */
    static Connection sluice(String options) throws SQLException {
        return DriverManager.getConnection("jdbc:mariadb://127.0.0.1:" + SLUICE_PORT
                + "/test?user=app&password=app&useServerPrepStmts=true" + options);
    }

    /** A direct connection to the primary. */
    static Connection primary() throws SQLException {
        return DriverManager.getConnection("jdbc:mariadb://127.0.0.1:" + PRIMARY_PORT + "/test?user=app&password=app");
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

    /** Runs `action`, which must fail with this error code and SQLState. */
    static SQLException expectError(int code, String sqlState, Action action, String what) throws Exception {
        try {
            action.run();
        } catch (SQLException e) {
            if (e.getErrorCode() != code || !sqlState.equals(e.getSQLState())) {
                throw new AssertionError(what + ": expected error " + code + " (" + sqlState + ") but got "
                        + e.getErrorCode() + " (" + e.getSQLState() + "): " + e.getMessage(), e);
            }
            return e;
        }
        throw new AssertionError(what + ": expected error " + code + " but it succeeded");
    }

    static String show(Object v) {
        if (v instanceof byte[] b) {
            String h = hex(Arrays.copyOf(b, Math.min(b.length, 32)));
            return "byte[" + b.length + "] " + h + (b.length > 32 ? "..." : "");
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

    static String hex(byte[] b) {
        return HexFormat.of().withUpperCase().formatHex(b);
    }

    static long num(Object v) {
        if (!(v instanceof Number n)) {
            throw new AssertionError("not a number: " + show(v));
        }
        return n.longValue();
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

    /** All rows of a prepared (binary protocol) query. */
    static List<Object[]> rows(Connection c, String sql, Object... params) throws SQLException {
        try (PreparedStatement ps = prepare(c, sql, params); ResultSet rs = ps.executeQuery()) {
            return read(rs);
        }
    }

    static Object[] only(List<Object[]> rows, String sql) {
        expect(rows.size() == 1, "%s returned %d rows", sql, rows.size());
        return rows.get(0);
    }

    /** The single row of a prepared query. */
    static Object[] row(Connection c, String sql, Object... params) throws SQLException {
        return only(rows(c, sql, params), sql);
    }

    /** The single row of a text-protocol query. */
    static Object[] textRow(Connection c, String sql) throws SQLException {
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            return only(read(rs), sql);
        }
    }

    static long num(Connection c, String sql, Object... params) throws SQLException {
        return num(row(c, sql, params)[0]);
    }

    static long textNum(Connection c, String sql) throws SQLException {
        return num(textRow(c, sql)[0]);
    }

    static long serverId(Connection c) throws SQLException {
        return num(c, "SELECT @@server_id");
    }

    /** A prepared INSERT/UPDATE/DELETE; returns the affected rows. */
    static int update(Connection c, String sql, Object... params) throws SQLException {
        try (PreparedStatement ps = prepare(c, sql, params)) {
            return ps.executeUpdate();
        }
    }

    /** A prepared INSERT; returns its first generated key. */
    static long insertKey(Connection c, String sql, Object... params) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(sql, Statement.RETURN_GENERATED_KEYS)) {
            for (int k = 0; k < params.length; k++) {
                ps.setObject(k + 1, params[k]);
            }
            ps.executeUpdate();
            try (ResultSet keys = ps.getGeneratedKeys()) {
                expect(keys.next(), "no generated key for %s", sql);
                return keys.getLong(1);
            }
        }
    }

    /** A text-protocol statement. */
    static void exec(Connection c, String sql) throws SQLException {
        try (Statement st = c.createStatement()) {
            st.execute(sql);
        }
    }

    /** Every result of a text query: row lists (List<Object[]>) and update counts (Long). */
    static List<Object> allResults(Connection c, String sql) throws SQLException {
        try (Statement st = c.createStatement()) {
            return drain(st, st.execute(sql));
        }
    }

    static List<Object> drain(Statement st, boolean isResultSet) throws SQLException {
        List<Object> out = new ArrayList<>();
        while (true) {
            if (isResultSet) {
                try (ResultSet rs = st.getResultSet()) {
                    out.add(read(rs));
                }
            } else {
                long n = st.getLargeUpdateCount();
                if (n == -1) {
                    return out;
                }
                out.add(n);
            }
            isResultSet = st.getMoreResults();
        }
    }

    @SuppressWarnings("unchecked")
    static List<Object[]> rowsOf(Object result) {
        expect(result instanceof List, "expected a result set, got %s", show(result));
        return (List<Object[]>) result;
    }

    static List<Object> column(List<Object[]> rows) {
        List<Object> out = new ArrayList<>();
        for (Object[] r : rows) {
            out.add(r[0]);
        }
        return out;
    }

    /** SHOW SLUICE SESSION as column name -> value. */
    static Map<String, String> session(Connection c) throws SQLException {
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SHOW SLUICE SESSION")) {
            expect(rs.next(), "SHOW SLUICE SESSION returned no row");
            Map<String, String> out = new LinkedHashMap<>();
            ResultSetMetaData md = rs.getMetaData();
            for (int k = 1; k <= md.getColumnCount(); k++) {
                out.put(md.getColumnLabel(k), rs.getString(k));
            }
            return out;
        }
    }

    /** The first column of a text query run directly on the primary, as a string. */
    static String primaryText(String sql) throws SQLException {
        try (Connection p = primary(); Statement st = p.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            expect(rs.next(), "no row on the primary for %s", sql);
            return rs.getString(1);
        }
    }

    static long primaryNum(String sql) throws SQLException {
        return Long.parseLong(primaryText(sql));
    }

    /**
     * Polls `sql` (a prepared autocommit read of a number and @@server_id) until both replicas
     * have returned `expected`: they catch up asynchronously.
     */
    static void awaitReplicas(Connection c, long expected, String sql) throws Exception {
        long deadline = System.nanoTime() + 60_000_000_000L; // a hang guard
        Set<Long> caughtUp = new TreeSet<>();
        Object[] last;
        do {
            last = replicaRow(c, sql);
            if (last != null && num(last[0]) == expected) {
                caughtUp.add(num(last[1]));
                if (caughtUp.equals(Set.of(2L, 3L))) {
                    return;
                }
            }
            Thread.sleep(20);
        } while (System.nanoTime() < deadline);
        throw new AssertionError(sql + ": expected " + expected + " from both replicas within 60 s; caught up: "
                + caughtUp + ", last got " + show(last));
    }

    /** The row of a prepared autocommit read; null while the replica answering lacks the table (1146). */
    static Object[] replicaRow(Connection c, String sql, Object... params) throws SQLException {
        try {
            return row(c, sql, params);
        } catch (SQLException e) {
            if (e.getErrorCode() != 1146) {
                throw e;
            }
            return null;
        }
    }

    /** Polls a prepared autocommit read (replicas catch up asynchronously) until it returns `expected`. */
    static void awaitNum(Connection c, long expected, String sql, Object... params) throws Exception {
        long deadline = System.nanoTime() + 60_000_000_000L; // a hang guard
        Object[] last;
        do {
            last = replicaRow(c, sql, params);
            if (last != null && num(last[0]) == expected) {
                return;
            }
            Thread.sleep(50);
        } while (System.nanoTime() < deadline);
        throw new AssertionError(sql + ": expected " + expected + " within 60 s, last got " + show(last));
    }
}
