//! Writes seed inputs for the fuzz targets from the project's own assemblies:
//! `cargo run --release --example fuzz_seeds -- fuzz/corpus`.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    for target in [
        "decode_body",
        "read_image",
        "verify_types",
        "verify_types_body",
        "verify_any",
        "rewrite_any",
        "rewrite_generated",
        "relax",
    ] {
        std::fs::create_dir_all(out.join(target))?;
    }
    let mut seeds = 0;
    for (name, bytes) in ilcheck::corpus::EMBEDDED {
        let file = name.rsplit('/').next().unwrap_or(name);
        std::fs::write(out.join("read_image").join(file), bytes)?;
        std::fs::write(out.join("verify_types").join(file), bytes)?;
        let Ok(image) = ilcheck::image::Image::parse(bytes) else {
            continue;
        };
        for m in image.methods() {
            let Ok(body) = m.body() else { continue };
            // Large bodies slow the fuzzer down more than they teach it.
            if body.len() > 4096 {
                continue;
            }
            let id = format!("{file}-{:08x}", m.token().0);
            std::fs::write(out.join("decode_body").join(&id), body)?;
            // The type cases' bodies, each framed by its own method.
            if file == "type_cases.dll" {
                let mut framed = m.rid().to_le_bytes()[..2].to_vec();
                framed.extend_from_slice(body);
                std::fs::write(out.join("verify_types_body").join(&id), framed)?;
            }
            let mut with_facts = vec![3, 0, 2, 0];
            with_facts.extend_from_slice(body);
            std::fs::write(out.join("verify_any").join(&id), &with_facts)?;
            std::fs::write(out.join("rewrite_any").join(&id), with_facts)?;
            seeds += 1;
        }
    }
    // The generator targets read any bytes as choices: a spread of lengths.
    for n in 0..32u32 {
        let seed = ilcheck::properties::seed_bytes(u64::from(n) + 1, n as usize * 61);
        std::fs::write(
            out.join("rewrite_generated").join(format!("seed-{n}")),
            &seed,
        )?;
        std::fs::write(out.join("relax").join(format!("seed-{n}")), &seed)?;
    }
    eprintln!(
        "{seeds} body seeds and {} images written under {}",
        ilcheck::corpus::EMBEDDED.len(),
        out.display()
    );
    Ok(())
}
