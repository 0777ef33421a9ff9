//! Where the original bodies are: the MethodDef RVA column, which bodies share an RVA, their
//! extents, and whether a new body fits in place.

use super::*;

/// The MethodDef RVA column by rid (index 0 unused), up to the first row that cannot be read,
/// into `rvas` (replacing its contents).
pub(super) fn rva_column(image: &Image<'_>, rvas: &mut Vec<u32>) {
    let info = image.tables_header().info(Table::MethodDef);
    rvas.clear();
    // Sized by the row count, which the reader checked against the table stream.
    rvas.reserve(info.rows as usize + 1);
    rvas.push(0);
    // Four-byte cells of a table inside the file are read straight from its rows.
    let Some((col, width)) = info.column(0) else {
        return;
    };
    let file = image.bytes();
    let (rows, row_size) = (info.rows as usize, info.row_size as usize);
    let table = file.get(info.offset..info.offset.saturating_add(rows.saturating_mul(row_size)));
    match table {
        Some(table) if width == 4 && row_size >= col + 4 => {
            // `row_size >= col + 4`: every row holds the cell.
            rvas.extend(
                table
                    .chunks_exact(row_size)
                    .map(|row| le_u32(row, col).unwrap_or(0)),
            );
        }
        // Another width or layout: the general cell reader (this is not the hot path).
        _ => {
            let tables = image.tables();
            for rid in 1..=info.rows {
                let Ok(rva) = tables.cell(Table::MethodDef, rid, 0) else {
                    break;
                };
                rvas.push(rva);
            }
        }
    }
}

/// Sorts `keys` (`rva << 32 | rid`, in rid order) by RVA, keeping rid order among equal RVAs:
/// a least-significant-digit radix sort over the RVA bytes that vary. Compilers lay bodies
/// out mostly, not wholly, in rid order, which comparison sorts gain little from.
pub(super) fn sort_by_rva(keys: &mut Vec<u64>, spare: &mut Vec<u64>) {
    if keys.is_sorted() {
        return;
    }
    let mut counts = [[0usize; 256]; 4];
    for &k in keys.iter() {
        let rva = (k >> 32) as u32;
        for (d, c) in counts.iter_mut().enumerate() {
            c[(rva >> (8 * d)) as u8 as usize] += 1;
        }
    }
    let mut from = std::mem::take(keys);
    let mut to = std::mem::take(spare);
    to.clear();
    to.resize(from.len(), 0);
    for (d, c) in counts.iter_mut().enumerate() {
        // A byte every key shares leaves the order as it is.
        if c.contains(&from.len()) {
            continue;
        }
        let mut start = 0;
        for n in c.iter_mut() {
            (*n, start) = (start, start + *n);
        }
        for &k in &from {
            let slot = &mut c[(k >> (32 + 8 * d)) as u8 as usize];
            to[*slot] = k;
            *slot += 1;
        }
        std::mem::swap(&mut from, &mut to);
    }
    *keys = from;
    *spare = to;
}

/// Why a body goes to the new section.
#[derive(Debug, Clone, Copy)]
pub(super) enum Relocate {
    TooLong,
    Misaligned,
    Shared,
    UnsafeExtent,
}

impl Relocate {
    pub(super) fn count(self, r: &mut RelocationReasons) {
        match self {
            Relocate::TooLong => r.too_long += 1,
            Relocate::Misaligned => r.misaligned += 1,
            Relocate::Shared => r.shared += 1,
            Relocate::UnsafeExtent => r.unsafe_extent += 1,
        }
    }
}

/// One body RVA: the MethodDefs using it, and the body's file offset and extent when known
/// and safe to overwrite.
#[derive(Debug)]
pub(super) struct RvaUse {
    pub(super) rva: u32,
    pub(super) sharers: Range<usize>,
    pub(super) extent: Option<(usize, usize)>,
}

/// The original bodies: who uses each RVA, and which extents can be overwritten safely.
/// `Default` is empty: memory for [`Originals::collect`] to fill.
#[derive(Debug, Default)]
pub(super) struct Originals {
    /// RVA then rid (as `rva << 32 | rid`) of every MethodDef with a body, ascending.
    pub(super) keys: Vec<u64>,
    /// Per rid: index of its RVA in `uses`, `u32::MAX` when it has no body.
    pub(super) use_of: Vec<u32>,
    /// One entry per distinct RVA, ascending.
    pub(super) uses: Vec<RvaUse>,
    /// The radix sort's second buffer.
    spare: Vec<u64>,
}

