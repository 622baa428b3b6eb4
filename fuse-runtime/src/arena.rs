//! The per-call arena: one block holding every intermediate of a plan at the offsets its memory plan fixed, and
//! the allocation of output tensors.
//!
//! Large arenas are mapped straight from the kernel (`mmap`), 2 MiB-aligned and advised to use transparent huge
//! pages: the kernel hands out zeroed pages lazily, so nothing touches an arena before the kernels that write it
//! (no eager zeroing: a 2 GiB arena costs nothing until used), a fresh arena costs a handful of page faults instead
//! of one per 4 KiB page, and dropping one returns its memory to the system at once (`munmap`), which is what
//! lets the pool shrink. No kernel reads arena memory it has not written in the same call (arenas come back from
//! the pool holding the last call's values); debug builds fill every arena they hand out with NaN bytes so the
//! test suite shows that.
//!
//! Every allocation here is first checked against what the process may still use ([`crate::memory`]).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

use crate::error::{Error, Result};
use crate::memory::check_fits;

/// Arenas at least this big are mapped with huge-page alignment and advice.
const HUGE_PAGE: usize = 2 << 20;
const CACHE_LINE: usize = 64;

pub struct Arena {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
}

enum Backing {
    /// From the global allocator with this layout.
    Heap(Layout),
    /// An anonymous mapping of exactly `len` bytes at `ptr`.
    #[cfg(target_os = "linux")]
    Mapped,
}

// SAFETY: an `Arena` owns its block exclusively, like a `Vec<u8>`.
unsafe impl Send for Arena {}

impl Arena {
    /// The length of an arena asked for `bytes`: a whole number of huge pages from one huge page on (mapped at one),
    /// else of cache lines; `None` where that overflows.
    pub fn len_for(bytes: usize) -> Option<usize> {
        bytes
            .max(CACHE_LINE)
            .checked_next_multiple_of(Arena::align_for(bytes))
    }

    /// The alignment of an arena asked for `bytes`: a huge page from one huge page on, else a cache line.
    fn align_for(bytes: usize) -> usize {
        if bytes >= HUGE_PAGE {
            HUGE_PAGE
        } else {
            CACHE_LINE
        }
    }

    /// An arena of at least `bytes` (at least one cache line, so the pointer is never dangling), zeroed when fresh;
    /// [`Error::OutOfMemory`] when the process may not use that much or the machine cannot provide it.
    pub fn new(bytes: usize) -> Result<Arena> {
        let out_of_memory = |available| Error::OutOfMemory {
            what: "the arena",
            bytes: Some(bytes),
            available,
        };
        check_fits("the arena", bytes)?;
        let (len, align) = (
            Arena::len_for(bytes).ok_or_else(|| out_of_memory(None))?,
            Arena::align_for(bytes),
        );
        #[cfg(target_os = "linux")]
        if align == HUGE_PAGE {
            let ptr = map_aligned(len).ok_or_else(|| out_of_memory(None))?;
            return Ok(Arena {
                ptr,
                len,
                backing: Backing::Mapped,
            });
        }
        let layout = Layout::from_size_align(len, align).map_err(|_| out_of_memory(None))?;
        // SAFETY: `layout` has a non-zero size.
        let ptr =
            NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or_else(|| out_of_memory(None))?;
        Ok(Arena {
            ptr,
            len,
            backing: Backing::Heap(layout),
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Fills the arena with `0xFF` bytes (NaN as f32), so a kernel that read memory it did not write gives NaN.
    pub fn poison(&mut self) {
        // SAFETY: the block is `len` bytes we own.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), 0xFF, self.len) };
    }

    /// Writes every page now (zeros), so the page faults of a fresh arena are paid here instead of by a call.
    pub fn touch(&mut self) {
        // SAFETY: the block is `len` bytes we own.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), 0, self.len) };
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        match self.backing {
            // SAFETY: allocated in `new` with this layout.
            Backing::Heap(layout) => unsafe { dealloc(self.ptr.as_ptr(), layout) },
            // SAFETY: mapped in `new` with exactly this address and length, and not unmapped since.
            #[cfg(target_os = "linux")]
            Backing::Mapped => unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), self.len);
            },
        }
    }
}

