//! Settings whose text alone does not say them again, and client encodings sluice's scanner
//! cannot read, against PostgreSQL itself (the steps of pins.rs, compared with a direct
//! connection per client where they can be).

use super::pg::raw::Raw;
use super::pg::start;
use super::pins::{connect_with_startup, differential, direct_then_sluice, POOL};

/// Client 1 holds the connection client 0 gave back; client 0 looks at what it set, on the
/// other connection; then client 1 looks at what it was given.
fn moved<'a>(first: &[(usize, &'a str)], show: &[&'a str]) -> Vec<(usize, &'a str)> {
    let mut steps = first.to_vec();
    steps.extend([(1, "BEGIN"), (1, "SELECT 1")]);
    steps.extend(show.iter().map(|s| (0, *s)));
    steps.push((1, "COMMIT"));
    steps.extend(show.iter().map(|s| (1, *s)));
    steps
}

/// A `SET DateStyle` may give one of its two parts and keep the other: the session's
/// setting is what the server made of it (its ParameterStatus), not the last statement.
/// PostgreSQL's old names of parameters (`sort_mem`) set the parameter itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datestyle_set_in_parts_and_an_old_parameter_name_move_whole() {
    let env = start(0, POOL).await;
    let dates: &[&str] = &["SHOW datestyle", "SELECT '01/02/2020'::date::text"];
    let work_mem: &[&str] = &["SHOW work_mem"];
    for (first, show) in [
        (["SET datestyle = 'dmy'", "SET datestyle = 'iso'"], dates),
        (["SET datestyle = 'German'", "SET datestyle = 'ymd'"], dates),
        (["SET work_mem = '5MB'", "SET sort_mem = '6MB'"], work_mem),
        (["SET sort_mem = '6MB'", "RESET work_mem"], work_mem),
    ] {
        differential(&env, 2, &moved(&first.map(|sql| (0, sql)), show)).await;
    }
}

/// A value outside ASCII set in a client encoding other than UTF-8: sluice could not say it
/// again elsewhere (it keeps settings as UTF-8 text), so the session keeps its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_ascii_setting_in_latin1_stays_the_clients() {
    let env = start(0, POOL).await;
    differential(
        &env,
        2,
        &moved(
            &[
                (0, "SET client_encoding = 'LATIN1'"),
                (0, "SET application_name = 'José'"),
                (0, "SET myapp.name = 'José'"),
            ],
            &[
                "SHOW application_name",
                "SELECT current_setting('myapp.name', true)",
                "SHOW client_encoding",
            ],
        ),
    )
    .await;
}

/// In SJIS (and BIG5, GBK, UHC, JOHAB, GB18030) the second byte of a character may be a
/// backslash: a scanner of bytes would read `E'表'` (0x95 0x5C) as a string that does not end
/// there, and miss the `SET` after it. The session keeps its connection, on the primary,
/// and its statements go there: the setting stays its own and its temporary table is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_encoding_the_scanner_cannot_read_pins_the_session() {
    let env = start(1, POOL).await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    a.try_simple("SET client_encoding = 'SJIS'").await.unwrap();
    let sjis = |a: &mut Raw, sql: &[u8]| {
        a.out.extend_from_slice(b"Q");
        a.out
            .extend_from_slice(&(4 + sql.len() as u32 + 1).to_be_bytes());
        a.out.extend_from_slice(sql);
        a.out.extend_from_slice(b"\0");
    };
    sjis(
        &mut a,
        b"SELECT E'\x95\x5c' AS a; SET search_path = app_a -- '",
    );
    let (tags, msgs) = a.round(1).await;
    assert!(!tags.contains('E'), "{msgs:?}");
    sjis(
        &mut a,
        b"SELECT E'\x95\x5c' AS a; CREATE TEMP TABLE tt (x int) -- '",
    );
    let (tags, msgs) = a.round(1).await;
    assert!(!tags.contains('E'), "{msgs:?}");
    let shown = |r: Result<Vec<_>, String>| Raw::column(&r.unwrap());
    assert_eq!(
        shown(b.try_simple("SHOW search_path").await),
        ["\"$user\", public"]
    );
    assert_eq!(shown(a.try_simple("SHOW search_path").await), ["app_a"]);
    assert_eq!(
        shown(a.try_simple("SELECT pg_is_in_recovery()").await),
        ["f"]
    );
    // Back in an encoding the scanner reads, the session still keeps its connection (what
    // it did before may have made state there) until DISCARD ALL.
    a.try_simple("SET client_encoding = 'UTF8'").await.unwrap();
    assert_eq!(
        shown(a.try_simple("SELECT count(*) FROM pg_temp.tt").await),
        ["0"]
    );
    a.try_simple("DISCARD ALL").await.unwrap();
    assert_eq!(
        shown(b.try_simple("SHOW search_path").await),
        ["\"$user\", public"]
    );
}

