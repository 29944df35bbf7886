// Command pgx drives sluice's PostgreSQL listener with jackc/pgx v5, the way Go applications
// use it: pgx's default QueryExecModeCacheStatement (a statement cache of named server-side
// statements, prepared with Parse/Describe/Sync and run with Bind/Execute/Sync in a second round
// trip), plus QueryExecModeDescribeExec, QueryExecModeExec and QueryExecModeSimpleProtocol for
// the types. Checks: replica reads and primary transactions, writes seen on the primary, session
// settings across pooled reads (and RESET), temporary tables, advisory locks, LISTEN/NOTIFY,
// COPY in and out, every common type as parameter and result (and NULL), cached statements on a
// backend that never saw them and a pgxpool under 50 goroutines, SendBatch pipelines, a
// CancelRequest for a running statement, errors that leave the session usable, a large result.
//
// Env: PGHOST, SLUICE_PORT (sluice's read/write-splitting PostgreSQL port), PRIMARY_PORT and
// REPLICA_PORT (the servers, direct), PGUSER, PGPASSWORD, PGDATABASE, PREFIX (every table,
// schema, channel, advisory-lock key and application_name derives from it: other programs run
// on the same servers at the same time).
// Prints `ok <check>` or `FAIL <check>: <reason>` per check, runs them all, exits 1 if any
// failed. Every wait is bounded; a watchdog ends the program after 170 s.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

var (
	host, user, password, database       string
	sluicePort, primaryPort, replicaPort string
	prefix                               string
)

func env(name string) string {
	v := os.Getenv(name)
	if v == "" {
		fmt.Printf("FAIL setup: %s is not set\n", name)
		os.Exit(1)
	}
	return v
}

// name is a table, schema or channel name of this program: PREFIX + "pgx_" + what.
func name(what string) string { return prefix + "pgx_" + what }

// lockKey is an advisory-lock key of this program.
func lockKey(what string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name(what)))
	return int64(h.Sum64() & math.MaxInt64)
}

// ---------------------------------------------------------------------------------------
// Helpers: a failed check panics with a checkFailure, which check reports.

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

func p[T any](v T) *T { return &v }

// sqlState is the SQLSTATE of a server error ("" for any other error).
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func wantState(err error, state, what string) {
	if err == nil {
		fail("%s: expected SQLSTATE %s, got no error", what, state)
	}
	if got := sqlState(err); got != state {
		fail("%s: expected SQLSTATE %s, got %v", what, state, err)
	}
}

var cleanups []func()

func deferCleanup(f func()) { cleanups = append(cleanups, f) }

var failures int

// check runs one check with its own deadline, prints its line and closes what it opened.
func check(label string, timeout time.Duration, f func(ctx context.Context)) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	msg := func() (msg string) {
		defer func() {
			if r := recover(); r != nil {
				cf, ok := r.(checkFailure)
				if !ok {
					panic(r)
				}
				msg = cf.msg
			}
		}()
		f(ctx)
		return ""
	}()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	cleanups = nil
	if msg == "" {
		fmt.Printf("ok %s\n", label)
	} else {
		failures++
		fmt.Printf("FAIL %s: %s\n", label, strings.ReplaceAll(msg, "\n", " "))
	}
}

// config is a connection to port; application_name is PREFIX+"pgx" unless app says otherwise.
// A context that ends while a statement runs sends a CancelRequest at once (pgx's default only
// closes the socket), and closes the socket 3 s later if the statement still has not ended.
func config(port, app string) *pgx.ConnConfig {
	if app == "" {
		app = name("")
		app = app[:len(app)-1]
	}
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=%s application_name=%s",
		host, port, user, password, database, app))
	if err != nil {
		fail("config: %v", err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 3 * time.Second}
	}
	cfg.ConnectTimeout = 25 * time.Second
	return cfg
}

func connectConfig(ctx context.Context, cfg *pgx.ConnConfig, what string) *pgx.Conn {
	c, err := pgx.ConnectConfig(ctx, cfg)
	must(err, "connect to "+what)
	deferCleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		c.Close(cctx)
	})
	return c
}

// sluice is a connection through sluice's read/write-splitting port.
func sluice(ctx context.Context) *pgx.Conn {
	return connectConfig(ctx, config(sluicePort, ""), "sluice")
}

func sluiceApp(ctx context.Context, app string) *pgx.Conn {
	return connectConfig(ctx, config(sluicePort, app), "sluice")
}

func primary(ctx context.Context) *pgx.Conn {
	return connectConfig(ctx, config(primaryPort, name("direct")), "the primary")
}

func replica(ctx context.Context) *pgx.Conn {
	return connectConfig(ctx, config(replicaPort, name("direct")), "the replica")
}

// querier is a *pgx.Conn or a pgx.Tx.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func exec(ctx context.Context, q querier, sql string, args ...any) pgconn.CommandTag {
	tag, err := q.Exec(ctx, sql, args...)
	must(err, sql)
	return tag
}

// row scans the only row of sql into dest.
func row(ctx context.Context, q querier, sql string, args []any, dest ...any) {
	must(q.QueryRow(ctx, sql, args...).Scan(dest...), sql)
}

func boolOf(ctx context.Context, q querier, sql string, args ...any) bool {
	var v bool
	row(ctx, q, sql, args, &v)
	return v
}

func intOf(ctx context.Context, q querier, sql string, args ...any) int64 {
	var v int64
	row(ctx, q, sql, args, &v)
	return v
}

func textOf(ctx context.Context, q querier, sql string, args ...any) string {
	var v string
	row(ctx, q, sql, args, &v)
	return v
}

func pidOf(ctx context.Context, q querier) int32 {
	var pid int32
	row(ctx, q, "SELECT pg_backend_pid()", nil, &pid)
	return pid
}

