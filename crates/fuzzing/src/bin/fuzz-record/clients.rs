//! The real clients whose traffic is recorded. Each one is bounded (a fixed script, or a
//! benchmark with a fixed number of events); a client that is missing or fails is reported
//! and skipped, so the recorder works with whatever is installed.

use mysql_async::prelude::*;
use std::process::{Command, Stdio};

/// Statements for the `mariadb` command-line client: result sets of many types, errors,
/// multiple result sets, LOCAL INFILE, session-state changes, transactions.
const CLI_SCRIPT: &str = r#"
DROP TABLE IF EXISTS cli;
CREATE TABLE cli (id INT PRIMARY KEY AUTO_INCREMENT, s VARCHAR(40), d DECIMAL(8,2), t DATETIME, b BLOB, j JSON, e ENUM('a','b'), f FLOAT, n INT NULL);
INSERT INTO cli (s, d, t, b, j, e, f, n) VALUES ('x', 1.5, NOW(), x'00ff10', '{"k": [1, 2]}', 'a', 0.25, NULL), ('y\'z', -3, '2024-02-29 10:00:00', '', '[]', 'b', 1e10, 7);
SELECT * FROM cli WHERE id IN (1, 2) ORDER BY id;
SELECT id, s FROM cli WHERE s LIKE 'y%' /* comment */ LIMIT 1;
SELECT CONNECTION_ID(), FOUND_ROWS(), ROW_COUNT(), LAST_INSERT_ID(), @@version, DATABASE();
SET @v := 5, SESSION sql_mode = 'NO_BACKSLASH_ESCAPES,STRICT_TRANS_TABLES';
SELECT 'a\b', "q""q", @v;
SET SESSION sql_mode = DEFAULT, autocommit = 0;
BEGIN; UPDATE cli SET n = n + 1 WHERE id = 2; COMMIT;
START TRANSACTION READ ONLY; SELECT COUNT(*) FROM cli; ROLLBACK;
SET autocommit = 1;
SELECT * FROM no_such_table;
SELECT 1 FROM DUAL WHERE 1 = 0;
SHOW VARIABLES LIKE 'max_allowed%';
SHOW WARNINGS;
DROP PROCEDURE IF EXISTS two;
DELIMITER //
CREATE PROCEDURE two() BEGIN SELECT 1 AS a; SELECT 'b' AS b, 2 AS c; END //
DELIMITER ;
CALL two();
CREATE TEMPORARY TABLE tmp (a INT);
INSERT INTO tmp VALUES (1), (2), (3);
DROP TEMPORARY TABLE tmp;
PREPARE ps FROM 'SELECT ? + 1'; SET @a = 41; EXECUTE ps USING @a; DEALLOCATE PREPARE ps;
LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE cli (s);
USE test;
SELECT /*+ sluice:reader */ id FROM cli;
EXPLAIN SELECT * FROM cli WHERE id = 1;
KILL QUERY 999999;
DO SLEEP(0);
"#;

/// PyMySQL: text protocol, many types, multi-statements, an error, ping, server-side cursor.
const PYMYSQL: &str = r#"
import sys, datetime, decimal, pymysql
port = int(sys.argv[1])
c = pymysql.connect(host='127.0.0.1', port=port, user='app', password='app', database='test',
                    client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS, local_infile=True)
cur = c.cursor()
cur.execute("DROP TABLE IF EXISTS py")
cur.execute("CREATE TABLE py (id INT PRIMARY KEY AUTO_INCREMENT, s VARCHAR(50), d DECIMAL(10,3), t DATETIME(6), b BLOB, f DOUBLE, n INT NULL)")
rows = [("héllo", decimal.Decimal("1.250"), datetime.datetime(2024, 5, 6, 7, 8, 9, 123456), b"\x00\x01'\\", 2.5, None),
        ("", decimal.Decimal("-0.001"), datetime.datetime(1999, 12, 31), b"x" * 300, -1e-9, 42)]
cur.executemany("INSERT INTO py (s, d, t, b, f, n) VALUES (%s, %s, %s, %s, %s, %s)", rows)
cur.execute("SELECT * FROM py WHERE id IN (%s, %s)", (1, 2)); cur.fetchall()
cur.execute("SELECT 1; SELECT 'a', NULL; UPDATE py SET n = 1 WHERE id = 1")
while cur.nextset(): pass
try:
    cur.execute("SELECT * FROM nosuch")
except pymysql.err.ProgrammingError:
    pass
c.begin(); cur.execute("DELETE FROM py WHERE id = 2"); c.rollback()
c.ping(); c.select_db('test')
ss = c.cursor(pymysql.cursors.SSCursor); ss.execute("SELECT * FROM py"); ss.fetchall(); ss.close()
c.close()
"#;

/// mysql-connector-python: prepared statements with typed parameters and long data.
const CONNECTOR: &str = r#"
import sys, io, datetime, decimal, mysql.connector
port = int(sys.argv[1])
c = mysql.connector.connect(host='127.0.0.1', port=port, user='app', password='app', database='test',
                            ssl_disabled=True, use_pure=True)
