'use strict';
// Drives sluice with the mysql2 driver, the way Node.js applications use it: transactions,
// session variables across replica reads, parameters of every common type, temporary tables,
// user variables, LAST_INSERT_ID with other sessions inserting, multi-statements (after a
// backend connection reset), large results and a 20 MB BLOB, a duplicate-key error, explicit
// prepared statements, a latin1 connection, COM_PING/COM_CHANGE_USER. Every check runs with
// `connection.query` (text protocol, client-side escaping) and with `connection.execute`
// (binary protocol, server-side prepared statements) where that applies.
//
// Env: SLUICE_PORT (sluice's read/write-splitting port), PRIMARY_PORT (the primary, direct).
// Prints `OK <check> [<mode>]` per check; exits 1 with a message on the first failure.

const crypto = require('node:crypto');
const mysql = require('mysql2/promise');

const SLUICE_PORT = Number(process.env.SLUICE_PORT);
const PRIMARY_PORT = Number(process.env.PRIMARY_PORT);
if (!SLUICE_PORT || !PRIMARY_PORT) {
  console.error('usage: SLUICE_PORT=<port> PRIMARY_PORT=<port> node checks.js');
  process.exit(2);
}

const REPLICAS = [2, 3];

// ---------------------------------------------------------------------------------------
// Helpers

function connect(port, options = {}) {
  return mysql.createConnection({
    host: '127.0.0.1',
    port,
    user: 'app',
    password: 'app',
    database: 'test',
    charset: 'utf8mb4_general_ci',
    // Exact values: BIGINT and DECIMAL as strings, temporal types as the server's text.
    supportBigNumbers: true,
    bigNumberStrings: true,
    dateStrings: true,
    timezone: 'Z',
    connectTimeout: 10000,
    ...options,
  });
}

function show(v) {
  if (Buffer.isBuffer(v)) {
    return v.length > 16 ? `<${v.length} bytes ${v.subarray(0, 16).toString('hex')}...>` : `<hex ${v.toString('hex')}>`;
  }
  return typeof v === 'bigint' ? `${v}n` : JSON.stringify(v);
}

function fail(what) {
  throw new Error(what);
}

function eq(actual, expected, what) {
  const same = Buffer.isBuffer(expected)
    ? Buffer.isBuffer(actual) && actual.equals(expected)
    : Object.is(actual, expected);
  if (!same) fail(`${what}: expected ${show(expected)}, got ${show(actual)}`);
}

