use super::*;
use crate::image::metadata::MetadataRoot;

/// Every cell of every original row of `image` reads the same from `built`.
fn same_cells(image: &Image<'_>, built: &BuiltMetadata) {
    let h = image.tables_header();
    for table in Table::ALL {
        assert!(built.tables.rows(table) >= h.rows(table), "{table:?}");
        for rid in 1..=h.rows(table) {
            for col in 0..schema(table).len() {
                assert_eq!(
                    h.cell(image.bytes(), table, rid, col).unwrap(),
                    built.tables.cell(&built.bytes, table, rid, col).unwrap(),
                    "{table:?} row {rid} column {col}"
                );
            }
        }
    }
}

fn root(built: &BuiltMetadata) -> MetadataRoot {
    MetadataRoot::parse(&built.bytes, 0, built.bytes.len()).unwrap()
}

#[test]
fn nothing_added_rebuilds_the_same_tables_and_heaps() {
    for (name, bytes) in crate::corpus::EMBEDDED {
        let image = Image::parse(bytes).unwrap();
        let b = MetadataBuilder::new(&image);
        assert!(b.is_empty());
        let built = b.build().unwrap();
        same_cells(&image, &built);
        let (old, new) = (image.metadata(), root(&built));
        assert_eq!(old.version, new.version, "{name}");
        assert_eq!(old.streams.len(), new.streams.len(), "{name}");
        for (o, n) in old.streams.iter().zip(&new.streams) {
            assert_eq!(o.name, n.name, "{name}");
            let original = &bytes[o.offset..o.offset + o.size];
            let rebuilt = &built.bytes[n.offset..n.offset + n.size];
            // Streams are padded to 4 bytes; the table stream is rebuilt from its rows.
            let len = original.len().min(rebuilt.len());
            if o.name == "#~" {
                let end = image.tables_header().end - o.offset;
                assert_eq!(&original[..end], &rebuilt[..end], "{name} {}", o.name);
            } else {
                assert_eq!(&original[..len], &rebuilt[..len], "{name} {}", o.name);
            }
        }
    }
}

/// The embedded `features.exe`, which references mscorlib and `System.Object`.
fn features() -> Image<'static> {
    let bytes = crate::corpus::EMBEDDED
        .iter()
        .find(|(n, _)| n.ends_with("features.exe"))
        .unwrap()
        .1;
    Image::parse(bytes).unwrap()
}

