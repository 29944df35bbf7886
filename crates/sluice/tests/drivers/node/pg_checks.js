'use strict';
// Drives sluice's PostgreSQL listener with node-postgres (`pg`) the way Node.js applications
// use it: read/write splitting, transactions, session settings replayed on other server
// connections, temporary tables, advisory locks and LISTEN (which pin the session), COPY
// (pg-copy-streams), named queries (server-side prepared statements) with every common type,
// a statement prepared once and executed on several server connections, a pg.Pool, errors,
// a large result, queued and pipelined queries, and a CancelRequest.
//
// Env: PGHOST, PGUSER, PGPASSWORD, PGDATABASE (read by pg itself), SLUICE_PORT (sluice's
// read/write-splitting PostgreSQL port), PRIMARY_PORT and REPLICA_PORT (the servers, direct),
// PREFIX (every table, schema, channel and advisory lock key is derived from it, so that other
// programs can run at the same time against the same servers).
// Prints `ok <check>` or `FAIL <check>: <reason>` per check, runs every check, exits 1 if any
// failed. An optional argument runs only the checks whose names contain it.

const crypto = require('node:crypto');
const { Readable } = require('node:stream');
const { pipeline } = require('node:stream/promises');
const pg = require('pg');
const { from: copyFrom, to: copyTo } = require('pg-copy-streams');

const SLUICE_PORT = Number(process.env.SLUICE_PORT);
const PRIMARY_PORT = Number(process.env.PRIMARY_PORT);
const REPLICA_PORT = Number(process.env.REPLICA_PORT);
const PREFIX = process.env.PREFIX || '';
if (!SLUICE_PORT || !PRIMARY_PORT || !REPLICA_PORT || !/^[a-z_][a-z0-9_]*$/.test(PREFIX)) {
  console.error(
    'usage: PGHOST=127.0.0.1 PGUSER=app PGPASSWORD=app PGDATABASE=postgres SLUICE_PORT=<port> ' +
      'PRIMARY_PORT=<port> REPLICA_PORT=<port> PREFIX=<lower-case identifier prefix> node pg_checks.js [check]',
  );
  process.exit(2);
}

const CHECK_TIMEOUT_MS = 60000; // a hang guard per check (generous: a busy machine)
const TOTAL_TIMEOUT_MS = 170000; // and for the whole run
const QUERY_TIMEOUT_MS = 30000; // and for any one query (the large results have more)

// ---------------------------------------------------------------------------------------
// Helpers

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Object names of this run.
const name = (n) => `${PREFIX}${n}`;