function sameSet(actual, expected, what) {
  const a = [...actual].sort().join(',');
  const e = [...expected].sort().join(',');
  if (a !== e) fail(`${what}: expected {${e}}, got {${a}}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// One session driven with `query` (text protocol) or `execute` (binary protocol).
class Session {
  constructor(conn, mode) {
    this.conn = conn;
    this.mode = mode;
  }

  // Rows (or the OK result) of a statement, in this session's protocol.
  async run(sql, params = []) {
    const [result] = await this.conn[this.mode](sql, params);
    return result;
  }

  // The first column of the only row.
  async value(sql, params = []) {
    const rows = await this.run(sql, params);
    if (rows.length !== 1) fail(`${sql}: expected one row, got ${rows.length}`);
    return Object.values(rows[0])[0];
  }

  async serverId() {
    return Number(await this.value('SELECT @@server_id'));
  }

  // The row of SHOW SLUICE SESSION (a proxy statement: always text protocol).
  async sluiceSession() {
    const [rows] = await this.conn.query('SHOW SLUICE SESSION');
    return rows[0];
  }

  async expectPinned(reason) {
    const s = await this.sluiceSession();
    eq(s.pinned, 'YES', `SHOW SLUICE SESSION pinned (expecting reason ${reason})`);
    if (!s.pin_reasons.split(',').includes(reason)) {
      fail(`SHOW SLUICE SESSION pin_reasons: expected to include ${reason}, got ${show(s.pin_reasons)}`);
    }
  }

  async expectUnpinned() {
    const s = await this.sluiceSession();
    eq(s.pinned, 'NO', `SHOW SLUICE SESSION pinned (reasons ${show(s.pin_reasons)})`);
  }

  async expectError(sql, params, errno) {
    try {
      await this.run(sql, params);
    } catch (e) {
      if (e.errno !== errno) fail(`${sql}: expected error ${errno}, got ${e.errno} ${e.message}`);
      return e;
    }
    fail(`${sql}: expected error ${errno}, but it succeeded`);
  }

  async recreate(table, definition) {
    await this.conn.query(`DROP TABLE IF EXISTS ${table}`);
    await this.conn.query(`CREATE TABLE ${table} ${definition}`);
  }
}

// Shared connections: `admin` through sluice (autocommit, never pinned), `primary` direct.
const ctx = { admin: null, primary: null, syncSeq: 0 };

async function primaryValue(sql, params = []) {
  const [rows] = await ctx.primary.query(sql, params);
  if (rows.length !== 1) fail(`on the primary, ${sql}: expected one row, got ${rows.length}`);
  return Object.values(rows[0])[0];
}

// Waits until both replicas have applied everything written so far: a marker row written
// now is seen by autocommit reads answered by each replica.
async function waitReplicated() {
  const token = `${process.pid}-${++ctx.syncSeq}`;
  await ctx.admin.query('CREATE TABLE IF NOT EXISTS drv_sync (token VARCHAR(64) PRIMARY KEY)');
  await ctx.admin.query('INSERT INTO drv_sync VALUES (?)', [token]);
  const seen = new Set();
  const deadline = Date.now() + 60000; // a hang guard
  while (seen.size < REPLICAS.length) {
    try {
      const [[row]] = await ctx.admin.query(
        'SELECT @@server_id AS sid, COUNT(*) AS n FROM drv_sync WHERE token = ?',
        [token],
      );
      if (Number(row.n) === 1) seen.add(Number(row.sid));
    } catch (e) {
      if (e.errno !== 1146) throw e; // the table itself has not reached this replica yet
    }
    if (Date.now() > deadline) fail(`replicas did not catch up within 60 s (caught up: ${[...seen]})`);
    await sleep(10);
  }
}

// ---------------------------------------------------------------------------------------
// Checks: each gets a fresh session through sluice in the given mode.

async function transactions(s) {
  const t = `tx_${s.mode}`;
  await s.recreate(t, '(id INT PRIMARY KEY, v VARCHAR(40))');

  // BEGIN ... COMMIT: own writes visible, everything on the primary, pinned meanwhile.
  await s.conn.beginTransaction();
  await s.run(`INSERT INTO ${t} VALUES (?, ?)`, [1, 'committed']);
  eq(await s.value(`SELECT v FROM ${t} WHERE id = ?`, [1]), 'committed', 'own write inside the transaction');
  for (let i = 0; i < 5; i++) eq(await s.serverId(), 1, '@@server_id inside a transaction');
  await s.expectPinned('transaction');
  await s.conn.commit();
  await s.expectUnpinned();
  eq(await primaryValue(`SELECT v FROM ${t} WHERE id = 1`), 'committed', 'committed row on the primary');

  // BEGIN ... ROLLBACK: the row is seen inside, and gone afterwards.
  await s.conn.beginTransaction();
  await s.run(`INSERT INTO ${t} VALUES (?, ?)`, [2, 'rolled back']);
  eq(Number(await s.value(`SELECT COUNT(*) FROM ${t} WHERE id = ?`, [2])), 1, 'own write inside the transaction');
  eq(await s.serverId(), 1, '@@server_id inside a transaction');
  await s.conn.rollback();
  await s.expectUnpinned();
  eq(Number(await primaryValue(`SELECT COUNT(*) FROM ${t} WHERE id = 2`)), 0, 'rolled-back row on the primary');
  eq(Number(await s.value(`SELECT /* sluice:writer */ COUNT(*) FROM ${t} WHERE id = ?`, [2])), 0,
    'rolled-back row through sluice');

  // autocommit=0: an implicit transaction from the first statement.
  await s.conn.query('SET autocommit = 0');
  await s.run(`INSERT INTO ${t} VALUES (?, ?)`, [3, 'implicit, rolled back']);
  eq(await s.serverId(), 1, '@@server_id with autocommit=0');
  eq(Number(await s.value(`SELECT COUNT(*) FROM ${t}`)), 2, 'own write with autocommit=0');
  await s.conn.query('ROLLBACK');
  await s.run(`INSERT INTO ${t} VALUES (?, ?)`, [4, 'implicit, committed']);
  await s.conn.query('COMMIT');
  await s.conn.query('SET autocommit = 1');
  await s.expectUnpinned();
  eq(await primaryValue(`SELECT GROUP_CONCAT(id ORDER BY id) FROM ${t}`), '1,4', 'rows on the primary');
}

async function sessionVariables(s) {
  const db = `drv_other_${s.mode}`;
  await s.conn.query(`CREATE DATABASE IF NOT EXISTS ${db}`);
  await s.conn.query(`CREATE OR REPLACE TABLE ${db}.marker (v VARCHAR(20))`);
  await s.conn.query(`INSERT INTO ${db}.marker VALUES ('other schema')`);
  await waitReplicated();

  // SET through the session's protocol (a prepared SET in execute mode).
  await s.run("SET SESSION sql_mode = 'ANSI_QUOTES,STRICT_ALL_TABLES'");
  await s.run("SET time_zone = '+05:30'");
  await s.run('SET sql_select_limit = 7');
  await s.run("SET collation_connection = 'utf8mb4_bin'");
  await s.conn.query(`USE ${db}`);

  const servers = new Set();
  for (let i = 0; i < 30; i++) {
    const [row] = await s.run(
      'SELECT @@sql_mode AS mode, @@time_zone AS tz, @@sql_select_limit AS lim, ' +
        '@@collation_connection AS coll, DATABASE() AS db, @@server_id AS sid, ' +
        'FROM_UNIXTIME(0) AS epoch, (SELECT v FROM marker) AS marker',
    );
    const at = `read ${i} (server ${row.sid})`;
    eq(row.mode, 'ANSI_QUOTES,STRICT_ALL_TABLES', `${at} @@sql_mode`);
    eq(row.tz, '+05:30', `${at} @@time_zone`);
    eq(String(row.lim), '7', `${at} @@sql_select_limit`);
    eq(row.coll, 'utf8mb4_bin', `${at} @@collation_connection`);
    eq(row.db, db, `${at} DATABASE()`);
    eq(row.epoch, '1970-01-01 05:30:00', `${at} FROM_UNIXTIME(0) in the session time zone`);
    eq(row.marker, 'other schema', `${at} unqualified table of the current schema`);
    // The variables take effect: ANSI_QUOTES makes "seq" a column, the limit cuts the rows.
    const rows = await s.run('SELECT "seq" AS v FROM seq_1_to_10');
    eq(rows.map((r) => String(r.v)).join(','), '1,2,3,4,5,6,7', `${at} "seq" under ANSI_QUOTES and the limit`);
    servers.add(Number(row.sid));
  }
  sameSet(servers, REPLICAS, 'servers that answered autocommit reads');

  await s.run('SET sql_select_limit = DEFAULT');
  for (let i = 0; i < 4; i++) {
    eq((await s.run('SELECT seq FROM test.seq_1_to_10')).length, 10, 'rows after SET sql_select_limit = DEFAULT');
  }
  await s.expectUnpinned();
}

// Values of every common type, as sent and as expected back.
function typeRows() {
  const allBytes = Buffer.from([...Array(256).keys()]);
  return [
    {
      id: 1,
      i: -2147483648,
      bi: 9007199254740993n, // 2^53 + 1: not representable as a JS number
      ubi: 18446744073709551615n, // 2^64 - 1
      d: '-12345678901234.123456',
      dbl: 3.141592653589793,
      s: 'héllo ✓ 🚀',
      vb: allBytes,
      bl: Buffer.concat(Array(64).fill(Buffer.from(allBytes).reverse())),
      dt: '2024-02-29',
      dtm: '2024-02-29 23:59:58.123456',
      tm: '-838:59:59',
    },
    {
      id: 2,
      i: 2147483647,
      bi: -5000000000,
      ubi: 2n ** 40n,
      d: '0.000001',
      dbl: -1.5e-300,
      s: '',
      vb: Buffer.alloc(0),
      bl: Buffer.from([0, 0, 39, 92, 34, 0, 26, 13, 10]), // NULs, quote, backslash, ^Z
      dt: '1000-01-01',
      // A JS Date (millisecond precision), sent in UTC (timezone 'Z').
      dtm: new Date(Date.UTC(2021, 0, 2, 3, 4, 5, 678)),
      tm: '12:34:56',
    },
    { id: 3, i: null, bi: null, ubi: null, d: null, dbl: null, s: null, vb: null, bl: null, dt: null, dtm: null, tm: null },
  ];
}

function expectedBack(row) {
  const e = { ...row };
  for (const col of ['bi', 'ubi']) {
    if (typeof e[col] === 'bigint' || typeof e[col] === 'number') e[col] = String(e[col]);
  }
  if (e.dtm instanceof Date) e.dtm = '2021-01-02 03:04:05.678000';
  return e;
}

function checkTypeRows(rows, what) {
  const sent = typeRows();
  eq(rows.length, sent.length, `${what}: rows`);
  for (let r = 0; r < sent.length; r++) {
    const expected = expectedBack(sent[r]);
    for (const [col, value] of Object.entries(expected)) {
      eq(rows[r][col], value, `${what}: row ${sent[r].id} column ${col}`);
    }
  }
}

async function parameterTypes(s) {
  const t = `types_${s.mode}`;
  await s.recreate(
    t,
    '(id INT PRIMARY KEY, i INT, bi BIGINT, ubi BIGINT UNSIGNED, d DECIMAL(20,6), dbl DOUBLE, s VARCHAR(50), ' +
      'vb VARBINARY(256), bl BLOB, dt DATE, dtm DATETIME(6), tm TIME) DEFAULT CHARSET=utf8mb4',
  );
  const cols = ['id', 'i', 'bi', 'ubi', 'd', 'dbl', 's', 'vb', 'bl', 'dt', 'dtm', 'tm'];
  for (const row of typeRows()) {
    await s.run(`INSERT INTO ${t} (${cols.join(', ')}) VALUES (${cols.map(() => '?').join(', ')})`,
      cols.map((c) => row[c]));
  }
  const select = `SELECT ${cols.join(', ')}, @@server_id AS sid FROM ${t} ORDER BY id`;

  // From the primary right away, then from each replica once they have the rows.
  checkTypeRows(await s.run(`SELECT /* sluice:writer */ ${select.slice(7)}`), 'read from the writer');
  await waitReplicated();
  // Reads are balanced at random: read until both replicas have answered.
  const servers = new Set();
  for (let i = 0; i < 40 && servers.size < REPLICAS.length; i++) {
    const rows = await s.run(select);
    checkTypeRows(rows, `read from server ${rows[0].sid}`);
    servers.add(Number(rows[0].sid));
  }
  sameSet(servers, REPLICAS, 'servers that answered');

  // The same values as parameters of a WHERE clause match the stored row.
  const [first] = typeRows();
  const match = await s.run(
    `SELECT id FROM ${t} WHERE i = ? AND bi = ? AND ubi = ? AND d = ? AND dbl = ? AND s = ? AND vb = ? ` +
      'AND bl = ? AND dt = ? AND dtm = ? AND tm = ?',
    [first.i, first.bi, first.ubi, first.d, first.dbl, first.s, first.vb, first.bl, first.dt, first.dtm, first.tm],
  );
  eq(match.map((r) => r.id).join(','), '1', 'row matched by parameters');
  const nulls = await s.run(`SELECT id FROM ${t} WHERE i <=> ? AND s <=> ?`, [null, null]);
  eq(nulls.map((r) => r.id).join(','), '3', 'row matched by NULL parameters');
}

async function temporaryTables(s) {
  const t = `tmp_${s.mode}`;
  await s.run(`CREATE TEMPORARY TABLE ${t} (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20))`);
  await s.expectPinned('temporary_tables');
  const servers = new Set();
  for (let i = 1; i <= 10; i++) {
    await s.run(`INSERT INTO ${t} (v) VALUES (?)`, [`row ${i}`]);
    eq(Number(await s.value(`SELECT COUNT(*) FROM ${t}`)), i, 'rows in the temporary table');
    eq(await s.value(`SELECT v FROM ${t} WHERE id = ?`, [i]), `row ${i}`, 'row of the temporary table');
    servers.add(await s.serverId());
  }
  eq(servers.size, 1, `one backend while pinned (servers ${[...servers]})`);
  await s.run(`DROP TEMPORARY TABLE ${t}`);
  await s.expectUnpinned();
  await s.expectError(`SELECT COUNT(*) FROM ${t}`, [], 1146);
  eq(Number(await s.value('SELECT 1')), 1, 'connection usable after the error');
}

async function userVariables(s) {
  const t = `uv_${s.mode}`;
  await s.recreate(t, '(id INT AUTO_INCREMENT PRIMARY KEY, v BIGINT, name VARCHAR(50)) DEFAULT CHARSET=utf8mb4');
  await s.run('SET @x = ?', [42]);
  await s.run('SET @name = ?', ['héllo ✓ 🚀']);
  await s.expectPinned('user_variables');
  const servers = new Set();
  for (let i = 0; i < 24; i++) {
    eq(Number(await s.value('SELECT @x')), 42, `SELECT @x (read ${i})`);
    eq(await s.value('SELECT @name'), 'héllo ✓ 🚀', `SELECT @name (read ${i})`);
    // Reads that do not touch user variables still go to the replicas.
    servers.add(await s.serverId());
  }
  sameSet(servers, REPLICAS, 'servers of reads without user variables');
  await s.run(`INSERT INTO ${t} (v, name) VALUES (@x, @name)`);
  await s.run(`INSERT INTO ${t} (v, name) VALUES (@x * ?, CONCAT(@name, ?))`, [2, '!']);
  const [rows] = await ctx.primary.query(`SELECT v, name FROM ${t} ORDER BY id`);
  eq(rows.map((r) => `${r.v}:${r.name}`).join(' '), '42:héllo ✓ 🚀 84:héllo ✓ 🚀!', 'rows inserted from @x on the primary');
  await s.run('SELECT @y := @x + 1');
  eq(Number(await s.value('SELECT @y')), 43, 'SELECT @y after @y := @x + 1');
}

async function lastInsertId(s) {
  const t = `ai_${s.mode}`;
  await s.recreate(t, '(id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT)');
  const other = new Session(await connect(SLUICE_PORT), s.mode);
  try {
    let next = 1;
    for (let round = 0; round < 5; round++) {
      const mine = await s.run(`INSERT INTO ${t} (v) VALUES (?)`, [round]);
      eq(mine.insertId, next, `insertId of this session's insert (round ${round})`);
      const own = next;
      next += 1;
      // Another session through sluice, and a direct connection, insert in between.
      const theirs = await other.run(`INSERT INTO ${t} (v) VALUES (?), (?), (?)`, [100, 101, 102]);
      eq(theirs.insertId, next, `insertId of the other session's insert (round ${round})`);
      const theirsFirst = next;
      next += 3;
      await ctx.primary.query(`INSERT INTO ${t} (v) VALUES (200)`);
      next += 1;

      eq(Number(await s.value('SELECT LAST_INSERT_ID()')), own, `LAST_INSERT_ID() (round ${round})`);
      const [row] = await s.run('SELECT LAST_INSERT_ID() + 0 AS lid, @@server_id AS sid');
      eq(Number(row.lid), own, `LAST_INSERT_ID() + 0 on server ${row.sid} (round ${round})`);
      eq(Number(await other.value('SELECT LAST_INSERT_ID()')), theirsFirst,
        `other session's LAST_INSERT_ID() (round ${round})`);
    }
    // Used inside a write.
    await s.run(`INSERT INTO ${t} (v) VALUES (LAST_INSERT_ID())`);
    const expected = next - 5; // this session's insert of the last round
    eq(Number(await primaryValue(`SELECT v FROM ${t} WHERE id = ${next}`)), expected,
      'LAST_INSERT_ID() used in an INSERT');
  } finally {
    await other.conn.end();
  }
}