#[test]
fn references_are_found_or_added_once() {
    let image = features();
    let mut b = MetadataBuilder::new(&image);
    // mscorlib and System.Object are referenced already.
    let corlib_rid = (1..=image.tables_header().rows(Table::AssemblyRef))
        .find(|&rid| {
            let r = image.tables().assembly_ref(rid).unwrap();
            image.strings().get(r.name).unwrap() == "mscorlib"
        })
        .unwrap();
    let corlib = Token::new(Table::AssemblyRef, corlib_rid);
    let object = b.type_ref(corlib, "System", "Object").unwrap();
    assert!(object.rid() <= image.tables_header().rows(Table::TypeRef));
    assert!(b.is_empty(), "{b:?}");

    let probe = AssemblyIdentity {
        name: "Probe".into(),
        version: [1, 2, 3, 4],
        ..Default::default()
    };
    let probe_ref = b.assembly_ref(&probe).unwrap();
    assert_eq!(b.assembly_ref(&probe).unwrap(), probe_ref);
    let probe_type = b.type_ref(probe_ref, "Acme", "Probe").unwrap();
    let sig = [0x00, 0x01, 0x01, 0x0E]; // default, 1 parameter, void (string)
    let enter = b.member_ref(probe_type, "Enter", &sig).unwrap();
    assert_eq!(b.member_ref(probe_type, "Enter", &sig).unwrap(), enter);
    let text = b.user_string("N.C::M()").unwrap();
    assert_eq!(b.user_string("N.C::M()").unwrap(), text);
    let second = b.user_string("it's").unwrap();
    assert!(second.rid() > text.rid());
    let added = b.additions();
    assert!(added.is_added_string(text.0) && added.is_added_string(second.0));
    // Not an entry start, past the heap, or the image's own: not added.
    assert!(!added.is_added_string(text.0 + 1));
    assert!(!added.is_added_string(second.0 + 64));
    assert!(!added.is_added_string(0x7000_0001));
    let locals = b.standalone_sig(&[0x07, 0x01, 0x08]).unwrap();
    assert_eq!(
        b.rows(Table::AssemblyRef),
        image.tables_header().rows(Table::AssemblyRef) + 1
    );

    let built = b.build().unwrap();
    same_cells(&image, &built);
    let new = root(&built);
    let heap = |r: crate::image::metadata::StreamRange| &built.bytes[r.offset..r.offset + r.size];
    let strings = crate::image::StringHeap {
        data: heap(new.strings),
        offset: 0,
    };
    let blobs = crate::image::BlobHeap {
        data: heap(new.blob),
        offset: 0,
    };
    let us = crate::image::UserStringHeap {
        data: heap(new.user_strings),
        offset: 0,
    };
    let cell = |t: Token, col| {
        built
            .tables
            .cell(&built.bytes, t.table().unwrap(), t.rid(), col)
            .unwrap()
    };
    assert_eq!(strings.get(cell(probe_ref, 6)).unwrap(), "Probe");
    assert_eq!(cell(probe_ref, 0), 1);
    assert_eq!(cell(probe_ref, 3), 4);
    assert_eq!(strings.get(cell(probe_type, 1)).unwrap(), "Probe");
    assert_eq!(strings.get(cell(probe_type, 2)).unwrap(), "Acme");
    assert_eq!(
        CodedIndex::ResolutionScope.decode(cell(probe_type, 0)),
        Some(probe_ref)
    );
    assert_eq!(strings.get(cell(enter, 1)).unwrap(), "Enter");
    assert_eq!(blobs.get(cell(enter, 2)).unwrap(), &sig);
    assert_eq!(blobs.get(cell(locals, 0)).unwrap(), &[0x07, 0x01, 0x08]);
    assert_eq!(us.get(text.rid()).unwrap(), "N.C::M()");
    assert_eq!(us.get(second.rid()).unwrap(), "it's");
    assert!(matches!(
        b.add_row(Table::CustomAttribute, &[0, 0, 0]),
        Err(EmitError::SortedTable { .. })
    ));
    assert!(matches!(
        b.add_row(Table::TypeRef, &[0, 0]),
        Err(EmitError::ColumnCount { .. })
    ));
}

use crate::image::tables::CodedIndex;

/// Adds TypeRefs until the table has `rows`, each with a distinct name.
fn grow_type_refs(b: &mut MetadataBuilder<'_, '_>, rows: u32) {
    let scope = Token::new(Table::AssemblyRef, 1);
    let mut n = 0;
    while b.rows(Table::TypeRef) < rows {
        b.type_ref(scope, "Grown", &format!("T{n}")).unwrap();
        n += 1;
    }
}

#[test]
fn coded_indexes_widen_when_a_target_table_crosses_their_limit() {
    let bytes = crate::corpus::EMBEDDED[0].1;
    let image = Image::parse(bytes).unwrap();
    // HasCustomAttribute has 5 tag bits: 2-byte values hold row ids below 2^11.
    let width = |built: &BuiltMetadata| {
        built
            .tables
            .info(Table::CustomAttribute)
            .column(0)
            .unwrap()
            .1
    };
    assert_eq!(
        image
            .tables_header()
            .info(Table::CustomAttribute)
            .column(0)
            .unwrap()
            .1,
        2
    );
    for (rows, expected) in [(2047, 2), (2048, 4)] {
        let mut b = MetadataBuilder::new(&image);
        grow_type_refs(&mut b, rows);
        let built = b.build().unwrap();
        assert_eq!(built.tables.rows(Table::TypeRef), rows);
        assert_eq!(width(&built), expected, "{rows} TypeRefs");
        same_cells(&image, &built);
        // The last added row reads back.
        let last = built
            .tables
            .cell(&built.bytes, Table::TypeRef, rows, 2)
            .unwrap();
        let strings = root(&built).strings;
        let heap = crate::image::StringHeap {
            data: &built.bytes[strings.offset..strings.offset + strings.size],
            offset: 0,
        };
        assert_eq!(heap.get(last).unwrap(), "Grown");
    }
}