// waitReplayed waits (up to 15 s) until the replica has replayed everything the primary wrote.
func waitReplayed(ctx context.Context, prim, repl *pgx.Conn) {
	lsn := textOf(ctx, prim, "SELECT pg_current_wal_insert_lsn()::text")
	deadline := time.Now().Add(15 * time.Second)
	for !boolOf(ctx, repl, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn) {
		if time.Now().After(deadline) {
			fail("the replica did not replay %s within 15 s", lsn)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holdBackend opens sluice connections, each in a read-only transaction (which runs on a replica
// and keeps its backend until it ends), until one holds backend pid: up to 10 (sluice gives the
// most recently idle connection first). Should another program's transaction have that backend
// just then, the holders end and try again (3 times). The holders' transactions end with
// release, or when the check's connections close.
func holdBackend(ctx context.Context, pid int32) (release func()) {
	var txs []pgx.Tx
	release = func() {
		for _, tx := range txs {
			must(tx.Rollback(ctx), "holder's rollback")
		}
		txs = nil
	}
	var seen []int32
	for try := range 3 {
		if try > 0 {
			release()
			time.Sleep(200 * time.Millisecond)
		}
		for range 10 {
			h := sluice(ctx)
			tx, err := h.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
			must(err, "holder's BEGIN READ ONLY")
			txs = append(txs, tx)
			got := pidOf(ctx, tx)
			if got == pid {
				return release
			}
			seen = append(seen, got)
		}
	}
	fail("none of 3 × 10 read-only transactions got backend %d (they got %v)", pid, seen)
	return nil
}

// ---------------------------------------------------------------------------------------
// Setup: the tables, created on the primary directly, replayed on the replica before the checks.

func setup(ctx context.Context) {
	prim := primary(ctx)
	repl := replica(ctx)
	for _, sql := range []string{
		"DROP TABLE IF EXISTS " + name("w") + ", " + name("tx") + ", " + name("copy") + ", " +
			name("types") + ", " + name("pool") + ", " + name("batch") + ", " + name("err"),
		"DROP SCHEMA IF EXISTS " + name("schema") + " CASCADE",
		"CREATE TABLE " + name("tx") + " (id int PRIMARY KEY, v text)",
		"CREATE TABLE " + name("copy") + " (id int PRIMARY KEY, v text, b bytea, ts timestamptz)",
		"CREATE TABLE " + name("types") + ` (mode text, is_null bool, c_int2 int2, c_int4 int4,
			c_int8 int8, c_float4 float4, c_float8 float8, c_numeric numeric, c_bool bool, c_text text,
			c_bytea bytea, c_bytea_empty bytea, c_date date, c_timestamp timestamp,
			c_timestamptz timestamptz, c_interval interval, c_uuid uuid, c_json json, c_jsonb jsonb,
			c_int4_array int4[], c_text_array text[], c_int4_empty int4[], c_text_empty text[])`,
		"CREATE TABLE " + name("pool") + " (g int, i int, v text, PRIMARY KEY (g, i))",
		"CREATE TABLE " + name("batch") + " (id int PRIMARY KEY, v text)",
		"CREATE TABLE " + name("err") + " (id int PRIMARY KEY)",
		"CREATE SCHEMA " + name("schema"),
		"CREATE TABLE " + name("schema") + ".pgx_marker (v text)",
		"INSERT INTO " + name("schema") + ".pgx_marker VALUES ('in " + name("schema") + "')",
	} {
		exec(ctx, prim, sql)
	}
	waitReplayed(ctx, prim, repl)
}

// ---------------------------------------------------------------------------------------
// 1. Autocommit reads on a replica, transactions on the primary.

func checkReplicaReads(ctx context.Context) {
	c := sluice(ctx)
	for i := range 3 {
		eq(boolOf(ctx, c, "SELECT pg_is_in_recovery()"), true, fmt.Sprintf("autocommit read %d in recovery", i))
	}
	eq(boolOf(ctx, c, "SELECT pg_is_in_recovery() AND $1::int = 1", 1), true, "autocommit read with a parameter in recovery")
	tx, err := c.Begin(ctx)
	must(err, "BEGIN")
	eq(boolOf(ctx, tx, "SELECT pg_is_in_recovery()"), false, "read in a transaction in recovery")
	eq(boolOf(ctx, tx, "SELECT pg_is_in_recovery() AND $1::int = 1", 1), false, "second read in the transaction in recovery")
	must(tx.Commit(ctx), "COMMIT")
	ro, err := c.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	must(err, "BEGIN READ ONLY")
	eq(boolOf(ctx, ro, "SELECT pg_is_in_recovery()"), true, "read in a read-only transaction in recovery")
	must(ro.Commit(ctx), "COMMIT")
	eq(boolOf(ctx, c, "SELECT pg_is_in_recovery()"), true, "autocommit read after the transactions in recovery")
}

// 2. Writes through sluice land on the primary.

func checkWrites(ctx context.Context) {
	c := sluice(ctx)
	prim := primary(ctx)
	t := name("w")
	exec(ctx, c, "DROP TABLE IF EXISTS "+t)
	exec(ctx, c, "CREATE TABLE "+t+" (id int PRIMARY KEY, v text)")
	for i := 1; i <= 3; i++ {
		tag := exec(ctx, c, "INSERT INTO "+t+" (id, v) VALUES ($1, $2)", i, fmt.Sprintf("v%d", i))
		eq(tag.RowsAffected(), int64(1), "INSERT rows affected")
	}
	var id int32
	row(ctx, c, "INSERT INTO "+t+" (id, v) VALUES ($1, $2) RETURNING id", []any{4, "v4"}, &id)
	eq(id, int32(4), "INSERT … RETURNING")
	eq(exec(ctx, c, "UPDATE "+t+" SET v = v || '!' WHERE id >= $1", 3).RowsAffected(), int64(2), "UPDATE rows affected")
	eq(exec(ctx, c, "DELETE FROM "+t+" WHERE id = $1", 1).RowsAffected(), int64(1), "DELETE rows affected")
	eq(textOf(ctx, prim, "SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM "+t), "2=v2,3=v3!,4=v4!", "rows on the primary")
}

// 3. Transactions: a rolled-back one leaves nothing, a committed one everything, savepoints.

func checkTransactions(ctx context.Context) {
	c := sluice(ctx)
	prim := primary(ctx)
	t := name("tx")
	exec(ctx, prim, "DELETE FROM "+t)

	tx, err := c.Begin(ctx)
	must(err, "BEGIN")
	exec(ctx, tx, "INSERT INTO "+t+" VALUES ($1, $2)", 1, "rolled back")
	eq(intOf(ctx, tx, "SELECT count(*) FROM "+t+" WHERE id = $1", 1), int64(1), "own row in the transaction")
	eq(textOf(ctx, tx, "SELECT v FROM "+t+" WHERE id = $1", 1), "rolled back", "own row's value")
	must(tx.Rollback(ctx), "ROLLBACK")
	eq(intOf(ctx, prim, "SELECT count(*) FROM "+t), int64(0), "rows on the primary after ROLLBACK")

	tx, err = c.Begin(ctx)
	must(err, "BEGIN")
	exec(ctx, tx, "INSERT INTO "+t+" VALUES ($1, $2)", 2, "committed")
	eq(intOf(ctx, tx, "SELECT count(*) FROM "+t), int64(1), "own row in the second transaction")
	sp, err := tx.Begin(ctx)
	must(err, "SAVEPOINT")
	exec(ctx, sp, "INSERT INTO "+t+" VALUES ($1, $2)", 3, "savepoint rolled back")
	eq(intOf(ctx, sp, "SELECT count(*) FROM "+t), int64(2), "rows after the savepoint's insert")
	must(sp.Rollback(ctx), "ROLLBACK TO SAVEPOINT")
	exec(ctx, tx, "INSERT INTO "+t+" VALUES ($1, $2)", 4, "committed too")
	must(tx.Commit(ctx), "COMMIT")
	eq(textOf(ctx, prim, "SELECT string_agg(id::text, ',' ORDER BY id) FROM "+t), "2,4", "rows on the primary after COMMIT")
	eq(boolOf(ctx, c, "SELECT pg_is_in_recovery()"), true, "autocommit read after the transactions in recovery")
}

// 4. Session settings follow the session onto other backends, and RESET undoes them.

func checkSessionState(ctx context.Context) {
	prim := primary(ctx)
	defaultTZ := textOf(ctx, prim, "SELECT current_setting('TimeZone')")
	c := sluice(ctx)
	app := name("")
	app = app[:len(app)-1]
	schema := name("schema")
	tz := "Asia/Kolkata"
	if defaultTZ == tz {
		tz = "America/St_Johns"
	}
	stateApp := name("state")

	// Two SETs in the simple protocol (pgx's Exec without arguments), two as extended-protocol
	// statements (pgx's Query: Parse/Describe/Sync, Bind/Execute/Sync).
	exec(ctx, c, "SET search_path TO "+schema+", public")
	exec(ctx, c, "SET TimeZone TO '"+tz+"'")
	rows, err := c.Query(ctx, "SET application_name TO '"+stateApp+"'")
	must(err, "SET application_name (extended protocol)")
	rows.Close()
	must(rows.Err(), "SET application_name (extended protocol)")
	rows, err = c.Query(ctx, "SET statement_timeout TO '54321ms'")
	must(err, "SET statement_timeout (extended protocol)")
	rows.Close()
	must(rows.Err(), "SET statement_timeout (extended protocol)")

	const q = `SELECT pg_backend_pid(), pg_is_in_recovery(), current_setting('search_path'),
		current_setting('TimeZone'), current_setting('application_name'),
		current_setting('statement_timeout'), (SELECT v FROM pgx_marker),
		'2020-01-01 00:00:00+00'::timestamptz::text`
	wantLocal := map[string]string{"Asia/Kolkata": "2020-01-01 05:30:00+05:30", "America/St_Johns": "2019-12-31 20:30:00-03:30"}[tz]
	var releases []func()
	pids := map[int32]bool{}
	for i := range 4 {
		what := fmt.Sprintf("read %d", i)
		var pid int32
		var recovery bool
		var sp, gotTZ, gotApp, timeout, marker, local string
		row(ctx, c, q, nil, &pid, &recovery, &sp, &gotTZ, &gotApp, &timeout, &marker, &local)
		eq(recovery, true, what+": in recovery")
		eq(sp, schema+", public", what+": search_path")
		eq(gotTZ, tz, what+": TimeZone")
		eq(gotApp, stateApp, what+": application_name")
		eq(timeout, "54321ms", what+": statement_timeout")
		eq(marker, "in "+schema, what+": unqualified table in search_path")
		eq(local, wantLocal, what+": timestamptz output in the TimeZone")
		eq(c.PgConn().ParameterStatus("application_name"), stateApp, what+": application_name ParameterStatus")
		eq(c.PgConn().ParameterStatus("TimeZone"), tz, what+": TimeZone ParameterStatus")
		if pids[pid] {
			fail("%s ran on backend %d again although a read-only transaction holds it", what, pid)
		}
		pids[pid] = true
		// The next read must run on another backend: hold this one.
		if i < 3 {
			releases = append(releases, holdBackend(ctx, pid))
		}
	}
	for _, r := range releases {
		r()
	}

	exec(ctx, c, "RESET search_path")
	exec(ctx, c, "RESET TimeZone")
	exec(ctx, c, "RESET application_name")
	rows, err = c.Query(ctx, "RESET statement_timeout")
	must(err, "RESET statement_timeout (extended protocol)")
	rows.Close()
	must(rows.Err(), "RESET statement_timeout (extended protocol)")
	for i := range 3 {
		what := fmt.Sprintf("read %d after RESET", i)
		var sp, gotTZ, gotApp, timeout string
		row(ctx, c, `SELECT current_setting('search_path'), current_setting('TimeZone'),
			current_setting('application_name'), current_setting('statement_timeout')`, nil, &sp, &gotTZ, &gotApp, &timeout)
		eq(sp, `"$user", public`, what+": search_path")
		eq(gotTZ, defaultTZ, what+": TimeZone")
		eq(gotApp, app, what+": application_name (the startup parameter's)")
		eq(timeout, "0", what+": statement_timeout")
		eq(c.PgConn().ParameterStatus("application_name"), app, what+": application_name ParameterStatus")
		eq(c.PgConn().ParameterStatus("TimeZone"), defaultTZ, what+": TimeZone ParameterStatus")
		_, err := c.Exec(ctx, "SELECT v FROM pgx_marker WHERE $1::int = 1", 1)
		wantState(err, "42P01", what+": pgx_marker without the schema in search_path")
	}
	// The statement pgx cached while search_path named the schema: PostgreSQL re-resolves a
	// prepared statement's names when search_path has changed since it was planned.
	err = c.QueryRow(ctx, q).Scan(new(int32), new(bool), new(string), new(string), new(string), new(string), new(string), new(string))
	wantState(err, "42P01", "the statement cached under the old search_path")
}

// 5. Temporary tables pin the session: they stay visible across statements and transactions.

func checkTempTables(ctx context.Context) {
	c := sluice(ctx)
	t := name("tmp")
	exec(ctx, c, "CREATE TEMP TABLE "+t+" (id int, v text)")
	pid := pidOf(ctx, c)
	exec(ctx, c, "INSERT INTO "+t+" VALUES ($1, $2)", 1, "autocommit")
	eq(intOf(ctx, c, "SELECT count(*) FROM "+t), int64(1), "rows after the autocommit insert")
	tx, err := c.Begin(ctx)
	must(err, "BEGIN")
	exec(ctx, tx, "INSERT INTO "+t+" VALUES ($1, $2)", 2, "committed")
	must(tx.Commit(ctx), "COMMIT")
	tx, err = c.Begin(ctx)
	must(err, "BEGIN")
	exec(ctx, tx, "INSERT INTO "+t+" VALUES ($1, $2)", 3, "rolled back")
	eq(intOf(ctx, tx, "SELECT count(*) FROM "+t), int64(3), "rows in the transaction")
	must(tx.Rollback(ctx), "ROLLBACK")
	// Another session's statements in between must not take the pinned backend.
	other := sluice(ctx)
	for range 3 {
		exec(ctx, other, "SELECT $1::int", 1)
		tx, err := other.Begin(ctx)
		must(err, "other session's BEGIN")
		exec(ctx, tx, "SELECT $1::int", 1)
		must(tx.Commit(ctx), "other session's COMMIT")
	}
	for i := range 3 {
		eq(textOf(ctx, c, "SELECT string_agg(id::text, ',' ORDER BY id) FROM "+t), "1,2", fmt.Sprintf("rows, read %d", i))
		eq(pidOf(ctx, c), pid, fmt.Sprintf("backend, read %d", i))
		eq(boolOf(ctx, c, "SELECT pg_is_in_recovery()"), false, fmt.Sprintf("read %d in recovery", i))
	}
	exec(ctx, c, "DISCARD TEMP")
	_, err = c.Exec(ctx, "SELECT count(*) FROM "+t+" WHERE $1::int = 1", 1)
	wantState(err, "42P01", "the temporary table after DISCARD TEMP")
	eq(boolOf(ctx, c, "SELECT pg_is_in_recovery()"), true, "read after DISCARD TEMP in recovery")
}

// 6. Session-level advisory locks stay with the session; transaction-level ones end with it.

func checkAdvisoryLocks(ctx context.Context) {
	c := sluice(ctx)
	prim := primary(ctx)
	key := lockKey("lock")
	row(ctx, c, "SELECT pg_advisory_lock($1)", []any{key}, new(any))
	eq(boolOf(ctx, prim, "SELECT pg_try_advisory_lock($1)", key), false, "direct pg_try_advisory_lock while sluice's session holds it")
	for i := range 3 {
		eq(boolOf(ctx, c, "SELECT $1::int = 1", 1), true, fmt.Sprintf("read %d while holding the lock", i))
	}
	eq(boolOf(ctx, prim, "SELECT pg_try_advisory_lock($1)", key), false, "direct pg_try_advisory_lock after the session's reads")
	eq(boolOf(ctx, c, "SELECT pg_advisory_unlock($1)", key), true, "pg_advisory_unlock through sluice")
	eq(boolOf(ctx, prim, "SELECT pg_try_advisory_lock($1)", key), true, "direct pg_try_advisory_lock after the unlock")
	eq(boolOf(ctx, prim, "SELECT pg_advisory_unlock($1)", key), true, "direct pg_advisory_unlock")

	xkey := lockKey("xact_lock")
	tx, err := c.Begin(ctx)
	must(err, "BEGIN")
	row(ctx, tx, "SELECT pg_advisory_xact_lock($1)", []any{xkey}, new(any))
	eq(boolOf(ctx, prim, "SELECT pg_try_advisory_lock($1)", xkey), false, "direct pg_try_advisory_lock during the transaction-level lock")
	must(tx.Commit(ctx), "COMMIT")
	eq(boolOf(ctx, prim, "SELECT pg_try_advisory_lock($1)", xkey), true, "direct pg_try_advisory_lock after COMMIT")
	eq(boolOf(ctx, prim, "SELECT pg_advisory_unlock($1)", xkey), true, "direct pg_advisory_unlock")
}

// 7. LISTEN/NOTIFY: notifications reach the listening session, from sluice or the primary.

func checkListenNotify(ctx context.Context) {
	l := sluice(ctx)
	n := sluice(ctx)
	prim := primary(ctx)
	ch := name("chan")
	wait := func(what string) *pgconn.Notification {
		wctx, cancel := context.WithTimeout(ctx, 25*time.Second)
		defer cancel()
		got, err := l.WaitForNotification(wctx)
		must(err, "WaitForNotification for "+what)
		return got
	}
	exec(ctx, l, "LISTEN "+ch)
	for i := range 3 {
		eq(boolOf(ctx, l, "SELECT $1::int = 1", 1), true, fmt.Sprintf("read %d while listening", i))
	}

	exec(ctx, n, "SELECT pg_notify($1, $2)", ch, "from sluice")
	got := wait("pg_notify through sluice")
	eq(got.Channel, ch, "channel")
	eq(got.Payload, "from sluice", "payload")

	exec(ctx, prim, "NOTIFY "+ch+", 'from the primary'")
	eq(wait("NOTIFY on the primary").Payload, "from the primary", "payload")

	// A rolled-back NOTIFY is never delivered: the next one is the committed one.
	tx, err := n.Begin(ctx)
	must(err, "BEGIN")
	exec(ctx, tx, "NOTIFY "+ch+", 'rolled back'")
	must(tx.Rollback(ctx), "ROLLBACK")
	tx, err = n.Begin(ctx)
	must(err, "BEGIN")
	exec(ctx, tx, "NOTIFY "+ch+", 'committed'")
	must(tx.Commit(ctx), "COMMIT")
	eq(wait("a committed NOTIFY").Payload, "committed", "payload after a rolled-back NOTIFY")

	// Delivered while the listener is idle, then read by a statement.
	exec(ctx, prim, "NOTIFY "+ch+", 'while idle'")
	eq(boolOf(ctx, l, "SELECT $1::int = 1", 1), true, "read after a notification arrived")
	eq(wait("a notification sent while idle").Payload, "while idle", "payload")
	exec(ctx, l, "UNLISTEN *")
}

// 8. COPY: binary COPY FROM STDIN (CopyFrom), text COPY FROM STDIN, COPY TO STDOUT.

func checkCopy(ctx context.Context) {
	c := sluice(ctx)
	prim := primary(ctx)
	repl := replica(ctx)
	t := name("copy")
	exec(ctx, prim, "DELETE FROM "+t)
	const n = 5000
	ts := time.Date(2024, 2, 29, 12, 0, 0, 0, time.UTC)
	rows := make([][]any, n)
	for i := range rows {
		rows[i] = []any{i + 1, fmt.Sprintf("row %d\ttab \\ é", i+1), []byte{0, byte(i), 0xff}, ts.Add(time.Duration(i) * time.Second)}
	}
	cols := []string{"id", "v", "b", "ts"}
	copied, err := c.CopyFrom(ctx, pgx.Identifier{t}, cols, pgx.CopyFromRows(rows))
	must(err, "CopyFrom")
	eq(copied, int64(n), "rows CopyFrom reports")

	// Inside a rolled-back transaction: nothing stays.
	tx, err := c.Begin(ctx)
	must(err, "BEGIN")
	copied, err = tx.CopyFrom(ctx, pgx.Identifier{t}, cols, pgx.CopyFromRows([][]any{{n + 100, "rolled back", nil, nil}}))
	must(err, "CopyFrom in a transaction")
	eq(copied, int64(1), "rows CopyFrom in a transaction reports")
	eq(intOf(ctx, tx, "SELECT count(*) FROM "+t), int64(n+1), "rows in the transaction")
	must(tx.Rollback(ctx), "ROLLBACK")

	var text bytes.Buffer
	for i := n + 1; i <= n+100; i++ {
		fmt.Fprintf(&text, "%d\ttext copy %d\t\\\\x00ff\t2024-03-01 00:00:00+00\n", i, i)
	}
	tag, err := c.PgConn().CopyFrom(ctx, &text, "COPY "+t+" (id, v, b, ts) FROM STDIN")
	must(err, "text COPY FROM STDIN")
	eq(tag.RowsAffected(), int64(100), "rows text COPY FROM STDIN reports")

	var count, sum int64
	row(ctx, prim, "SELECT count(*), sum(id) FROM "+t, nil, &count, &sum)
	eq(count, int64(n+100), "rows on the primary")
	eq(sum, int64((n+100)*(n+101)/2), "sum of ids on the primary")
	eq(textOf(ctx, prim, "SELECT v || ' ' || encode(b, 'hex') FROM "+t+" WHERE id = 300"), "row 300\ttab \\ é 002bff", "a CopyFrom row on the primary")
	eq(textOf(ctx, prim, "SELECT encode(b, 'hex') FROM "+t+" WHERE id = $1", n+7), "00ff", "a text COPY row on the primary")

	waitReplayed(ctx, prim, repl)
	var out bytes.Buffer
	tag, err = c.PgConn().CopyTo(ctx, &out, "COPY (SELECT id, v FROM "+t+" ORDER BY id) TO STDOUT")
	must(err, "COPY TO STDOUT")
	eq(tag.RowsAffected(), int64(n+100), "rows COPY TO STDOUT reports")
	lines := 0
	sc := bufio.NewScanner(&out)
	var first, last string
	for sc.Scan() {
		if lines == 0 {
			first = sc.Text()
		}
		last = sc.Text()
		lines++
	}
	eq(lines, n+100, "lines COPY TO STDOUT wrote")
	eq(first, "1\trow 1\\ttab \\\\ é", "first line")
	eq(last, fmt.Sprintf("%d\ttext copy %d", n+100, n+100), "last line")
	eq(boolOf(ctx, c, "SELECT $1::int = 1", 1), true, "a query after the COPYs")
}

// 9. Every common type as a parameter and a result, and NULL, in one exec mode.

type typeCase struct {
	typ     string
	val     any
	null    any
	newDest func() any                      // a **T
	check   func(dest any, null bool) error // dest from newDest, after Scan
}

func tcase[T any](typ string, v T, same func(got, want T) bool) typeCase {
	return typeCase{
		typ:     typ,
		val:     v,
		null:    (*T)(nil),
		newDest: func() any { return new(*T) },
		check: func(dest any, null bool) error {
			got := *(dest.(**T))
			switch {
			case null && got != nil:
				return fmt.Errorf("%s: expected NULL, got %#v", typ, *got)
			case null:
				return nil
			case got == nil:
				return fmt.Errorf("%s: expected %#v, got NULL", typ, v)
			case !same(*got, v):
				return fmt.Errorf("%s: sent %#v, got %#v", typ, v, *got)
			}
			return nil
		},
	}
}

func equal[T comparable](got, want T) bool { return got == want }

func sameTime(got, want time.Time) bool { return got.Equal(want) }

func sameJSON(got, want string) bool {
	var g, w any
	if json.Unmarshal([]byte(got), &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}

func samePtrs[T comparable](got, want []*T) bool {
	if got == nil || len(got) != len(want) {
		return false
	}
	for i := range want {
		if (got[i] == nil) != (want[i] == nil) || got[i] != nil && *got[i] != *want[i] {
			return false
		}
	}
	return true
}

func emptySlice[T any](got, _ []T) bool { return got != nil && len(got) == 0 }

func typeCases() []typeCase {
	const js = `{"a": 1, "b": [true, null, "é\"\\"], "c": {"d": 1.5}}`
	return []typeCase{
		tcase("int2", int16(math.MinInt16), equal[int16]),
		tcase("int4", int32(math.MaxInt32), equal[int32]),
		tcase("int8", int64(math.MinInt64), equal[int64]),
		tcase("float4", float32(-3.25e-5), equal[float32]),
		tcase("float8", math.Pi*1e300, equal[float64]),
		tcase("numeric", "-12345678901234567890.0123456789", equal[string]),
		tcase("bool", true, equal[bool]),
		tcase("text", "héllo 'quoted' \"double\" \\ back\ttab\nnewline 日本 😀", equal[string]),
		tcase("bytea", []byte{0, 0xff, 0xfe, 0x80, 0, 'a', 0xc3, 0x28, 0}, func(g, w []byte) bool { return bytes.Equal(g, w) }),
		tcase("bytea", []byte{}, func(g, _ []byte) bool { return len(g) == 0 }),
		tcase("date", time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), sameTime),
		tcase("timestamp", time.Date(2024, 2, 29, 13, 14, 15, 123456000, time.UTC), sameTime),
		tcase("timestamptz", time.Date(1999, 12, 31, 23, 59, 58, 654321000, time.FixedZone("", 5*3600+1800)), sameTime),
		tcase("interval", pgtype.Interval{Months: 14, Days: 3, Microseconds: 4*3600e6 + 5e6 + 6, Valid: true}, equal[pgtype.Interval]),
		tcase("uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", equal[string]),
		tcase("json", js, equal[string]),
		tcase("jsonb", js, sameJSON),
		tcase("int4[]", []*int32{p(int32(1)), nil, p(int32(-3))}, samePtrs[int32]),
		tcase("text[]", []*string{p("a"), nil, p(`b,c "q" {x} \`), p("NULL"), p("")}, samePtrs[string]),
		tcase("int4[]", []int32{}, emptySlice[int32]),
		tcase("text[]", []string{}, emptySlice[string]),
	}
}

func checkTypes(ctx context.Context, mode pgx.QueryExecMode) {
	c := sluice(ctx)
	cases := typeCases()
	// One statement per type, then NULL.
	for _, tc := range cases {
		for _, null := range []bool{false, true} {
			arg := tc.val
			if null {
				arg = tc.null
			}
			dest := tc.newDest()
			var isNull bool
			err := c.QueryRow(ctx, "SELECT $1::"+tc.typ+", $1::"+tc.typ+" IS NULL", mode, arg).Scan(dest, &isNull)
			if err != nil {
				fail("SELECT $1::%s (NULL: %v): %v", tc.typ, null, err)
			}
			if err := tc.check(dest, null); err != nil {
				fail("SELECT $1::%s: %v", tc.typ, err)
			}
			eq(isNull, null, fmt.Sprintf("$1::%s IS NULL", tc.typ))
		}
	}
	// All of them into a table's columns and back, in a transaction (on the primary). The modes
	// that describe the statement let the server infer the parameters' types from the columns.
	cols := []string{"c_int2", "c_int4", "c_int8", "c_float4", "c_float8", "c_numeric", "c_bool", "c_text",
		"c_bytea", "c_bytea_empty", "c_date", "c_timestamp", "c_timestamptz", "c_interval", "c_uuid", "c_json",
		"c_jsonb", "c_int4_array", "c_text_array", "c_int4_empty", "c_text_empty"}
	var ph []string
	for i, tc := range cases {
		if mode == pgx.QueryExecModeExec || mode == pgx.QueryExecModeSimpleProtocol {
			ph = append(ph, fmt.Sprintf("$%d::%s", i+3, tc.typ))
		} else {
			ph = append(ph, fmt.Sprintf("$%d", i+3))
		}
	}
	t := name("types")
	insert := "INSERT INTO " + t + " (mode, is_null, " + strings.Join(cols, ", ") + ") VALUES ($1, $2, " + strings.Join(ph, ", ") + ")"
	tx, err := c.Begin(ctx)
	must(err, "BEGIN")
	defer tx.Rollback(ctx)
	for _, null := range []bool{false, true} {
		args := []any{mode, mode.String(), null}
		for _, tc := range cases {
			if null {
				args = append(args, tc.null)
			} else {
				args = append(args, tc.val)
			}
		}
		_, err := tx.Exec(ctx, insert, args...)
		must(err, fmt.Sprintf("INSERT into the types table (NULL: %v)", null))
	}
	for _, null := range []bool{false, true} {
		dests := make([]any, len(cases))
		for i, tc := range cases {
			dests[i] = tc.newDest()
		}
		err := tx.QueryRow(ctx, "SELECT "+strings.Join(cols, ", ")+" FROM "+t+" WHERE mode = $1 AND is_null = $2",
			mode, mode.String(), null).Scan(dests...)
		must(err, fmt.Sprintf("SELECT from the types table (NULL: %v)", null))
		for i, tc := range cases {
			if err := tc.check(dests[i], null); err != nil {
				fail("column %s: %v", cols[i], err)
			}
		}
	}
	must(tx.Rollback(ctx), "ROLLBACK")
}

// 10a. pgx's cached (named) statements run on a backend that has never seen them.

func checkStatementCache(ctx context.Context) {
	a := sluice(ctx)
	repl := replica(ctx)
	// A text no backend has seen (sluice shares a statement's server-side preparation by text).
	q := fmt.Sprintf("SELECT pg_backend_pid(), $1::int AS %s_%d", name("n"), time.Now().UnixNano())
	var x, n int32
	row(ctx, a, q, []any{1}, &x, &n)
	eq(n, int32(1), "first run's value")
	eq(intOf(ctx, repl, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", x), int64(1), fmt.Sprintf("backend %d is the replica's", x))
	row(ctx, a, q, []any{2}, &x, &n) // from pgx's cache now: Bind/Execute/Sync only
	eq(n, int32(2), "second run's value")
	release := holdBackend(ctx, x)
	for i := range 3 {
		var y int32
		row(ctx, a, q, []any{10 + i}, &y, &n)
		eq(n, int32(10+i), fmt.Sprintf("cached statement's value on another backend, run %d", i))
		if y == x {
			fail("run %d ran on backend %d, which a read-only transaction holds", i, x)
		}
	}
	release()
	// Another session preparing the same text shares sluice's statement on the backend.
	b := sluice(ctx)
	row(ctx, b, q, []any{7}, new(int32), &n)
	eq(n, int32(7), "the same statement from another session")
	row(ctx, a, q, []any{8}, new(int32), &n)
	eq(n, int32(8), "the cached statement after the holders ended")
}

// 10b. A pgxpool of 5 connections under 50 goroutines: cached queries and transactions.

func checkPool(ctx context.Context) {
	prim := primary(ctx)
	t := name("pool")
	exec(ctx, prim, "DELETE FROM "+t)
	pcfg, err := pgxpool.ParseConfig("")
	must(err, "pgxpool config")
	pcfg.ConnConfig = config(sluicePort, "")
	pcfg.MaxConns = 5
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	must(err, "pgxpool")
	defer pool.Close()
	const goroutines, iterations = 50, 6
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := func() error {
				for i := range iterations {
					var sum int32
					var s string
					if err := pool.QueryRow(ctx, "SELECT $1::int + $2::int, $3::text || '!'", g, i, fmt.Sprint(g)).Scan(&sum, &s); err != nil {
						return fmt.Errorf("goroutine %d query %d: %w", g, i, err)
					}
					if sum != int32(g+i) || s != fmt.Sprint(g)+"!" {
						return fmt.Errorf("goroutine %d query %d: got %d %q", g, i, sum, s)
					}
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						if _, err := tx.Exec(ctx, "INSERT INTO "+t+" VALUES ($1, $2, $3)", g, i, fmt.Sprintf("%d/%d", g, i)); err != nil {
							return err
						}
						var count int64
						if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+t+" WHERE g = $1", g).Scan(&count); err != nil {
							return err
						}
						if count != int64(i+1) {
							return fmt.Errorf("%d rows of goroutine %d in its transaction, expected %d", count, g, i+1)
						}
						return nil
					})
					if err != nil {
						return fmt.Errorf("goroutine %d transaction %d: %w", g, i, err)
					}
				}
				return nil
			}()
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []string
	for err := range errs {
		all = append(all, err.Error())
	}
	if len(all) > 0 {
		fail("%d of %d goroutines failed, e.g. %s", len(all), goroutines, all[0])
	}
	var count, sum int64
	row(ctx, prim, "SELECT count(*), sum(g * 100 + i) FROM "+t, nil, &count, &sum)
	eq(count, int64(goroutines*iterations), "rows on the primary")
	eq(sum, int64(iterations*100*goroutines*(goroutines-1)/2+goroutines*iterations*(iterations-1)/2), "sum on the primary")
}

// 11. SendBatch: several statements pipelined with one Sync.

func checkBatch(ctx context.Context) {
	c := sluice(ctx)
	prim := primary(ctx)
	t := name("batch")
	exec(ctx, prim, "DELETE FROM "+t)

	readBatch := func(round int) {
		b := &pgx.Batch{}
		b.Queue("SELECT $1::int + 1", 41)
		b.Queue("SELECT $1::text || 'x'", "a")
		b.Queue("SELECT g FROM generate_series(1, $1::int) g", 5)
		b.Queue("SELECT pg_is_in_recovery()")
		br := c.SendBatch(ctx, b)
		what := fmt.Sprintf("read batch %d", round)
		var n int32
		var s string
		must(br.QueryRow().Scan(&n), what+": first")
		eq(n, int32(42), what+": first")
		must(br.QueryRow().Scan(&s), what+": second")
		eq(s, "ax", what+": second")
		rows, err := br.Query()
		must(err, what+": third")
		gs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		must(err, what+": third")
		eq(fmt.Sprint(gs), "[1 2 3 4 5]", what+": third")
		var rec bool
		must(br.QueryRow().Scan(&rec), what+": fourth")
		eq(rec, true, what+": in recovery")
		must(br.Close(), what+": close")
	}
	readBatch(1)
	readBatch(2) // the statements are in pgx's cache now: only Bind/Execute, one Sync

	b := &pgx.Batch{}
	b.Queue("INSERT INTO "+t+" VALUES ($1, $2)", 1, "one")
	b.Queue("INSERT INTO "+t+" VALUES ($1, $2)", 2, "two")
	b.Queue("SELECT count(*) FROM " + t)
	b.Queue("SELECT pg_is_in_recovery()")
	br := c.SendBatch(ctx, b)
	for i := range 2 {
		tag, err := br.Exec()
		must(err, fmt.Sprintf("write batch: insert %d", i+1))
		eq(tag.RowsAffected(), int64(1), "rows inserted")
	}
	var count int64
	must(br.QueryRow().Scan(&count), "write batch: count")
	eq(count, int64(2), "write batch: rows the batch sees")
	var rec bool
	must(br.QueryRow().Scan(&rec), "write batch: pg_is_in_recovery")
	eq(rec, false, "write batch: in recovery (a batch runs as a unit)")
	must(br.Close(), "write batch: close")
	eq(textOf(ctx, prim, "SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM "+t), "1=one,2=two", "rows on the primary")

	// One Sync: the statements before an error are rolled back with it (an implicit transaction).
	b = &pgx.Batch{}
	b.Queue("INSERT INTO "+t+" VALUES ($1, $2)", 3, "rolled back")
	b.Queue("SELECT 1 / $1::int", 0)
	b.Queue("SELECT $1::int", 5)
	br = c.SendBatch(ctx, b)
	_, err := br.Exec()
	must(err, "failing batch: insert")
	_, err = br.Exec()
	wantState(err, "22012", "failing batch: division by zero")
	_, err = br.Exec()
	if err == nil {
		fail("failing batch: the statement after the error ran")
	}
	br.Close()
	eq(intOf(ctx, prim, "SELECT count(*) FROM "+t+" WHERE id = 3"), int64(0), "the failing batch's insert on the primary")
	eq(intOf(ctx, c, "SELECT $1::int", 6), int64(6), "a query after the failing batch")
}

// 12. A statement whose context ends is cancelled (pgx sends a CancelRequest) and stops on the
// server. First as an application does it (a context with a 1 s timeout), then once the
// statement is seen running in pg_stat_activity (which shows that the query below finds it).

const running = `SELECT count(*) FROM pg_stat_activity
	WHERE application_name = $1 AND state = 'active' AND query LIKE '%pg_sleep(30)%'`

// asleep is running where the statement sleeps: a Parse of its text shows it active too, and a
// cancel then would find the backend reading its next message and do nothing.
const asleep = running + ` AND wait_event = 'PgSleep'`

// sleeping is how many pg_sleep(30) of application app run on the primary and on the replica.
func sleeping(ctx context.Context, prim, repl *pgx.Conn, app string) (int64, int64) {
	return intOf(ctx, prim, running, app), intOf(ctx, repl, running, app)
}

// cancelled checks the error of a cancelled pg_sleep(30), that its connection (if pgx kept it)
// and a fresh one work, and that the statement stops on the server within 25 s.
func cancelled(ctx context.Context, c *pgx.Conn, err error, took time.Duration, prim, repl *pgx.Conn, app, what string) {
	if err == nil {
		fail("%s: pg_sleep(30) returned no error", what)
	}
	if took > 25*time.Second {
		fail("%s: pg_sleep(30) returned %v after the cancel (error %v)", what, took, err)
	}
	if sqlState(err) != "57014" && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !pgconn.Timeout(err) {
		fail("%s: expected SQLSTATE 57014 or a context error, got %v", what, err)
	}
	if !c.IsClosed() {
		eq(intOf(ctx, c, "SELECT $1::int", 3), int64(3), what+": a query on the same connection after the cancel")
	}
	fresh := sluice(ctx)
	eq(intOf(ctx, fresh, "SELECT $1::int", 4), int64(4), what+": a query on a fresh connection after the cancel")
	deadline := time.Now().Add(25 * time.Second)
	for {
		np, nr := sleeping(ctx, prim, repl, app)
		if np == 0 && nr == 0 {
			return
		}
		if time.Now().After(deadline) {
			fail("%s: pg_sleep(30) still runs 25 s after the cancel (primary %d, replica %d; client error %v)", what, np, nr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func checkCancel(ctx context.Context) {
	prim := primary(ctx)
	repl := replica(ctx)
	app := name("cancel")
	c := sluiceApp(ctx, app)
	eq(textOf(ctx, c, "SELECT current_setting('application_name')"), app, "application_name")

	qctx, cancel := context.WithTimeout(ctx, time.Second)
	start := time.Now()
	_, err := c.Exec(qctx, "SELECT pg_sleep(30)")
	cancel()
	cancelled(ctx, c, err, time.Since(start)-time.Second, prim, repl, app, "1 s timeout")

	c = sluiceApp(ctx, app)
	qctx, cancel = context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(qctx, "SELECT pg_sleep(30)")
		done <- err
	}()
	deadline := time.Now().Add(25 * time.Second)
	for {
		np, nr := intOf(ctx, prim, asleep, app), intOf(ctx, repl, asleep, app)
		if np+nr == 1 {
			break
		}
		if np+nr > 1 || time.Now().After(deadline) {
			fail("pg_sleep(30) of %s: running on the primary %d, on the replica %d (expected one, within 25 s)", app, np, nr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	start = time.Now()
	cancel()
	select {
	case err = <-done:
	case <-time.After(25 * time.Second):
		fail("pg_sleep(30) seen running: no answer 25 s after its context was cancelled")
	}
	cancelled(ctx, c, err, time.Since(start), prim, repl, app, "seen running")
}

// 13. Errors leave the session usable.

func checkErrors(ctx context.Context) {
	c := sluice(ctx)
	prim := primary(ctx)
	t := name("err")
	exec(ctx, prim, "DELETE FROM "+t)

	tx, err := c.Begin(ctx)
	must(err, "BEGIN")
	exec(ctx, tx, "INSERT INTO "+t+" VALUES ($1)", 1)
	_, err = tx.Exec(ctx, "SELECT 1 / $1::int", 0)
	wantState(err, "22012", "division by zero in the transaction")
	_, err = tx.Exec(ctx, "SELECT $1::int", 1)
	wantState(err, "25P02", "a statement after the error")
	_, err = tx.Exec(ctx, "SELECT 2")
	wantState(err, "25P02", "a simple query after the error")
	must(tx.Rollback(ctx), "ROLLBACK")
	eq(intOf(ctx, c, "SELECT $1::int", 5), int64(5), "a query after ROLLBACK")
	eq(boolOf(ctx, c, "SELECT pg_is_in_recovery()"), true, "a read after ROLLBACK in recovery")
	eq(intOf(ctx, prim, "SELECT count(*) FROM "+t), int64(0), "rows on the primary after ROLLBACK")

	_, err = c.Exec(ctx, "SELEC 1")
	wantState(err, "42601", "a syntax error (simple query)")
	eq(intOf(ctx, c, "SELECT 6"), int64(6), "a simple query after it")
	_, err = c.Exec(ctx, "SELEC $1::int", 1)
	wantState(err, "42601", "a syntax error (Parse)")
	eq(intOf(ctx, c, "SELECT $1::int", 7), int64(7), "a prepared query after it")

	exec(ctx, c, "INSERT INTO "+t+" VALUES ($1)", 2)
	_, err = c.Exec(ctx, "INSERT INTO "+t+" VALUES ($1)", 2)
	wantState(err, "23505", "a duplicate key")
	exec(ctx, c, "INSERT INTO "+t+" VALUES ($1)", 3)
	eq(textOf(ctx, prim, "SELECT string_agg(id::text, ',' ORDER BY id) FROM "+t), "2,3", "rows on the primary")
}

// 14. A large result.

func checkLargeResult(ctx context.Context) {
	c := sluice(ctx)
	rows, err := c.Query(ctx, "SELECT g, repeat('x', 100) FROM generate_series(1, 200000) g")
	must(err, "large query")
	var count, sum int64
	for rows.Next() {
		var g int32
		var s string
		must(rows.Scan(&g, &s), "scan")
		if len(s) != 100 {
			fail("row %d: %d bytes", g, len(s))
		}
		count++
		sum += int64(g)
	}
	must(rows.Err(), "large query")
	eq(count, int64(200000), "rows")
	eq(sum, int64(200000)*200001/2, "sum")
	eq(intOf(ctx, c, "SELECT $1::int", 1), int64(1), "a query after the large result")
}

func main() {
	host = env("PGHOST")
	user = env("PGUSER")
	password = env("PGPASSWORD")
	database = env("PGDATABASE")
	sluicePort = env("SLUICE_PORT")
	primaryPort = env("PRIMARY_PORT")
	replicaPort = env("REPLICA_PORT")
	prefix = env("PREFIX")
	if !regexp.MustCompile(`^[a-z_][a-z0-9_]*$`).MatchString(prefix) {
		fmt.Printf("FAIL setup: PREFIX %q is not a lower-case SQL identifier\n", prefix)
		os.Exit(1)
	}
	time.AfterFunc(170*time.Second, func() {
		fmt.Println("FAIL watchdog: the checks did not finish within 170 s")
		os.Exit(1)
	})

	check("setup", 60*time.Second, setup)
	if failures > 0 {
		os.Exit(1)
	}
	check("replica_reads", 60*time.Second, checkReplicaReads)
	check("writes_on_primary", 60*time.Second, checkWrites)
	check("transactions", 60*time.Second, checkTransactions)
	check("session_state", 60*time.Second, checkSessionState)
	check("temp_tables", 60*time.Second, checkTempTables)
	check("advisory_locks", 60*time.Second, checkAdvisoryLocks)
	check("listen_notify", 60*time.Second, checkListenNotify)
	check("copy", 60*time.Second, checkCopy)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		check("types_"+strings.ReplaceAll(mode.String(), " ", "_"), 60*time.Second, func(ctx context.Context) { checkTypes(ctx, mode) })
	}
	check("statement_cache_backends", 60*time.Second, checkStatementCache)
	check("pool_concurrency", 60*time.Second, checkPool)
	check("batch", 60*time.Second, checkBatch)
	check("cancel", 60*time.Second, checkCancel)
	check("errors", 60*time.Second, checkErrors)
	check("large_result", 60*time.Second, checkLargeResult)
	if failures > 0 {
		os.Exit(1)
	}
}
