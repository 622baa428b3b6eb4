//! Intel AMX (Advanced Matrix Extensions): whether this process may use it, and the tile configuration the GEMM
//! kernels load.
//!
//! AMX adds eight tile registers (`tmm0`–`tmm7`, each up to 16 rows of 64 bytes) and instructions that multiply
//! two of them into a third: `tdpbf16ps` (16×32 bf16 by 32×16 bf16 into 16×16 f32, the pairs of depths laid out
//! as `vdpbf16ps` reads them) and `tdpbusd` (u8 by s8 into i32, groups of four depths as `vpdpbusd`).
//!
//! - **Permission.** Linux leaves AMX's 8 KiB of tile state off for a process until it asks for it
//!   (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`), so that context switches of other processes need
//!   not save it; a tile instruction before that faults. [`features`] asks once, and reports no AMX when the
//!   kernel refuses (or on another OS), so no tile instruction ever runs without it.
//! - **Instructions.** Stable Rust has no AMX intrinsics or target features yet, so the kernels write the
//!   instructions with `asm!`, naming tile registers the compiler never allocates.

/// Which AMX instructions this process may run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// `tdpbf16ps`.
    pub bf16: bool,
    /// `tdpbusd` and its signed variants.
    pub int8: bool,
}

/// What the CPU has and the OS allows, asked once per process.
pub fn features() -> Features {
    static FEATURES: std::sync::OnceLock<Features> = std::sync::OnceLock::new();
    *FEATURES.get_or_init(detect)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn detect() -> Features {
    use std::arch::x86_64::__cpuid_count;
    // CPUID exists on every x86-64 processor; leaf 7 is asked only where leaf 0 reports it.
    if __cpuid_count(0, 0).eax < 7 {
        return Features::default();
    }
    let leaf7 = __cpuid_count(7, 0);
    let bit = |n: u32| leaf7.edx & (1 << n) != 0;
    let (tile, bf16, int8) = (bit(24), bit(22), bit(25));
    if !tile || !(bf16 || int8) || !request_tile_data() {
        return Features::default();
    }
    Features { bf16, int8 }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect() -> Features {
    Features::default()
}

/// Asks Linux for the tile data state; whether it granted it. A kernel without AMX support (before 5.16) or one
/// that disabled it answers with an error.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request_tile_data() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl with this request only changes which state components the process may use.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

/// Bytes per row of a tile register.
pub const ROW_BYTES: usize = 64;

/// Rows of a tile register.
pub const ROWS: usize = 16;

/// The `ldtilecfg` operand: palette 1, every one of the eight tiles 16 rows of 64 bytes (the most they hold).
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    bytes_per_row: [u16; 16],
    rows: [u8; 16],
}

const FULL_TILES: TileConfig = {
    let mut config = TileConfig {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        bytes_per_row: [0; 16],
        rows: [0; 16],
    };
    let mut t = 0;
    while t < 8 {
        config.bytes_per_row[t] = ROW_BYTES as u16;
        config.rows[t] = ROWS as u8;
        t += 1;
    }
    config
};

/// The tile registers configured as full tiles on this thread, until dropped (`tilerelease`, which also lets the
/// OS skip saving them on a context switch).
pub struct Configured(());

impl Configured {
    /// # Safety
    /// [`features`] reported the instructions the caller runs.
    #[cfg(target_arch = "x86_64")]
    pub unsafe fn full_tiles() -> Configured {
        // SAFETY: the process has permission (the caller's contract); the operand is a valid palette-1 config.
        unsafe {
            std::arch::asm!("ldtilecfg [{0}]", in(reg) &FULL_TILES, options(nostack, readonly));
        }
        Configured(())
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for Configured {
    fn drop(&mut self) {
        // SAFETY: only a configured thread holds a `Configured`, so the process may run tile instructions.
        unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// Bytes from one row of a packed panel (a pair or a quad of depths of its 32 columns, 4 bytes a column) to the
/// next; also from one row of a tile's sums (32 columns of f32 or i32) to the next.
pub const PANEL_ROW_BYTES: usize = 128;

/// Depth steps of 4 bytes per tile product: 16 pairs (bf16) or 16 quads (int8) fill a row of A's tile.
pub const STEP: usize = ROW_BYTES / 4;