#[test]
fn string_indexes_widen_when_the_heap_crosses_64_kib() {
    let bytes = crate::corpus::EMBEDDED[0].1;
    let image = Image::parse(bytes).unwrap();
    assert_eq!(
        image.tables_header().heap_sizes & heap_sizes::BIG_STRINGS,
        0
    );
    let size = image.metadata().strings.size;
    for (target, wide) in [(0xFFFC, false), (0xFFFD, true)] {
        let mut b = MetadataBuilder::new(&image);
        // Strings of 9 bytes each ("S" + 7 digits + NUL), then one to land on the target.
        let mut n = 0;
        while b.strings.len() + 9 + 2 <= target {
            b.string(&format!("S{n:07}")).unwrap();
            n += 1;
        }
        let rest = target - b.strings.len();
        b.string(&"x".repeat(rest - 1)).unwrap();
        assert_eq!(b.strings.len(), target, "from {size}");
        let built = b.build().unwrap();
        let flags = built.tables.heap_sizes;
        assert_eq!(flags & heap_sizes::BIG_STRINGS != 0, wide, "{target:#x}");
        let name_width = built.tables.info(Table::TypeDef).column(1).unwrap().1;
        assert_eq!(name_width, if wide { 4 } else { 2 });
        same_cells(&image, &built);
    }
}

/// The emit resolver's batch answer is the per-token rule's (the trait's contract), over the
/// image's rows and strings, the added ones, and tokens just past both, in runs longer and
/// shorter than its batches.
#[test]
fn the_emit_resolvers_token_batches_answer_as_token_by_token() {
    use crate::opcode::OperandKind;
    use crate::verify::Resolver;
    let image = features();
    let mut b = MetadataBuilder::new(&image);
    let probe = AssemblyIdentity {
        name: "Probe".into(),
        ..Default::default()
    };
    let scope = b.assembly_ref(&probe).unwrap();
    let ty = b.type_ref(scope, "Acme", "Probe").unwrap();
    let enter = b
        .member_ref(ty, "Enter", &[0x00, 0x01, 0x01, 0x0E])
        .unwrap();
    let text = b.user_string("N.C::M()").unwrap();
    let additions = b.additions();
    let inner = crate::verify::ImageResolver::new(&image);
    // The image resolver answers from counts, so the emit resolver checks in one loop; an
    // inner resolver that does not say so has its tokens split off into runs.
    struct Opaque<'a>(&'a crate::verify::ImageResolver<'a>);
    impl Resolver for Opaque<'_> {
        fn token_exists(&self, token: u32) -> Option<bool> {
            self.0.token_exists(token)
        }
        fn string_exists(&self, token: u32) -> Option<bool> {
            self.0.string_exists(token)
        }
        fn tokens_pass(&self, tokens: &[(OperandKind, u32)]) -> bool {
            self.0.tokens_pass(tokens)
        }
    }
    let opaque = Opaque(&inner);
    assert!(inner.token_limits().is_some() && opaque.token_limits().is_none());
    for inner in [&inner as &dyn Resolver, &opaque] {
        check_token_batches(
            &EmitResolver {
                inner,
                additions: &additions,
                locals: None,
            },
            &image,
            &b,
            [enter, ty, scope, text],
        );
    }
}

