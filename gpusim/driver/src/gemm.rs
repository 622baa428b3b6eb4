//! The arithmetic behind the cuBLAS stand-in: a strided-batched, column-major GEMM
//! `C = α·op(A)·op(B) + β·C` computed on the host in f32 with f32 accumulation, over f32, f16 or bf16 storage,
//! reading and writing the simulated device memory with every operand's footprint checked against the
//! allocation table first. `C` is not read when `β = 0`, as in cuBLAS.

use cudarc::driver::sys::CUresult;
use gpusim::DeviceMemory;
use half::{bf16, f16};

use crate::ops::{memory_fault, OpError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    F32,
    F16,
    Bf16,
}

impl Storage {
    pub fn size(self) -> usize {
        match self {
            Storage::F32 => 4,
            Storage::F16 | Storage::Bf16 => 2,
        }
    }

    fn decode(self, bytes: &[u8]) -> Vec<f32> {
        match self {
            Storage::F32 => bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Storage::F16 => bytes
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            Storage::Bf16 => bytes
                .chunks_exact(2)
                .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        }
    }

    fn encode(self, values: &[f32]) -> Vec<u8> {
        match self {
            Storage::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            Storage::F16 => values
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect(),
            Storage::Bf16 => values
                .iter()
                .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
                .collect(),
        }
    }
}

/// One operand: device address of batch 0's first element, storage, leading dimension, batch stride (elements).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Operand {
    pub ptr: u64,
    pub storage: Storage,
    pub ld: i64,
    pub stride: i64,
}

/// One `cublas*gemmStridedBatched*` call, with α and β read at call time (host pointer mode).
#[derive(Debug, Clone, PartialEq)]
pub struct GemmCall {
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub alpha: f32,
    pub beta: f32,
    pub a: Operand,
    pub b: Operand,
    pub c: Operand,
    pub batch: i64,
}

fn invalid(message: String) -> OpError {
    OpError::new(CUresult::CUDA_ERROR_INVALID_VALUE, message)
}

/// cuBLAS's own argument checks (`CUBLAS_STATUS_INVALID_VALUE` there).
pub fn validate(call: &GemmCall) -> Result<(), OpError> {
    let GemmCall { m, n, k, batch, .. } = *call;
    if m < 0 || n < 0 || k < 0 || batch < 0 {
        return Err(invalid(format!(
            "GEMM with a negative size: m={m} n={n} k={k} batch={batch}"
        )));
    }
    let rows_a = if call.trans_a { k } else { m };
    let rows_b = if call.trans_b { n } else { k };
    for (name, ld, rows) in [
        ("lda", call.a.ld, rows_a),
        ("ldb", call.b.ld, rows_b),
        ("ldc", call.c.ld, m),
    ] {
        if ld < rows.max(1) {
            return Err(invalid(format!(
                "GEMM {name}={ld} is below its operand's row count {rows} (m={m} n={n} k={k}, \
                 transa={} transb={})",
                call.trans_a, call.trans_b
            )));
        }
    }
    Ok(())
}

/// Reads a column-major `rows × cols` operand (leading dimension `ld`) of batch `i` as f32, column by column.
fn read_matrix(
    memory: &DeviceMemory,
    name: &str,
    op: &Operand,
    i: i64,
    rows: i64,
    cols: i64,
) -> Result<Vec<f32>, OpError> {
    let size = op.storage.size() as i64;
    let mut out = Vec::with_capacity((rows * cols) as usize);
    let mut bytes = vec![0u8; (rows * size) as usize];
    for col in 0..cols {
        let element = i * op.stride + col * op.ld;
        let address = op.ptr.wrapping_add_signed(element * size);
        memory
            // Only the elements the product uses are read, so a never-written one is a real defect.
            .read(address, &mut bytes, true)
            .map_err(|f| {
                let mut e = memory_fault(
                    &format!("GEMM operand {name}, batch {i}, column {col}"),
                    address,
                    bytes.len(),
                    f,
                );
                e.code = CUresult::CUDA_ERROR_ILLEGAL_ADDRESS;
                e
            })?;
        out.extend(op.storage.decode(&bytes));
    }
    Ok(out)
}

