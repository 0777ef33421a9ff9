//! `corpus/bin/verify_cases.dll` (from `corpus/il/verify_cases.il`): every method of
//! `Verify.Cases` is named `<Name>_Valid` or `<Name>_Invalid_<Code>[.<Code>…]`, and the
//! verifier must report exactly the codes its name lists (as a set).

use ilcheck::image::Image;
use ilcheck::verify::{Code, ImageResolver, Verifier};
use std::collections::BTreeSet;
use std::path::Path;

#[test]
fn every_case_reports_the_codes_its_name_lists() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/bin/verify_cases.dll");
    let image = Image::open(&path).expect("corpus/bin/verify_cases.dll");
    let mut resolver = ImageResolver::new(&image);
    let mut verifier = Verifier::new();
    let (mut checked, mut failures) = (0, Vec::new());
    for method in image.methods() {
        let full = method.full_name().unwrap();
        if !full.starts_with("Verify.Cases::") {
            continue;
        }
        let name = method.name().unwrap();
        let expected: BTreeSet<&str> = match name.split_once("_Invalid_") {
            Some((_, codes)) => codes.split('.').collect(),
            None if name.ends_with("_Valid") => BTreeSet::new(),
            None => continue,
        };
        for c in &expected {
            assert!(Code::from_name(c).is_some(), "{name}: unknown code {c}");
        }
        let body = method.decoded_body().unwrap();
        resolver.set_method(&method, &body);
        let found = verifier.verify(&body, &resolver, &ilcheck::verify::Options::ALL);
        let got: BTreeSet<&str> = found.iter().map(|d| d.code.as_str()).collect();
        checked += 1;
        if got != expected {
            let detail: Vec<String> = found.iter().map(|d| d.to_string()).collect();
            failures.push(format!(
                "{name}: got {got:?}\n        {}",
                detail.join("\n        ")
            ));
        }
    }
    assert!(checked > 50, "only {checked} cases found");
    assert!(
        failures.is_empty(),
        "{} of {checked} cases differ:\n    {}",
        failures.len(),
        failures.join("\n    ")
    );
}