fn check_token_batches(
    r: &dyn crate::verify::Resolver,
    image: &Image<'_>,
    b: &MetadataBuilder<'_, '_>,
    [enter, ty, scope, text]: [Token; 4],
) {
    use crate::opcode::OperandKind;
    let h = image.tables_header();
    let mut tokens = Vec::new();
    for t in [
        Table::TypeRef,
        Table::MemberRef,
        Table::MethodDef,
        Table::Field,
    ] {
        let rows = h.rows(t);
        for rid in [0, 1, rows, rows + 1, rows + 2, b.rows(t), b.rows(t) + 1] {
            tokens.push(Token::new(t, rid).0);
        }
    }
    for rid in [
        0,
        1,
        text.rid() - 1,
        text.rid(),
        text.rid() + 1,
        0x00FF_FFFF,
    ] {
        tokens.push(0x7000_0000 | rid);
    }
    tokens.extend([enter.0, ty.0, scope.0, 0x7F00_0001]);
    let kinds = [
        OperandKind::Method,
        OperandKind::Type,
        OperandKind::Field,
        OperandKind::Tok,
        OperandKind::String,
    ];
    let one = |kind: OperandKind, token: u32| {
        r.token_fits(kind, token)
            && if kind == OperandKind::String {
                r.string_exists(token) != Some(false)
            } else {
                token & 0x00FF_FFFF != 0 && r.token_exists(token) != Some(false)
            }
    };
    let all: Vec<(OperandKind, u32)> = kinds
        .iter()
        .flat_map(|&k| tokens.iter().map(move |&t| (k, t)))
        .collect();
    for &(kind, token) in &all {
        assert_eq!(
            r.tokens_pass(&[(kind, token)]),
            one(kind, token),
            "{kind:?} {token:#x}"
        );
    }
    // Runs of passing tokens, long and short, and one failing token at each position.
    let passing: Vec<_> = all.iter().copied().filter(|&(k, t)| one(k, t)).collect();
    let failing = all.iter().copied().find(|&(k, t)| !one(k, t)).unwrap();
    assert!(passing.len() > 40, "{}", passing.len());
    let long: Vec<_> = passing.iter().cycle().take(100).copied().collect();
    assert!(r.tokens_pass(&long));
    for at in [0, 31, 32, 33, 64, 99] {
        let mut broken = long.clone();
        broken[at] = failing;
        assert!(!r.tokens_pass(&broken), "failing token at {at}");
    }
}

/// Adds `void [Probe]Acme.Probe::Enter(string)`: an AssemblyRef, a TypeRef and a MemberRef.
fn add_probe_reference(b: &mut MetadataBuilder<'_, '_>) {
    let probe = AssemblyIdentity {
        name: "Probe".into(),
        ..Default::default()
    };
    let scope = b.assembly_ref(&probe).unwrap();
    let ty = b.type_ref(scope, "Acme", "Probe").unwrap();
    b.member_ref(ty, "Enter", &[0x00, 0x01, 0x01, 0x0E])
        .unwrap();
}

/// A builder working in an earlier builder's memory (another image's, with additions and a
/// build behind it) builds the same bytes as a fresh one.
#[test]
fn recycled_buffers_build_what_fresh_ones_do() {
    let add = |b: &mut MetadataBuilder<'_, '_>| {
        add_probe_reference(b);
        b.reserve_user_strings(3, 16);
        for s in ["A::B()", "it's", "A::B()", "C::D(int32)"] {
            b.user_string(s).unwrap();
        }
    };
    let mut buffers = EmitBuffers::default();
    for (name, bytes) in crate::corpus::EMBEDDED {
        let image = Image::parse(bytes).unwrap();
        let mut fresh = MetadataBuilder::new(&image);
        add(&mut fresh);
        let expected = fresh.build().unwrap().bytes;
        let mut reused = MetadataBuilder::with_buffers(&image, std::mem::take(&mut buffers));
        add(&mut reused);
        let built = reused.build().unwrap();
        assert_eq!(built.bytes, expected, "{name}");
        buffers = reused.into_buffers();
        buffers.recycle(built);
    }
    assert!(buffers.root.capacity() > 0 && buffers.heaps[2].0.capacity() > 0);
}

