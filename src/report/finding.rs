//! What text and Markdown reports show of one finding besides its message: the EH table with
//! the clause at fault marked, and the arrivals where stack depths disagree.

use crate::corpus::{ClauseRow, Finding};

/// `IL_0000 to IL_000b`, as the disassembler writes a range.
pub(super) fn range(start: u32, end: u64) -> String {
    format!("IL_{start:04x} to IL_{end:04x}")
}

/// How a clause row is marked: `>` the clause at fault, `*` the other clause involved.
pub(super) fn mark(f: &Finding, c: &ClauseRow) -> &'static str {
    if f.clause == Some(c.index) {
        ">"
    } else if f.other_clause == Some(c.index) {
        "*"
    } else {
        " "
    }
}

/// The cells of a clause row: index, kind, try, handler, filter or class.
pub(super) fn clause_cells(c: &ClauseRow) -> [String; 5] {
    let last = match (&c.class, c.filter_start) {
        (Some(class), _) => class.clone(),
        (None, Some(filter)) => format!("filter IL_{filter:04x}"),
        (None, None) if c.kind == "invalid" => format!("flags {:#x}", c.flags),
        (None, None) => String::new(),
    };
    [
        c.index.to_string(),
        c.kind.to_string(),
        format!("try {}", range(c.try_start, c.try_end)),
        format!("handler {}", range(c.handler_start, c.handler_end)),
        last,
    ]
}

/// The legend of a clause table for `f`.
pub(super) fn clause_legend(f: &Finding) -> &'static str {
    match (f.clause, f.other_clause) {
        (Some(_), Some(_)) => "EH table (> the clause at fault, * the other clause involved):",
        (Some(_), None) => "EH table (> the clause at fault):",
        _ => "EH table:",
    }
}

/// Rows of cells as lines, each cell padded to its column's width (the last one not); the
/// columns `right` lists are aligned right (counts).
pub(super) fn columns(rows: &[Vec<String>], indent: &str, right: &[usize]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|k| {
            rows.iter()
                .filter_map(|r| r.get(k))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::from(indent);
        for (k, cell) in row.iter().enumerate() {
            let pad = widths[k] - cell.chars().count();
            if right.contains(&k) {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                if k + 1 < row.len() {
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            if k + 1 < row.len() {
                line.push_str("  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The finding's EH table and arrivals as text lines under its window.
pub(super) fn detail_text(f: &Finding) -> String {
    let mut s = String::new();
    if !f.clauses.is_empty() {
        s.push_str("    ");
        s.push_str(clause_legend(f));
        s.push('\n');
        let rows: Vec<Vec<String>> = f
            .clauses
            .iter()
            .map(|c| {
                let mut row = vec![mark(f, c).to_string()];
                row.extend(clause_cells(c));
                row
            })
            .collect();
        s.push_str(&columns(&rows, "    ", &[1]));
        if f.clauses_omitted > 0 {
            s.push_str(&format!(
                "    … and {} more clauses not shown\n",
                f.clauses_omitted
            ));
        }
    }
    if !f.arrivals.is_empty() {
        s.push_str(&format!("    arrivals at IL_{:04x}:\n", f.offset));
        let rows: Vec<Vec<String>> = f
            .arrivals
            .iter()
            .map(|a| {
                vec![
                    format!("depth {}", a.depth),
                    a.kind.as_str().to_string(),
                    a.instruction.clone(),
                ]
            })
            .collect();
        s.push_str(&columns(&rows, "      ", &[]));
        if f.more_arrivals > 0 {
            s.push_str(&format!("      … and {} more\n", f.more_arrivals));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_trim() {
        let rows = vec![
            vec![">".to_string(), "0".into(), "catch".into(), "X".into()],
            vec![
                " ".to_string(),
                "12".into(),
                "finally".into(),
                String::new(),
            ],
        ];
        assert_eq!(
            columns(&rows, "  ", &[1]),
            "  >   0  catch    X\n     12  finally\n"
        );
    }
}
