// Command drivertest drives sluice with go-sql-driver/mysql, the way Go applications use it:
// transactions, session variables across replica reads, parameters of every common type,
// temporary tables, user variables, LAST_INSERT_ID with other sessions inserting,
// multi-statements (after a backend connection reset), large results and a 20 MB BLOB (also
// as COM_STMT_SEND_LONG_DATA), a duplicate-key error, explicit prepared statements and a
// latin1 connection. Every check runs twice: with interpolateParams=true (client-side
// interpolation, text protocol) and without (statements with parameters are server-side
// prepared: binary protocol; those without are text either way).
//
// Env: SLUICE_PORT (sluice's read/write-splitting port), PRIMARY_PORT (the primary, direct).
// Prints `OK <check> [<mode>]` per check; exits 1 with a message on the first failure.
//
// A *sql.DB is a pool: session-scoped checks use one *sql.Conn (db.Conn) or a *sql.Tx.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

var replicas = []int64{2, 3}

// mode is one way of sending statements with parameters.
type mode struct {
	name        string
	interpolate bool
}

var (
	textMode     = mode{"interpolate", true}
	preparedMode = mode{"prepared", false}
)

// ---------------------------------------------------------------------------------------
// Helpers: a failed check panics with a checkFailure, which main reports.

type checkFailure struct{ msg string }

func fail(format string, args ...any) {
	panic(checkFailure{fmt.Sprintf(format, args...)})
}

func must(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

func eq[T comparable](got, want T, what string) {
	if got != want {
		fail("%s: expected %#v, got %#v", what, want, got)
	}
}

func sameSet(got map[int64]bool, want []int64, what string) {
	var g []int64
	for k := range got {
		g = append(g, k)
	}
	slices.Sort(g)
	if !slices.Equal(g, want) {
		fail("%s: expected %v, got %v", what, want, g)
	}
}

// querier is a *sql.DB, *sql.Conn or *sql.Tx.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var ctx = context.Background()

func exec(q querier, query string, args ...any) sql.Result {
	res, err := q.ExecContext(ctx, query, args...)
	must(err, query)
	return res
}

// scan reads the only row of a query into dest.
func scan(q querier, query string, args []any, dest ...any) {
	must(q.QueryRowContext(ctx, query, args...).Scan(dest...), query)
}

// value is the first column of the only row, as text ("NULL" for NULL).
func value(q querier, query string, args ...any) string {
	rows := maps(q, query, args...)
	if len(rows) != 1 {
		fail("%s: expected one row, got %d", query, len(rows))
	}
	return rows[0]["_0"]
}

func intValue(q querier, query string, args ...any) int64 {
	v := value(q, query, args...)
	n, err := strconv.ParseInt(v, 10, 64)
	must(err, query+": integer")
	return n
}

func text(v any) string {
	switch v := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		return string(v)
	case time.Time:
		return v.Format("2006-01-02 15:04:05.999999")
	default:
		return fmt.Sprint(v)
	}
}

// maps returns every row as column name -> text value; "_0" is the first column.
func maps(q querier, query string, args ...any) []map[string]string {
	rows, err := q.QueryContext(ctx, query, args...)
	must(err, query)
	defer rows.Close()
	cols, err := rows.Columns()
	must(err, query)
	var out []map[string]string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		must(rows.Scan(ptrs...), query)
		m := map[string]string{}
		for i, c := range cols {
			m[c] = text(vals[i])
		}
		m["_0"] = text(vals[0])
		out = append(out, m)
	}
	must(rows.Err(), query)
	return out
}

func serverID(q querier) int64 {
	return intValue(q, "SELECT @@server_id")
}

func sluiceSession(q querier) map[string]string {
	return maps(q, "SHOW SLUICE SESSION")[0]
}

func expectPinned(q querier, reason string) {
	s := sluiceSession(q)
	eq(s["pinned"], "YES", "SHOW SLUICE SESSION pinned (expecting reason "+reason+")")
	if !slices.Contains(strings.Split(s["pin_reasons"], ","), reason) {
		fail("SHOW SLUICE SESSION pin_reasons: expected to include %s, got %q", reason, s["pin_reasons"])
	}
}

func expectUnpinned(q querier) {
	s := sluiceSession(q)
	eq(s["pinned"], "NO", fmt.Sprintf("SHOW SLUICE SESSION pinned (reasons %q)", s["pin_reasons"]))
}

func expectError(q querier, number uint16, query string, args ...any) *mysql.MySQLError {
	_, err := q.ExecContext(ctx, query, args...)
	if err == nil {
		fail("%s: expected error %d, but it succeeded", query, number)
	}
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != number {
		fail("%s: expected error %d, got %v", query, number, err)
	}
	return me
}

func recreate(q querier, table, definition string) {
	exec(q, "DROP TABLE IF EXISTS "+table)
	exec(q, "CREATE TABLE "+table+" "+definition)
}

