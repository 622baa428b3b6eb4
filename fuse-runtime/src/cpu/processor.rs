//! What this processor is: its model name, its data-cache sizes and which vector instruction sets it runs.
//!
//! The GEMM sizes its blocks from the cache sizes (`super::gemm`), and every benchmark prints them, so a figure
//! always says which machine produced it. On x86 they come from CPUID: the brand string (leaves
//! 0x8000_0002–4) and the deterministic cache parameters (leaf 4 on Intel, 0x8000_001D on AMD, whose older
//! leaves 0x8000_0005/6 back it up). Elsewhere, or where a hypervisor hides those leaves, Linux's
//! `/sys/devices/system/cpu/cpu0/cache` answers, and failing that the typical sizes below.

use std::fmt;
use std::sync::OnceLock;

/// Sizes assumed when nothing reports them: a common x86-64 core (32 KiB L1d, 512 KiB L2, 8 MiB L3).
const FALLBACK: Caches = Caches {
    l1d: 32 << 10,
    l2: 512 << 10,
    l3: 8 << 20,
};

/// Data-cache sizes in bytes: L1d and L2 as one core sees them, L3 as a whole (0 when there is none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caches {
    pub l1d: usize,
    pub l2: usize,
    pub l3: usize,
}

/// Where the cache sizes came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheSource {
    /// CPUID's deterministic cache leaves.
    Cpuid,
    /// AMD's legacy leaves 0x8000_0005/6.
    CpuidLegacy,
    /// Linux sysfs.
    Sysfs,
    /// Nothing reported them: [`FALLBACK`]'s typical sizes.
    Assumed,
}

/// The processor this process runs on.
#[derive(Clone, Debug)]
pub struct Processor {
    /// The CPU model as the processor names itself (CPUID brand string), or the architecture's name.
    pub model: String,
    pub caches: Caches,
    pub cache_source: CacheSource,
    /// AVX2 and FMA (256-bit vectors).
    pub avx2_fma: bool,
    /// AVX-512F and VL (512-bit vectors).
    pub avx512: bool,
    /// The core executes each 512-bit FMA as two 256-bit halves, so AVX-512 has AVX2's FMA peak (AMD before
    /// Zen 5, by CPUID family); the GEMM then uses its AVX2 tile (`super::gemm::Backend::best`).
    pub splits_512_bit_fma: bool,
    /// The core issues AVX-512 BF16's `vdpbf16ps` (two multiply-adds a lane) at half the rate of its FMAs, so a
    /// bf16 product widened to f32 runs faster on FMAs (Intel's cores: one thread's `vdpbf16ps` peak 87 GFLOP/s
    /// against 177 for its FMAs on one, 110 against about 240 on another; AMD's Zen 4 has it at twice its FMAs'
    /// rate; `super::gemm::bf16::Bf16Kernel::best`).
    pub half_rate_dpbf16: bool,
    /// The core's L2 prefetch hints (`prefetcht1`), asked a depth block at a time, do not keep a GEMM's weights
    /// streaming from memory, so the int8 and bf16 tiles ask L1 for B's lines a block ahead, a step's lines per
    /// step (AMD's cores, by vendor; `super::gemm::tile::b_ahead`). On a Zen 5 core W2's bf16 middle product
    /// (32 MiB of weights) ran 6.3–6.4 ms on one thread with the L2 hints, 6.2–6.8 with none and 4.4–4.6 with
    /// the L1 hints (BENCHMARKS.md, forty-second run); Intel's cores keep the L2 hints they were measured with.
    pub prefetch_b_into_l1: bool,
}

impl Processor {
    /// Detected once per process.
    pub fn get() -> &'static Processor {
        static PROCESSOR: OnceLock<Processor> = OnceLock::new();
        PROCESSOR.get_or_init(detect)
    }

    /// One line for benchmark output, e.g. `AMD EPYC 7B13; L1d 32 KiB, L2 512 KiB, L3 32 MiB (cpuid); AVX2+FMA`.
    pub fn summary(&self) -> String {
        let isa = match (self.avx512, self.avx2_fma) {
            (true, _) if self.splits_512_bit_fma => "AVX-512 (FMAs in 256-bit halves), AVX2+FMA",
            (true, _) => "AVX-512, AVX2+FMA",
            (false, true) => "AVX2+FMA",
            (false, false) => "no AVX2",
        };
        let source = match self.cache_source {
            CacheSource::Cpuid => "cpuid",
            CacheSource::CpuidLegacy => "cpuid legacy leaves",
            CacheSource::Sysfs => "sysfs",
            CacheSource::Assumed => "assumed",
        };
        format!("{}; {} ({source}); {isa}", self.model, self.caches)
    }
}

