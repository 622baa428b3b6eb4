//! What the AMX int8 loop can reach on W2's middle column block (64 rows, 4096 deep, 1024 columns) with nothing
//! but its tile work: the loop nest of the int8 driver (panels of 32 columns → depth blocks of 512 → row tiles of
//! 16 rows) over a B read from beyond L2, as the model's weights are, with no quantisation of A, no scaling of
//! C's columns and no epilogue. It reads the sums out of the tiles five ways:
//! - once per depth block, only storing them, which one activation scale per row allows (ONNX Runtime's dynamic
//!   quantisation);
//! - the same, dequantised into the tile's f32 sums as the kernel does: groups of 512 depths, which
//!   `int8::activation_group` gives this 4096-deep product;
//! - once per activation group of 128 depths (`int8::A_GROUP`, which products under 1024 deep keep: MiniLM's
//!   projections and FFN input), only storing them;
//! - the same, each group's sums dequantised;
//! - once per depth block and dequantised, as the second, but in tiles of 32 rows: two A tiles and the panel's
//!   two B tiles into four sum tiles, 4 `tdpbusd` per 4 tile loads instead of 2 per 3.
//!
//! The second is a ceiling for fuse's int8 kernel at this shape (BENCHMARKS.md sets it against ONNX Runtime int8).
//! Next to it, the kernel itself on the same block as the model runs it ([`kernel_as_w2_runs_it`]): A quantised
//! once for all of a product's column blocks, B a 4096-column pack whose column blocks follow each other, and
//! nothing else running in between (the int8 table below interleaves every kernel, which leaves the AMX kernel
//! well below this). x86-64 only, as AMX is.

use fuse_runtime::cpu::gemm::int8::{Int8Kernel, QuantB};
use fuse_runtime::cpu::gemm::{BView, Strided};

/// W2's middle layer's column block: rows, depth, columns.
const ROWS: usize = 64;
const DEPTH: usize = 4096;
const COLS: usize = 1024;
/// Column blocks of B cycled through (32 MiB), so that each run reads its B from beyond L2, as W2's 25 MB of int8
/// weights are read.
const RING: usize = 8;

/// How the sums leave the tiles.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Readout {
    Block,
    BlockDequantised,
    Group,
    GroupDequantised,
    Block32Dequantised,
}

const READOUTS: [(Readout, &str); 5] = [
    (Readout::Block, "stored once per 512-deep block"),
    (Readout::BlockDequantised, "the same and dequantised"),
    (Readout::Group, "stored per 128-deep group"),
    (Readout::GroupDequantised, "the same and dequantised"),
    (
        Readout::Block32Dequantised,
        "once per 512-deep block, dequantised, tiles of 32 rows",
    ),
];

/// Prints the five rates, and the kernel's, where the process may run AMX-INT8.
pub fn report() {
    if fuse_runtime::cpu::amx::features().int8 {
        x86::report();
        println!(
            "one-thread int8 kernel ({}) on the same block as W2 runs it: {:.0} GOP/s",
            Int8Kernel::best().describe(),
            kernel_as_w2_runs_it()
        );
    }
}

/// GOP/s of the best int8 kernel on W2's middle layer's column blocks in turn, A quantised once before.
fn kernel_as_w2_runs_it() -> f64 {
    const WIDTH: usize = 4 * COLS;
    let a: Vec<f32> = (0..ROWS * DEPTH)
        .map(|i| ((i * 7919) % 97) as f32 * 0.01 - 0.4)
        .collect();
    let w: Vec<f32> = (0..WIDTH * DEPTH)
        .map(|i| ((i * 104_729) % 89) as f32 * 0.01 - 0.4)
        .collect();
    // B = Wᵀ: a linear layer's weight, [out, in].
    let view = BView {
        offset: 0,
        rs: 1,
        cs: DEPTH,
        k: DEPTH,
        n: WIDTH,
    };
    let pack = QuantB::new(&w, view)
        .expect("W2's middle layer fits in memory")
        .expect("its view lies inside the weight");
    let mut buf = vec![0.0f32; pack.quantised_len(ROWS)];
    let quantised = pack
        .quantise_rows(&a, (0, DEPTH, 1), ROWS, &mut buf)
        .expect("A's rows lie inside `a` and `buf` holds them");
    let mut c = vec![0.0f32; ROWS * WIDTH];
    let mut turn = 0;
    let best = super::best_seconds(|| {
        turn = (turn + 1) % (WIDTH / COLS);
        let col0 = turn * COLS;
        // SAFETY: `quantised` holds A's rows for this pack; C is ROWS × WIDTH, and the block's columns lie in it.
        unsafe {
            pack.gemm_quantised(
                quantised,
                0,
                (ROWS, DEPTH, COLS),
                col0,
                Strided::new(c.as_mut_ptr().add(col0), WIDTH as isize, 1),
            )
        }
    });
    2.0 * (ROWS * DEPTH * COLS) as f64 / best / 1e9
}