/// A `DateStyle` in `options` and another among the startup parameters (PgJDBC always sends
/// `DateStyle=ISO`): PostgreSQL applies `options` first, and the second, of one part, keeps
/// the first's order (`ISO, DMY`). sluice kept only the last, reset: `ISO, MDY`, and read
/// `01/02/2024` as 2 January.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datestyle_in_options_keeps_its_part_beside_a_startup_datestyle() {
    let env = start(0, POOL).await;
    let direct = direct_then_sluice(&env, async |port| {
        let mut a = connect_with_startup(
            port,
            &[("options", "-c DateStyle=DMY"), ("DateStyle", "ISO")],
        )
        .await;
        let mut b = Raw::connect(port, "app", "app", "postgres").await;
        let told: Vec<String> = a
            .params
            .iter()
            .filter(|(k, _)| k == "DateStyle")
            .map(|(_, v)| v.clone())
            .collect();
        let mut steps = vec![told.join(",")];
        let shown = "SELECT current_setting('DateStyle') || ' ' || '01/02/2024'::date::text";
        let one = |msgs: Vec<super::pg::raw::Msg>| Raw::column(&msgs).join(",");
        steps.push(one(a.try_simple(shown).await.unwrap()));
        // Another session leaves its own order on the connection a is given next.
        b.try_simple("SET DateStyle = 'SQL, YMD'").await.unwrap();
        b.try_simple("SELECT 1").await.unwrap();
        steps.push(one(a.try_simple(shown).await.unwrap()));
        steps.push(one(b.try_simple("SHOW DateStyle").await.unwrap()));
        steps
    })
    .await;
    assert_eq!(
        direct,
        [
            "ISO, DMY",
            "ISO, DMY 2024-02-01",
            "ISO, DMY 2024-02-01",
            "SQL, YMD"
        ]
    );
}

/// A startup value with a backslash, on a connection whose standard_conforming_strings is
/// off (the session's own startup parameter): sluice's `'C:\dir\'` literal read `\'` as a
/// quote there, so setting the value again after a `RESET` in a block did not parse and the
/// session ended. Its literals are escape strings (`E'…'`), read alike either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_startup_value_with_a_backslash_is_set_again_without_conforming_strings() {
    let env = start(0, POOL).await;
    let direct = direct_then_sluice(&env, async |port| {
        let mut c = connect_with_startup(
            port,
            &[
                ("application_name", "C:\\dir\\"),
                ("standard_conforming_strings", "off"),
            ],
        )
        .await;
        let mut steps = Vec::new();
        for sql in [
            "SHOW application_name",
            "BEGIN",
            "RESET application_name",
            "SHOW application_name",
            "COMMIT",
            "SHOW application_name",
        ] {
            let shown = match c.try_simple(sql).await {
                Ok(msgs) => Raw::column(&msgs).join(","),
                Err(e) => format!("ERR {e}"),
            };
            steps.push(shown);
        }
        steps
    })
    .await;
    assert_eq!(direct, ["C:\\dir\\", "", "", "C:\\dir\\", "", "C:\\dir\\"]);
}