impl fmt::Display for Caches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "L1d {}, L2 {}, L3 {}",
            bytes(self.l1d),
            bytes(self.l2),
            bytes(self.l3)
        )
    }
}

fn bytes(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{} KiB", n >> 10)
    }
}

fn detect() -> Processor {
    let (cpuid_caches, model, cores) = x86::detect();
    let (caches, cache_source) = match cpuid_caches {
        Some(found) => found,
        None => match sysfs_caches() {
            Some(caches) => (caches, CacheSource::Sysfs),
            None => (FALLBACK, CacheSource::Assumed),
        },
    };
    Processor {
        model: model.unwrap_or_else(|| std::env::consts::ARCH.to_string()),
        caches,
        cache_source,
        avx2_fma: super::math::dispatch_avx2(),
        avx512: super::math::dispatch_avx512(),
        splits_512_bit_fma: cores.splits_512_bit_fma,
        half_rate_dpbf16: cores.half_rate_dpbf16,
        prefetch_b_into_l1: cores.prefetch_b_into_l1,
    }
}

/// What the vendor and family say of a core's vector units (see [`Processor`]'s fields of these names).
#[derive(Clone, Copy, Debug, Default)]
struct Cores {
    splits_512_bit_fma: bool,
    half_rate_dpbf16: bool,
    prefetch_b_into_l1: bool,
}

/// Linux's view of cpu0's caches; `None` elsewhere or when it lacks L1d or L2.
fn sysfs_caches() -> Option<Caches> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut caches = Caches {
        l1d: 0,
        l2: 0,
        l3: 0,
    };
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let read = |name: &str| std::fs::read_to_string(entry.path().join(name)).ok();
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            continue;
        };
        let size = parse_size(size.trim())?;
        match (level.trim(), kind.trim()) {
            ("1", "Data") => caches.l1d = size,
            ("2", "Data" | "Unified") => caches.l2 = size,
            ("3", "Data" | "Unified") => caches.l3 = size,
            _ => {}
        }
    }
    (caches.l1d > 0 && caches.l2 > 0).then_some(caches)
}

