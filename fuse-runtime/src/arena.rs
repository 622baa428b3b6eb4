//! The per-call arena: one zeroed block holding every intermediate of a plan at the offsets its memory plan fixed.
//!
//! Large arenas are 2 MiB-aligned and advised to use transparent huge pages, so a fresh arena (the first call of
//! a process, or a larger shape) costs a handful of page faults instead of one per 4 KiB page — which is most of
//! what makes a first call slower than the steady state.

use std::alloc::{alloc, alloc_zeroed, dealloc, Layout};
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
    /// A zeroed arena of at least `bytes` (at least one cache line, so the pointer is never dangling), or
    /// `None` when the machine cannot provide it.
    pub fn new(bytes: usize) -> Option<Arena> {
        let align = if bytes >= HUGE_PAGE {
            HUGE_PAGE
        } else {
            CACHE_LINE
        };
        let size = bytes.max(CACHE_LINE).checked_next_multiple_of(align)?;
        let layout = Layout::from_size_align(size, align).ok()?;
        // Not `alloc_zeroed`: for this alignment it zeroes eagerly, touching every 4 KiB page before the advice
        // below could apply. Advise first, then zero, so the first touch already maps huge pages.
        // SAFETY: `layout` has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc(layout) })?;
        if align == HUGE_PAGE {
            advise_huge_pages(ptr.as_ptr(), size);
        }
        // SAFETY: the block is `size` bytes we own; zeroing makes every later `&[f32]` view of it initialised.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, size) };
        Some(Arena { ptr, layout })
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

/// A zeroed `Vec<f32>` of `numel` for an output tensor, or `None` when the machine cannot provide it. A large one
/// is advised to use huge pages before anything touches it (a zeroed allocation maps fresh, untouched memory), so
/// the kernel that fills it takes a few dozen page faults instead of one per 4 KiB: for a 64 MB output that is
/// most of a call's time.
pub fn zeroed_output(numel: usize) -> Option<Vec<f32>> {
    if numel == 0 {
        return Some(Vec::new());
    }
    let layout = Layout::array::<f32>(numel).ok()?;
    // SAFETY: `layout` has a non-zero size; the block is zeroed f32s (all-zero bits are 0.0), allocated by the
    // global allocator with `Vec<f32>`'s layout for this capacity, so the Vec may own and free it.
    let mut v = unsafe {
        let ptr = NonNull::new(alloc_zeroed(layout))?;
        Vec::from_raw_parts(ptr.as_ptr().cast::<f32>(), numel, numel)
    };
    let bytes = numel * std::mem::size_of::<f32>();
    if bytes >= 2 * HUGE_PAGE {
        let start = v.as_mut_ptr() as usize;
        let first = start.next_multiple_of(HUGE_PAGE);
        let last = (start + bytes) / HUGE_PAGE * HUGE_PAGE;
        if last > first {
            advise_huge_pages(first as *mut u8, last - first);
        }
    }
    Some(v)
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
            let mut a = Arena::new(bytes).unwrap();
            assert!(a.len() >= bytes);
            assert_eq!(a.as_mut_ptr() as usize % 64, 0);
            // SAFETY: the arena holds `a.len()` initialised (zeroed) bytes.
            let bytes = unsafe { std::slice::from_raw_parts(a.as_mut_ptr(), a.len()) };
            assert!(bytes.iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn sizes_the_machine_cannot_back_are_none_not_an_abort() {
        // Sizes no layout can describe, and sizes the allocator refuses (an exabyte).
        assert!(Arena::new(usize::MAX).is_none());
        assert!(Arena::new(usize::MAX / 2).is_none());
        assert!(Arena::new(1 << 60).is_none());
        assert!(zeroed_output(1 << 58).is_none());
        assert!(zeroed_output(usize::MAX / 4).is_none());
        assert!(zeroed_output(usize::MAX).is_none());
    }

    #[test]
    fn outputs_are_zeroed_whatever_their_size() {
        // Below and above the huge-page threshold, with a length that ends mid-page.
        for numel in [0, 5, (5 << 20) + 3] {
            let mut v = zeroed_output(numel).unwrap();
            assert_eq!(v.len(), numel);
            assert!(v.iter().all(|&x| x == 0.0));
            v.iter_mut().for_each(|x| *x = 1.0);
            assert!(v.iter().all(|&x| x == 1.0));
        }
    }
}
