//! The PTX inside an nvcc fatbin, as `cuModuleLoadData` receives it.
//!
//! Layout (read off nvcc 13.0's output; little-endian):
//! - file header, 16 bytes: magic `0xBA55ED50`, u16 version, u16 header size, u64 size of the entries;
//! - each entry: a header (u16 kind: 1 PTX, 2 ELF/SASS; u16 version; u32 header size; u64 payload size;
//!   u32 compressed size; u32; u16 minor, u16 major (the ISA version); u32 arch (e.g. 90); u32 name offset;
//!   u32 name length; u64 flags; u64; u64 uncompressed size), then the payload.
//! - flag `0x8000`: the payload is a zstd frame (nvcc 13 compresses PTX by default); `0x2000`: LZ4 (older
//!   nvcc), refused by name.
//!
//! The simulator runs PTX only, so the entry taken is the PTX of the highest arch ≤ 90, as a real sm_90 driver
//! would JIT it when it has no SASS of its own.

use std::io::Read;

/// `__fatBinC_Wrapper_t`'s magic: a host-side struct whose second word points at the fatbin.
pub const WRAPPER_MAGIC: u32 = 0x466243B1;
pub const FATBIN_MAGIC: u32 = 0xBA55ED50;
pub const FILE_HEADER_BYTES: usize = 16;
/// The arch the simulated device reports.
pub const DEVICE_ARCH: u32 = 90;

const KIND_PTX: u16 = 1;
const FLAG_ZSTD: u64 = 0x8000;
const FLAG_LZ4: u64 = 0x2000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FatbinError {
    #[error("the fatbin is truncated: {0}")]
    Truncated(String),
    #[error(
        "the fatbin has no PTX for compute capability <= {DEVICE_ARCH} (PTX archs present: {0:?}); the simulator \
         cannot run SASS"
    )]
    NoPtx(Vec<u32>),
    #[error("fatbin PTX entry: {0}")]
    Compression(String),
    #[error("fatbin PTX entry is not text: {0}")]
    NotText(String),
}

fn u16_at(d: &[u8], at: usize) -> Result<u16, FatbinError> {
    d.get(at..at + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .ok_or_else(|| FatbinError::Truncated(format!("no u16 at byte {at}")))
}

fn u32_at(d: &[u8], at: usize) -> Result<u32, FatbinError> {
    d.get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| FatbinError::Truncated(format!("no u32 at byte {at}")))
}

fn u64_at(d: &[u8], at: usize) -> Result<u64, FatbinError> {
    Ok(u64::from(u32_at(d, at)?) | (u64::from(u32_at(d, at + 4)?) << 32))
}

/// The total length of a fatbin from its 16-byte file header, or `None` when `header` is not one.
pub fn total_len(header: &[u8; FILE_HEADER_BYTES]) -> Option<usize> {
    let magic = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    if magic != FATBIN_MAGIC {
        return None;
    }
    let header_size = u16::from_le_bytes([header[6], header[7]]) as usize;
    let mut size = [0u8; 8];
    size.copy_from_slice(&header[8..16]);
    Some(header_size + u64::from_le_bytes(size) as usize)
}

struct Entry<'a> {
    arch: u32,
    payload: &'a [u8],
    flags: u64,
    compressed_size: usize,
    uncompressed_size: usize,
}

fn ptx_entries(fatbin: &[u8]) -> Result<Vec<Entry<'_>>, FatbinError> {
    let header_size = u16_at(fatbin, 6)? as usize;
    let end = header_size + u64_at(fatbin, 8)? as usize;
    if end > fatbin.len() {
        return Err(FatbinError::Truncated(format!(
            "{end} bytes announced, {} present",
            fatbin.len()
        )));
    }
    let mut at = header_size;
    let mut entries = Vec::new();
    while at < end {
        let kind = u16_at(fatbin, at)?;
        let entry_header = u32_at(fatbin, at + 4)? as usize;
        let payload_size = u64_at(fatbin, at + 8)? as usize;
        let start = at + entry_header;
        let payload = fatbin.get(start..start + payload_size).ok_or_else(|| {
            FatbinError::Truncated(format!("entry at byte {at} runs past the end"))
        })?;
        if kind == KIND_PTX {
            entries.push(Entry {
                arch: u32_at(fatbin, at + 28)?,
                payload,
                flags: u64_at(fatbin, at + 40)?,
                compressed_size: u32_at(fatbin, at + 16)? as usize,
                uncompressed_size: u64_at(fatbin, at + 56)? as usize,
            });
        }
        at = start + payload_size;
    }
    Ok(entries)
}