mod x86 {
    use std::arch::asm;
    use std::arch::x86_64::*;

    use fuse_runtime::cpu::amx::Configured;

    use super::{Readout, COLS, DEPTH, READOUTS, RING, ROWS};

    /// Depth of a block, and steps of 64 depths in it and in a group.
    const BLOCK: usize = 512;
    const BLOCK_STEPS: usize = BLOCK / 64;
    const GROUP_STEPS: usize = 2;
    /// Bytes between a panel's rows of quads (32 columns of 4 bytes), and per step of 16 of them.
    const PANEL_ROW: usize = 128;
    const PANEL_STEP: usize = 16 * PANEL_ROW;

    /// A 64-byte aligned region of `bytes` bytes, byte i set to `fill(i)`, inside a vector that owns it.
    struct Aligned {
        store: Vec<u8>,
        start: usize,
    }

    impl Aligned {
        fn new(bytes: usize, fill: impl Fn(usize) -> u8) -> Aligned {
            let mut store = vec![0u8; bytes + 64];
            let start = store.as_ptr().align_offset(64);
            for (i, v) in store[start..start + bytes].iter_mut().enumerate() {
                *v = fill(i);
            }
            Aligned { store, start }
        }

        fn ptr(&mut self) -> *mut u8 {
            self.store[self.start..].as_mut_ptr()
        }
    }

    /// The operands of one run: A's quantised rows, B's ring of packed column blocks, two blocks of stored
    /// sums, the row tiles' f32 sums, and a panel's column sums (the dequantisation makes each row's scale and
    /// zero point from the row and group instead of loading them).
    struct Operands {
        a: Aligned,
        b: Aligned,
        ints: Aligned,
        acc: Aligned,
        col_sums: [f32; 32],
    }

    pub fn report() {
        let mut ops = Operands {
            a: Aligned::new(ROWS * DEPTH, |i| (i % 251) as u8),
            b: Aligned::new(RING * COLS * DEPTH, |i| (i % 127) as u8),
            ints: Aligned::new(2 * 16 * 32 * 4, |_| 0),
            acc: Aligned::new(ROWS * 32 * 4, |_| 0),
            col_sums: std::array::from_fn(|j| j as f32),
        };
        let gop = 2.0 * (ROWS * DEPTH * COLS) as f64 / 1e9;
        print!("one-thread AMX int8 loop ceiling, W2 middle block {ROWS}×{DEPTH}×{COLS}, B from beyond L2 (GOP/s):");
        for (readout, what) in READOUTS {
            let mut turn = 0;
            let best = super::super::best_seconds(|| {
                turn = (turn + 1) % RING;
                // SAFETY: `features` reported AMX-INT8 (the caller's check); the run stays inside the operands.
                unsafe { run(readout, &mut ops, turn) }
            });
            print!(" {what} {:.0};", gop / best);
        }
        println!();
    }

