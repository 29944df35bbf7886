use crate::*;

fn route(sql: &str) -> Route {
    scan(sql.as_bytes()).route()
}

fn effects(sql: &str) -> Effects {
    scan(sql.as_bytes()).effects
}

#[test]
fn plain_reads_go_to_readers() {
    for sql in [
        "SELECT 1",
        "select c from sbtest1 where id=?",
        "  /* leading */ SELECT a, COUNT(*) FROM t GROUP BY a",
        "(SELECT 1) UNION (SELECT 2)",
        "WITH x AS (SELECT 1) SELECT * FROM x",
        "SELECT REPLACE(name, 'a', 'b'), INSERT('abc', 1, 1, 'x') FROM t",
        "SELECT * FROM t WHERE id IN (1,2,3) AND EXISTS (SELECT 1 FROM u)",
        "SELECT CAST(x AS DECIMAL(10,2)), ST_AsText(g) FROM t",
        "SHOW TABLES",
        "SHOW CREATE TABLE t",
        "DESCRIBE t",
        "DESC t",
        "EXPLAIN SELECT * FROM t",
        "EXPLAIN EXTENDED SELECT 1",
        "SELECT @@session.sql_mode",
        "SELECT 'FOR UPDATE' AS x",
        "SELECT `insert` FROM t",
        "SET NAMES utf8mb4",
        "SET sql_mode = 'STRICT_ALL_TABLES', time_zone = '+00:00'",
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "USE test",
        "SELECT 1; SELECT 2",
    ] {
        assert_eq!(route(sql), Route::Read, "{sql}");
    }
}

#[test]
fn writes_and_locking_reads_go_to_the_writer() {
    for sql in [
        "INSERT INTO t VALUES (1)",
        "UPDATE t SET a=1",
        "DELETE FROM t",
        "REPLACE INTO t VALUES (1)",
        "CREATE TABLE t (a int)",
        "SELECT * FROM t FOR UPDATE",
        "SELECT * FROM t WHERE a=1 LOCK IN SHARE MODE",
        "SELECT * FROM t FOR SHARE",
        "SELECT a INTO @x FROM t",
        "SELECT a FROM t INTO OUTFILE '/tmp/x'",
        "SELECT @x := 1",
        "SELECT GET_LOCK('a', 1)",
        "SELECT my_func(1) FROM t",
        "SELECT db.f(1)",
        "SELECT `f`(1)",
        "SELECT NEXTVAL(s)",
        "SELECT NEXT VALUE FOR s",
        "SELECT LAST_INSERT_ID(5)",
        "EXPLAIN UPDATE t SET a=1",
        "SHOW MASTER STATUS",
        "BEGIN",
        "START TRANSACTION READ ONLY",
        "COMMIT",
        "CALL p()",
        "SET GLOBAL max_connections = 10",
        "SET @@global.max_connections = 10",
        "SET @x = 1",
        "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        "SET PASSWORD = PASSWORD('x')",
        "SELECT 1; INSERT INTO t VALUES (1)",
        "WITH x AS (SELECT 1) UPDATE t SET a = 1",
        "/*!40101 SET @OLD_SQL_MODE=@@SQL_MODE */",
        "DO 1",
        "LOCK TABLES t WRITE",
        "",
        "   -- only a comment\n",
    ] {
        assert_eq!(route(sql), Route::Write, "{sql:?}");
    }
}

