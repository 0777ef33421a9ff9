//! Replays every input in `corpus/regressions/<target>/` through its fuzz target's property, and
//! runs the properties over seeds made from the project's own assemblies.

use ilcheck::properties;
use std::path::PathBuf;

type Property = fn(&[u8]);

const TARGETS: &[(&str, Property)] = &[
    ("decode_body", properties::decode_body),
    ("read_image", properties::read_image),
    ("verify_types", properties::verify_types),
    ("verify_types_body", properties::verify_types_body),
    ("verify_any", properties::verify_any),
    ("rewrite_any", properties::rewrite_any),
    ("rewrite_generated", properties::rewrite_generated),
    ("relax", properties::relax),
];

#[test]
fn regressions_replay() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus/regressions");
    let mut replayed = 0;
    for (target, property) in TARGETS {
        let dir = root.join(target);
        assert!(dir.is_dir(), "{} is missing", dir.display());
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            // `.keep` holds the folder in git.
            if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            {
                continue;
            }
            let data = std::fs::read(&path).unwrap();
            let result = std::panic::catch_unwind(|| property(&data));
            assert!(result.is_ok(), "{target}: {} fails again", path.display());
            replayed += 1;
        }
    }
    eprintln!("replayed {replayed} regression inputs");
}

#[test]
fn generator_properties_hold_on_fixed_seeds() {
    // Seeds of several lengths and byte patterns: each is a valid generated body.
    let mut instructions = 0;
    for n in 0..64u32 {
        let seed = ilcheck::properties::seed_bytes(u64::from(n) + 1, n as usize * 37);
        properties::rewrite_generated(&seed);
        properties::relax(&seed);
        let g =
            ilcheck::generate::generate_from_bytes(&seed, &ilcheck::generate::Config::everything());
        instructions += g.method.instrs.len();
    }
    assert!(
        instructions > 2000,
        "the seeds generate only {instructions} instructions"
    );
}

#[test]
fn properties_hold_on_project_assemblies_and_their_bodies() {
    let mut bodies = 0;
    let mut typed = 0;
    let mut rewritten = 0;
    for (name, bytes) in ilcheck::corpus::EMBEDDED {
        properties::read_image(bytes);
        let image = ilcheck::image::Image::parse(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        for m in image.methods() {
            let Ok(tail) = m.body_bytes() else { continue };
            properties::decode_body(tail);
            let mut with_facts = vec![3, 0, 2, 0];
            with_facts.extend_from_slice(m.body().unwrap_or(tail));
            properties::verify_any(&with_facts);
            rewritten += properties::rewrite_any_written(&with_facts);
            if name.ends_with("/type_cases.dll") {
                let mut framed = m.rid().to_le_bytes()[..2].to_vec();
                framed.extend_from_slice(m.body().unwrap_or(tail));
                properties::verify_types_body(&framed);
                typed += 1;
            }
            bodies += 1;
        }
        properties::verify_types(bytes);
        // Truncations of the image at a spread of offsets.
        for cut in (0..bytes.len()).step_by(bytes.len() / 97 + 1) {
            properties::read_image(&bytes[..cut]);
        }
    }
    assert!(bodies > 400, "{bodies}");
    assert!(typed > 100, "{typed} type cases");
    assert!(
        rewritten > 400,
        "{rewritten} bodies rewritten from clean ones"
    );
    eprintln!("{bodies} bodies, {typed} type cases, {rewritten} rewrites");
}
