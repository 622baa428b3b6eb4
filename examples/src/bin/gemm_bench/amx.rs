//! One thread's AMX peaks: loops of `tdpbusd` (int8) and `tdpbf16ps` (bf16) on four independent sum tiles, the
//! operand tiles never reloaded, so what the tile unit computes when nothing else holds it back.

/// Steps (four tile products each) per timing.
const STEPS: usize = 200_000;

/// (int8 GOP/s of `tdpbusd`, bf16 GFLOP/s of `tdpbf16ps`) where the process may run AMX, each `None` where not.
pub fn peaks() -> (Option<f64>, Option<f64>) {
    #[cfg(target_arch = "x86_64")]
    {
        let amx = fuse_runtime::cpu::amx::features();
        // Per step, four 16×16 products over 64 bytes of depth (64 int8 or 32 bf16 values), 2 ops a multiply-add.
        let int8: [super::PeakRun<()>; 1] = [("tdpbusd", 4 * 16 * 16 * 64 * 2, x86::tdpbusd)];
        let bf16: [super::PeakRun<()>; 1] = [("tdpbf16ps", 4 * 16 * 16 * 32 * 2, x86::tdpbf16ps)];
        // SAFETY: each loop runs only where `features` reports its instructions.
        let rate = |on: bool, runs: &[super::PeakRun<()>]| {
            on.then(|| unsafe { super::loop_rates(STEPS, runs) }[0].1)
        };
        (rate(amx.int8, &int8), rate(amx.bf16, &bf16))
    }
    #[cfg(not(target_arch = "x86_64"))]
    (None, None)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::asm;

    use fuse_runtime::cpu::amx::Configured;

    macro_rules! peak_loop {
        ($name:ident, $product:literal) => {
            /// # Safety
            /// The process may run the product (`amx::features`).
            pub unsafe fn $name(steps: usize) {
                // SAFETY: the caller's contract; every tile is zeroed before it is read.
                unsafe {
                    let _tiles = Configured::full_tiles();
                    asm!(
                        "tilezero tmm0",
                        "tilezero tmm1",
                        "tilezero tmm2",
                        "tilezero tmm3",
                        "tilezero tmm4",
                        "tilezero tmm5",
                        "tilezero tmm6",
                        "tilezero tmm7",
                        options(nostack, nomem)
                    );
                    for _ in 0..steps {
                        asm!(
                            concat!($product, " tmm0, tmm4, tmm6"),
                            concat!($product, " tmm1, tmm4, tmm7"),
                            concat!($product, " tmm2, tmm5, tmm6"),
                            concat!($product, " tmm3, tmm5, tmm7"),
                            options(nostack, nomem)
                        );
                    }
                }
            }
        };
    }

    peak_loop!(tdpbusd, "tdpbusd");
    peak_loop!(tdpbf16ps, "tdpbf16ps");
}