    /// One pass of the loop nest over column block `turn` of the ring.
    ///
    /// # Safety
    /// The process may run AMX-INT8.
    #[target_feature(enable = "avx512f")]
    unsafe fn run(readout: Readout, ops: &mut Operands, turn: usize) -> f32 {
        let (a, ints, acc) = (ops.a.ptr(), ops.ints.ptr(), ops.acc.ptr() as *mut f32);
        let b = ops.b.ptr().wrapping_add(turn * COLS * DEPTH);
        let col_sums = ops.col_sums.as_ptr();
        // SAFETY: every tile load stays inside A's rows and B's column block, every store inside `ints` and
        // `acc`; the tiles are configured for the whole pass.
        unsafe {
            let _tiles = Configured::full_tiles();
            for p in 0..COLS / 32 {
                for d in 0..DEPTH / BLOCK {
                    let block = b.add((p * DEPTH + d * BLOCK) * 32);
                    if readout == Readout::Block32Dequantised {
                        for t in 0..ROWS / 32 {
                            let tile = |half: usize| Tile {
                                a: a.add((t * 32 + half * 16) * DEPTH + d * BLOCK),
                                b: block,
                                ints: ints.add(half * 16 * 32 * 4),
                                acc: acc.add((t * 32 + half * 16) * 32),
                                col_sums,
                            };
                            whole_block_32(&tile(0), &tile(1));
                        }
                        continue;
                    }
                    for t in 0..ROWS / 16 {
                        let a_t = a.add(t * 16 * DEPTH + d * BLOCK);
                        let tile = Tile {
                            a: a_t,
                            b: block,
                            ints,
                            acc: acc.add(t * 16 * 32),
                            col_sums,
                        };
                        match readout {
                            Readout::Block => tile.whole_block(false),
                            Readout::BlockDequantised => tile.whole_block(true),
                            Readout::Group => tile.groups(false),
                            Readout::GroupDequantised => tile.groups(true),
                            Readout::Block32Dequantised => unreachable!("run in tiles of 32 rows"),
                        }
                    }
                }
            }
            *acc
        }
    }

    /// One row tile over one depth block.
    struct Tile {
        a: *const u8,
        b: *const u8,
        ints: *mut u8,
        acc: *mut f32,
        col_sums: *const f32,
    }

    /// One step (64 depths) of A's 16 rows times the panel's two halves into sum tiles `$c0`, `$c1`.
    macro_rules! step {
        ($c0:literal, $c1:literal, $a:expr, $b:expr) => {
            asm!(
                "tileloadd tmm6, [{b} + {bs}*1]",
                "tileloadd tmm7, [{b} + {bs}*1 + 64]",
                "tileloadd tmm4, [{a} + {as_}*1]",
                concat!("tdpbusd ", $c0, ", tmm4, tmm6"),
                concat!("tdpbusd ", $c1, ", tmm4, tmm7"),
                b = in(reg) $b, bs = in(reg) PANEL_ROW, a = in(reg) $a, as_ = in(reg) DEPTH,
                options(nostack, readonly),
            )
        };
    }

    /// Zeroes sum tiles `$c0`, `$c1`.
    macro_rules! zero {
        ($c0:literal, $c1:literal) => {
            asm!(
                concat!("tilezero ", $c0),
                concat!("tilezero ", $c1),
                options(nostack, nomem)
            )
        };
    }

    /// Stores sum tiles `$c0`, `$c1` as 16 rows of 32 i32 at `$to`.
    macro_rules! store {
        ($c0:literal, $c1:literal, $to:expr) => {
            asm!(
                concat!("tilestored [{s} + {rs}*1], ", $c0),
                concat!("tilestored [{s} + {rs}*1 + 64], ", $c1),
                s = in(reg) $to, rs = in(reg) PANEL_ROW, options(nostack),
            )
        };
    }

    /// [`Tile::whole_block`] dequantised, over the 32 rows of `top` and `bottom` (each with its own A rows,
    /// stored sums and f32 sums, the same panel): each step loads the panel's two B tiles once for both.
    ///
    /// # Safety
    /// Tiles configured; the pointers hold the block.
    #[target_feature(enable = "avx512f")]
    unsafe fn whole_block_32(top: &Tile, bottom: &Tile) {
        // SAFETY: the caller's contract.
        unsafe {
            zero!("tmm0", "tmm1");
            zero!("tmm2", "tmm3");
            for s in 0..BLOCK_STEPS {
                asm!(
                    "tileloadd tmm6, [{b} + {bs}*1]",
                    "tileloadd tmm7, [{b} + {bs}*1 + 64]",
                    "tileloadd tmm4, [{a0} + {as_}*1]",
                    "tdpbusd tmm0, tmm4, tmm6",
                    "tdpbusd tmm1, tmm4, tmm7",
                    "tileloadd tmm5, [{a1} + {as_}*1]",
                    "tdpbusd tmm2, tmm5, tmm6",
                    "tdpbusd tmm3, tmm5, tmm7",
                    b = in(reg) top.b.add(s * PANEL_STEP), bs = in(reg) PANEL_ROW,
                    a0 = in(reg) top.a.add(64 * s), a1 = in(reg) bottom.a.add(64 * s), as_ = in(reg) DEPTH,
                    options(nostack, readonly),
                );
            }
            store!("tmm0", "tmm1", top.ints);
            store!("tmm2", "tmm3", bottom.ints);
            top.dequantise(top.ints, 0);
            bottom.dequantise(bottom.ints, 0);
        }
    }