#[test]
fn session_effects() {
    assert!(effects("SET @x = 1").contains(Effects::USER_VAR_WRITE));
    assert!(effects("SELECT a INTO @x, @y FROM t").contains(Effects::USER_VAR_WRITE));
    assert!(effects("SELECT @x").contains(Effects::USER_VAR_READ));
    assert!(!effects("SELECT @x").contains(Effects::USER_VAR_WRITE));
    assert!(effects("SET NAMES utf8").contains(Effects::SESSION_SET));
    assert!(effects("SET autocommit=0").contains(Effects::SESSION_SET));
    assert!(effects("SET @@session.autocommit=0").contains(Effects::SESSION_SET));
    assert!(effects("SET SESSION session_track_schema = 0").contains(Effects::SESSION_TRACK_SET));
    assert!(effects("BEGIN").contains(Effects::TRX_BEGIN));
    assert!(!effects("BEGIN NOT ATOMIC SELECT 1; END").contains(Effects::TRX_BEGIN));
    assert!(effects("START TRANSACTION WITH CONSISTENT SNAPSHOT").contains(Effects::TRX_BEGIN));
    assert!(effects("COMMIT").contains(Effects::TRX_END));
    assert!(!effects("COMMIT AND CHAIN").contains(Effects::TRX_END));
    assert!(effects("COMMIT AND NO CHAIN").contains(Effects::TRX_END));
    assert!(!effects("ROLLBACK TO SAVEPOINT a").contains(Effects::TRX_END));
    assert!(effects("LOCK TABLES t READ").contains(Effects::LOCK_TABLES));
    assert!(effects("FLUSH TABLES WITH READ LOCK").contains(Effects::LOCK_TABLES));
    assert!(effects("UNLOCK TABLES").contains(Effects::UNLOCK_TABLES));
    assert!(effects("CREATE TEMPORARY TABLE t (a int)").contains(Effects::TEMP_TABLE_CREATE));
    assert!(
        effects("CREATE OR REPLACE TEMPORARY TABLE t (a int)").contains(Effects::TEMP_TABLE_CREATE)
    );
    assert!(!effects("CREATE TABLE t (a int)").contains(Effects::TEMP_TABLE_CREATE));
    assert!(effects("DROP TEMPORARY TABLE t").contains(Effects::TABLE_DROP));
    assert!(effects("SELECT RELEASE_LOCK('a')").contains(Effects::LOCK_FUNCTION));
    assert!(effects("DO GET_LOCK('a', 0)").contains(Effects::LOCK_FUNCTION));
    assert!(effects("PREPARE s FROM 'SELECT 1'").contains(Effects::TEXT_PREPARE));
    assert!(effects("EXECUTE s USING @a").contains(Effects::TEXT_EXECUTE));
    assert!(effects("DEALLOCATE PREPARE s").contains(Effects::TEXT_DEALLOCATE));
    assert!(effects("DROP PREPARE s").contains(Effects::TEXT_DEALLOCATE));
    assert!(
        effects("SELECT SQL_CALC_FOUND_ROWS * FROM t LIMIT 1").contains(Effects::CALC_FOUND_ROWS)
    );
    assert!(effects("SELECT FOUND_ROWS()").contains(Effects::PREV_STATEMENT));
    assert!(effects("SHOW WARNINGS").contains(Effects::PREV_STATEMENT));
    assert!(effects("SHOW COUNT(*) ERRORS").contains(Effects::PREV_STATEMENT));
    assert!(effects("SELECT @@warning_count").contains(Effects::PREV_STATEMENT));
    assert!(effects("GET DIAGNOSTICS @n = NUMBER").contains(Effects::PREV_STATEMENT));
    assert!(effects("SELECT LAST_INSERT_ID()").contains(Effects::LAST_INSERT_ID_READ));
    assert!(effects("SELECT @@identity").contains(Effects::LAST_INSERT_ID_READ));
    assert!(
        effects("UPDATE t SET id = LAST_INSERT_ID(id + 1)").contains(Effects::LAST_INSERT_ID_SET)
    );
    assert!(effects("XA START 'x'").contains(Effects::XA_START));
    assert!(effects("XA COMMIT 'x'").contains(Effects::XA_END));
    assert!(effects("SET TRANSACTION READ ONLY").contains(Effects::TRX_CHARACTERISTICS));
    assert!(effects("SET ROLE admin").contains(Effects::UNTRACKED));
    assert!(effects("LOAD DATA LOCAL INFILE 'x' INTO TABLE t").contains(Effects::LOAD_LOCAL));
    assert!(!effects("LOAD DATA INFILE 'x' INTO TABLE t").contains(Effects::LOAD_LOCAL));
    assert!(effects("SELECT 1; SELECT 2").contains(Effects::MULTI));
    assert!(effects("SELECT CONNECTION_ID()").contains(Effects::CONNECTION_ID));
    assert!(effects("SET @a = 1, sql_mode = ''")
        .contains(Effects::USER_VAR_WRITE | Effects::SESSION_SET));
}

