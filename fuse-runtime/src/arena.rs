//! The per-call arena: one zeroed block holding every intermediate of a plan at the offsets its memory plan fixed.
//!
//! Large arenas are 2 MiB-aligned and advised to use transparent huge pages, so a fresh arena (the first call of
//! a process, or a larger shape) costs a handful of page faults instead of one per 4 KiB page — which is most of
//! what makes a first call slower than the steady state.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

/// Arenas at least this big get huge-page alignment and advice.
const HUGE_PAGE: usize = 2 << 20;
const CACHE_LINE: usize = 64;

pub struct Arena {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: an `Arena` owns its block exclusively, like a `Vec<u8>`.
unsafe impl Send for Arena {}

impl Arena {
    /// A zeroed arena of at least `bytes` (at least one cache line, so the pointer is never dangling).
    pub fn new(bytes: usize) -> Arena {
        let align = if bytes >= HUGE_PAGE {
            HUGE_PAGE
        } else {
            CACHE_LINE
        };
        let size = bytes.max(CACHE_LINE).div_ceil(align) * align;
        let Ok(layout) = Layout::from_size_align(size, align) else {
            handle_alloc_error(Layout::new::<u8>())
        };
        // Not `alloc_zeroed`: for this alignment it zeroes eagerly, touching every 4 KiB page before the advice
        // below could apply. Advise first, then zero, so the first touch already maps huge pages.
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        if align == HUGE_PAGE {
            advise_huge_pages(ptr.as_ptr(), size);
        }
        // SAFETY: the block is `size` bytes we own; zeroing makes every later `&[f32]` view of it initialised.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, size) };
        Arena { ptr, layout }
    }

    pub fn len(&self) -> usize {
        self.layout.size()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// A zeroed `Vec<f32>` of `numel` for an output tensor. A large one is advised to use huge pages before anything
/// touches it (`vec!` of zeros maps fresh, untouched memory), so the kernel that fills it takes a few dozen page
/// faults instead of one per 4 KiB: for a 64 MB output that is most of a call's time.
pub fn zeroed_output(numel: usize) -> Vec<f32> {
    let mut v = vec![0.0f32; numel];
    let bytes = numel * std::mem::size_of::<f32>();
    if bytes >= 2 * HUGE_PAGE {
        let start = v.as_mut_ptr() as usize;
        let first = start.next_multiple_of(HUGE_PAGE);
        let last = (start + bytes) / HUGE_PAGE * HUGE_PAGE;
        if last > first {
            advise_huge_pages(first as *mut u8, last - first);
        }
    }
    v
}

#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: *mut u8, len: usize) {
    // SAFETY: the range is one allocation we own; MADV_HUGEPAGE only changes how it is backed, and a failure
    // (e.g. THP disabled) leaves ordinary pages, which is fine.
    unsafe {
        libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_: *mut u8, _: usize) {}

#[cfg(test)]
mod tests {
    use super::{zeroed_output, Arena};

    #[test]
    fn arenas_are_zeroed_aligned_and_large_enough() {
        for bytes in [0, 1, 100, 3 << 20] {
            let mut a = Arena::new(bytes);
            assert!(a.len() >= bytes);
            assert_eq!(a.as_mut_ptr() as usize % 64, 0);
            // SAFETY: the arena holds `a.len()` initialised (zeroed) bytes.
            let bytes = unsafe { std::slice::from_raw_parts(a.as_mut_ptr(), a.len()) };
            assert!(bytes.iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn outputs_are_zeroed_whatever_their_size() {
        // Below and above the huge-page threshold, with a length that ends mid-page.
        for numel in [0, 5, (5 << 20) + 3] {
            let mut v = zeroed_output(numel);
            assert_eq!(v.len(), numel);
            assert!(v.iter().all(|&x| x == 0.0));
            v.iter_mut().for_each(|x| *x = 1.0);
            assert!(v.iter().all(|&x| x == 1.0));
        }
    }
}