pub fn run(call: &GemmCall, memory: &mut DeviceMemory) -> Result<(), OpError> {
    validate(call)?;
    let GemmCall { m, n, k, .. } = *call;
    let (rows_a, cols_a) = if call.trans_a { (k, m) } else { (m, k) };
    let (rows_b, cols_b) = if call.trans_b { (n, k) } else { (k, n) };
    let size_c = call.c.storage.size() as i64;
    for i in 0..call.batch {
        if m == 0 || n == 0 {
            continue;
        }
        // With k = 0 the product is empty and A and B are not read.
        let (a, b) = if k == 0 {
            (Vec::new(), Vec::new())
        } else {
            (
                read_matrix(memory, "A", &call.a, i, rows_a, cols_a)?,
                read_matrix(memory, "B", &call.b, i, rows_b, cols_b)?,
            )
        };
        let c_old = if call.beta != 0.0 {
            read_matrix(memory, "C", &call.c, i, m, n)?
        } else {
            Vec::new()
        };
        // op(A) row-major (m × k) and op(B) column-major (k per column), so each dot product is contiguous.
        let (m, n, k) = (m as usize, n as usize, k as usize);
        let mut a_rows = vec![0f32; m * k];
        for r in 0..m {
            for l in 0..k {
                a_rows[r * k + l] = if call.trans_a {
                    a[l + r * rows_a as usize]
                } else {
                    a[r + l * rows_a as usize]
                };
            }
        }
        let mut b_cols = vec![0f32; n * k];
        for col in 0..n {
            for l in 0..k {
                b_cols[col * k + l] = if call.trans_b {
                    b[col + l * rows_b as usize]
                } else {
                    b[l + col * rows_b as usize]
                };
            }
        }
        let mut column = vec![0f32; m];
        for col in 0..n {
            let bc = &b_cols[col * k..(col + 1) * k];
            for (r, out) in column.iter_mut().enumerate() {
                let ar = &a_rows[r * k..(r + 1) * k];
                let acc = ar.iter().zip(bc).fold(0f32, |s, (x, y)| x.mul_add(*y, s));
                let mut v = call.alpha * acc;
                if call.beta != 0.0 {
                    v += call.beta * c_old[r + col * m];
                }
                *out = v;
            }
            let element = i * call.c.stride + col as i64 * call.c.ld;
            let address = call.c.ptr.wrapping_add_signed(element * size_c);
            memory
                .write(address, &call.c.storage.encode(&column))
                .map_err(|f| {
                    let mut e = memory_fault(
                        &format!("GEMM output C, batch {i}, column {col}"),
                        address,
                        m * size_c as usize,
                        f,
                    );
                    e.code = CUresult::CUDA_ERROR_ILLEGAL_ADDRESS;
                    e
                })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random sequence (no test dependency on `rand`).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    fn upload(memory: &mut DeviceMemory, v: &[f32], storage: Storage) -> u64 {
        let bytes = storage.encode(v);
        let ptr = memory.alloc(bytes.len()).expect("alloc");
        memory.write(ptr, &bytes).expect("write");
        ptr
    }

    /// f64 reference on the same (rounded) inputs, row by row from the definition.
    fn reference(
        a: &[f32],
        b: &[f32],
        c: &[f32],
        call: &GemmCall,
        i: usize,
        r: usize,
        col: usize,
    ) -> f64 {
        let at = |row: usize, l: usize| {
            let base = i as i64 * call.a.stride;
            let e = if call.trans_a {
                l as i64 + row as i64 * call.a.ld
            } else {
                row as i64 + l as i64 * call.a.ld
            };
            f64::from(a[(base + e) as usize])
        };
        let bt = |l: usize, column: usize| {
            let base = i as i64 * call.b.stride;
            let e = if call.trans_b {
                column as i64 + l as i64 * call.b.ld
            } else {
                l as i64 + column as i64 * call.b.ld
            };
            f64::from(b[(base + e) as usize])
        };
        let dot: f64 = (0..call.k as usize).map(|l| at(r, l) * bt(l, col)).sum();
        let ce = i as i64 * call.c.stride + r as i64 + col as i64 * call.c.ld;
        f64::from(call.alpha) * dot + f64::from(call.beta) * f64::from(c[ce as usize])
    }

    fn round(v: &[f32], s: Storage) -> Vec<f32> {
        s.decode(&s.encode(v))
    }

    #[test]
    fn strided_batched_gemm_matches_an_f64_reference_for_every_transpose_and_storage() {
        let mut seed = 1;
        for storage in [Storage::F32, Storage::F16, Storage::Bf16] {
            for (trans_a, trans_b) in [(false, false), (true, false), (false, true), (true, true)] {
                for (m, n, k, batch) in [(1, 1, 1, 1), (5, 3, 7, 2), (17, 9, 33, 3)] {
                    seed += 1;
                    let (rows_a, cols_a) = if trans_a { (k, m) } else { (m, k) };
                    let (rows_b, cols_b) = if trans_b { (n, k) } else { (k, n) };
                    // Padded leading dimensions and gaps between batches.
                    let (lda, ldb, ldc) = (rows_a + 2, rows_b + 1, m + 3);
                    let (sa, sb, sc) = (lda * cols_a + 5, ldb * cols_b, ldc * n + 1);
                    let a = round(&values((sa * batch) as usize, seed), storage);
                    let b = round(&values((sb * batch) as usize, seed + 100), storage);
                    let c = round(&values((sc * batch) as usize, seed + 200), storage);
                    let mut memory = DeviceMemory::new();
                    let (pa, pb, pc) = (
                        upload(&mut memory, &a, storage),
                        upload(&mut memory, &b, storage),
                        upload(&mut memory, &c, storage),
                    );
                    let op = |ptr, ld, stride| Operand {
                        ptr,
                        storage,
                        ld,
                        stride,
                    };
                    let call = GemmCall {
                        trans_a,
                        trans_b,
                        m,
                        n,
                        k,
                        alpha: 0.75,
                        beta: -0.5,
                        a: op(pa, lda, sa),
                        b: op(pb, ldb, sb),
                        c: op(pc, ldc, sc),
                        batch,
                    };
                    run(&call, &mut memory).expect("gemm runs");
                    let mut bytes = vec![0u8; c.len() * storage.size()];
                    memory.read(pc, &mut bytes, false).expect("read back");
                    let got = storage.decode(&bytes);
                    let tol = match storage {
                        Storage::F32 => 1e-5,
                        Storage::F16 => 2e-3,
                        Storage::Bf16 => 1e-2,
                    };
                    for i in 0..batch as usize {
                        for col in 0..n as usize {
                            for r in 0..m as usize {
                                let want = reference(&a, &b, &c, &call, i, r, col);
                                let e = i * sc as usize + r + col * ldc as usize;
                                let g = f64::from(got[e]);
                                assert!(
                                    (g - want).abs() <= tol * (1.0 + want.abs()),
                                    "{storage:?} ta={trans_a} tb={trans_b} {m}x{n}x{k}: C[{i}][{r},{col}] = {g}, \
                                     want {want}"
                                );
                            }
                        }
                        // The padding rows of C are untouched.
                        for col in 0..n as usize {
                            for r in m as usize..ldc as usize {
                                let e = i * sc as usize + r + col * ldc as usize;
                                assert_eq!(got[e], c[e], "padding C[{i}][{r},{col}] changed");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn an_operand_past_its_allocation_is_an_illegal_address_naming_it() {
        let mut memory = DeviceMemory::new();
        let storage = Storage::F32;
        let a = upload(&mut memory, &values(6, 1), storage);
        let b = upload(&mut memory, &values(6, 2), storage);
        let c = memory.alloc(4 * 4).expect("alloc");
        let op = |ptr, ld, stride| Operand {
            ptr,
            storage,
            ld,
            stride,
        };
        // 2×3 · 3×2 = 2×2, but batch 2 with a stride that leaves B's allocation.
        let call = GemmCall {
            trans_a: false,
            trans_b: false,
            m: 2,
            n: 2,
            k: 3,
            alpha: 1.0,
            beta: 0.0,
            a: op(a, 2, 0),
            b: op(b, 3, 6),
            c: op(c, 2, 0),
            batch: 2,
        };
        let e = run(&call, &mut memory).expect_err("batch 1 of B is out of bounds");
        assert_eq!(e.code, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        assert!(e.message.contains("operand B, batch 1"), "{}", e.message);
        let bad_ld = GemmCall {
            batch: 1,
            a: op(a, 1, 0),
            ..call
        };
        let e = run(&bad_ld, &mut memory).expect_err("lda below m");
        assert!(e.message.contains("lda=1"), "{}", e.message);
    }
}