#[test]
fn method_name_literals_are_the_joined_names_literals() {
    // Every method of every embedded image, in rid order and then again backwards (owners
    // change at every method), plus names with flagged and wide characters: the literal built
    // from widened pieces is the entry `user_string` makes of the joined name.
    for (name, bytes) in crate::corpus::EMBEDDED {
        let image = Image::parse(bytes).unwrap();
        let mut pieces = MetadataBuilder::new(&image);
        let mut joined = MetadataBuilder::new(&image);
        let (mut names, mut literals) = (
            crate::image::FullNames::default(),
            MethodNameLiterals::new(),
        );
        let methods: Vec<_> = image.methods().collect();
        for m in methods.iter().chain(methods.iter().rev()) {
            let Ok(parts) = m.full_name_parts(&mut names) else {
                continue;
            };
            let full = m.full_name().unwrap();
            assert_eq!(
                full,
                format!("{}{}{}", parts.prefix, parts.name, parts.params)
            );
            let a = literals.literal(&mut pieces, &parts).unwrap();
            let b = joined.user_string(&full).unwrap();
            assert_eq!(a, b, "{name} {full}");
        }
        // A flagged or wide character in one piece at a time: the final byte is the pieces'.
        for (prefix, method, params) in [
            ("Ns.T'1::", "Value", "(int32)"),
            ("A::", "get-X", "()"),
            ("B::", "C", "(it's)"),
            ("Été::", "M", "()"),
            ("", "Ω", "(string,char)"),
            ("", "\u{1}x", "()"),
        ] {
            let parts = crate::image::FullNameParts {
                owner: Some(u32::MAX),
                prefix,
                name: method,
                signature: u32::MAX - u32::from(params.len() as u8),
                params,
                params_id: 0,
            };
            let mut fresh = MethodNameLiterals::new();
            let a = fresh.literal(&mut pieces, &parts).unwrap();
            // A list number far past those met is widened without a slot, to the same entry.
            let far = crate::image::FullNameParts {
                params_id: u32::MAX,
                ..parts
            };
            assert_eq!(
                MethodNameLiterals::new()
                    .literal(&mut pieces, &far)
                    .unwrap(),
                a
            );
            let b = joined
                .user_string(&format!("{prefix}{method}{params}"))
                .unwrap();
            assert_eq!(a, b, "{name} {prefix}{method}{params}");
        }
        assert_eq!(
            pieces.build().unwrap().bytes,
            joined.build().unwrap().bytes,
            "{name}"
        );
    }
}