/// `"32K"`, `"1024K"`, `"32M"` or plain bytes.
fn parse_size(s: &str) -> Option<usize> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => s.split_at(at),
        None => (s, ""),
    };
    let n: usize = digits.parse().ok()?;
    match unit {
        "" => Some(n),
        "K" => n.checked_mul(1 << 10),
        "M" => n.checked_mul(1 << 20),
        "G" => n.checked_mul(1 << 30),
        _ => None,
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{__cpuid, __cpuid_count, CpuidResult};

    use super::{CacheSource, Caches, Cores};

    /// The cache sizes (when CPUID reports L1d and L2), the brand string (when it has one) and what the vendor
    /// and family say of the vector units.
    pub fn detect() -> (Option<(Caches, CacheSource)>, Option<String>, Cores) {
        // CPUID exists on every x86-64 processor; leaves past the reported maxima are never asked.
        let cpuid = __cpuid_count;
        let max_extended = __cpuid(0x8000_0000).eax;
        let max_basic = cpuid(0, 0).eax;
        let vendor = vendor(cpuid(0, 0));
        let brand = (max_extended >= 0x8000_0004).then(|| {
            brand([
                cpuid(0x8000_0002, 0),
                cpuid(0x8000_0003, 0),
                cpuid(0x8000_0004, 0),
            ])
        });
        let brand = brand.filter(|b| !b.is_empty());
        let amd = vendor == *b"AuthenticAMD" || vendor == *b"HygonGenuine";
        // Leaf 0x8000_001D exists when leaf 0x8000_0001 reports topology extensions (ECX bit 22).
        let topoext = max_extended >= 0x8000_001D && cpuid(0x8000_0001, 0).ecx & (1 << 22) != 0;
        let deterministic = if amd && topoext {
            Some(0x8000_001D)
        } else if !amd && max_basic >= 4 {
            Some(4)
        } else {
            None
        };
        let mut caches = deterministic.and_then(|leaf| {
            walk_cache_leaf(|sub| cpuid(leaf, sub)).map(|c| (c, CacheSource::Cpuid))
        });
        if caches.is_none() && amd && max_extended >= 0x8000_0006 {
            caches = legacy_amd(cpuid(0x8000_0005, 0), cpuid(0x8000_0006, 0))
                .map(|c| (c, CacheSource::CpuidLegacy));
        }
        (
            caches,
            brand,
            Cores {
                splits_512_bit_fma: amd && splits_512_bit_fma(family(cpuid(1, 0))),
                half_rate_dpbf16: vendor == *b"GenuineIntel",
                prefetch_b_into_l1: amd,
            },
        )
    }

    /// The processor family of leaf 1's EAX: the base family, plus the extended family when the base is 0xF.
    pub fn family(leaf1: CpuidResult) -> u32 {
        let base = (leaf1.eax >> 8) & 0xF;
        if base == 0xF {
            base + ((leaf1.eax >> 20) & 0xFF)
        } else {
            base
        }
    }

    /// AMD's cores through family 0x19 (Zen 3 and Zen 4; Zen 4 is the first with AVX-512) have 256-bit FMA
    /// units; family 0x1A (Zen 5) executes 512-bit FMAs whole on its server parts.
    pub fn splits_512_bit_fma(amd_family: u32) -> bool {
        amd_family <= 0x19
    }

    fn vendor(leaf0: CpuidResult) -> [u8; 12] {
        let mut v = [0u8; 12];
        for (chunk, reg) in v.chunks_exact_mut(4).zip([leaf0.ebx, leaf0.edx, leaf0.ecx]) {
            chunk.copy_from_slice(&reg.to_le_bytes());
        }
        v
    }

    /// The 48-byte brand string, NUL padding and surrounding blanks removed.
    fn brand(leaves: [CpuidResult; 3]) -> String {
        let bytes: Vec<u8> = leaves
            .iter()
            .flat_map(|r| [r.eax, r.ebx, r.ecx, r.edx])
            .flat_map(u32::to_le_bytes)
            .take_while(|&b| b != 0)
            .collect();
        String::from_utf8_lossy(&bytes).trim().to_string()
    }

    /// Subleaves of leaf 4 / 0x8000_001D (same layout) until the "no more caches" type; `None` without L1d or
    /// L2.
    pub fn walk_cache_leaf(mut sub: impl FnMut(u32) -> CpuidResult) -> Option<Caches> {
        let mut caches = Caches {
            l1d: 0,
            l2: 0,
            l3: 0,
        };
        for index in 0..16 {
            let r = sub(index);
            // Type: 0 none (end), 1 data, 2 instruction, 3 unified.
            let kind = r.eax & 0x1f;
            if kind == 0 {
                break;
            }
            if kind == 2 {
                continue;
            }
            let level = (r.eax >> 5) & 0x7;
            let ways = ((r.ebx >> 22) & 0x3ff) as usize + 1;
            let partitions = ((r.ebx >> 12) & 0x3ff) as usize + 1;
            let line = (r.ebx & 0xfff) as usize + 1;
            let sets = r.ecx as usize + 1;
            let size = ways * partitions * line * sets;
            match level {
                1 => caches.l1d = size,
                2 => caches.l2 = size,
                3 => caches.l3 = size,
                _ => {}
            }
        }
        (caches.l1d > 0 && caches.l2 > 0).then_some(caches)
    }

    /// AMD's leaves 0x8000_0005 (ECX[31:24]: L1d KiB) and 0x8000_0006 (ECX[31:16]: L2 KiB; EDX[31:18]: L3 in
    /// 512 KiB units).
    pub fn legacy_amd(l1: CpuidResult, l2l3: CpuidResult) -> Option<Caches> {
        let caches = Caches {
            l1d: ((l1.ecx >> 24) as usize) << 10,
            l2: ((l2l3.ecx >> 16) as usize) << 10,
            l3: ((l2l3.edx >> 18) as usize) * (512 << 10),
        };
        (caches.l1d > 0 && caches.l2 > 0).then_some(caches)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use super::{CacheSource, Caches, Cores};

    pub fn detect() -> (Option<(Caches, CacheSource)>, Option<String>, Cores) {
        (None, None, Cores::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leaf 1's EAX of real parts: family 0x19 model 0x11 (Zen 4, EPYC 9004), 0x1A (Zen 5), 0x17 (Zen 2) and an
    /// Intel family 6; only the AMD parts before Zen 5 split 512-bit FMAs.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn family_decodes_leaf_1_and_only_amd_before_zen_5_splits_512_bit_fmas() {
        use std::arch::x86_64::CpuidResult;
        let leaf1 = |eax| CpuidResult {
            eax,
            ebx: 0,
            ecx: 0,
            edx: 0,
        };
        let families: Vec<u32> = [0x00A1_0F11, 0x00B4_0F40, 0x0083_0F10, 0x0008_06F8]
            .into_iter()
            .map(|eax| x86::family(leaf1(eax)))
            .collect();
        assert_eq!(families, [0x19, 0x1A, 0x17, 6]);
        let splits: Vec<bool> = families[..3]
            .iter()
            .map(|&f| x86::splits_512_bit_fma(f))
            .collect();
        assert_eq!(splits, [true, false, true]);
    }

    /// Whatever source answered, the sizes must be ones a real core has: L1d 8 KiB–1 MiB, L2 larger than L1d
    /// and under 64 MiB, L3 (when present) at least L2's size, and the model named.
    #[test]
    fn detected_values_are_sane() {
        let p = Processor::get();
        let Caches { l1d, l2, l3 } = p.caches;
        assert!((8 << 10..=1 << 20).contains(&l1d), "L1d {l1d} in {p:?}");
        assert!(l2 > l1d && l2 <= 64 << 20, "L2 {l2} in {p:?}");
        assert!(l3 == 0 || l3 >= l2, "L3 {l3} in {p:?}");
        assert!(l1d.is_power_of_two() || l1d % (16 << 10) == 0, "L1d {l1d}");
        assert!(!p.model.is_empty());
        if p.avx512 {
            assert!(p.avx2_fma, "AVX-512 dispatch implies AVX2+FMA here");
        }
        // Linux reports the same L1d and L2 through sysfs; where both answer they must agree.
        if let Some(sys) = sysfs_caches() {
            if p.cache_source == CacheSource::Cpuid {
                assert_eq!(
                    (sys.l1d, sys.l2),
                    (l1d, l2),
                    "cpuid {:?} vs sysfs {sys:?}",
                    p.caches
                );
            }
        }
        let line = p.summary();
        assert!(line.contains("L1d") && line.contains(&p.model), "{line}");
    }

    #[test]
    fn sysfs_sizes_parse() {
        assert_eq!(parse_size("32K"), Some(32 << 10));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("12X"), None);
        assert_eq!(parse_size(""), None);
    }

    /// Leaf-4 decoding on a recorded answer: an Intel core with 48 KiB 12-way L1d (64 sets), 32 KiB L1i,
    /// 1.25 MiB 10-way L2 (2048 sets) and a 30 MiB 12-way L3 (40960 sets).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn cache_leaf_decoding() {
        use std::arch::x86_64::CpuidResult;
        let leaf = |kind: u32, level: u32, ways: u32, sets: u32| CpuidResult {
            eax: kind | (level << 5),
            ebx: ((ways - 1) << 22) | 63,
            ecx: sets - 1,
            edx: 0,
        };
        let answers = [
            leaf(1, 1, 12, 64),
            leaf(2, 1, 8, 64),
            leaf(3, 2, 10, 2048),
            leaf(3, 3, 12, 40960),
            leaf(0, 0, 1, 1),
        ];
        let caches = x86::walk_cache_leaf(|i| answers[i as usize]).unwrap();
        assert_eq!(
            caches,
            Caches {
                l1d: 48 << 10,
                l2: 1280 << 10,
                l3: 30 << 20
            }
        );
        // AMD legacy: 32 KiB L1d, 512 KiB L2, 32 MiB L3 (64 units of 512 KiB).
        let l1 = CpuidResult {
            eax: 0,
            ebx: 0,
            ecx: 32 << 24,
            edx: 0,
        };
        let l2l3 = CpuidResult {
            eax: 0,
            ebx: 0,
            ecx: 512 << 16,
            edx: 64 << 18,
        };
        assert_eq!(
            x86::legacy_amd(l1, l2l3),
            Some(Caches {
                l1d: 32 << 10,
                l2: 512 << 10,
                l3: 32 << 20
            })
        );
    }
}
