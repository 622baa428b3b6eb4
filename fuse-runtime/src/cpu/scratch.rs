//! Per-thread scratch buffers (the GEMM's packed blocks, attention's scores), kept for the life of the thread.
//!
//! A model reserves them on every worker when it loads ([`reserve`]), so no call — the first one included —
//! allocates or page-faults for scratch. A thread that first needs one later (a caller's own thread running a
//! small kernel inline, or a larger shape) grows its buffer on that use.

use std::cell::RefCell;
use std::thread::LocalKey;

/// One per-thread buffer.
pub type Buffer = LocalKey<RefCell<Vec<f32>>>;

thread_local! {
    /// The GEMM's packed block of A.
    pub static GEMM_A: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The GEMM's packed block of B.
    pub static GEMM_B: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Attention's block of scores.
    pub static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Attention's block of query rows, when the kernel computes them.
    pub static QUERIES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Attention's block of output rows, when they are placed apart from each other.
    pub static ATTENTION_ROWS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// A bf16 product's B operand when it is computed per call (attention's keys and values), rounded and packed.
    pub static BF16_OPERAND: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// An int8 product's quantised rows of A, shared by the threads running its column blocks.
    pub static INT8_ROWS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Floats a buffer holds past what it hands out, so that what it hands out can start on a cache line.
const LINE_SLACK: usize = crate::cpu::gemm::LINE / std::mem::size_of::<f32>();

/// Runs `f` on `len` floats of this thread's `buffer` starting on a cache line (AMX loads 64-byte rows of packed
/// operands and sums from them, at half the rate where a row straddles two lines), growing it first if it is
/// shorter. The contents are whatever the last user left: callers overwrite before they read.
pub fn with_buffer<R>(buffer: &'static Buffer, len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    let on_a_line = |buf: &mut [f32]| {
        let start = buf
            .as_ptr()
            .align_offset(crate::cpu::gemm::LINE)
            .min(LINE_SLACK);
        f(&mut buf[start..start + len])
    };
    buffer.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < len + LINE_SLACK {
                *buf = touched(len + LINE_SLACK);
            }
            on_a_line(&mut buf)
        }
        // Only reachable if a kernel re-entered itself on this thread; a temporary buffer keeps it correct.
        Err(_) => on_a_line(&mut touched(len + LINE_SLACK)),
    })
}

/// This thread's `buffer`, at least `len` long, taken out of it so that other threads may read it while this one
/// waits for them; [`put`] returns it. A buffer taken and not returned is only lost to the next user, which
/// then grows a new one.
pub fn take(buffer: &'static Buffer, len: usize) -> Vec<f32> {
    let mut v = buffer.with(|cell| {
        cell.try_borrow_mut()
            .map(|mut b| std::mem::take(&mut *b))
            .unwrap_or_default()
    });
    if v.len() < len {
        v = touched(len);
    }
    v
}

/// Returns a buffer [`take`] gave out.
pub fn put(buffer: &'static Buffer, v: Vec<f32>) {
    buffer.with(|cell| {
        if let Ok(mut b) = cell.try_borrow_mut() {
            *b = v;
        }
    });
}

/// Gives every rayon worker and the calling thread each `(buffer, len)`, and so also starts rayon's pool:
/// a model's first call then pays for neither.
pub fn reserve(needs: &[(&'static Buffer, usize)]) {
    let reserve_here = || {
        for &(buffer, len) in needs {
            with_buffer(buffer, len, |_| ());
        }
    };
    rayon::broadcast(|_| reserve_here());
    reserve_here();
}

/// A zeroed buffer whose pages are already mapped, so its first use does not fault on them.
fn touched(len: usize) -> Vec<f32> {
    // `vec![0.0; len]` maps fresh zero pages lazily, and the compiler turns allocate-then-fill-with-zeros into
    // the same lazy allocation; a volatile write per page cannot be elided.
    let mut v = vec![0.0f32; len];
    let per_page = 4096 / std::mem::size_of::<f32>();
    for i in (0..len).step_by(per_page) {
        // SAFETY: `i < len`, so the pointer is in bounds and aligned.
        unsafe { std::ptr::write_volatile(v.as_mut_ptr().add(i), 0.0) };
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_start_on_a_cache_line() {
        for len in [1, 5, 100, 5000, 70_000] {
            let at = with_buffer(&BF16_OPERAND, len, |b| (b.as_ptr() as usize, b.len()));
            assert_eq!((at.0 % crate::cpu::gemm::LINE, at.1), (0, len), "{len}");
        }
    }

    #[test]
    fn buffers_grow_and_keep_their_contents_per_thread() {
        with_buffer(&SCORES, 10, |b| b.fill(3.0));
        // A shorter request sees the same memory; a longer one gets a zeroed, larger buffer.
        with_buffer(&SCORES, 4, |b| assert_eq!(b, [3.0; 4]));
        with_buffer(&SCORES, 5000, |b| assert!(b.iter().all(|&x| x == 0.0)));
        std::thread::spawn(|| with_buffer(&SCORES, 3, |b| assert_eq!(b, [0.0; 3])))
            .join()
            .unwrap();
        // Re-entering the same buffer gets a temporary one instead of a panic.
        with_buffer(&SCORES, 2, |outer| {
            outer.fill(1.0);
            with_buffer(&SCORES, 2, |inner| assert_eq!(inner, [0.0; 2]));
        });
    }
}