async function multiStatements(s) {
  // First a session without CLIENT_MULTI_STATEMENTS ends while pinned (temporary table):
  // sluice resets its backend connection and reuses it for the batches below.
  const plain = await connect(SLUICE_PORT);
  await plain.query('CREATE TEMPORARY TABLE ms_pinned (a INT)');
  await plain.end();
  await sleep(300);

  const m = await connect(SLUICE_PORT, { multipleStatements: true });
  try {
    await m.query('DROP TABLE IF EXISTS ms; CREATE TABLE ms (id INT PRIMARY KEY)');
    const [results] = await m.query(
      "SELECT 1 AS a; SELECT 'two' AS b UNION ALL SELECT 'three'; INSERT INTO ms VALUES (1), (2); " +
        'SELECT COUNT(*) AS n FROM ms; SELECT @@server_id AS sid',
    );
    eq(results.length, 5, 'result sets');
    eq(String(results[0][0].a), '1', 'result set 1');
    eq(results[1].map((r) => r.b).join(','), 'two,three', 'result set 2');
    eq(results[2].affectedRows, 2, 'affected rows of the INSERT');
    eq(String(results[3][0].n), '2', 'COUNT(*) after the INSERT in the same batch');
    eq(Number(results[4][0].sid), 1, 'a batch with a write runs on the primary');

    const [reads] = await m.query('SELECT 1 AS v; SELECT 2 AS v; SELECT 3 AS v');
    eq(reads.map((r) => r[0].v).join(','), '1,2,3', 'read-only batch');

    const [vars] = await m.query('SET @m = 5; SELECT @m * 2 AS v');
    eq(Number(vars[1][0].v), 10, 'user variable set and read in one batch');
    const [[later]] = await m.query('SELECT @m AS v');
    eq(Number(later.v), 5, 'user variable from the batch, read later');

    try {
      await m.query('SELECT 1; SELECT * FROM no_such_table; SELECT 3');
      fail('a batch with a failing statement succeeded');
    } catch (e) {
      if (e.errno !== 1146) throw e;
    }
    const [after] = await m.query('SELECT 4 AS v; SELECT 5 AS v');
    eq(after.map((r) => r[0].v).join(','), '4,5', 'batch after a failed batch');
  } finally {
    await m.end();
  }
}

