//! Bounds-checked little-endian reads at a file offset.

pub fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

pub fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

pub fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    let lo = le_u32(b, at)?;
    let hi = le_u32(b, at.checked_add(4)?)?;
    Some(u64::from(lo) | (u64::from(hi) << 32))
}
