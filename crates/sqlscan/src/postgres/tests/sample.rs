//! Shape samples: a text a sample matches has the sample's shape key, whatever its bytes.

use super::super::{shape_key, ShapeKey, ShapeSample};
use super::frozen::corpus;
use super::Rng;

fn key(sql: &[u8]) -> Option<Vec<u8>> {
    let mut out = ShapeKey::default();
    shape_key(sql, &mut out).then(|| out.as_bytes().to_vec())
}

fn matches(sample: &str, text: &str) -> bool {
    ShapeSample::of(sample.as_bytes())
        .unwrap_or_else(|| panic!("no sample of {sample:?}"))
        .same_shape(text.as_bytes())
}

#[test]
fn texts_of_other_values_match_and_others_do_not() {
    let pgbench = "SELECT abalance FROM pgbench_accounts WHERE aid = 12345;";
    for same in [
        pgbench,
        "SELECT abalance FROM pgbench_accounts WHERE aid = 7;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 1.5e3;",
    ] {
        assert!(matches(pgbench, same), "{same:?}");
    }
    for other in [
        "SELECT abalance FROM pgbench_accounts WHERE aid = 7",
        "SELECT abalance FROM pgbench_accounts WHERE aid = '7';",
        "SELECT abalance FROM pgbench_accounts WHERE aid = $1;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 7 ;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 7x;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 7 OR true;",
        "select abalance FROM pgbench_accounts WHERE aid = 7;",
        "SELECT abalance FROM pgbench_accounts WHERE aid =  7;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = /* c */ 7;",
        "",
    ] {
        assert!(!matches(pgbench, other), "{other:?}");
    }
    let strings = "UPDATE t SET a = 'xy', b = E'\\n' WHERE id IN ($1, $2)";
    assert!(matches(
        strings,
        "UPDATE t SET a = 'it''s', b = $$x$$ WHERE id IN ($7, $12)"
    ));
    assert!(!matches(
        strings,
        "UPDATE t SET a = 'it''s', b = 5 WHERE id IN ($7, $12)"
    ));
    // A literal after a byte a token could run on from is not sampled.
    for unsampled in [
        "SELECT -5",
        "SELECT x::int, a.5",
        "SELECT a/*c*/5",
        "SELECT 'a'5",
    ] {
        assert_eq!(ShapeSample::of(unsampled.as_bytes()), None, "{unsampled:?}");
    }
    assert!(ShapeSample::of(&vec![b' '; 2000]).is_none());
}

/// Whatever a text's bytes, a match has the sample's key: texts from the scanner's corpus,
/// each matched against variants made by replacing, inserting or removing bytes (the
/// variants that match have the key; a good share of those that keep the key match).
#[test]
fn a_match_always_has_the_samples_shape_key() {
    const BYTES: &[u8] = b" 0123456789.'\"$eExXuU&-+*/=(),;:_abz\n\\";
    let mut rng = Rng(0x5a3b_1e5e);
    let (mut tried, mut matched, mut same_key) = (0u32, 0u32, 0u32);
    for _ in 0..4_000 {
        let a = corpus(&mut rng);
        let Some(sample) = ShapeSample::of(a.as_bytes()) else {
            continue;
        };
        let Some(ka) = key(a.as_bytes()) else {
            continue;
        };
        for _ in 0..8 {
            let mut b = a.as_bytes().to_vec();
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(b.len() + 1);
                let byte = BYTES[rng.below(BYTES.len())];
                match rng.below(3) {
                    0 if at < b.len() => b[at] = byte,
                    1 if at < b.len() => {
                        b.remove(at);
                    }
                    _ => b.insert(at, byte),
                }
            }
            tried += 1;
            let kb = key(&b);
            if kb.as_ref() == Some(&ka) {
                same_key += 1;
            }
            if sample.same_shape(&b) {
                matched += 1;
                assert_eq!(
                    kb.as_ref(),
                    Some(&ka),
                    "{a:?} matched {:?} of another shape",
                    String::from_utf8_lossy(&b)
                );
            }
        }
    }
    assert!(tried > 10_000, "{tried} variants");
    assert!(
        matched * 4 > same_key,
        "{matched} matches of {same_key} variants of the same key ({tried} in all)"
    );
}