// ---------------------------------------------------------------------------------------
// Environment shared by the checks.

type env struct {
	sluicePort, primaryPort string
	primary                 *sql.DB // direct
	admin                   *sql.DB // through sluice, autocommit, never pinned
	syncSeq                 int
}

// open makes a pool for port in mode m; extra adds DSN parameters ("&name=value").
func open(port string, m mode, extra string) *sql.DB {
	if !strings.Contains(extra, "collation=") {
		extra += "&collation=utf8mb4_general_ci"
	}
	dsn := fmt.Sprintf("app:app@tcp(127.0.0.1:%s)/test?parseTime=true&loc=UTC&timeout=10s"+
		"&interpolateParams=%t%s", port, m.interpolate, extra)
	db, err := sql.Open("mysql", dsn)
	must(err, "open "+dsn)
	return db
}

// conn is one session through sluice.
func (e *env) conn(db *sql.DB) *sql.Conn {
	c, err := db.Conn(ctx)
	must(err, "connect through sluice")
	return c
}

// waitReplicated waits until both replicas have applied everything written so far: a marker
// row written now is seen by autocommit reads answered by each replica.
func (e *env) waitReplicated() {
	e.syncSeq++
	token := fmt.Sprintf("go-%d-%d", os.Getpid(), e.syncSeq)
	exec(e.admin, "CREATE TABLE IF NOT EXISTS drv_sync (token VARCHAR(64) PRIMARY KEY)")
	exec(e.admin, "INSERT INTO drv_sync VALUES (?)", token)
	seen := map[int64]bool{}
	deadline := time.Now().Add(60 * time.Second) // a hang guard
	for len(seen) < len(replicas) {
		var sid, n int64
		err := e.admin.QueryRowContext(ctx, "SELECT @@server_id, COUNT(*) FROM drv_sync WHERE token = ?", token).
			Scan(&sid, &n)
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1146 {
			n = 0 // the table itself has not reached this replica yet
		} else {
			must(err, "read the replication marker")
		}
		if n == 1 {
			seen[sid] = true
		}
		if time.Now().After(deadline) {
			fail("replicas did not catch up within 60 s (caught up: %v)", seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------------------
// Checks: each gets a fresh pool through sluice in its mode.

func transactions(e *env, db *sql.DB, m mode) {
	t := "tx_" + m.name
	recreate(db, t, "(id INT PRIMARY KEY, v VARCHAR(40))")

	// BEGIN ... COMMIT: own writes visible, everything on the primary, pinned meanwhile.
	tx, err := db.BeginTx(ctx, nil)
	must(err, "BEGIN")
	exec(tx, "INSERT INTO "+t+" VALUES (?, ?)", 1, "committed")
	eq(value(tx, "SELECT v FROM "+t+" WHERE id = ?", 1), "committed", "own write inside the transaction")
	for range 5 {
		eq(serverID(tx), 1, "@@server_id inside a transaction")
	}
	expectPinned(tx, "transaction")
	must(tx.Commit(), "COMMIT")
	eq(value(e.primary, "SELECT v FROM "+t+" WHERE id = 1"), "committed", "committed row on the primary")

	// BEGIN ... ROLLBACK: the row is seen inside, and gone afterwards.
	tx, err = db.BeginTx(ctx, nil)
	must(err, "BEGIN")
	exec(tx, "INSERT INTO "+t+" VALUES (?, ?)", 2, "rolled back")
	eq(intValue(tx, "SELECT COUNT(*) FROM "+t+" WHERE id = ?", 2), 1, "own write inside the transaction")
	eq(serverID(tx), 1, "@@server_id inside a transaction")
	must(tx.Rollback(), "ROLLBACK")
	eq(intValue(e.primary, "SELECT COUNT(*) FROM "+t+" WHERE id = 2"), 0, "rolled-back row on the primary")
	eq(intValue(db, "SELECT /* sluice:writer */ COUNT(*) FROM "+t+" WHERE id = ?", 2), 0,
		"rolled-back row through sluice")

	// autocommit=0 on one connection: an implicit transaction from the first statement.
	c := e.conn(db)
	defer c.Close()
	exec(c, "SET autocommit = 0")
	exec(c, "INSERT INTO "+t+" VALUES (?, ?)", 3, "implicit, rolled back")
	eq(serverID(c), 1, "@@server_id with autocommit=0")
	expectPinned(c, "transaction")
	eq(intValue(c, "SELECT COUNT(*) FROM "+t+" WHERE id > ?", 0), 2, "own write with autocommit=0")
	exec(c, "ROLLBACK")
	exec(c, "INSERT INTO "+t+" VALUES (?, ?)", 4, "implicit, committed")
	exec(c, "COMMIT")
	exec(c, "SET autocommit = 1")
	expectUnpinned(c)
	eq(value(e.primary, "SELECT GROUP_CONCAT(id ORDER BY id) FROM "+t), "1,4", "rows on the primary")
}

func sessionVariables(e *env, db *sql.DB, m mode) {
	schema := "drv_go_other_" + m.name
	exec(db, "CREATE DATABASE IF NOT EXISTS "+schema)
	exec(db, "CREATE OR REPLACE TABLE "+schema+".marker (v VARCHAR(20))")
	exec(db, "INSERT INTO "+schema+".marker VALUES ('other schema')")
	e.waitReplicated()

	c := e.conn(db)
	defer c.Close()
	// SET with parameters: a prepared SET in the prepared mode.
	exec(c, "SET SESSION sql_mode = ?", "ANSI_QUOTES,STRICT_ALL_TABLES")
	exec(c, "SET time_zone = ?", "+05:30")
	exec(c, "SET sql_select_limit = ?", 7)
	exec(c, "SET collation_connection = ?", "utf8mb4_bin")
	exec(c, "USE "+schema)

	servers := map[int64]bool{}
	for i := range 30 {
		row := maps(c, "SELECT @@sql_mode AS mode, @@time_zone AS tz, @@sql_select_limit AS lim, "+
			"@@collation_connection AS coll, DATABASE() AS db, @@server_id AS sid, "+
			"FROM_UNIXTIME(?) AS epoch, (SELECT v FROM marker) AS marker", 0)[0]
		at := fmt.Sprintf("read %d (server %s)", i, row["sid"])
		eq(row["mode"], "ANSI_QUOTES,STRICT_ALL_TABLES", at+" @@sql_mode")
		eq(row["tz"], "+05:30", at+" @@time_zone")
		eq(row["lim"], "7", at+" @@sql_select_limit")
		eq(row["coll"], "utf8mb4_bin", at+" @@collation_connection")
		eq(row["db"], schema, at+" DATABASE()")
		eq(row["epoch"], "1970-01-01 05:30:00", at+" FROM_UNIXTIME(0) in the session time zone")
		eq(row["marker"], "other schema", at+" unqualified table of the current schema")
		// The variables take effect: ANSI_QUOTES makes "seq" a column, the limit cuts the rows.
		var got []string
		for _, r := range maps(c, `SELECT "seq" AS v FROM test.seq_1_to_10 WHERE seq > ?`, 0) {
			got = append(got, r["v"])
		}
		eq(strings.Join(got, ","), "1,2,3,4,5,6,7", at+` "seq" under ANSI_QUOTES and the limit`)
		sid, _ := strconv.ParseInt(row["sid"], 10, 64)
		servers[sid] = true
	}
	sameSet(servers, replicas, "servers that answered autocommit reads")

	exec(c, "SET sql_select_limit = DEFAULT")
	for range 4 {
		eq(len(maps(c, "SELECT seq FROM test.seq_1_to_10 WHERE seq > ?", 0)), 10,
			"rows after SET sql_select_limit = DEFAULT")
	}
	expectUnpinned(c)
}

// typeRow holds one row of every common type, as sent and as expected back.
type typeRow struct {
	id  int64
	i   sql.NullInt64
	bi  sql.NullInt64
	ubi any // uint64 or nil
	d   sql.NullString
	dbl sql.NullFloat64
	s   sql.NullString
	vb  []byte
	bl  []byte
	dt  sql.NullTime
	dtm sql.NullTime
	tm  sql.NullString
}

func typeRows() []typeRow {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	rev := slices.Clone(all)
	slices.Reverse(rev)
	utc := func(y int, mo time.Month, d, h, mi, s, ns int) sql.NullTime {
		return sql.NullTime{Time: time.Date(y, mo, d, h, mi, s, ns, time.UTC), Valid: true}
	}
	return []typeRow{
		{
			id:  1,
			i:   sql.NullInt64{Int64: math.MinInt32, Valid: true},
			bi:  sql.NullInt64{Int64: 1<<53 + 1, Valid: true},
			ubi: uint64(math.MaxUint64),
			d:   sql.NullString{String: "-12345678901234.123456", Valid: true},
			dbl: sql.NullFloat64{Float64: math.Pi, Valid: true},
			s:   sql.NullString{String: "héllo ✓ 🚀", Valid: true},
			vb:  all,
			bl:  bytes.Repeat(rev, 64),
			dt:  utc(2024, 2, 29, 0, 0, 0, 0),
			dtm: utc(2024, 2, 29, 23, 59, 58, 123456000),
			tm:  sql.NullString{String: "-838:59:59", Valid: true},
		},
		{
			id:  2,
			i:   sql.NullInt64{Int64: math.MaxInt32, Valid: true},
			bi:  sql.NullInt64{Int64: -5000000000, Valid: true},
			ubi: uint64(1 << 40),
			d:   sql.NullString{String: "0.000001", Valid: true},
			dbl: sql.NullFloat64{Float64: -1.5e-300, Valid: true},
			s:   sql.NullString{String: "", Valid: true},
			vb:  []byte{},
			bl:  []byte{0, 0, '\'', '\\', '"', 0, 0x1a, '\r', '\n'},
			dt:  utc(1000, 1, 1, 0, 0, 0, 0),
			dtm: utc(2021, 1, 2, 3, 4, 5, 678000000),
			tm:  sql.NullString{String: "12:34:56", Valid: true},
		},
		{id: 3}, // all NULL
	}
}

func (r typeRow) args() []any {
	return []any{r.id, r.i, r.bi, r.ubi, r.d, r.dbl, r.s, r.vb, r.bl, r.dt, r.dtm, r.tm}
}

func checkTypeRows(q querier, query string, arg any, what string) int64 {
	rows, err := q.QueryContext(ctx, query, arg)
	must(err, query)
	defer rows.Close()
	sent := typeRows()
	n, sid := 0, int64(0)
	for rows.Next() {
		if n >= len(sent) {
			fail("%s: more rows than sent", what)
		}
		want := sent[n]
		var got typeRow
		var ubi sql.Null[uint64]
		must(rows.Scan(&got.id, &got.i, &got.bi, &ubi, &got.d, &got.dbl, &got.s, &got.vb, &got.bl,
			&got.dt, &got.dtm, &got.tm, &sid), what)
		at := fmt.Sprintf("%s (server %d): row %d column ", what, sid, want.id)
		eq(got.id, want.id, at+"id")
		eq(got.i, want.i, at+"i INT")
		eq(got.bi, want.bi, at+"bi BIGINT")
		if want.ubi == nil {
			eq(ubi.Valid, false, at+"ubi BIGINT UNSIGNED is NULL")
		} else {
			eq(ubi.V, want.ubi.(uint64), at+"ubi BIGINT UNSIGNED")
		}
		eq(got.d, want.d, at+"d DECIMAL")
		eq(got.dbl, want.dbl, at+"dbl DOUBLE")
		eq(got.s, want.s, at+"s VARCHAR")
		for _, col := range []struct {
			name      string
			got, want []byte
		}{{"vb VARBINARY", got.vb, want.vb}, {"bl BLOB", got.bl, want.bl}} {
			if (col.got == nil) != (col.want == nil) || !bytes.Equal(col.got, col.want) {
				fail("%s%s: expected %s, got %s", at, col.name, showBytes(col.want), showBytes(col.got))
			}
		}
		eq(got.dt.Valid, want.dt.Valid, at+"dt DATE is not NULL")
		eq(got.dt.Time.Equal(want.dt.Time), true, fmt.Sprintf("%sdt DATE %v = %v", at, got.dt.Time, want.dt.Time))
		eq(got.dtm.Valid, want.dtm.Valid, at+"dtm DATETIME(6) is not NULL")
		eq(got.dtm.Time.Equal(want.dtm.Time), true,
			fmt.Sprintf("%sdtm DATETIME(6) %v = %v", at, got.dtm.Time, want.dtm.Time))
		eq(got.tm, want.tm, at+"tm TIME")
		n++
	}
	must(rows.Err(), what)
	eq(n, len(sent), what+": rows")
	return sid
}

func showBytes(b []byte) string {
	if b == nil {
		return "NULL"
	}
	if len(b) > 16 {
		return fmt.Sprintf("<%d bytes %x...>", len(b), b[:16])
	}
	return fmt.Sprintf("<hex %x>", b)
}

func parameterTypes(e *env, db *sql.DB, m mode) {
	t := "types_" + m.name
	recreate(db, t, "(id INT PRIMARY KEY, i INT, bi BIGINT, ubi BIGINT UNSIGNED, d DECIMAL(20,6), "+
		"dbl DOUBLE, s VARCHAR(50), vb VARBINARY(256), bl BLOB, dt DATE, dtm DATETIME(6), tm TIME) "+
		"DEFAULT CHARSET=utf8mb4")
	cols := "id, i, bi, ubi, d, dbl, s, vb, bl, dt, dtm, tm"
	for _, r := range typeRows() {
		exec(db, "INSERT INTO "+t+" ("+cols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", r.args()...)
	}
	query := cols + ", @@server_id FROM " + t + " WHERE id > ? ORDER BY id"

	// From the primary right away, then from each replica once they have the rows.
	checkTypeRows(db, "SELECT /* sluice:writer */ "+query, 0, "read from the writer")
	e.waitReplicated()
	// Reads are balanced at random: read until both replicas have answered.
	servers := map[int64]bool{}
	for i := 0; i < 40 && len(servers) < len(replicas); i++ {
		servers[checkTypeRows(db, "SELECT "+query, 0, "read from a replica")] = true
	}
	sameSet(servers, replicas, "servers that answered")

	// The same values as parameters of a WHERE clause match the stored row.
	first := typeRows()[0]
	eq(value(db, "SELECT GROUP_CONCAT(id) FROM "+t+" WHERE id = ? AND i = ? AND bi = ? AND ubi = ? "+
		"AND d = ? AND dbl = ? AND s = ? AND vb = ? AND bl = ? AND dt = ? AND dtm = ? AND tm = ?",
		first.args()...), "1", "row matched by parameters")
	eq(value(db, "SELECT GROUP_CONCAT(id) FROM "+t+" WHERE i <=> ? AND s <=> ?", nil, nil), "3",
		"row matched by NULL parameters")
}

func temporaryTables(e *env, db *sql.DB, m mode) {
	t := "tmp_" + m.name
	c := e.conn(db)
	defer c.Close()
	exec(c, "CREATE TEMPORARY TABLE "+t+" (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20))")
	expectPinned(c, "temporary_tables")
	servers := map[int64]bool{}
	for i := int64(1); i <= 10; i++ {
		exec(c, "INSERT INTO "+t+" (v) VALUES (?)", fmt.Sprintf("row %d", i))
		eq(intValue(c, "SELECT COUNT(*) FROM "+t+" WHERE id > ?", 0), i, "rows in the temporary table")
		eq(value(c, "SELECT v FROM "+t+" WHERE id = ?", i), fmt.Sprintf("row %d", i), "row of the temporary table")
		servers[serverID(c)] = true
	}
	eq(len(servers), 1, fmt.Sprintf("one backend while pinned (servers %v)", servers))
	exec(c, "DROP TEMPORARY TABLE "+t)
	expectUnpinned(c)
	expectError(c, 1146, "SELECT COUNT(*) FROM "+t+" WHERE id > ?", 0)
	eq(intValue(c, "SELECT 1"), 1, "connection usable after the error")
}

func userVariables(e *env, db *sql.DB, m mode) {
	t := "uv_" + m.name
	recreate(db, t, "(id INT AUTO_INCREMENT PRIMARY KEY, v BIGINT, name VARCHAR(50)) DEFAULT CHARSET=utf8mb4")
	c := e.conn(db)
	defer c.Close()
	exec(c, "SET @x = ?", 42)
	exec(c, "SET @name = ?", "héllo ✓ 🚀")
	expectPinned(c, "user_variables")
	servers := map[int64]bool{}
	for i := range 24 {
		eq(value(c, "SELECT @x + ?", 0), "42", fmt.Sprintf("SELECT @x (read %d)", i))
		eq(value(c, "SELECT @name"), "héllo ✓ 🚀", fmt.Sprintf("SELECT @name (read %d)", i))
		// Reads that do not touch user variables still go to the replicas.
		servers[serverID(c)] = true
	}
	sameSet(servers, replicas, "servers of reads without user variables")
	exec(c, "INSERT INTO "+t+" (v, name) VALUES (@x, @name)")
	exec(c, "INSERT INTO "+t+" (v, name) VALUES (@x * ?, CONCAT(@name, ?))", 2, "!")
	var got []string
	for _, r := range maps(e.primary, "SELECT v, name FROM "+t+" ORDER BY id") {
		got = append(got, r["v"]+":"+r["name"])
	}
	eq(strings.Join(got, " "), "42:héllo ✓ 🚀 84:héllo ✓ 🚀!", "rows inserted from @x on the primary")
	exec(c, "SELECT @y := @x + ?", 1)
	eq(value(c, "SELECT @y"), "43", "SELECT @y after @y := @x + 1")
}

func lastInsertID(e *env, db *sql.DB, m mode) {
	t := "ai_" + m.name
	recreate(db, t, "(id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT)")
	mine, other := e.conn(db), e.conn(db)
	defer mine.Close()
	defer other.Close()
	insertID := func(res sql.Result) int64 {
		id, err := res.LastInsertId()
		must(err, "LastInsertId")
		return id
	}
	next := int64(1)
	for round := range 5 {
		own := insertID(exec(mine, "INSERT INTO "+t+" (v) VALUES (?)", round))
		eq(own, next, fmt.Sprintf("LastInsertId of this session's insert (round %d)", round))
		next++
		// Another session through sluice, and a direct connection, insert in between.
		theirs := insertID(exec(other, "INSERT INTO "+t+" (v) VALUES (?), (?), (?)", 100, 101, 102))
		eq(theirs, next, fmt.Sprintf("LastInsertId of the other session's insert (round %d)", round))
		next += 3
		exec(e.primary, "INSERT INTO "+t+" (v) VALUES (200)")
		next++

		eq(intValue(mine, "SELECT LAST_INSERT_ID()"), own, fmt.Sprintf("LAST_INSERT_ID() (round %d)", round))
		var lid, sid int64
		scan(mine, "SELECT LAST_INSERT_ID() + ?, @@server_id", []any{0}, &lid, &sid)
		eq(lid, own, fmt.Sprintf("LAST_INSERT_ID() + 0 on server %d (round %d)", sid, round))
		eq(intValue(other, "SELECT LAST_INSERT_ID()"), theirs,
			fmt.Sprintf("other session's LAST_INSERT_ID() (round %d)", round))
	}
	// Used inside a write.
	exec(mine, "INSERT INTO "+t+" (v) VALUES (LAST_INSERT_ID())")
	eq(intValue(e.primary, "SELECT v FROM "+t+" WHERE id = ?", next), next-5, "LAST_INSERT_ID() used in an INSERT")
}

// resultSets reads every result set of a multi-statement: rows as text, or "ok" for a
// statement without a result set.
func resultSets(q querier, query string, args ...any) [][]string {
	rows, err := q.QueryContext(ctx, query, args...)
	must(err, query)
	defer rows.Close()
	var sets [][]string
	for {
		set := []string{}
		cols, err := rows.Columns()
		must(err, query)
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			must(rows.Scan(ptrs...), query)
			var fields []string
			for _, v := range vals {
				fields = append(fields, text(v))
			}
			set = append(set, strings.Join(fields, "|"))
		}
		sets = append(sets, set)
		if !rows.NextResultSet() {
			break
		}
	}
	must(rows.Err(), query)
	return sets
}

func multiStatements(e *env, _ *sql.DB, m mode) {
	// First a session without CLIENT_MULTI_STATEMENTS ends while pinned (temporary table):
	// sluice resets its backend connection and reuses it for the batches below.
	plain := open(e.sluicePort, m, "")
	pc := e.conn(plain)
	exec(pc, "CREATE TEMPORARY TABLE ms_pinned (a INT)")
	must(pc.Close(), "close")
	must(plain.Close(), "close")
	time.Sleep(300 * time.Millisecond)

	db := open(e.sluicePort, m, "&multiStatements=true")
	defer db.Close()
	c := e.conn(db)
	defer c.Close()
	t := "ms_" + m.name
	exec(c, "DROP TABLE IF EXISTS "+t+"; CREATE TABLE "+t+" (id INT PRIMARY KEY)")
	// Parameters are interpolated in the text mode; a batch cannot be a prepared statement.
	batch := "SELECT 1 AS a; SELECT 'two' AS b UNION ALL SELECT 'three'; INSERT INTO " + t +
		" VALUES (1), (2); SELECT COUNT(*) AS n FROM " + t + "; SELECT @@server_id AS sid"
	var args []any
	if m.interpolate {
		batch = "SELECT ? AS a; SELECT ? AS b UNION ALL SELECT ?; INSERT INTO " + t +
			" VALUES (?), (?); SELECT COUNT(*) AS n FROM " + t + "; SELECT @@server_id AS sid"
		args = []any{1, "two", "three", 1, 2}
	}
	got := fmt.Sprint(resultSets(c, batch, args...))
	// database/sql skips the INSERT's OK: it has no result set.
	eq(got, "[[1] [two three] [2] [1]]", "result sets of a batch with a write (on the primary)")

	eq(fmt.Sprint(resultSets(c, "SELECT 1 AS v; SELECT 2 AS v; SELECT 3 AS v")), "[[1] [2] [3]]", "read-only batch")
	eq(fmt.Sprint(resultSets(c, "SET @m = 5; SELECT @m * 2 AS v")), "[[10]]", "user variable set and read in a batch")
	eq(value(c, "SELECT @m"), "5", "user variable from the batch, read later")

	// The error comes with the second result set.
	rows, err := c.QueryContext(ctx, "SELECT 1; SELECT * FROM no_such_table; SELECT 3")
	if err == nil {
		for more := true; more; more = rows.NextResultSet() {
			for rows.Next() {
			}
		}
		err = rows.Err()
		must(rows.Close(), "close the failed batch")
	}
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1146 {
		fail("batch with a failing statement: expected error 1146, got %v", err)
	}
	eq(fmt.Sprint(resultSets(c, "SELECT 4 AS v; SELECT 5 AS v")), "[[4] [5]]", "batch after a failed batch")
}

func largeResults(e *env, db *sql.DB, m mode) {
	const n = 200000
	rows, err := db.QueryContext(ctx, "SELECT seq, REPEAT('x', 100) FROM seq_1_to_200000 WHERE seq <= ? ORDER BY seq", n)
	must(err, "large SELECT")
	pad := strings.Repeat("x", 100)
	var count, sum int64
	for rows.Next() {
		var seq int64
		var p sql.RawBytes
		must(rows.Scan(&seq, &p), "large SELECT row")
		count++
		if seq != count || string(p) != pad {
			fail("row %d: got %d, %q", count, seq, p)
		}
		sum += seq
	}
	must(rows.Err(), "large SELECT")
	rows.Close()
	eq(count, int64(n), "rows")
	eq(sum, int64(n)*(n+1)/2, "sum of seq")

	// A 20 MB BLOB (more than one 16 MB protocol packet) both ways.
	t := "big_" + m.name
	recreate(db, t, "(id INT PRIMARY KEY, b LONGBLOB)")
	blob := make([]byte, 20<<20)
	_, _ = rand.Read(blob)
	sum256 := sha256.Sum256(blob)
	sha := hex.EncodeToString(sum256[:])
	check := func(q querier, query string, id int, what string) {
		var b []byte
		var length, sid int64
		var serverSha string
		scan(q, query, []any{id}, &b, &length, &serverSha, &sid)
		at := fmt.Sprintf("%s (server %d)", what, sid)
		eq(length, int64(len(blob)), at+": LENGTH(b)")
		eq(serverSha, sha, at+": SHA2(b, 256) on the server")
		eq(len(b), len(blob), at+": bytes received")
		got := sha256.Sum256(b)
		eq(hex.EncodeToString(got[:]), sha, at+": SHA-256 of the bytes received")
	}
	sel := "b, LENGTH(b), SHA2(b, 256), @@server_id FROM " + t + " WHERE id = ?"
	exec(db, "INSERT INTO "+t+" VALUES (?, ?)", 1, blob)
	check(db, "SELECT /* sluice:writer */ "+sel, 1, "from the writer")
	if !m.interpolate {
		// With a smaller maxAllowedPacket the driver sends the BLOB with COM_STMT_SEND_LONG_DATA.
		small := open(e.sluicePort, m, "&maxAllowedPacket=16777216")
		defer small.Close()
		exec(small, "INSERT INTO "+t+" VALUES (?, ?)", 2, blob)
		check(small, "SELECT /* sluice:writer */ "+sel, 2, "sent as long data, from the writer")
	}
	e.waitReplicated()
	check(db, "SELECT "+sel, 1, "from a replica")
}

func duplicateKey(e *env, db *sql.DB, m mode) {
	t := "dup_" + m.name
	recreate(db, t, "(id INT PRIMARY KEY, v VARCHAR(10))")
	c := e.conn(db)
	defer c.Close()
	exec(c, "INSERT INTO "+t+" VALUES (?, ?)", 1, "a")
	me := expectError(c, 1062, "INSERT INTO "+t+" VALUES (?, ?)", 1, "b")
	eq(string(me.SQLState[:]), "23000", "SQLSTATE")
	eq(intValue(c, "SELECT ? + 1", 0), 1, "connection usable after the error")
	exec(c, "INSERT INTO "+t+" VALUES (?, ?)", 2, "b")

	// Inside a transaction the error does not end it.
	tx, err := c.BeginTx(ctx, nil)
	must(err, "BEGIN")
	exec(tx, "INSERT INTO "+t+" VALUES (?, ?)", 3, "c")
	expectError(tx, 1062, "INSERT INTO "+t+" VALUES (?, ?)", 2, "dup")
	eq(intValue(tx, "SELECT COUNT(*) FROM "+t+" WHERE id > ?", 0), 3, "rows in the transaction after the error")
	eq(serverID(tx), 1, "@@server_id in the transaction after the error")
	must(tx.Commit(), "COMMIT")
	expectUnpinned(c)
	eq(value(e.primary, "SELECT GROUP_CONCAT(v ORDER BY id) FROM "+t), "a,b,c", "rows on the primary")
}

// preparedStatements: explicitly prepared statements (server-side in both modes): one
// handle used on replicas, inside a transaction on the primary and after it; closing; errors
// at prepare time.
func preparedStatements(e *env, db *sql.DB, m mode) {
	c := e.conn(db)
	defer c.Close()
	stmt, err := c.PrepareContext(ctx, "SELECT @@server_id, ?")
	must(err, "PREPARE")
	servers := map[int64]bool{}
	for i := 0; i < 40 && len(servers) < len(replicas); i++ {
		var sid int64
		var echo string
		must(stmt.QueryRowContext(ctx, fmt.Sprint("v", i)).Scan(&sid, &echo), "EXECUTE")
		eq(echo, fmt.Sprint("v", i), "parameter echoed by a prepared statement")
		servers[sid] = true
	}
	sameSet(servers, replicas, "servers that ran the prepared statement")
	tx, err := c.BeginTx(ctx, nil)
	must(err, "BEGIN")
	txStmt := tx.StmtContext(ctx, stmt)
	for range 3 {
		var sid int64
		var echo string
		must(txStmt.QueryRowContext(ctx, "in trx").Scan(&sid, &echo), "EXECUTE in a transaction")
		eq(sid, 1, "prepared statement inside a transaction")
	}
	must(tx.Commit(), "COMMIT")
	var sid int64
	var echo string
	must(stmt.QueryRowContext(ctx, "after").Scan(&sid, &echo), "EXECUTE after COMMIT")
	if !slices.Contains(replicas, sid) {
		fail("prepared statement after COMMIT ran on server %d", sid)
	}
	must(stmt.Close(), "COM_STMT_CLOSE")
	eq(intValue(c, "SELECT ? + 1", 0), 1, "session usable after COM_STMT_CLOSE")

	_, err = c.PrepareContext(ctx, "SELEC ?")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1064 {
		fail("prepare of a syntax error: expected error 1064, got %v", err)
	}
	eq(intValue(c, "SELECT ? + 2", 0), 2, "session usable after a failed prepare")
}

// connectionCharset: a latin1 connection (the handshake's collation) behaves as on a direct
// connection, whichever server answers. The driver sends Go strings' UTF-8 bytes as they are.
func connectionCharset(e *env, db *sql.DB, m mode) {
	t := "cs_" + m.name
	recreate(db, t, "(id INT PRIMARY KEY, s VARCHAR(20)) DEFAULT CHARSET=utf8mb4")
	latin1 := func(port string) *sql.DB { return open(port, m, "&collation=latin1_swedish_ci") }
	viaSluice, direct := latin1(e.sluicePort), latin1(e.primaryPort)
	defer viaSluice.Close()
	defer direct.Close()
	exec(viaSluice, "INSERT INTO "+t+" VALUES (?, ?)", 1, "héllo")
	exec(direct, "INSERT INTO "+t+" VALUES (?, ?)", 2, "héllo")
	e.waitReplicated()
	query := "SELECT s, HEX(s), ?, HEX(?), @@character_set_client, @@character_set_results " +
		"FROM " + t + " WHERE id = ?"
	read := func(db *sql.DB, id int) string {
		row := maps(db, query, "é", "é", id)[0]
		delete(row, "_0")
		return fmt.Sprint(row)
	}
	want := read(direct, 2)
	servers := map[int64]bool{}
	for i := range 20 {
		for _, id := range []int{1, 2} {
			eq(read(viaSluice, id), want, fmt.Sprintf("read %d of row %d, sluice vs direct", i, id))
		}
		servers[serverID(viaSluice)] = true
	}
	sameSet(servers, replicas, "servers that answered")
}

type check struct {
	name  string
	fn    func(*env, *sql.DB, mode)
	modes []mode
}

var checks = []check{
	{"transactions", transactions, []mode{textMode, preparedMode}},
	{"session_variables", sessionVariables, []mode{textMode, preparedMode}},
	{"parameter_types", parameterTypes, []mode{textMode, preparedMode}},
	{"temporary_tables", temporaryTables, []mode{textMode, preparedMode}},
	{"user_variables", userVariables, []mode{textMode, preparedMode}},
	{"last_insert_id", lastInsertID, []mode{textMode, preparedMode}},
	{"multi_statements", multiStatements, []mode{textMode, preparedMode}},
	{"large_results", largeResults, []mode{textMode, preparedMode}},
	{"duplicate_key", duplicateKey, []mode{textMode, preparedMode}},
	{"prepared_statements", preparedStatements, []mode{preparedMode}},
	{"connection_charset", connectionCharset, []mode{textMode, preparedMode}},
}

// run runs one check, turning a failure into an error.
func run(c check, e *env, m mode) (err error) {
	db := open(e.sluicePort, m, "")
	defer db.Close()
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(checkFailure)
			if !ok {
				panic(r)
			}
			err = errors.New(f.msg)
		}
	}()
	c.fn(e, db, m)
	return nil
}

func main() {
	e := &env{sluicePort: os.Getenv("SLUICE_PORT"), primaryPort: os.Getenv("PRIMARY_PORT")}
	if e.sluicePort == "" || e.primaryPort == "" {
		fmt.Fprintln(os.Stderr, "usage: SLUICE_PORT=<port> PRIMARY_PORT=<port> drivertest [check]")
		os.Exit(2)
	}
	e.primary = open(e.primaryPort, textMode, "")
	e.admin = open(e.sluicePort, textMode, "")
	only := ""
	if len(os.Args) > 1 {
		only = os.Args[1]
	}
	for _, c := range checks {
		if only != "" && c.name != only {
			continue
		}
		for _, m := range c.modes {
			started := time.Now()
			if err := run(c, e, m); err != nil {
				fmt.Fprintf(os.Stderr, "FAIL %s [%s]: %v\n", c.name, m.name, err)
				os.Exit(1)
			}
			fmt.Printf("OK %s [%s] (%d ms)\n", c.name, m.name, time.Since(started).Milliseconds())
		}
	}
}
