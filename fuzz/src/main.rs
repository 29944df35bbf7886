//! One AFL++ fuzz binary for every target: `sluice-fuzz <target>` (packet, handshake, params,
//! scanner, sqlscan, pgwire). Run through `bench/fuzz.sh`, which builds it with `cargo afl`.

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = sluice_fuzzing::target(&name) else {
        let names: Vec<&str> = sluice_fuzzing::TARGETS.iter().map(|t| t.name).collect();
        eprintln!("usage: sluice-fuzz <{}>", names.join("|"));
        std::process::exit(2);
    };
    afl::fuzz(true, |data: &[u8]| (target.run)(data));
}