async function largeResults(s) {
  const n = 200000;
  const [rows] = await s.conn[s.mode]({
    sql: "SELECT seq, REPEAT('x', 100) AS pad FROM seq_1_to_200000 ORDER BY seq",
    rowsAsArray: true,
  });
  eq(rows.length, n, 'rows');
  const pad = 'x'.repeat(100);
  let sum = 0;
  for (let i = 0; i < rows.length; i++) {
    const [seq, p] = rows[i];
    if (Number(seq) !== i + 1 || p !== pad) fail(`row ${i}: got ${show(seq)}, ${show(p)}`);
    sum += Number(seq);
  }
  eq(sum, (n * (n + 1)) / 2, 'sum of seq');

  // A 20 MB BLOB (more than one 16 MB protocol packet) both ways.
  const t = `big_${s.mode}`;
  await s.recreate(t, '(id INT PRIMARY KEY, b LONGBLOB)');
  const blob = crypto.randomBytes(20 * 1024 * 1024);
  const sha = crypto.createHash('sha256').update(blob).digest('hex');
  await s.run(`INSERT INTO ${t} VALUES (?, ?)`, [1, blob]);
  const checkBlob = (row, what) => {
    eq(Number(row.len), blob.length, `${what}: LENGTH(b)`);
    eq(row.sha, sha, `${what}: SHA2(b, 256) on the server`);
    eq(row.b.length, blob.length, `${what}: bytes received`);
    eq(crypto.createHash('sha256').update(row.b).digest('hex'), sha, `${what}: SHA-256 of the bytes received`);
  };
  const select = `b, LENGTH(b) AS len, SHA2(b, 256) AS sha, @@server_id AS sid FROM ${t} WHERE id = ?`;
  const [fromWriter] = await s.run(`SELECT /* sluice:writer */ ${select}`, [1]);
  checkBlob(fromWriter, 'from the writer');
  await waitReplicated();
  const [fromReplica] = await s.run(`SELECT ${select}`, [1]);
  checkBlob(fromReplica, `from server ${fromReplica.sid}`);
}