    impl Tile {
        /// All steps of the block into one pair of sum tiles, stored once and, when `dequantise`, dequantised
        /// (one group of 512: the kernel's order, which has no next group to overlap).
        ///
        /// # Safety
        /// Tiles configured; the pointers hold the block.
        #[target_feature(enable = "avx512f")]
        unsafe fn whole_block(&self, dequantise: bool) {
            // SAFETY: the caller's contract.
            unsafe {
                zero!("tmm0", "tmm1");
                for s in 0..BLOCK_STEPS {
                    step!(
                        "tmm0",
                        "tmm1",
                        self.a.add(64 * s),
                        self.b.add(s * PANEL_STEP)
                    );
                }
                store!("tmm0", "tmm1", self.ints);
                if dequantise {
                    self.dequantise(self.ints, 0);
                }
            }
        }

        /// The block's groups into alternating pairs of sum tiles, each pair stored as its group ends and, when
        /// `dequantise`, dequantised after the next group's products are issued (the kernel's order).
        ///
        /// # Safety
        /// Tiles configured; the pointers hold the block.
        #[target_feature(enable = "avx512f")]
        unsafe fn groups(&self, dequantise: bool) {
            let groups = BLOCK_STEPS / GROUP_STEPS;
            let block = |g: usize| self.ints.wrapping_add(g % 2 * 16 * 32 * 4);
            // SAFETY: the caller's contract.
            unsafe {
                for g in 0..groups {
                    let s0 = g * GROUP_STEPS;
                    let (a, b) = (self.a.add(64 * s0), self.b.add(s0 * PANEL_STEP));
                    if g % 2 == 0 {
                        zero!("tmm0", "tmm1");
                        step!("tmm0", "tmm1", a, b);
                        step!("tmm0", "tmm1", a.add(64), b.add(PANEL_STEP));
                    } else {
                        zero!("tmm2", "tmm3");
                        step!("tmm2", "tmm3", a, b);
                        step!("tmm2", "tmm3", a.add(64), b.add(PANEL_STEP));
                    }
                    if dequantise && g > 0 {
                        self.dequantise(block(g - 1), g - 1);
                    }
                    if g % 2 == 0 {
                        store!("tmm0", "tmm1", block(g));
                    } else {
                        store!("tmm2", "tmm3", block(g));
                    }
                }
                if dequantise {
                    self.dequantise(block(groups - 1), groups - 1);
                }
            }
        }

        /// The kernel's dequantisation of one group's stored sums into the f32 sums:
        /// `acc += (sum − zero · col_sum) · scale`, with a scale and zero point per row.
        ///
        /// # Safety
        /// `ints` holds 16 rows of 32 i32, aligned.
        #[target_feature(enable = "avx512f")]
        unsafe fn dequantise(&self, ints: *const u8, g: usize) {
            // SAFETY: the caller's contract; `acc` holds the tile's 16 rows of 32 f32, aligned.
            unsafe {
                for r in 0..16 {
                    let (scale, zero) = (
                        _mm512_set1_ps(1e-3 * (r + g) as f32),
                        _mm512_set1_ps(r as f32),
                    );
                    for h in 0..2 {
                        let at = r * 32 + 16 * h;
                        let sums =
                            _mm512_cvtepi32_ps(_mm512_load_si512(ints.add(4 * at) as *const _));
                        let t = _mm512_fnmadd_ps(
                            zero,
                            _mm512_loadu_ps(self.col_sums.add(16 * h)),
                            sums,
                        );
                        let out = self.acc.add(at);
                        _mm512_store_ps(out, _mm512_fmadd_ps(t, scale, _mm512_load_ps(out)));
                    }
                }
            }
        }
    }
}