/// `len` bytes (a multiple of [`HUGE_PAGE`]) of fresh anonymous memory at a [`HUGE_PAGE`]-aligned address,
/// advised to use huge pages; `None` when the kernel refuses the mapping.
#[cfg(target_os = "linux")]
fn map_aligned(len: usize) -> Option<NonNull<u8>> {
    // Map one huge page more than needed, then unmap the unaligned head and the tail.
    let span = len.checked_add(HUGE_PAGE)?;
    // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    let start = base as usize;
    let aligned = start.next_multiple_of(HUGE_PAGE);
    let head = aligned - start;
    let tail = span - head - len;
    // SAFETY: both ranges lie inside the mapping just made and outside the part kept; the kernel's page size
    // (4 KiB) divides `head` and `tail`, since `start`, `span` and `HUGE_PAGE` are page multiples.
    unsafe {
        if head > 0 {
            libc::munmap(base, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
    }
    advise_huge_pages(aligned as *mut u8, len);
    NonNull::new(aligned as *mut u8)
}

/// A zeroed `Vec<f32>` of `numel` for `what` (an output, a tensor), or [`Error::OutOfMemory`] when the process may
/// not use that much or the machine cannot provide it. A large one is advised to use huge pages before anything
/// touches it (a zeroed allocation maps fresh, untouched memory), so the kernel that fills it takes a few dozen
/// page faults instead of one per 4 KiB: for a 64 MB output that is most of a call's time.
pub fn zeroed_f32(what: &'static str, numel: usize) -> Result<Vec<f32>> {
    let bytes = numel.checked_mul(std::mem::size_of::<f32>());
    let out_of_memory = || Error::OutOfMemory {
        what,
        bytes,
        available: None,
    };
    let bytes = bytes.ok_or_else(out_of_memory)?;
    check_fits(what, bytes)?;
    if numel == 0 {
        return Ok(Vec::new());
    }
    let layout = Layout::array::<f32>(numel).map_err(|_| out_of_memory())?;
    // SAFETY: `layout` has a non-zero size; the block is zeroed f32s (all-zero bits are 0.0), allocated by the
    // global allocator with `Vec<f32>`'s layout for this capacity, so the Vec may own and free it.
    let mut v = unsafe {
        let ptr = NonNull::new(alloc_zeroed(layout)).ok_or_else(out_of_memory)?;
        Vec::from_raw_parts(ptr.as_ptr().cast::<f32>(), numel, numel)
    };
    advise_huge_pages_inside(v.as_mut_ptr().cast(), bytes);
    Ok(v)
}

/// Advises the whole huge pages inside the `bytes` at `start` (one allocation, not yet touched) to be backed by
/// huge pages, when there are at least two huge pages' worth.
pub(crate) fn advise_huge_pages_inside(start: *mut u8, bytes: usize) {
    if bytes >= 2 * HUGE_PAGE {
        let at = start as usize;
        let first = at.next_multiple_of(HUGE_PAGE);
        let last = (at + bytes) / HUGE_PAGE * HUGE_PAGE;
        if last > first {
            advise_huge_pages(start.wrapping_add(first - at), last - first);
        }
    }
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
    use super::{zeroed_f32, Arena, HUGE_PAGE};

    #[test]
    fn fresh_arenas_are_zeroed_aligned_and_large_enough() {
        for bytes in [0, 1, 100, 3 << 20] {
            let mut a = Arena::new(bytes).unwrap();
            assert!(a.len() >= bytes);
            let align = if bytes >= HUGE_PAGE { HUGE_PAGE } else { 64 };
            assert_eq!(a.as_mut_ptr() as usize % align, 0);
            // SAFETY: the arena holds `a.len()` initialised (zeroed) bytes.
            let view = unsafe { std::slice::from_raw_parts(a.as_mut_ptr(), a.len()) };
            assert!(view.iter().all(|&b| b == 0));
            a.poison();
            // SAFETY: as above; every byte was just written.
            let view = unsafe { std::slice::from_raw_parts(a.as_mut_ptr(), a.len()) };
            assert!(view.iter().all(|&b| b == 0xFF));
        }
    }

    #[test]
    fn sizes_the_machine_cannot_back_are_errors_not_an_abort() {
        // Sizes no layout can describe, and sizes the allocator refuses (an exabyte).
        assert!(Arena::new(usize::MAX).is_err());
        assert!(Arena::new(usize::MAX / 2).is_err());
        assert!(Arena::new(1 << 60).is_err());
        assert!(zeroed_f32("an output", 1 << 58).is_err());
        assert!(zeroed_f32("an output", usize::MAX / 4).is_err());
        assert!(zeroed_f32("an output", usize::MAX).is_err());
    }

    #[test]
    fn outputs_are_zeroed_whatever_their_size() {
        // Below and above the huge-page threshold, with a length that ends mid-page.
        for numel in [0, 5, (5 << 20) + 3] {
            let mut v = zeroed_f32("an output", numel).unwrap();
            assert_eq!(v.len(), numel);
            assert!(v.iter().all(|&x| x == 0.0));
            v.iter_mut().for_each(|x| *x = 1.0);
            assert!(v.iter().all(|&x| x == 1.0));
        }
    }
}