#[test]
fn prepared_metadata_writes_what_build_builds_and_the_writer_places_it_alike() {
    // Every embedded image with rows, strings, literals and a GUID added: the prepared root
    // written after other bytes is the built root byte for byte, its cells are found at the
    // same places, and an image written with either is the same file.
    let mut written = 0;
    for (name, bytes) in crate::corpus::EMBEDDED {
        let image = Image::parse(bytes).unwrap();
        let mut b = MetadataBuilder::new(&image);
        add_probe_reference(&mut b);
        b.string("a new name").unwrap();
        b.user_string("A::B(int32)").unwrap();
        b.guid([7; 16]);
        let built = b.build().unwrap();
        let prepared = b.prepare().unwrap();
        assert_eq!(prepared.size(), built.bytes.len(), "{name}");
        let mut out = vec![0xAB; 12];
        prepared.write_to(&mut out);
        assert_eq!(&out[12..], &built.bytes[..], "{name}");
        for table in [Table::MethodDef, Table::MemberRef, Table::AssemblyRef] {
            for rid in 0..=built.tables.rows(table) + 1 {
                assert_eq!(
                    prepared.cell_at(table, rid, 0),
                    built.cell_at(table, rid, 0),
                    "{name} {table:?} {rid}"
                );
            }
        }
        // One body relocated: the first tiny one, a `nop` longer (it no longer fits).
        let mut writer = crate::image::writer::ImageWriter::new(&image);
        let first = image.methods().find_map(|m| {
            let (_, bytes) = m.decoded_body_and_bytes().ok()?;
            let code = bytes
                .get(1..)
                .filter(|c| bytes[0] & 3 == 2 && c.len() < 60)?;
            let mut longer = vec![(((code.len() + 1) as u8) << 2) | 2, 0x00];
            longer.extend_from_slice(code);
            Some((m.rid(), longer))
        });
        if let Some((rid, body)) = first {
            writer.replace_body(rid, &body).unwrap();
        }
        let mut by_prepared = Vec::new();
        let placed = writer
            .finish_into_with(&mut by_prepared, Some(&prepared))
            .map(|(s, _)| s.relocated);
        writer.set_metadata(built);
        let by_built = writer.finish();
        match (placed, by_built) {
            (Ok(relocated), Ok(patched)) => {
                assert_eq!(relocated, patched.summary.relocated, "{name}");
                assert_eq!(by_prepared, patched.bytes, "{name}");
                Image::parse(&by_prepared).unwrap();
                written += usize::from(relocated > 0);
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{name}"),
            (a, b) => panic!("{name}: {a:?} against {:?}", b.map(|p| p.summary)),
        }
        prepared.recycle();
    }
    assert!(
        written > 1,
        "{written} images written with a relocated body"
    );
}

/// Every original row looked up by what identifies it (a signature; a TypeRef's scope and
/// name; a MemberRef's parent, name and signature; a TypeDef's name) is found at the first row
/// holding it, adding nothing, whichever order they are asked in; a new one is added once.
#[test]
fn original_rows_are_found_at_their_first_row() {
    for (name, bytes) in crate::corpus::EMBEDDED {
        let image = Image::parse(bytes).unwrap();
        let h = image.tables_header();
        let cell = |table, rid, col| h.cell(bytes, table, rid, col).unwrap();
        let blob = |i| image.blobs().get(i).unwrap().to_vec();
        let string = |i| image.strings().get(i).unwrap().to_string();
        // The first row at or before `rid` whose `key` is the same as its.
        let first =
            |rid, key: &dyn Fn(u32) -> Vec<u8>| (1..=rid).find(|&r| key(r) == key(rid)).unwrap();
        let mut b = MetadataBuilder::new(&image);
        // Last row first: the first lookup indexes the table, which must not depend on it.
        for table in [Table::StandAloneSig, Table::TypeSpec] {
            for rid in (1..=h.rows(table)).rev() {
                let sig = blob(cell(table, rid, 0));
                let found = match table {
                    Table::StandAloneSig => b.standalone_sig(&sig),
                    _ => b.type_spec(&sig),
                };
                let key = |r| blob(cell(table, r, 0));
                let want = Token::new(table, first(rid, &key));
                assert_eq!(found.unwrap(), want, "{name} {table:?}");
            }
        }
        for rid in (1..=h.rows(Table::TypeRef)).rev() {
            let t = Table::TypeRef;
            let scope = CodedIndex::ResolutionScope.decode(cell(t, rid, 0));
            let Some(scope) = scope.filter(|s| !s.is_null()) else {
                continue;
            };
            let (n, ns) = (string(cell(t, rid, 1)), string(cell(t, rid, 2)));
            let key = |r| {
                format!(
                    "{}/{}/{}",
                    cell(t, r, 0),
                    string(cell(t, r, 1)),
                    string(cell(t, r, 2))
                )
                .into_bytes()
            };
            let want = Token::new(t, first(rid, &key));
            assert_eq!(b.type_ref(scope, &ns, &n).unwrap(), want, "{name}");
        }
        for rid in (1..=h.rows(Table::MemberRef)).rev() {
            let t = Table::MemberRef;
            let parent = CodedIndex::MemberRefParent.decode(cell(t, rid, 0)).unwrap();
            let (n, sig) = (string(cell(t, rid, 1)), blob(cell(t, rid, 2)));
            let key = |r| {
                let mut k = format!("{}/{}/", cell(t, r, 0), string(cell(t, r, 1))).into_bytes();
                k.extend(blob(cell(t, r, 2)));
                k
            };
            let want = Token::new(t, first(rid, &key));
            assert_eq!(b.member_ref(parent, &n, &sig).unwrap(), want, "{name}");
        }
        for rid in (1..=h.rows(Table::TypeDef)).rev() {
            let t = Table::TypeDef;
            let (n, ns) = (string(cell(t, rid, 1)), string(cell(t, rid, 2)));
            let key =
                |r| format!("{}/{}", string(cell(t, r, 1)), string(cell(t, r, 2))).into_bytes();
            let want = Token::new(t, first(rid, &key));
            assert_eq!(b.type_def_named(&ns, &n).unwrap(), Some(want), "{name}");
        }
        assert!(b.is_empty(), "{name}: {b:?}");
        assert_eq!(b.type_def_named("No.Such", "Type").unwrap(), None, "{name}");
        // A local signature no image has: added once, then found among the added rows.
        let new = [0x07, 0x03, 0x08, 0x0E, 0x1C];
        let t = b.standalone_sig(&new).unwrap();
        assert_eq!(t.rid(), h.rows(Table::StandAloneSig) + 1, "{name}");
        assert_eq!(b.standalone_sig(&new).unwrap(), t, "{name}");
    }
}
