//! Replays the committed seed corpus and every regression input through the harness bodies,
//! so the harnesses build and pass with the ordinary test suite (the fuzzing itself is
//! `fuzz/fuzz.sh`).
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Runs every file of `fuzz/<kind>/<target>/` through the target; returns how many ran.
fn replay(kind: &str) -> usize {
    let mut ran = 0;
    for t in sluice_fuzzing::TARGETS {
        let dir = fuzz_dir().join(kind).join(t.name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files {
            if !f.is_file()
                || f.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            {
                continue;
            }
            let data = std::fs::read(&f).expect("readable corpus file");
            let r = std::panic::catch_unwind(|| (t.run)(&data));
            assert!(r.is_ok(), "{} fails on {}", t.name, f.display());
            ran += 1;
        }
    }
    ran
}

#[test]
fn seed_corpus_passes_every_harness() {
    for t in sluice_fuzzing::TARGETS {
        let dir = fuzz_dir().join("corpus").join(t.name);
        let n = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
        assert!(n > 0, "no seed corpus for {} in {}", t.name, dir.display());
    }
    assert!(replay("corpus") > 0);
}

#[test]
fn regression_inputs_pass_every_harness() {
    // Every input that once crashed a harness (see docs/fuzzing.md) must pass now.
    replay("regressions");
}

#[test]
fn empty_and_tiny_inputs_pass() {
    for t in sluice_fuzzing::TARGETS {
        for data in [&b""[..], &[0], &[0xff; 3], &[1, 2, 3, 4, 5, 6, 7]] {
            (t.run)(data);
        }
    }
}
