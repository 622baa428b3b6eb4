//! Byte sizes as people write them (`"12 MiB"`, `"1.5 GB"`, `"4096"`) and as errors print them.

const UNITS: [(&str, f64); 7] = [
    ("B", 1.0),
    ("KiB", 1024.0),
    ("MiB", 1048576.0),
    ("GiB", 1073741824.0),
    ("KB", 1e3),
    ("MB", 1e6),
    ("GB", 1e9),
];

/// A size: a number, optionally with a fraction, then optionally one of the units B, KiB, MiB, GiB, KB, MB, GB.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = (&text[..split], text[split..].trim());
    let scale = if unit.is_empty() {
        1.0
    } else {
        match UNITS.iter().find(|(name, _)| *name == unit) {
            Some(&(_, scale)) => scale,
            None => {
                return Err(format!(
                    "unknown unit `{unit}` in a size; write one of B, KiB, MiB, GiB, KB, MB, GB, e.g. \"12 MiB\""
                ))
            }
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size; write e.g. \"12 MiB\" or \"4096\""))?;
    let bytes = (value * scale).round();
    if !bytes.is_finite() || bytes >= usize::MAX as f64 {
        return Err(format!("`{text}` is larger than this machine can address"));
    }
    Ok(bytes as usize)
}

/// Bytes in the binary unit that keeps the number readable: `512 B`, `12.00 MiB`.
pub fn format_bytes(bytes: usize) -> String {
    let b = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} B")
    } else if b < 1048576.0 {
        format!("{:.2} KiB", b / 1024.0)
    } else if b < 1073741824.0 {
        format!("{:.2} MiB", b / 1048576.0)
    } else {
        format!("{:.2} GiB", b / 1073741824.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_trip_through_their_units() {
        assert_eq!(parse_bytes("12 MiB"), Ok(12 << 20));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("2 MB"), Ok(2_000_000));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("12 mib").is_err());
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("1e99 GiB").is_err());
        assert_eq!(format_bytes(12 << 20), "12.00 MiB");
        assert_eq!(format_bytes(100), "100 B");
    }
}
