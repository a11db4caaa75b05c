//! The bounded run `cargo test` does: every seed and regression case of a
//! target, then `cases` inputs made by mutating them with a generator
//! seeded from `seed`, so a run is the same every time and a failure
//! replays. A failing input is written to
//! `<target dir>/props-failures/<target>/<hash>` for `tests/props/regressions`.
//!
//! This is not coverage-guided (libFuzzer is, in `fuzz/`): it finds what a
//! few thousand cheap mutations of good inputs find, in seconds, on every
//! test run.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::Target;

/// How many mutated inputs per target: `DAGR_PROPS_CASES`, default 2000.
pub fn cases() -> usize {
    std::env::var("DAGR_PROPS_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
}

/// The generator's seed: `DAGR_PROPS_SEED`, default fixed.
pub fn seed() -> u64 {
    std::env::var("DAGR_PROPS_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x00da_9a17)
}

/// Checks every seed and regression of `target`, then `cases` mutants.
/// Panics naming the first input that breaks a property.
pub fn run(target: &Target, cases: usize, seed: u64) {
    let mut corpus = (target.seeds)();
    for (path, input) in crate::seeds::regressions(target.name) {
        check_one(target, &input, &format!("regression {}", path.display()));
        corpus.push(input);
    }
    assert!(!corpus.is_empty(), "target {} has no seeds", target.name);
    for (i, input) in corpus.iter().enumerate() {
        check_one(target, input, &format!("seed {i}"));
    }
    let mut rng = StdRng::seed_from_u64(seed ^ fnv(target.name.as_bytes()));
    for case in 0..cases {
        let base = &corpus[rng.random_range(0..corpus.len())];
        let other = &corpus[rng.random_range(0..corpus.len())];
        let mut input = base.clone();
        for _ in 0..rng.random_range(1..=4) {
            input = mutate(&mut rng, &input, other, target.dictionary);
        }
        check_one(target, &input, &format!("case {case} of seed {seed}"));
    }
}

fn check_one(target: &Target, input: &[u8], what: &str) {
    if catch_unwind(AssertUnwindSafe(|| (target.check)(input))).is_ok() {
        return;
    }
    let saved = save(target.name, input);
    panic!(
        "target `{}`: {what} breaks a property (the panic above says which); the input is {} ({} bytes): {:?}",
        target.name,
        saved.map(|p| p.display().to_string()).unwrap_or_else(|| "not saved".into()),
        input.len(),
        String::from_utf8_lossy(&input[..input.len().min(600)])
    );
}

fn save(target: &str, input: &[u8]) -> Option<PathBuf> {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::seeds::workspace_root().join("target"))
        .join("props-failures")
        .join(target);
    std::fs::create_dir_all(&dir).ok()?;
    let path = dir.join(format!("{:016x}", fnv(input)));
    std::fs::write(&path, input).ok()?;
    Some(path)
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// One mutation: flip, replace, insert (random or a dictionary word),
/// delete, repeat a range, or splice from another input.
pub fn mutate(rng: &mut StdRng, input: &[u8], other: &[u8], dictionary: &[&str]) -> Vec<u8> {
    let mut out = input.to_vec();
    let len = out.len();
    let at = |rng: &mut StdRng, n: usize| if n == 0 { 0 } else { rng.random_range(0..=n) };
    match rng.random_range(0..9) {
        0 if len > 0 => {
            let i = rng.random_range(0..len);
            out[i] ^= 1 << rng.random_range(0..8);
        }
        1 if len > 0 => {
            let i = rng.random_range(0..len);
            out[i] = INTERESTING[rng.random_range(0..INTERESTING.len())];
        }
        2 | 3 if !dictionary.is_empty() => {
            let word = dictionary[rng.random_range(0..dictionary.len())].as_bytes();
            let i = at(rng, len);
            out.splice(i..i, word.iter().copied());
        }
        4 if len > 0 => {
            let i = rng.random_range(0..len);
            let n = rng.random_range(1..=(len - i).min(16));
            out.drain(i..i + n);
        }
        5 if len > 0 => {
            let i = rng.random_range(0..len);
            let n = rng.random_range(1..=(len - i).min(32));
            let times = rng.random_range(1..=64);
            let piece: Vec<u8> = out[i..i + n].to_vec();
            for _ in 0..times {
                out.splice(i..i, piece.iter().copied());
            }
        }
        6 if !other.is_empty() => {
            let from = rng.random_range(0..other.len());
            let n = rng.random_range(1..=(other.len() - from).min(64));
            let i = at(rng, len);
            out.splice(i..i, other[from..from + n].iter().copied());
        }
        7 if len > 1 => {
            out.truncate(rng.random_range(1..len));
        }
        _ => {
            let i = at(rng, len);
            let n = rng.random_range(1..=8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.random_range(0x20..0x7f)).collect();
            out.splice(i..i, bytes);
        }
    }
    out.truncate(64 << 10);
    out
}

const INTERESTING: &[u8] = b"\0\x01\x7f\x80\xff\n\r\t \"'\\{}[]:,-*&!|#%@?<>()0123456789.eE+";