#[test]
fn set_statement_for_is_classified_by_its_statement() {
    assert_eq!(
        route("SET STATEMENT max_statement_time=1 FOR SELECT * FROM t"),
        Route::Read
    );
    assert_eq!(
        route("SET STATEMENT max_statement_time=1 FOR UPDATE t SET a=1"),
        Route::Write
    );
    assert!(!effects("SET STATEMENT sql_mode='' FOR SELECT 1").contains(Effects::SESSION_SET));
}

#[test]
fn hints() {
    let sql = b"SELECT /* sluice:writer */ 1";
    assert_eq!(scan(sql).hint(sql), Some("writer"));
    let sql = b"-- sluice:analytics\nSELECT 1";
    assert_eq!(scan(sql).hint(sql), Some("analytics"));
    let sql = b"SELECT 1 # sluice:reader";
    assert_eq!(scan(sql).hint(sql), Some("reader"));
    let sql = b"SELECT '/* sluice:writer */'";
    assert_eq!(scan(sql).hint(sql), None);
    let sql = b"SELECT /* sluice: */ 1";
    assert_eq!(scan(sql).hint(sql), None);
}

#[test]
fn kill_targets() {
    let s = scan(b"KILL 42");
    assert_eq!(s.command, Command::Kill);
    assert_eq!(
        s.kill,
        Some(Kill {
            query_only: false,
            id: 42
        })
    );
    assert_eq!(
        scan(b"KILL QUERY 7").kill,
        Some(Kill {
            query_only: true,
            id: 7
        })
    );
    assert_eq!(
        scan(b"kill connection 9").kill,
        Some(Kill {
            query_only: false,
            id: 9
        })
    );
    assert_eq!(
        scan(b"KILL HARD QUERY ID 3").kill,
        Some(Kill {
            query_only: true,
            id: 3
        })
    );
    assert_eq!(scan(b"KILL USER bob").kill, None);
}

#[test]
fn commands() {
    assert_eq!(scan(b"select 1").command, Command::Select);
    assert_eq!(scan(b"insert into t values (1)").command, Command::Insert);
    assert_eq!(scan(b"BEGIN").command, Command::Begin);
    assert_eq!(scan(b"use db").command, Command::Use);
    assert_eq!(scan(b"").command, Command::Empty);
    assert_eq!(scan(b";;").statements, 0);
    assert_eq!(scan(b"SELECT 1; SELECT 2;").statements, 2);
}

#[test]
fn no_backslash_escapes_changes_string_ends() {
    // With backslash escapes the quote after \ is escaped, so FOR UPDATE is inside the string.
    let sql = br"SELECT 'a\' FOR UPDATE -- '";
    assert_eq!(scan(sql).route(), Route::Read);
    let s = scan_with(
        sql,
        Options {
            no_backslash_escapes: true,
        },
    );
    assert_eq!(s.route(), Route::Write);
}

#[test]
fn never_panics_on_garbage() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20_000 {
        let len = (seed % 64) as usize;
        let mut buf = Vec::with_capacity(len);
        for _ in 0..len {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let alphabet = b"SELECT @:=(),;'\"`/*!-#\n xyFORUPDATE0.9";
            buf.push(alphabet[(seed % alphabet.len() as u64) as usize]);
        }
        let _ = scan(&buf);
    }
}

#[test]
fn insert_id_related_effects() {
    assert!(effects("CALL p()").contains(Effects::PROCEDURE_CALL));
    assert!(effects("SET last_insert_id = 5").contains(Effects::LAST_INSERT_ID_SET));
    assert!(effects("SET @@session.insert_id = 5").contains(Effects::UNTRACKED));
}

#[test]
fn statements_that_may_commit() {
    for sql in [
        "COMMIT",
        "BEGIN",
        "START TRANSACTION",
        "CREATE TABLE t (a INT)",
        "SET autocommit=1",
        "LOCK TABLES t WRITE",
        "CALL p()",
        "GRANT SELECT ON *.* TO x",
        "SELECT 1; COMMIT",
    ] {
        assert!(effects(sql).contains(Effects::MAY_COMMIT), "{sql}");
    }
    for sql in [
        "SELECT 1",
        "INSERT INTO t VALUES (1)",
        "UPDATE t SET a=1",
        "DELETE FROM t",
        "SHOW TABLES",
        "ROLLBACK",
        "SELECT * FROM t FOR UPDATE",
    ] {
        assert!(!effects(sql).contains(Effects::MAY_COMMIT), "{sql}");
    }
}