impl Originals {
    /// The originals of `image`, in the memory of `reuse` (an earlier image's, or empty).
    pub(super) fn collect(
        image: &Image<'_>,
        headers: &Headers,
        file: &[u8],
        rvas: &[u32],
        lens: &[u32],
        reuse: Originals,
    ) -> Originals {
        let Originals {
            mut keys,
            mut use_of,
            mut uses,
            mut spare,
        } = reuse;
        use_of.clear();
        use_of.resize(image.method_count() as usize + 1, u32::MAX);
        // As one integer, RVA then rid: cheaper to sort than pairs.
        keys.clear();
        keys.reserve(rvas.len());
        keys.extend(
            (1u32..)
                .zip(rvas.iter().skip(1))
                .filter(|&(_, &rva)| rva != 0)
                .map(|(rid, &rva)| u64::from(rva) << 32 | u64::from(rid)),
        );
        sort_by_rva(&mut keys, &mut spare);
        uses.clear();
        uses.reserve(keys.len());
        for (i, &k) in keys.iter().enumerate() {
            let (rva, rid) = ((k >> 32) as u32, k as u32);
            if let Some(u) = uses.last_mut()
                && u.rva == rva
            {
                u.sharers.end = i + 1;
                use_of[rid as usize] = (uses.len() - 1) as u32;
                continue;
            }
            let extent = match lens.get(rid as usize) {
                Some(&len) if len != 0 => image.rva_to_offset(rva).map(|at| (at, len as usize)),
                _ => image.method(rid).ok().and_then(|m| {
                    m.body()
                        .ok()
                        .zip(m.body_offset())
                        .map(|(b, at)| (at, b.len()))
                }),
            };
            use_of[rid as usize] = uses.len() as u32;
            uses.push(RvaUse {
                rva,
                sharers: i..i + 1,
                extent,
            });
        }
        // Extents that overlap another body (or hold another MethodDef's RVA) or the CLI data
        // are not safe to overwrite. `uses` is in RVA order.
        let span = |u: &RvaUse| {
            // An RVA whose body does not decode still must not be written through.
            let len = u.extent.map_or(0, |(_, e)| e as u64);
            (u64::from(u.rva), u64::from(u.rva) + len)
        };
        let mut unsafe_uses = Vec::new();
        let mut reach: Option<(u64, usize)> = None;
        for (i, u) in uses.iter().enumerate() {
            let (start, end) = span(u);
            if let Some((prev_end, prev)) = reach
                && start < prev_end
            {
                unsafe_uses.push(i);
                unsafe_uses.push(prev);
            }
            if reach.is_none_or(|(e, _)| end > e) {
                reach = Some((end, i));
            }
        }
        let cli = image.cli_header();
        let mut protected: Vec<Dir> = vec![
            cli.metadata.into(),
            cli.resources.into(),
            cli.strong_name_signature.into(),
        ];
        if let Some(d) = headers.directory(file, CLI_HEADER_DIRECTORY) {
            protected.push(d);
        }
        for (i, u) in uses.iter().enumerate() {
            let (start, end) = span(u);
            let hits = protected.iter().any(|d| {
                let (ds, de) = (u64::from(d.rva), u64::from(d.rva) + u64::from(d.size));
                d.size != 0 && start < de && ds < end
            });
            if hits {
                unsafe_uses.push(i);
            }
        }
        for i in unsafe_uses {
            uses[i].extent = None;
        }
        Originals {
            keys,
            use_of,
            uses,
            spare,
        }
    }

    /// The index in `uses` of the RVA MethodDef `rid` uses, when it has a body.
    pub(super) fn index_of_rid(&self, rid: u32) -> Option<usize> {
        let &i = self.use_of.get(rid as usize)?;
        ((i as usize) < self.uses.len()).then_some(i as usize)
    }

    /// The index in `uses` of `rva`.
    pub(super) fn index_of_rva(&self, rva: u32) -> Option<usize> {
        self.uses.binary_search_by_key(&rva, |u| u.rva).ok()
    }

    /// Every MethodDef sharing `u`'s RVA is given the same bytes. Remembered per RVA in
    /// `agree`: asking for each sharer in turn would compare sharers × sharers bodies.
    pub(super) fn sharers_agree(
        &self,
        u: &RvaUse,
        replacements: &Replacements<'_>,
        agree: &mut HashMap<usize, bool>,
    ) -> bool {
        *agree.entry(u.sharers.start).or_insert_with(|| {
            let mut sharers = self.keys[u.sharers.clone()].iter();
            let first = sharers.next().and_then(|&k| replacements.get(k as u32));
            first.is_some() && sharers.all(|&k| replacements.get(k as u32) == first)
        })
    }

    /// The original body's file offset and extent when `bytes` can be written over it, else
    /// why not.
    #[inline]
    pub(super) fn fits_in_place(
        &self,
        use_: Option<&RvaUse>,
        rva: u32,
        bytes: &[u8],
        replacements: &Replacements<'_>,
        agree: &mut HashMap<usize, bool>,
    ) -> Result<(usize, usize), Relocate> {
        let u = use_.ok_or(Relocate::UnsafeExtent)?;
        let (at, extent) = u.extent.ok_or(Relocate::UnsafeExtent)?;
        if u.sharers.len() > 1 && !self.sharers_agree(u, replacements, agree) {
            return Err(Relocate::Shared);
        }
        if bytes.len() > extent {
            return Err(Relocate::TooLong);
        }
        let fat = bytes.first().is_some_and(|&h| h & 0x3 == 0x3);
        if fat && !rva.is_multiple_of(4) {
            return Err(Relocate::Misaligned);
        }
        Ok((at, extent))
    }
}
