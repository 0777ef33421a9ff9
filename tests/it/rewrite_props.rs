//! Random edit sequences over real bodies (the project corpus), laid out with every branch-form
//! option: the output decodes, every branch and `switch` reaches the instruction its label
//! names (a wrapped short displacement would not), region boundaries land where their labels
//! are, and the original instructions keep their order.

use ilcheck::body::Body;
use ilcheck::image::Image;
use ilcheck::ir::edit::{Regions, Targets};
use ilcheck::ir::{BranchForms, Instr, LayoutOptions, MaxStackPolicy, Method, Operand, layout};
use ilcheck::opcode::Opcode;
use ilcheck::verify::NoResolver;
use proptest::prelude::*;
use std::sync::OnceLock;

/// The inserted instruction: an operand no compiler output in the corpus carries.
/// Layout without MaxStack computation or verification: the property is about placement.
const STRUCTURAL: LayoutOptions = LayoutOptions {
    branch_forms: BranchForms::KeepOriginal,
    max_stack: MaxStackPolicy::Declared,
    verify: false,
};

const MARK: Instr = Instr::new(Opcode::Ldc_I4, Operand::Int32(0x5EED_1234));

fn bodies() -> &'static [Method] {
    static BODIES: OnceLock<Vec<Method>> = OnceLock::new();
    BODIES.get_or_init(|| {
        let mut out = Vec::new();
        for (_, bytes) in ilcheck::corpus::EMBEDDED {
            let image = Image::parse(bytes).unwrap();
            for m in image.methods() {
                // Bodies that lift and lay out as they are (the corpus holds invalid ones on
                // purpose, an empty try among them).
                if let Ok(b) = m.decoded_body()
                    && let Ok(lifted) = Method::from_body(&b)
                    && !lifted.instrs.is_empty()
                    && layout(&lifted, &STRUCTURAL, &NoResolver, &mut Vec::new()).is_ok()
                {
                    out.push(lifted);
                }
            }
        }
        out
    })
}

#[derive(Clone, Debug)]
enum Edit {
    Before(usize, usize, bool, bool),
    After(usize, usize, bool),
    Flip(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1..80usize, any::<bool>(), any::<bool>())
            .prop_map(|(i, k, t, r)| Edit::Before(i, k, t, r)),
        (any::<usize>(), 1..80usize, any::<bool>()).prop_map(|(i, k, r)| Edit::After(i, k, r)),
        any::<usize>().prop_map(Edit::Flip),
    ]
}

/// Applies the edits that do not conflict with earlier ones at the same place.
fn apply(m: &mut Method, edits: &[Edit]) {
    let n = m.instrs.len();
    for e in edits {
        let mut ed = m.edit();
        let r = |inside: bool| {
            if inside {
                Regions::Inside
            } else {
                Regions::Outside
            }
        };
        let ok = match *e {
            Edit::Before(i, k, to_new, inside) => {
                let t = if to_new {
                    Targets::ToNew
                } else {
                    Targets::StayOnOld
                };
                ed.insert_before(i % n, &vec![MARK; k], t, r(inside))
                    .is_ok()
            }
            Edit::After(i, k, inside) => ed.insert_after(i % n, &vec![MARK; k], r(inside)).is_ok(),
            Edit::Flip(_) => false,
        };
        if ok {
            // An edit whose labels would be ambiguous is refused; the method stays as it was.
            let _ = ed.commit();
        }
        if let Edit::Flip(i) = *e {
            let len = m.instrs.len();
            let ins = &mut m.instrs[i % len];
            if ins.is_branch() {
                ins.opcode = if ins.opcode.long_form() == ins.opcode {
                    ins.opcode.short_form()
                } else {
                    ins.opcode.long_form()
                };
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn layout_reaches_every_label_and_keeps_the_sequence(
        pick in any::<usize>(),
        edits in prop::collection::vec(edit(), 0..12),
        forms in prop_oneof![
            Just(BranchForms::KeepOriginal),
            Just(BranchForms::AllLong),
            Just(BranchForms::ShortestWhereFits)
        ],
    ) {
        let all = bodies();
        let original = &all[pick % all.len()];
        let mut m = original.clone();
        apply(&mut m, &edits);
        let opts = LayoutOptions { branch_forms: forms, ..STRUCTURAL };
        let mut out = Vec::new();
        let Ok(_) = layout(&m, &opts, &NoResolver, &mut out) else {
            // Only an edit that empties a region may be refused; none of these remove code.
            return Err(TestCaseError::fail("layout refused an edited body"));
        };
        if let Err(e) = ilcheck::ir::check::placement(&m, &out) {
            return Err(TestCaseError::fail(e));
        }
        let body = Body::decode(&out).unwrap();
        let decoded: Vec<_> = body.instructions().map(Result::unwrap).filter(|i| !i.opcode.is_prefix()).collect();
        if forms == BranchForms::AllLong {
            prop_assert!(decoded.iter().all(|d| d.opcode == d.opcode.long_form()));
        }
        // Without the inserted marks, the original instructions in their order.
        let kept: Vec<Opcode> = decoded
            .iter()
            .filter(|d| !(d.opcode == Opcode::Ldc_I4 && d.operand == ilcheck::instr::Operand::Int32(0x5EED_1234)))
            .map(|d| d.opcode.long_form())
            .collect();
        let orig: Vec<Opcode> = original.instrs.iter().map(|i| i.opcode.long_form()).collect();
        prop_assert_eq!(kept, orig);
    }
}