cur = c.cursor(prepared=True)
cur.execute("DROP TABLE IF EXISTS mc")
cur.execute("CREATE TABLE mc (id INT PRIMARY KEY AUTO_INCREMENT, a BIGINT, s VARCHAR(20), f DOUBLE, d DECIMAL(6,2), t DATETIME, b LONGBLOB, n INT NULL)")
cur.execute("INSERT INTO mc (a, s, f, d, t, b, n) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (-9000000000, "ünï", 1.5, decimal.Decimal("12.34"), datetime.datetime(2020, 1, 2, 3, 4, 5), b"\x00" * 20, None))
cur.execute("INSERT INTO mc (a, b) VALUES (?, ?)", (7, io.BytesIO(b"long data " * 400)))
cur.execute("SELECT id, a, s, f, d, t, LENGTH(b), n FROM mc WHERE a > ? OR s = ?", (-10000000000, "x")); cur.fetchall()
cur.execute("SELECT ? + 1, ?, ?", (1, None, 2.25)); cur.fetchall()
try:
    cur.execute("SELECT * FROM nosuch WHERE a = ?", (1,))
except mysql.connector.Error:
    pass
cur.close(); c.close()
"#;

/// Runs every client against the relay on `port`.
pub async fn run_all(port: u16) {
    let p = port.to_string();
    let base = [
        "--no-defaults",
        "-h127.0.0.1",
        "-P",
        &p,
        "-uapp",
        "-papp",
        "--skip-ssl",
    ];
    let mut cli: Vec<&str> = base.to_vec();
    cli.extend(["--local-infile=1", "--comments", "--force", "test"]);
    external("mariadb", &cli, Some(CLI_SCRIPT)).await;
    let mut admin: Vec<&str> = base.to_vec();
    admin.extend(["ping", "status", "processlist"]);
    external("mariadb-admin", &admin, None).await;

    let sb = [
        "oltp_read_write",
        "--mysql-host=127.0.0.1",
        &format!("--mysql-port={port}"),
        "--mysql-user=app",
        "--mysql-password=app",
        "--mysql-db=test",
        "--tables=1",
        "--table-size=50",
        "--threads=1",
        "--events=20",
        "--time=0",
    ]
    .map(String::from);
    for step in ["prepare", "run", "cleanup"] {
        let mut args: Vec<&str> = sb.iter().map(String::as_str).collect();
        args.push(step);
        external("sysbench", &args, None).await;
    }
    let python = python();
    for script in [PYMYSQL, CONNECTOR] {
        external(&python, &["-c", script, &p], None).await;
    }
    if let Err(e) = mysql_async_client(port).await {
        eprintln!("mysql_async client: {e}");
    }
}

/// The virtualenv's Python (with the drivers) when there is one.
fn python() -> String {
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let venv = format!("{target}/pyenv/bin/python3");
    if std::path::Path::new(&venv).exists() {
        venv
    } else {
        "python3".into()
    }
}

/// Runs a program to completion (stdin from `input`), reporting but tolerating failure.
async fn external(program: &str, args: &[&str], input: Option<&str>) {
    let program = program.to_string();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let input = input.map(str::to_string);
    let r = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(&program)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            use std::io::Write;
            let _ = stdin.write_all(text.as_bytes());
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            eprintln!("{program}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
    if let Ok(Err(e)) = r {
        eprintln!("cannot run a client: {e}");
    }
}

/// mysql_async: prepared statements with many parameter types, multi-statements, reset,
/// change of user.
async fn mysql_async_client(port: u16) -> Result<(), mysql_async::Error> {
    use mysql_async::Value;
    let url = format!("mysql://app:app@127.0.0.1:{port}/test?prefer_socket=false");
    let mut c = mysql_async::Conn::new(mysql_async::Opts::from_url(&url)?).await?;
    c.query_drop("DROP TABLE IF EXISTS ma").await?;
    c.query_drop(
        "CREATE TABLE ma (id INT PRIMARY KEY AUTO_INCREMENT, a BIGINT UNSIGNED, s TEXT, f DOUBLE, \
         t TIME(3), dt DATETIME(6), b VARBINARY(500), n INT NULL)",
    )
    .await?;
    let ins = c
        .prep("INSERT INTO ma (a, s, f, t, dt, b, n) VALUES (?, ?, ?, ?, ?, ?, ?)")
        .await?;
    let rows: Vec<Vec<Value>> = vec![
        vec![
            Value::UInt(u64::MAX),
            Value::from("text"),
            Value::Double(0.5),
            Value::Time(true, 1, 2, 3, 4, 5000),
            Value::Date(2024, 2, 29, 23, 59, 59, 999_999),
            Value::Bytes(vec![0xff; 300]),
            Value::NULL,
        ],
        vec![
            Value::Int(0),
            Value::from(""),
            Value::Double(-2.5e300),
            Value::Time(false, 0, 0, 0, 0, 0),
            Value::Date(1970, 1, 1, 0, 0, 0, 0),
            Value::Bytes(Vec::new()),
            Value::Int(-1),
        ],
    ];
    for r in rows {
        c.exec_drop(&ins, r).await?;
    }
    let _: Vec<mysql_async::Row> = c.exec("SELECT * FROM ma WHERE id > ?", (0,)).await?;
    let _: Vec<(i64, String)> = c.exec("SELECT ?, ?", (5, "five")).await?;
    let mut multi = c.query_iter("SELECT 1; SELECT 'two', NULL; DO 0").await?;
    while !multi.is_empty() {
        let _: Vec<mysql_async::Row> = multi.collect().await?;
    }
    drop(multi);
    let _ = c.query_drop("SELECT * FROM nosuch").await;
    c.ping().await?;
    c.reset().await?;
    c.change_user(
        mysql_async::ChangeUserOpts::default()
            .with_user(Some("app".into()))
            .with_pass(Some("app".into()))
            .with_db_name(Some("test".into())),
    )
    .await?;
    c.query_drop("SELECT 1").await?;
    c.disconnect().await
}