async function duplicateKey(s) {
  const t = `dup_${s.mode}`;
  await s.recreate(t, '(id INT PRIMARY KEY, v VARCHAR(10))');
  await s.run(`INSERT INTO ${t} VALUES (?, ?)`, [1, 'a']);
  const e = await s.expectError(`INSERT INTO ${t} VALUES (?, ?)`, [1, 'b'], 1062);
  eq(e.code, 'ER_DUP_ENTRY', 'error code name');
  eq(e.sqlState, '23000', 'SQLSTATE');
  eq(Number(await s.value('SELECT 1')), 1, 'connection usable after the error');
  await s.run(`INSERT INTO ${t} VALUES (?, ?)`, [2, 'b']);

  // Inside a transaction the error does not end it.
  await s.conn.beginTransaction();
  await s.run(`INSERT INTO ${t} VALUES (?, ?)`, [3, 'c']);
  await s.expectError(`INSERT INTO ${t} VALUES (?, ?)`, [2, 'dup'], 1062);
  eq(Number(await s.value(`SELECT COUNT(*) FROM ${t}`)), 3, 'rows in the transaction after the error');
  eq(await s.serverId(), 1, '@@server_id in the transaction after the error');
  await s.conn.commit();
  await s.expectUnpinned();
  eq(await primaryValue(`SELECT GROUP_CONCAT(v ORDER BY id) FROM ${t}`), 'a,b,c', 'rows on the primary');
}