/// The PTX text of the highest arch ≤ [`DEVICE_ARCH`] in `fatbin` (which starts with the file header).
pub fn extract_ptx(fatbin: &[u8]) -> Result<String, FatbinError> {
    let entries = ptx_entries(fatbin)?;
    let best = entries
        .iter()
        .filter(|e| e.arch <= DEVICE_ARCH)
        .max_by_key(|e| e.arch)
        .ok_or_else(|| FatbinError::NoPtx(entries.iter().map(|e| e.arch).collect()))?;
    let bytes = if best.flags & FLAG_ZSTD != 0 {
        let frame = best.payload.get(..best.compressed_size).ok_or_else(|| {
            FatbinError::Compression("compressed size exceeds the payload".into())
        })?;
        let mut source = frame;
        let mut decoder = ruzstd::decoding::StreamingDecoder::new(&mut source)
            .map_err(|e| FatbinError::Compression(format!("zstd: {e}")))?;
        let mut out = Vec::with_capacity(best.uncompressed_size);
        decoder
            .read_to_end(&mut out)
            .map_err(|e| FatbinError::Compression(format!("zstd: {e}")))?;
        out
    } else if best.flags & FLAG_LZ4 != 0 {
        return Err(FatbinError::Compression(
            "LZ4-compressed (an older nvcc); rebuild with nvcc 13 or pass -no-compress".into(),
        ));
    } else {
        best.payload.to_vec()
    };
    // The text is NUL-padded to the payload's alignment.
    let text = bytes.split(|&b| b == 0).next().unwrap_or(&[]);
    String::from_utf8(text.to_vec()).map_err(|e| FatbinError::NotText(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fatbin with the layout above: one ELF entry and PTX entries for the given (arch, flags, payload).
    fn fatbin(ptx: &[(u32, u64, Vec<u8>, usize)]) -> Vec<u8> {
        let mut entries = Vec::new();
        let mut entry = |kind: u16, arch: u32, flags: u64, payload: &[u8], uncompressed: usize| {
            let mut h = vec![0u8; 64];
            h[0..2].copy_from_slice(&kind.to_le_bytes());
            h[2..4].copy_from_slice(&0x101u16.to_le_bytes());
            h[4..8].copy_from_slice(&64u32.to_le_bytes());
            h[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
            h[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
            h[28..32].copy_from_slice(&arch.to_le_bytes());
            h[40..48].copy_from_slice(&flags.to_le_bytes());
            h[56..64].copy_from_slice(&(uncompressed as u64).to_le_bytes());
            entries.extend(h);
            entries.extend(payload);
        };
        entry(2, 90, 0x11, b"\x7fELF not run", 0);
        for (arch, flags, payload, uncompressed) in ptx {
            entry(KIND_PTX, *arch, *flags, payload, *uncompressed);
        }
        let mut out = Vec::new();
        out.extend(FATBIN_MAGIC.to_le_bytes());
        out.extend(1u16.to_le_bytes());
        out.extend(16u16.to_le_bytes());
        out.extend((entries.len() as u64).to_le_bytes());
        out.extend(entries);
        out
    }

    #[test]
    fn the_highest_ptx_not_above_sm_90_is_taken() {
        let f = fatbin(&[
            (80, 0x11, b".version 8.0 // sm_80\0\0\0".to_vec(), 0),
            (90, 0x11, b".version 9.0 // sm_90\0".to_vec(), 0),
            (100, 0x11, b".version 9.0 // sm_100\0".to_vec(), 0),
        ]);
        let header: [u8; 16] = f[..16].try_into().expect("16 bytes");
        assert_eq!(total_len(&header), Some(f.len()));
        assert_eq!(extract_ptx(&f).expect("PTX"), ".version 9.0 // sm_90");
        let only_newer = fatbin(&[(100, 0x11, b"x\0".to_vec(), 0)]);
        assert_eq!(extract_ptx(&only_newer), Err(FatbinError::NoPtx(vec![100])));
        let truncated = &f[..f.len() - 3];
        assert!(matches!(
            extract_ptx(truncated),
            Err(FatbinError::Truncated(_))
        ));
    }

    #[test]
    fn a_zstd_compressed_entry_is_decompressed() {
        // A zstd frame holding "hello ptx" in one raw block: magic, frame header (single segment, 1-byte
        // content size), block header (last, raw, 9 bytes), the bytes.
        let text = b"hello ptx";
        let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0x20, text.len() as u8];
        let block_header = 1u32 | ((text.len() as u32) << 3);
        frame.extend(&block_header.to_le_bytes()[..3]);
        frame.extend(text);
        let f = fatbin(&[(90, 0x8011, frame, text.len())]);
        assert_eq!(extract_ptx(&f).expect("decompressed"), "hello ptx");
        let lz4 = fatbin(&[(90, 0x2011, b"??".to_vec(), 2)]);
        assert!(matches!(
            extract_ptx(&lz4),
            Err(FatbinError::Compression(_))
        ));
    }
}
