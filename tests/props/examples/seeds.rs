//! Writes every target's seeds and regression cases to `DIR/<target>/`,
//! for libFuzzer (`scripts/fuzz.sh`).
//!
//! `cargo run -p dagr-props --example seeds -- DIR`

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "fuzz-seeds".into()));
    for target in dagr_props::TARGETS {
        let out = dir.join(target.name);
        std::fs::create_dir_all(&out)?;
        let mut inputs = (target.seeds)();
        inputs.extend(dagr_props::seeds::regressions(target.name).into_iter().map(|(_, input)| input));
        for (i, input) in inputs.iter().enumerate() {
            std::fs::write(out.join(format!("seed-{i:04}")), input)?;
        }
        // libFuzzer's dictionary format: one quoted word per line.
        let words: Vec<String> = target.dictionary.iter().map(|w| dictionary_word(w)).collect();
        std::fs::write(dir.join(format!("{}.dict", target.name)), words.join("\n") + "\n")?;
        println!("{}: {} seeds", target.name, inputs.len());
    }
    Ok(())
}

/// `"word"`, with quotes, backslashes and bytes outside printable ASCII as `\xNN`.
fn dictionary_word(word: &str) -> String {
    let mut out = String::from("\"");
    for b in word.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\x{b:02X}"));
        }
    }
    out.push('"');
    out
}