// Explicitly prepared statements (binary protocol only): one statement handle used on
// replicas, inside a transaction on the primary and after it; schema binding like a direct
// connection's; closing; errors at prepare time.
async function preparedStatements(s) {
  const stmt = await s.conn.prepare('SELECT @@server_id AS sid, ? AS echo');
  const servers = new Set();
  for (let i = 0; i < 40 && servers.size < REPLICAS.length; i++) {
    const [[row]] = await stmt.execute([`v${i}`]);
    eq(row.echo, `v${i}`, 'parameter echoed by a prepared statement');
    servers.add(Number(row.sid));
  }
  sameSet(servers, REPLICAS, 'servers that ran the prepared statement');
  await s.conn.beginTransaction();
  for (let i = 0; i < 3; i++) {
    const [[row]] = await stmt.execute(['in trx']);
    eq(Number(row.sid), 1, 'prepared statement inside a transaction');
  }
  await s.conn.commit();
  const [[after]] = await stmt.execute(['after']);
  if (!REPLICAS.includes(Number(after.sid))) fail(`prepared statement after COMMIT ran on server ${after.sid}`);
  stmt.close();
  eq(Number(await s.value('SELECT 1')), 1, 'session usable after COM_STMT_CLOSE');

  // A syntax error at prepare time, then the session goes on.
  await s.expectError('SELEC 1', [], 1064);
  eq(Number(await s.value('SELECT 2')), 2, 'session usable after a failed prepare');

  // A statement prepared in one schema and executed after USE of another resolves its tables
  // as on a direct connection.
  for (const db of ['drv_ps_a', 'drv_ps_b']) {
    await ctx.admin.query(`CREATE DATABASE IF NOT EXISTS ${db}`);
    await ctx.admin.query(`CREATE OR REPLACE TABLE ${db}.t (v VARCHAR(10))`);
    await ctx.admin.query(`INSERT INTO ${db}.t VALUES (?)`, [db]);
  }
  await waitReplicated();
  const schemaSwitch = async (conn) => {
    await conn.query('USE drv_ps_a');
    const p = await conn.prepare('SELECT v FROM t');
    const [[first]] = await p.execute([]);
    await conn.query('USE drv_ps_b');
    const [[second]] = await p.execute([]);
    p.close();
    await conn.query('USE test');
    return `${first.v} then ${second.v}`;
  };
  const direct = await connect(PRIMARY_PORT);
  try {
    eq(await schemaSwitch(s.conn), await schemaSwitch(direct), 'prepared statement across USE, sluice vs direct');
  } finally {
    await direct.end();
  }
}