// A comparable rendering of what pg returns: Buffers as hex, Dates as ISO strings, objects
// with sorted keys.
function canon(v) {
  if (v === null || v === undefined) return 'null';
  if (Buffer.isBuffer(v)) return v.length > 40 ? `<${v.length} bytes ${v.subarray(0, 16).toString('hex')}...>` : `\\x${v.toString('hex')}`;
  if (v instanceof Date) return `Date(${Number.isNaN(v.getTime()) ? 'invalid' : v.toISOString()})`;
  if (Array.isArray(v)) return `[${v.map(canon).join(',')}]`;
  if (typeof v === 'bigint') return `${v}n`;
  if (typeof v === 'number') return Object.is(v, -0) ? '-0' : String(v);
  if (typeof v === 'object') {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canon(v[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}

// Full comparison (Buffers byte by byte, not only the rendering).
function same(a, b) {
  if (Buffer.isBuffer(a) || Buffer.isBuffer(b)) return Buffer.isBuffer(a) && Buffer.isBuffer(b) && a.equals(b);
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => same(x, b[i]));
  }
  if (a && b && typeof a === 'object' && typeof b === 'object' && !(a instanceof Date) && !(b instanceof Date)) {
    const ka = Object.keys(a).sort();
    const kb = Object.keys(b).sort();
    return same(ka, kb) && ka.every((k) => same(a[k], b[k]));
  }
  return canon(a) === canon(b);
}

function fail(what) {
  throw new Error(what);
}

function eq(actual, expected, what) {
  if (!same(actual, expected)) fail(`${what}: expected ${canon(expected)}, got ${canon(actual)}`);
}

function truthy(cond, what) {
  if (!cond) fail(what);
}

function describe(e) {
  if (!e) return String(e);
  return e.code ? `${e.code} ${e.message}` : e.message || String(e);
}

// Runs `fn`, which must fail with SQLSTATE `code`; returns the error.
async function expectError(fn, code, what) {
  let result;
  try {
    result = await fn();
  } catch (e) {
    if (e.code !== code) fail(`${what}: expected SQLSTATE ${code}, got ${describe(e)}`);
    return e;
  }
  fail(`${what}: expected SQLSTATE ${code}, but it succeeded (${canon(result && result.rows)})`);
}

// The first column of the only row.
async function value(client, query, values) {
  const res = await client.query(query, values);
  if (res.rows.length !== 1) fail(`${typeof query === 'string' ? query : query.text}: expected one row, got ${res.rows.length}`);
  return Object.values(res.rows[0])[0];
}

// Resolves with what `promise` gives, or rejects after `ms`.
function within(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

// Clients of the running check, closed when it ends (whatever happened).
let opened = [];

async function connect(port, options = {}) {
  const client = new pg.Client({
    port,
    connectionTimeoutMillis: 10000,
    query_timeout: QUERY_TIMEOUT_MS,
    ...options,
  });
  client.asyncErrors = [];
  client.on('error', (e) => client.asyncErrors.push(e)); // a dropped connection: not a crash
  opened.push(client);
  await client.connect();
  return client;
}

const sluice = (options) => connect(SLUICE_PORT, options);
const replica = (options) => connect(REPLICA_PORT, options);

async function closeAll(clients) {
  await Promise.all(
    clients.map(async (c) => {
      try {
        await within(c.end(), 3000, 'end');
      } catch {
        if (c.connection && c.connection.stream) c.connection.stream.destroy();
      }
    }),
  );
}

// A connection to the primary for set-up and verification, shared by the checks.
let direct = null;

// Waits (bounded) until the replica has replayed everything written on the primary so far.
async function waitReplicated() {
  const lsn = await value(direct, 'SELECT pg_current_wal_insert_lsn()::text');
  const r = await replica();
  try {
    const deadline = Date.now() + 30000;
    for (;;) {
      if (await value(r, 'SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn', [lsn])) return;
      if (Date.now() > deadline) fail(`the replica did not replay ${lsn} within 30 s`);
      await sleep(20);
    }
  } finally {
    await closeAll([r]);
  }
}

async function recreate(table, definition) {
  await direct.query(`DROP TABLE IF EXISTS ${table}`);
  await direct.query(`CREATE TABLE ${table} ${definition}`);
}

const inRecovery = (client) => value(client, 'SELECT pg_is_in_recovery()');
const backendPid = (client) => value(client, 'SELECT pg_backend_pid()');

// Sessions through sluice in `BEGIN READ ONLY`, which sluice answers without a server: each
// takes a replica connection with its first statement and keeps it until its transaction ends.
async function readyHolders() {
  const ready = [];
  for (let i = 0; i < 10; i++) {
    const h = await sluice();
    await h.query('BEGIN READ ONLY');
    ready.push(h);
  }
  return ready;
}

// Makes the next statement of `session` run on another server connection than its last one:
// runs `step` (a read of the session that returns the server backend it ran on), then has up to
// 10 other sessions take server connections until one holds that backend. The pool lends the
// connection given back last first, so the first holder normally gets it; the others are there
// for when another program's session took it in between, and so are two more rounds (`step`
// again, then the holders). Returns the holders (end them with `release`) and the backend.
async function holdLastBackend(session, step, what) {
  const missed = [];
  for (let round = 0; round < 3; round++) {
    const ready = await readyHolders();
    const pid = await step();
    // sluice answers these itself, after the session has given the connection of `step` back.
    await session.query('BEGIN');
    await session.query('ROLLBACK');
    for (let i = 0; i < ready.length; i++) {
      if ((await backendPid(ready[i])) === pid) {
        await release(ready.slice(i + 1));
        return { holders: ready.slice(0, i + 1), pid };
      }
    }
    await release(ready);
    missed.push(pid);
  }
  fail(`${what}: none of 10 transactions through sluice got the server backend of the last read (3 rounds: ${missed})`);
}

// Opens `n` sessions through sluice that each hold a server connection in a transaction
// (`BEGIN` alone: on the primary); returns them and their backends.
async function holdSome(n, begin) {
  const holders = [];
  const pids = [];
  for (let i = 0; i < n; i++) {
    const h = await sluice();
    holders.push(h);
    await h.query(begin);
    pids.push(await backendPid(h));
  }
  return { holders, pids };
}

async function release(holders) {
  for (const h of holders) await h.query('ROLLBACK');
  await closeAll(holders);
}

// The advisory lock key of this run (int8, as a string).
function lockKey(what) {
  const h = crypto.createHash('sha256').update(`${PREFIX}/${what}`).digest();
  return String(h.readUIntBE(0, 6)); // < 2^48
}

// Waits (bounded) for `count` notifications in `list`.
async function waitNotifications(list, count, what) {
  const deadline = Date.now() + 30000;
  while (list.length < count) {
    if (Date.now() > deadline) fail(`${what}: got ${list.length} of ${count} notifications within 30 s: ${canon(list)}`);
    await sleep(10);
  }
}

// ---------------------------------------------------------------------------------------
// Checks

// 1. Autocommit reads go to the replica, transactions to the primary.
async function readWriteSplit() {
  const c = await sluice();
  for (let i = 0; i < 5; i++) eq(await inRecovery(c), true, `autocommit SELECT pg_is_in_recovery() (${i})`);
  eq(await value(c, { name: 'rw_recovery', text: 'SELECT pg_is_in_recovery() AND $1::bool', values: [true] }), true,
    'autocommit named query');
  eq(await value(c, 'SELECT pg_is_in_recovery() AND $1::bool', [true]), true, 'autocommit unnamed parameterized query');

  await c.query('BEGIN');
  for (let i = 0; i < 3; i++) eq(await inRecovery(c), false, `pg_is_in_recovery() inside BEGIN (${i})`);
  eq(await value(c, { name: 'rw_recovery', text: 'SELECT pg_is_in_recovery() AND $1::bool', values: [true] }), false,
    'named query inside BEGIN');
  await c.query('COMMIT');
  eq(await inRecovery(c), true, 'autocommit SELECT after COMMIT');

  await c.query('BEGIN READ ONLY');
  eq(await inRecovery(c), true, 'pg_is_in_recovery() inside BEGIN READ ONLY');
  await c.query('COMMIT');

  await c.query('START TRANSACTION');
  eq(await inRecovery(c), false, 'pg_is_in_recovery() inside START TRANSACTION');
  await c.query('ROLLBACK');
}

// 2. Writes through sluice land on the primary.
async function writesOnPrimary() {
  const t = name('writes');
  const seq = name('writes_seq');
  const c = await sluice();
  await c.query(`DROP TABLE IF EXISTS ${t}`);
  await c.query(`DROP SEQUENCE IF EXISTS ${seq}`);
  await c.query(`CREATE TABLE ${t} (id int PRIMARY KEY, v text)`);
  await c.query(`CREATE SEQUENCE ${seq}`);
  eq((await c.query(`INSERT INTO ${t} VALUES (1, 'one')`)).rowCount, 1, 'simple INSERT rowCount');
  eq((await c.query(`INSERT INTO ${t} VALUES ($1, $2)`, [2, 'two'])).rowCount, 1, 'unnamed INSERT rowCount');
  const ins = { name: 'wr_insert', text: `INSERT INTO ${t} VALUES ($1, $2) RETURNING id, v` };
  eq((await c.query({ ...ins, values: [3, 'three'] })).rows, [{ id: 3, v: 'three' }], 'named INSERT RETURNING');
  eq((await c.query({ ...ins, values: [4, 'four'] })).rows, [{ id: 4, v: 'four' }], 'named INSERT RETURNING again');
  eq((await c.query(`UPDATE ${t} SET v = $1 WHERE id = $2`, ['uno', 1])).rowCount, 1, 'UPDATE rowCount');
  eq((await c.query(`DELETE FROM ${t} WHERE id = 2`)).rowCount, 1, 'DELETE rowCount');
  // Statements that read like reads but write or lock.
  const cte = await c.query(`WITH x AS (INSERT INTO ${t} VALUES (5, 'cte') RETURNING id) SELECT id FROM x`);
  eq(cte.rows, [{ id: 5 }], 'data-modifying WITH');
  eq(await value(c, `SELECT v FROM ${t} WHERE id = 1 FOR UPDATE`), 'uno', 'SELECT ... FOR UPDATE');
  for (let i = 1; i <= 3; i++) eq(await value(c, `SELECT nextval('${seq}')`), String(i), `nextval() ${i}`);

  const rows = (await direct.query(`SELECT id, v FROM ${t} ORDER BY id`)).rows;
  eq(rows, [{ id: 1, v: 'uno' }, { id: 3, v: 'three' }, { id: 4, v: 'four' }, { id: 5, v: 'cte' }], 'rows on the primary');
  eq(await value(direct, `SELECT last_value FROM ${seq}`), '3', 'sequence on the primary');
}

// 3. Transactions on one session: own writes, ROLLBACK, COMMIT, savepoints.
async function transactions() {
  const t = name('tx');
  await recreate(t, '(id int PRIMARY KEY, v text)');
  const c = await sluice();
  const ins = (id, v) => c.query({ name: 'tx_insert', text: `INSERT INTO ${t} VALUES ($1, $2)`, values: [id, v] });
  const count = async () => Number(await value(c, { name: 'tx_count', text: `SELECT count(*) FROM ${t} WHERE id <> $1`, values: [0] }));

  await c.query('BEGIN');
  await ins(1, 'rolled back');
  eq(await value(c, `SELECT v FROM ${t} WHERE id = $1`, [1]), 'rolled back', 'own row inside the transaction');
  eq(await count(), 1, 'count inside the transaction');
  const pids = new Set();
  for (let i = 0; i < 4; i++) pids.add(await backendPid(c));
  eq(pids.size, 1, 'server backends inside one transaction');
  eq(await inRecovery(c), false, 'pg_is_in_recovery() inside the transaction');
  await c.query('ROLLBACK');
  eq(Number(await value(direct, `SELECT count(*) FROM ${t}`)), 0, 'rows on the primary after ROLLBACK');
  await c.query('BEGIN');
  eq(await count(), 0, 'count in a new transaction after ROLLBACK');
  await c.query('COMMIT');

  await c.query('BEGIN');
  await ins(2, 'two');
  await c.query(`INSERT INTO ${t} VALUES ($1, $2)`, [3, 'three']);
  eq(await count(), 2, 'count inside the second transaction');
  await c.query('COMMIT');
  eq((await direct.query(`SELECT id, v FROM ${t} ORDER BY id`)).rows, [{ id: 2, v: 'two' }, { id: 3, v: 'three' }],
    'rows on the primary after COMMIT');

  await c.query('BEGIN');
  await ins(4, 'kept');
  await c.query('SAVEPOINT s1');
  await ins(5, 'undone');
  eq(await count(), 4, 'count before ROLLBACK TO SAVEPOINT');
  await c.query('ROLLBACK TO SAVEPOINT s1');
  eq(await count(), 3, 'count after ROLLBACK TO SAVEPOINT');
  await c.query('COMMIT');
  eq((await direct.query(`SELECT array_agg(id ORDER BY id) AS ids FROM ${t}`)).rows[0].ids, [2, 3, 4],
    'ids on the primary after the savepoint transaction');
}

// 4. SET / RESET of session settings, seen by autocommit reads on other server connections.
async function sessionSettings() {
  const schema = name('schema');
  await direct.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await direct.query(`CREATE SCHEMA ${schema}`);
  await direct.query(`CREATE TABLE ${schema}.marker (v text)`);
  await direct.query(`INSERT INTO ${schema}.marker VALUES ('in ${schema}')`);
  await waitReplicated();

  const startupApp = name('startup');
  const c = await sluice({ application_name: startupApp });
  const settingsSql =
    "SELECT pg_backend_pid() AS pid, pg_is_in_recovery() AS rec, current_setting('search_path') AS sp, " +
    "current_setting('TimeZone') AS tz, current_setting('application_name') AS app, " +
    "current_setting('statement_timeout') AS st, '1970-01-01 00:00:00+00'::timestamptz::text AS epoch";
  const read = async () => (await c.query(settingsSql)).rows[0];
  const expectSettings = (row, expected, at) => {
    eq(row.rec, true, `${at}: pg_is_in_recovery()`);
    for (const k of Object.keys(expected)) eq(row[k], expected[k], `${at}: ${k}`);
  };

  await c.query(`SET search_path = ${schema}, public`);
  await c.query("SET TimeZone = 'Asia/Kolkata'");
  await c.query(`SET application_name = '${name('set')}'`);
  await c.query("SET statement_timeout = '1s'");
  const set = {
    sp: `${schema}, public`,
    tz: 'Asia/Kolkata',
    app: name('set'),
    st: '1s',
    epoch: '1970-01-01 05:30:00+05:30',
  };
  for (let i = 0; i < 4; i++) expectSettings(await read(), set, `read ${i} after SET`);
  eq(await value(c, { name: 'set_marker', text: 'SELECT v FROM marker WHERE $1::bool', values: [true] }), `in ${schema}`,
    'unqualified table of the search_path (named query)');
  eq(await value(c, 'SELECT v FROM marker WHERE $1::bool', [true]), `in ${schema}`,
    'unqualified table of the search_path (unnamed query)');

  // On another server connection (the ones the session used are held by other sessions).
  const readAfterSet = async () => {
    const row = await read();
    expectSettings(row, set, 'read after SET');
    return row.pid;
  };
  let { holders, pid } = await holdLastBackend(c, readAfterSet, 'holding the backend of the last read after SET');
  try {
    const row = await read();
    truthy(row.pid !== pid, `a read while backend ${pid} is held ran on it`);
    expectSettings(row, set, `read on another backend (${row.pid}) after SET`);
    eq(await value(c, 'SELECT v FROM marker'), `in ${schema}`, 'unqualified table on another backend');
    // statement_timeout takes effect there.
    await expectError(() => c.query('SELECT pg_sleep(10)'), '57014', 'pg_sleep(10) under statement_timeout = 1s');
  } finally {
    await release(holders);
  }

  // SET LOCAL ends with its transaction; a SET in a rolled-back transaction does not count.
  await c.query('BEGIN');
  await c.query("SET LOCAL TimeZone = 'UTC'");
  eq(await value(c, "SELECT current_setting('TimeZone')"), 'UTC', 'SET LOCAL inside the transaction');
  await c.query('COMMIT');
  await c.query('BEGIN');
  await c.query("SET application_name = 'rolled_back'");
  await c.query('ROLLBACK');
  for (let i = 0; i < 3; i++) expectSettings(await read(), set, `read ${i} after SET LOCAL and a rolled-back SET`);

  // RESET: back to what a direct connection with the same startup parameters has.
  for (const p of ['search_path', 'TimeZone', 'application_name', 'statement_timeout']) await c.query(`RESET ${p}`);
  const d = await replica({ application_name: startupApp });
  const defaults = (await d.query(settingsSql)).rows[0];
  delete defaults.pid;
  eq(defaults.app, startupApp, 'application_name of a direct connection');
  for (let i = 0; i < 3; i++) expectSettings(await read(), defaults, `read ${i} after RESET`);
  const readAfterReset = async () => {
    const row = await read();
    expectSettings(row, defaults, 'read after RESET');
    return row.pid;
  };
  ({ holders, pid } = await holdLastBackend(c, readAfterReset, 'holding the backend of the last read after RESET'));
  try {
    const row = await read();
    truthy(row.pid !== pid, `a read while backend ${pid} is held ran on it`);
    expectSettings(row, defaults, `read on another backend (${row.pid}) after RESET`);
    eq(await value(c, 'SELECT pg_sleep(1.2)::text'), '', 'pg_sleep(1.2) after RESET statement_timeout');
  } finally {
    await release(holders);
  }
}

// 5. A temporary table over several statements and transactions (the session is pinned).
async function temporaryTables() {
  const t = name('tmp');
  const c = await sluice();
  await c.query(`CREATE TEMP TABLE ${t} (id serial PRIMARY KEY, v text)`);
  // The server backend that has the table (a statement that reads it runs there).
  const pid = (await c.query(`SELECT pg_backend_pid() AS pid, count(*) AS n FROM ${t}`)).rows[0].pid;
  // Other sessions taking server connections now cannot get the pinned one.
  const { holders, pids } = await holdSome(3, 'BEGIN');
  try {
    truthy(!pids.includes(pid), `another session got the pinned server backend ${pid} (${pids})`);
    for (let i = 1; i <= 5; i++) {
      await c.query({ name: 'tmp_insert', text: `INSERT INTO ${t} (v) VALUES ($1)`, values: [`row ${i}`] });
      eq(Number(await value(c, { name: 'tmp_count', text: `SELECT count(*) FROM ${t} WHERE $1::bool`, values: [true] })), i,
        `rows in the temporary table after insert ${i}`);
      eq(await value(c, `SELECT v FROM ${t} WHERE id = $1`, [i]), `row ${i}`, `row ${i} of the temporary table`);
      eq(await backendPid(c), pid, 'server backend of the pinned session');
    }
  } finally {
    await release(holders);
  }
  await c.query('BEGIN');
  await c.query(`INSERT INTO ${t} (v) VALUES ('committed')`);
  await c.query('COMMIT');
  await c.query('BEGIN');
  await c.query(`INSERT INTO ${t} (v) VALUES ('rolled back')`);
  eq(Number(await value(c, `SELECT count(*) FROM ${t}`)), 7, 'rows inside the second transaction');
  await c.query('ROLLBACK');
  eq((await c.query(`SELECT v FROM ${t} ORDER BY id`)).rows.map((r) => r.v),
    ['row 1', 'row 2', 'row 3', 'row 4', 'row 5', 'committed'], 'rows after COMMIT and ROLLBACK');
  eq(await backendPid(c), pid, 'server backend after the transactions');
  await c.query('DISCARD TEMP');
  await expectError(() => c.query(`SELECT * FROM ${t}`), '42P01', 'the temporary table after DISCARD TEMP');
  eq(await value(c, 'SELECT 1 AS one'), 1, 'session usable after DISCARD TEMP');
}

// 6. A session advisory lock taken through sluice is held on the primary until unlocked.
async function advisoryLocks() {
  const key = lockKey('advisory');
  const c = await sluice();
  const tryDirect = () => value(direct, 'SELECT pg_try_advisory_lock($1::bigint)', [key]);
  const unlockDirect = () => value(direct, 'SELECT pg_advisory_unlock($1::bigint)', [key]);

  // A parameterized query (Parse/Bind/Execute), as applications take it.
  const pid = (await c.query('SELECT pg_advisory_lock($1::bigint), pg_backend_pid() AS pid', [key])).rows[0].pid;
  eq(await tryDirect(), false, 'pg_try_advisory_lock on the primary while sluice holds the lock');
  // The session keeps that server connection: its reads run there, and no one else gets it.
  eq(await backendPid(c), pid, 'server backend of a read of the session holding the lock');
  const { holders, pids } = await holdSome(2, 'BEGIN');
  try {
    truthy(!pids.includes(pid), `another session got the server backend ${pid} holding the lock (${pids})`);
    for (let i = 0; i < 3; i++) {
      eq((await c.query('SELECT $1::int AS v, pg_backend_pid() AS pid', [i])).rows, [{ v: i, pid }], `read ${i} while holding the lock`);
    }
    eq(await tryDirect(), false, 'pg_try_advisory_lock on the primary after reads through sluice');
  } finally {
    await release(holders);
  }
  eq(await value(c, 'SELECT pg_advisory_unlock($1::bigint)', [key]), true, 'pg_advisory_unlock through sluice');
  eq(await tryDirect(), true, 'pg_try_advisory_lock on the primary after the unlock');
  eq(await unlockDirect(), true, 'pg_advisory_unlock on the primary');

  // pg_advisory_unlock_all() releases it too.
  await c.query(`SELECT pg_advisory_lock(${key})`);
  eq(await tryDirect(), false, 'pg_try_advisory_lock on the primary (second lock)');
  await c.query('SELECT pg_advisory_unlock_all()');
  eq(await tryDirect(), true, 'pg_try_advisory_lock on the primary after pg_advisory_unlock_all()');
  eq(await unlockDirect(), true, 'pg_advisory_unlock on the primary');

  // A session that ends holding the lock releases it (its server connection is closed).
  const e = await sluice();
  eq(await value(e, 'SELECT pg_try_advisory_lock($1::bigint)', [key]), true, 'pg_try_advisory_lock through sluice');
  eq(await tryDirect(), false, 'pg_try_advisory_lock on the primary while the other session holds it');
  await closeAll([e]);
  const deadline = Date.now() + 30000;
  while (!(await tryDirect())) {
    if (Date.now() > deadline) fail('the lock of a session that ended is still held on the primary after 30 s');
    await sleep(20);
  }
  eq(await unlockDirect(), true, 'pg_advisory_unlock on the primary (after the session ended)');
}

// 7. LISTEN through sluice receives NOTIFYs from other sessions while idle.
async function listenNotify() {
  const chan = name('chan');
  const chan2 = name('chan2');
  const got = [];
  const l = await sluice();
  l.on('notification', (n) => got.push({ channel: n.channel, payload: n.payload }));
  await l.query(`LISTEN ${chan}`);
  // The server backend that listens (and the session keeps it).
  const listening = (await l.query('SELECT pg_backend_pid() AS pid, array(SELECT pg_listening_channels()) AS channels')).rows[0];
  eq(listening.channels, [chan], 'pg_listening_channels() of the session');
  const pid = listening.pid;

  const n = await sluice();
  await n.query(`NOTIFY ${chan}, 'from sluice é ✓'`);
  await waitNotifications(got, 1, 'NOTIFY through sluice');
  eq(got[0], { channel: chan, payload: 'from sluice é ✓' }, 'first notification');

  await direct.query('SELECT pg_notify($1, $2)', [chan, 'from the primary']);
  await waitNotifications(got, 2, 'pg_notify on the primary');
  eq(got[1], { channel: chan, payload: 'from the primary' }, 'second notification');

  // Statements of the listening session in between; it keeps its server connection.
  const { holders, pids } = await holdSome(2, 'BEGIN');
  try {
    truthy(!pids.includes(pid), `another session got the listening server backend ${pid} (${pids})`);
    eq(await value(l, 'SELECT $1::text AS v', ['x']), 'x', 'a query of the listening session');
    await n.query('SELECT pg_notify($1, $2)', [chan, 'third']);
    await waitNotifications(got, 3, 'pg_notify through sluice');
    eq(got[2], { channel: chan, payload: 'third' }, 'third notification');
  } finally {
    await release(holders);
  }

  // After UNLISTEN *, a NOTIFY on the channel no longer arrives (one on another channel, sent
  // after it, does and comes first otherwise).
  await l.query('UNLISTEN *');
  await n.query(`NOTIFY ${chan}, 'after UNLISTEN'`);
  await l.query(`LISTEN ${chan2}`);
  await n.query(`NOTIFY ${chan2}, 'marker'`);
  await waitNotifications(got, 4, 'NOTIFY on the second channel');
  eq(got.slice(3), [{ channel: chan2, payload: 'marker' }], 'notifications after UNLISTEN *');
  await l.query('UNLISTEN *');
  eq(await value(l, 'SELECT 1 AS one'), 1, 'session usable after UNLISTEN *');
}

// 8. COPY FROM STDIN and COPY TO STDOUT through sluice.
async function copy() {
  const t = name('copy');
  await recreate(t, '(id int PRIMARY KEY, s text, b bytea, n numeric)');
  const lines = [];
  for (let i = 1; i <= 2000; i++) lines.push(`${i}\tline ${i} é\t\\\\x${(i % 256).toString(16).padStart(2, '0')}00ff\t${i}.5\n`);
  lines.push('2001\t\\N\t\\N\t\\N\n');
  lines.push('2002\ttab\\there\\nnewline \\\\ backslash\t\\\\x\t-0.000001\n');
  const input = lines.join('');

  const c = await sluice();
  const into = c.query(copyFrom(`COPY ${t} (id, s, b, n) FROM STDIN`));
  // In chunks that do not line up with rows.
  const chunks = [];
  for (let i = 0; i < input.length; i += 7001) chunks.push(Buffer.from(input.slice(i, i + 7001)));
  await within(pipeline(Readable.from(chunks), into), 60000, 'COPY FROM STDIN');
  eq(into.rowCount, 2002, 'COPY FROM rowCount');
  const check = await direct.query(
    `SELECT count(*) AS n, sum(id) AS ids, (SELECT s FROM ${t} WHERE id = 2002) AS s, ` +
      `(SELECT b FROM ${t} WHERE id = 7) AS b, (SELECT n::text FROM ${t} WHERE id = 2002) AS num, ` +
      `(SELECT s IS NULL AND b IS NULL AND n IS NULL FROM ${t} WHERE id = 2001) AS nulls FROM ${t}`,
  );
  eq(check.rows[0], {
    n: '2002',
    ids: String((2002 * 2003) / 2),
    s: 'tab\there\nnewline \\ backslash',
    b: Buffer.from([7, 0, 0xff]),
    num: '-0.000001',
    nulls: true,
  }, 'rows on the primary after COPY FROM');

  // A COPY in a transaction that rolls back; a COPY with bad data fails and the session goes on.
  await c.query('BEGIN');
  const inTx = c.query(copyFrom(`COPY ${t} (id, s) FROM STDIN`));
  await within(pipeline(Readable.from(['3001\tx\n', '3002\ty\n']), inTx), 60000, 'COPY FROM STDIN in a transaction');
  eq(Number(await value(c, `SELECT count(*) FROM ${t}`)), 2004, 'rows inside the transaction');
  await c.query('ROLLBACK');
  const bad = c.query(copyFrom(`COPY ${t} (id, s) FROM STDIN`));
  await expectError(() => within(pipeline(Readable.from(['4001\tok\n', 'not a number\tx\n']), bad), 60000, 'bad COPY'),
    '22P02', 'COPY FROM with an invalid integer');
  eq(Number(await value(direct, `SELECT count(*) FROM ${t}`)), 2002, 'rows on the primary after the rolled-back and the failed COPY');

  // COPY TO STDOUT (on the replica) gives back what went in, and the same bytes as the primary.
  await waitReplicated();
  eq(Number(await value(c, `SELECT count(*) FROM ${t} WHERE $1::bool`, [true])), 2002, 'rows through sluice');
  const readAll = async (client, sql) => {
    const out = client.query(copyTo(sql));
    const parts = [];
    await within((async () => { for await (const part of out) parts.push(part); })(), 60000, sql);
    return Buffer.concat(parts);
  };
  const sql = `COPY (SELECT id, s, b, n FROM ${t} ORDER BY id) TO STDOUT`;
  const text = await readAll(c, sql);
  eq(text.toString(), input, 'COPY TO STDOUT output (text)');
  const binSql = `COPY (SELECT id, s, b, n FROM ${t} ORDER BY id) TO STDOUT (FORMAT binary)`;
  eq(await readAll(c, binSql), await readAll(direct, binSql), 'COPY TO STDOUT (FORMAT binary), sluice vs primary');
  eq((await readAll(c, `COPY ${t} TO STDOUT`)).length, Buffer.byteLength(input), 'COPY table TO STDOUT length');
  eq(await value(c, 'SELECT 1 AS one'), 1, 'session usable after COPY');
}

// Values of every common type: a row of typical values, one of extremes, one of NULLs.
const TYPE_COLUMNS = ['i2', 'i4', 'i8', 'f8', 'num', 'b', 't', 'by', 'd', 'ts', 'iv', 'u', 'j', 'jb', 'ia', 'ta', 'ea'];
function typeRows() {
  const allBytes = Buffer.from([...Array(256).keys()]);
  return [
    {
      i2: -32768,
      i4: -2147483648,
      i8: '-9223372036854775808',
      f8: 3.141592653589793,
      num: '-12345678901234567890.123456789',
      b: true,
      t: 'héllo ✓ 🚀 \'q\' "dq" back\\slash\ttab\nline',
      by: allBytes,
      d: '2024-02-29',
      ts: '2024-02-29 23:59:58.123456+05:30',
      iv: '1 year 2 mons 3 days 04:05:06.789',
      u: 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
      j: { a: [1, 2, { b: null }], s: 'é"\\' },
      jb: { z: 1, a: { nested: [true, false, null] }, u: '✓' },
      ia: [1, null, -3],
      ta: ['a', null, 'with "quote"', 'back\\slash', '', 'comma,brace}', 'NULL', 'é ✓'],
      ea: [],
    },
    {
      i2: 32767,
      i4: 2147483647,
      i8: 9007199254740993n, // 2^53 + 1: not representable as a JS number
      f8: -1.5e-300,
      num: '0.000000001',
      b: false,
      t: '',
      by: Buffer.alloc(0),
      d: '1999-12-31',
      ts: new Date(Date.UTC(2021, 0, 2, 3, 4, 5, 678)),
      iv: '-00:00:00.000001',
      u: 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A12',
      j: JSON.stringify([1, 'two', null]), // a JS array would be sent as a PostgreSQL array
      jb: JSON.stringify([]),
      ia: [0],
      ta: [''],
      ea: [],
    },
    Object.fromEntries(TYPE_COLUMNS.map((c) => [c, null])),
  ];
}

// What reading a row back gives (see TYPES_SELECT).
function typeExpected(id, row) {
  if (row.i2 === null) return { id, ...Object.fromEntries(TYPE_COLUMNS.map((c) => [c, null])), ia_text: null, ea_text: null };
  return {
    id,
    i2: row.i2,
    i4: row.i4,
    i8: String(row.i8),
    f8: row.f8,
    num: row.num,
    b: row.b,
    t: row.t,
    by: row.by,
    d: row.d,
    ts: row.ts instanceof Date ? '2021-01-02 03:04:05.678000' : '2024-02-29 18:29:58.123456',
    iv: row.iv,
    u: row.u.toLowerCase(),
    j: typeof row.j === 'string' ? row.j : JSON.stringify(row.j),
    jb: typeof row.jb === 'string' ? JSON.parse(row.jb) : row.jb,
    ia: row.ia,
    ta: row.ta,
    ea: row.ea,
    ia_text: `{${row.ia.map((v) => (v === null ? 'NULL' : v)).join(',')}}`,
    ea_text: '{}',
  };
}

// Typed where pg's parsing is exact, as the server's text where it is not (date, timestamptz
// in UTC, interval, json's exact text).
const TYPES_SELECT =
  "id, i2, i4, i8, f8, num, b, t, by, d::text AS d, to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') AS ts, " +
  'iv::text AS iv, u, j::text AS j, jb, ia, ta, ea, ia::text AS ia_text, ea::text AS ea_text';

// 9. Named (server-side prepared) and unnamed parameterized queries with every common type.
async function parameterTypes() {
  const t = name('types');
  await recreate(
    t,
    '(id int PRIMARY KEY, i2 int2, i4 int4, i8 int8, f8 float8, num numeric, b bool, t text, by bytea, d date, ' +
      'ts timestamptz, iv interval, u uuid, j json, jb jsonb, ia int[], ta text[], ea int[])',
  );
  const c = await sluice();
  const insertText = `INSERT INTO ${t} (id, ${TYPE_COLUMNS.join(', ')}) VALUES ($1, ${TYPE_COLUMNS.map((_, i) => `$${i + 2}`).join(', ')})`;
  const rows = typeRows();
  const expected = [];
  for (const [base, named] of [[0, true], [10, false]]) {
    for (let r = 0; r < rows.length; r++) {
      const id = base + r + 1;
      const values = [id, ...TYPE_COLUMNS.map((col) => rows[r][col])];
      const res = await c.query(named ? { name: 'types_insert', text: insertText, values } : { text: insertText, values });
      eq(res.rowCount, 1, `INSERT of row ${id} (${named ? 'named' : 'unnamed'})`);
      expected.push(typeExpected(id, rows[r]));
    }
  }

  // Read back on the primary directly.
  const back = (await direct.query(`SELECT ${TYPES_SELECT} FROM ${t} ORDER BY id`)).rows;
  eq(back.length, expected.length, 'rows on the primary');
  for (let r = 0; r < expected.length; r++) {
    for (const col of Object.keys(expected[r])) eq(back[r][col], expected[r][col], `row ${expected[r].id} column ${col} on the primary`);
  }

  // Read back through sluice (a replica) with a named query: the same as on the primary.
  await waitReplicated();
  const ids = expected.map((e) => e.id);
  const viaSluice = await c.query({
    name: 'types_select',
    text: `SELECT ${TYPES_SELECT}, pg_is_in_recovery() AS rec FROM ${t} WHERE id = ANY($1::int[]) ORDER BY id`,
    values: [ids],
  });
  for (let r = 0; r < expected.length; r++) {
    const row = viaSluice.rows[r] || {};
    eq(row.rec, true, `row ${expected[r].id} read through sluice: pg_is_in_recovery()`);
    delete row.rec;
    eq(row, back[r], `row ${expected[r].id} through sluice (named query) vs the primary`);
  }

  // The same values as parameters of a WHERE clause (json has no equality: not compared).
  const where = TYPE_COLUMNS.filter((col) => col !== 'j');
  const matchText = `SELECT array_agg(id ORDER BY id) AS ids FROM ${t} WHERE ${where.map((col, i) => `${col} = $${i + 1}`).join(' AND ')}`;
  for (let r = 0; r < 2; r++) {
    const values = where.map((col) => rows[r][col]);
    eq(await value(c, { name: 'types_match', text: matchText, values }), [r + 1, r + 11], `row ${r + 1} matched by named-query parameters`);
    eq(await value(c, matchText, values), [r + 1, r + 11], `row ${r + 1} matched by unnamed-query parameters`);
  }
  const nullText = `SELECT array_agg(id ORDER BY id) AS ids FROM ${t} WHERE ${TYPE_COLUMNS.map((col, i) =>
    // json has no equality operator: compared as text.
    col === 'j' ? `j::text IS NOT DISTINCT FROM $${i + 1}::text` : `${col} IS NOT DISTINCT FROM $${i + 1}::${colType(col)}`).join(' AND ')}`;
  const nulls = TYPE_COLUMNS.map(() => null);
  eq(await value(c, { name: 'types_nulls', text: nullText, values: nulls }), [3, 13], 'rows matched by NULL parameters (named)');
  eq(await value(c, nullText, nulls), [3, 13], 'rows matched by NULL parameters (unnamed)');
}

function colType(col) {
  return {
    i2: 'int2', i4: 'int4', i8: 'int8', f8: 'float8', num: 'numeric', b: 'bool', t: 'text', by: 'bytea', d: 'date',
    ts: 'timestamptz', iv: 'interval', u: 'uuid', j: 'json', jb: 'jsonb', ia: 'int[]', ta: 'text[]', ea: 'int[]',
  }[col];
}

// 10. A named query prepared once and executed on several server connections; a pg.Pool.
async function preparedAcrossBackends() {
  const a = await sluice();
  // The text is this program's own: no other program's session prepares it on a connection.
  const q = (n) => ({ name: 'pid_and_n', text: `SELECT pg_backend_pid() AS pid, $1::int AS n /* ${PREFIX} */`, values: [n] });
  let n = 0;
  const execute = async () => {
    n += 1;
    const row = (await a.query(q(n))).rows[0];
    eq(row.n, n, `execution ${n}`);
    return row.pid;
  };
  // Prepared on first use on backend x, which another session now holds.
  const { holders, pid: x } = await holdLastBackend(a, execute, 'holding the backend that ran the statement');
  try {
    const r = await replica();
    eq(Number(await value(r, 'SELECT count(*) FROM pg_stat_activity WHERE pid = $1', [x])), 1,
      `backend ${x} of the last execution is on the replica`);
    const pid = await execute();
    truthy(pid !== x, `the execution while backend ${x} is held ran on it`);
    eq(Number(await value(r, 'SELECT count(*) FROM pg_stat_activity WHERE pid = $1', [pid])), 1,
      `backend ${pid} of the execution on another backend is on the replica`);
    for (let i = 0; i < 4; i++) await execute();
  } finally {
    await release(holders);
  }
  for (let i = 0; i < 6; i++) await execute();
  // And inside a transaction, on the primary.
  await a.query('BEGIN');
  await execute();
  eq(await inRecovery(a), false, 'pg_is_in_recovery() inside the transaction');
  await a.query('COMMIT');
  await execute();

  // A pg.Pool of 5 sessions: 50 concurrent named queries, 25 of them with a transaction.
  const t = name('pool');
  await recreate(t, '(id int PRIMARY KEY, v int)');
  const pool = new pg.Pool({
    port: SLUICE_PORT,
    max: 5,
    connectionTimeoutMillis: 10000,
    query_timeout: QUERY_TIMEOUT_MS,
  });
  pool.on('error', () => {}); // an idle client's connection dropped: the queries report it
  try {
    const task = async (i) => {
      const res = await pool.query({ name: 'pool_double', text: 'SELECT $1::int * 2 AS v, $2::text AS s', values: [i, `s${i}`] });
      eq(res.rows, [{ v: 2 * i, s: `s${i}` }], `pool named query ${i}`);
      if (i % 2 === 1) return;
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query({ name: 'pool_insert', text: `INSERT INTO ${t} VALUES ($1, $2)`, values: [i, 3 * i] });
        eq(await value(client, { name: 'pool_get', text: `SELECT v FROM ${t} WHERE id = $1`, values: [i] }), 3 * i,
          `own row inside pool transaction ${i}`);
        await client.query('COMMIT');
      } catch (e) {
        await client.query('ROLLBACK').catch(() => {});
        throw e;
      } finally {
        client.release();
      }
    };
    const results = await within(Promise.allSettled(Array.from({ length: 50 }, (_, i) => task(i))), 60000, 'pool tasks');
    const failed = results.filter((res) => res.status === 'rejected');
    if (failed.length) fail(`${failed.length} of 50 pool tasks failed, first: ${describe(failed[0].reason)}`);
  } finally {
    await within(pool.end(), 5000, 'pool.end()').catch(() => {});
  }
  const got = (await direct.query(`SELECT count(*) AS n, sum(v) AS s FROM ${t}`)).rows[0];
  eq(got, { n: '25', s: String(3 * (24 * 25)) }, 'rows of the pool transactions on the primary');
}

// 11. Errors leave the session usable.
async function errors() {
  const c = await sluice();
  await c.query('BEGIN');
  eq(await value(c, 'SELECT 1 AS one'), 1, 'first statement of the transaction');
  await expectError(() => c.query('SELECT 1/0'), '22012', 'division by zero in the transaction');
  await expectError(() => c.query('SELECT 2'), '25P02', 'simple query in the failed transaction');
  await expectError(() => c.query({ name: 'err_named', text: 'SELECT $1::int AS v', values: [3] }), '25P02',
    'named query in the failed transaction');
  await expectError(() => c.query('SELECT $1::int AS v', [4]), '25P02', 'unnamed query in the failed transaction');
  await c.query('ROLLBACK');
  eq(await value(c, { name: 'err_named', text: 'SELECT $1::int AS v', values: [5] }), 5, 'named query after ROLLBACK');
  eq(await value(c, 'SELECT 6 AS v'), 6, 'simple query after ROLLBACK');

  // An error in an extended-protocol statement inside a transaction.
  await c.query('BEGIN');
  await expectError(() => c.query({ name: 'err_div', text: 'SELECT 1 / $1::int AS v', values: [0] }), '22012',
    'named division by zero in the transaction');
  await expectError(() => c.query({ name: 'err_div', text: 'SELECT 1 / $1::int AS v', values: [1] }), '25P02',
    'named query in the transaction failed by a named query');
  await c.query('ROLLBACK');
  eq(await value(c, { name: 'err_div', text: 'SELECT 1 / $1::int AS v', values: [1] }), 1, 'the named query after ROLLBACK');

  await expectError(() => c.query('SELEC 1'), '42601', 'syntax error outside a transaction');
  eq(await value(c, 'SELECT 7 AS v'), 7, 'query after the syntax error');
  await expectError(() => c.query('SELECT * FROM no_such_table_anywhere'), '42P01', 'unknown table');
  eq(await value(c, 'SELECT $1::int AS v', [8]), 8, 'unnamed query after the unknown table');

  // A named query whose text does not parse, twice (pg parses it again), then others.
  for (let i = 0; i < 2; i++) {
    await expectError(() => c.query({ name: 'err_bad_parse', text: 'SELEC $1::int', values: [1] }), '42601',
      `named query that does not parse (${i})`);
    eq(await value(c, 'SELECT 9 AS v'), 9, `simple query after the failed parse (${i})`);
  }
  eq(await value(c, { name: 'err_good', text: 'SELECT $1::int + 1 AS v', values: [9] }), 10, 'another named query after the failed parse');
  // A bind error (bad parameter value) of a prepared statement, which then works.
  await expectError(() => c.query({ name: 'err_good', text: 'SELECT $1::int + 1 AS v', values: ['not a number'] }), '22P02',
    'named query with an invalid parameter');
  eq(await value(c, { name: 'err_good', text: 'SELECT $1::int + 1 AS v', values: [10] }), 11, 'the named query after the bind error');
  eq(c.asyncErrors.length, 0, `connection errors (${c.asyncErrors.map(describe)})`);
}

// 12. A large result: 200,000 rows.
async function largeResult() {
  const c = await sluice({ query_timeout: 60000 });
  const n = 200000;
  const pad = 'x'.repeat(100);
  const checkRows = (rows, what) => {
    eq(rows.length, n, `${what}: rows`);
    let sum = 0;
    for (let i = 0; i < rows.length; i++) {
      const [g, p] = rows[i];
      if (g !== i + 1 || p !== pad) fail(`${what}: row ${i} is ${canon(rows[i])}`);
      sum += g;
    }
    eq(sum, (n * (n + 1)) / 2, `${what}: sum of g`);
  };
  const simple = await c.query({ text: "SELECT g, repeat('x', 100) AS pad FROM generate_series(1, 200000) g", rowMode: 'array' });
  checkRows(simple.rows, 'simple query');
  const named = await c.query({
    name: 'large',
    text: "SELECT g, repeat('x', $2::int) AS pad FROM generate_series(1, $1::int) g",
    values: [n, 100],
    rowMode: 'array',
  });
  checkRows(named.rows, 'named query');
  eq(await value(c, 'SELECT 1 AS one'), 1, 'session usable after the large results');
}

// 13. Queries issued without waiting: queued by pg, and sent pipelined (`pipeline: true`).
async function queuedAndPipelined() {
  const t = name('pipe');
  await recreate(t, '(id int PRIMARY KEY, v text)');
  for (const pipelined of [false, true]) {
    const mode = pipelined ? 'pipelined' : 'queued';
    const base = pipelined ? 100 : 0;
    const c = await sluice(pipelined ? { pipeline: true } : {});
    const settle = (p) => p.then((res) => ({ res }), (err) => ({ err }));
    const echo = (v) => ({ name: 'pipe_echo', text: 'SELECT $1::text AS v', values: [v] });
    const issued = [
      settle(c.query('SELECT 1 AS v')),
      settle(c.query(echo('a'))),
      settle(c.query(`INSERT INTO ${t} VALUES (${base + 1}, 'autocommit')`)),
      settle(c.query('SELECT $1::int + 1 AS v', [41])),
      settle(c.query('SELECT 1/0 AS v')),
      settle(c.query(echo('b'))),
      settle(c.query('BEGIN')),
      settle(c.query({ name: 'pipe_insert', text: `INSERT INTO ${t} VALUES ($1, $2) RETURNING id`, values: [base + 2, 'in tx'] })),
      settle(c.query(`SELECT count(*)::int AS v FROM ${t} WHERE id > $1 AND id < $2`, [base, base + 100])),
      settle(c.query('COMMIT')),
      settle(c.query({ name: 'pipe_div', text: 'SELECT 10 / $1::int AS v', values: [0] })),
      settle(c.query({ name: 'pipe_div', text: 'SELECT 10 / $1::int AS v', values: [5] })),
      settle(c.query(echo('c'))),
    ];
    const out = await within(Promise.all(issued), 60000, `${mode} queries`);
    const expected = [
      [1], ['a'], null, [42], '22012', ['b'], null, [base + 2], [2], null, '22012', [2], ['c'],
    ];
    for (let i = 0; i < expected.length; i++) {
      const { res, err } = out[i];
      const what = `${mode} query ${i}`;
      if (typeof expected[i] === 'string') {
        truthy(err && err.code === expected[i], `${what}: expected SQLSTATE ${expected[i]}, got ${err ? describe(err) : canon(res.rows)}`);
      } else if (err) {
        fail(`${what}: ${describe(err)}`);
      } else if (expected[i] !== null) {
        eq(res.rows.map((row) => Object.values(row)[0]), expected[i], what);
      }
    }
    eq((await direct.query(`SELECT array_agg(v ORDER BY id) AS v FROM ${t} WHERE id > $1 AND id < $2`, [base, base + 100])).rows[0].v,
      ['autocommit', 'in tx'], `${mode}: rows on the primary`);
    eq(await value(c, 'SELECT 2 AS two'), 2, `${mode}: session usable afterwards`);
    eq(c.asyncErrors.length, 0, `${mode}: connection errors (${c.asyncErrors.map(describe)})`);
  }
}

// 14. A CancelRequest through sluice cancels the running statement.
async function cancel() {
  const c = await sluice();
  const marker = `${name('cancel')}_${process.pid}`;
  const running = c.query(`SELECT pg_sleep(60) /* ${marker} */`).then(
    (res) => ({ res }),
    (err) => ({ err }),
  );
  // Until the statement sleeps on a server, a cancel could find the session idle (a Parse of
  // the text shows it active too, and a cancel then does nothing).
  const r = await replica();
  const runningOn = async (client) =>
    Number(await value(client, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND wait_event = 'PgSleep' AND query LIKE $1", [`%${marker} */`]));
  const deadline = Date.now() + 30000;
  while ((await runningOn(r)) + (await runningOn(direct)) !== 1) {
    if (Date.now() > deadline) fail('the pg_sleep(60) statement did not show on a server within 30 s');
    await sleep(20);
  }
  const started = Date.now();
  // What pg's Client#cancel does: a new connection to the same host and port sending the
  // session's BackendKeyData in a CancelRequest.
  const con = new pg.Connection();
  con.on('error', () => {});
  con.on('connect', () => con.cancel(c.processID, c.secretKey));
  con.connect(SLUICE_PORT, process.env.PGHOST || 'localhost');
  const { res, err } = await within(running, 30000, 'the cancelled pg_sleep(60)');
  truthy(err && err.code === '57014', `pg_sleep(60) after the CancelRequest: expected SQLSTATE 57014, got ${err ? describe(err) : 'success'}`);
  truthy(Date.now() - started < 30000, 'the cancel took effect within 30 s');
  eq(await value(c, 'SELECT 1 AS one'), 1, 'session usable after the cancel');
}

const CHECKS = [
  ['read_write_split', readWriteSplit],
  ['writes_on_primary', writesOnPrimary],
  ['transactions', transactions],
  ['session_settings', sessionSettings],
  ['temporary_tables', temporaryTables],
  ['advisory_locks', advisoryLocks],
  ['listen_notify', listenNotify],
  ['copy', copy],
  ['parameter_types', parameterTypes],
  ['prepared_across_backends', preparedAcrossBackends],
  ['errors', errors],
  ['large_result', largeResult],
  ['queued_and_pipelined', queuedAndPipelined],
  ['cancel', cancel],
];

async function main() {
  const only = process.argv[2];
  const started = Date.now();
  let failures = 0;
  const watchdog = setTimeout(() => {
    console.log(`FAIL run: not finished within ${TOTAL_TIMEOUT_MS / 1000} s`);
    process.exit(1);
  }, TOTAL_TIMEOUT_MS);
  try {
    direct = new pg.Client({ port: PRIMARY_PORT, connectionTimeoutMillis: 10000, query_timeout: QUERY_TIMEOUT_MS });
    direct.on('error', () => {});
    await direct.connect();
  } catch (e) {
    console.log(`FAIL setup: connecting to the primary: ${describe(e)}`);
    process.exit(1);
  }
  for (const [checkName, check] of CHECKS) {
    if (only && !checkName.includes(only)) continue;
    const t0 = Date.now();
    opened = [];
    try {
      await within(check(), CHECK_TIMEOUT_MS, checkName);
      console.log(`ok ${checkName}`);
    } catch (e) {
      failures++;
      console.log(`FAIL ${checkName}: ${describe(e).replace(/\s+/g, ' ')}`);
      if (e && e.stack) console.error(`${checkName}: ${e.stack}`);
    }
    await closeAll(opened);
    console.error(`${checkName}: ${Date.now() - t0} ms`);
  }
  clearTimeout(watchdog);
  await closeAll([direct]);
  console.error(`pg_checks.js: ${failures} failed, ${((Date.now() - started) / 1000).toFixed(1)} s`);
  process.exit(failures ? 1 : 0);
}

main();