// A latin1 connection (the handshake's character set): strings are converted as on a direct
// connection, whichever server answers.
async function connectionCharset(s) {
  const t = `cs_${s.mode}`;
  await s.recreate(t, '(id INT PRIMARY KEY, s VARCHAR(20)) DEFAULT CHARSET=utf8mb4');
  const latin1 = new Session(await connect(SLUICE_PORT, { charset: 'LATIN1_SWEDISH_CI' }), s.mode);
  try {
    await latin1.run(`INSERT INTO ${t} VALUES (?, ?)`, [1, 'héllo']);
    await waitReplicated();
    const servers = new Set();
    for (let i = 0; i < 20; i++) {
      const [row] = await latin1.run(
        `SELECT s, HEX(s) AS stored, ? AS echo, HEX(?) AS sent, @@character_set_client AS cc, ` +
          `@@character_set_results AS cr, @@server_id AS sid FROM ${t} WHERE id = ?`,
        ['é', 'é', 1],
      );
      const at = `read ${i} (server ${row.sid})`;
      eq(row.s, 'héllo', `${at} column value`);
      eq(row.stored, '68C3A96C6C6F', `${at} stored as utf8mb4`);
      eq(row.echo, 'é', `${at} parameter echoed`);
      eq(row.sent, 'E9', `${at} parameter sent as latin1`);
      eq(`${row.cc}/${row.cr}`, 'latin1/latin1', `${at} @@character_set_client/results`);
      servers.add(Number(row.sid));
    }
    sameSet(servers, REPLICAS, 'servers that answered');
  } finally {
    await latin1.conn.end();
  }
}

// COM_PING and COM_CHANGE_USER: the reset forgets variables, temporary tables and pins, and
// switches the schema, as on a direct connection.
async function changeUser(s) {
  await s.conn.ping();
  await s.run('SET @u = ?', [1]);
  await s.run("SET time_zone = '+01:00'");
  await s.run('CREATE TEMPORARY TABLE tmp_cu (a INT)');
  await s.expectPinned('temporary_tables');
  await s.conn.changeUser({ user: 'app', password: 'app', database: 'mysql' });
  await s.expectUnpinned();
  for (let i = 0; i < 4; i++) {
    const [row] = await s.run('SELECT @u AS u, @@time_zone AS tz, DATABASE() AS db');
    eq(row.u, null, 'user variable after COM_CHANGE_USER');
    eq(row.tz, 'SYSTEM', '@@time_zone after COM_CHANGE_USER');
    eq(row.db, 'mysql', 'DATABASE() after COM_CHANGE_USER');
  }
  await s.expectError('SELECT * FROM test.tmp_cu', [], 1146);
  await s.conn.ping();
}

const CHECKS = [
  ['transactions', transactions, ['query', 'execute']],
  ['session_variables', sessionVariables, ['query', 'execute']],
  ['parameter_types', parameterTypes, ['query', 'execute']],
  ['temporary_tables', temporaryTables, ['query', 'execute']],
  ['user_variables', userVariables, ['query', 'execute']],
  ['last_insert_id', lastInsertId, ['query', 'execute']],
  // Prepared statements hold one statement: a batch is text protocol only.
  ['multi_statements', multiStatements, ['query']],
  ['large_results', largeResults, ['query', 'execute']],
  ['duplicate_key', duplicateKey, ['query', 'execute']],
  ['prepared_statements', preparedStatements, ['execute']],
  ['connection_charset', connectionCharset, ['query', 'execute']],
  ['change_user', changeUser, ['query', 'execute']],
];

async function main() {
  const only = process.argv[2]; // optional: run one check by name
  ctx.admin = await connect(SLUICE_PORT);
  ctx.primary = await connect(PRIMARY_PORT);
  for (const [name, check, modes] of CHECKS) {
    if (only && name !== only) continue;
    for (const mode of modes) {
      const started = Date.now();
      const s = new Session(await connect(SLUICE_PORT), mode);
      try {
        await check(s);
      } catch (e) {
        console.error(`FAIL ${name} [${mode}]: ${e.message}`);
        console.error(e.stack);
        process.exit(1);
      }
      await s.conn.end();
      console.log(`OK ${name} [${mode}] (${Date.now() - started} ms)`);
    }
  }
  await ctx.admin.end();
  await ctx.primary.end();
}

main().catch((e) => {
  console.error(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
