//! The device allocation table. Addresses are never reused while the table lives, so a stale pointer is caught
//! as out-of-bounds rather than reading someone else's buffer.

use crate::error::{SimError, SimResult};
use std::collections::BTreeMap;

struct Allocation {
    bytes: Vec<u8>,
    /// One flag per byte: written at least once (by a copy, a memset or a kernel).
    written: Vec<bool>,
}

pub struct DeviceMemory {
    allocations: BTreeMap<u64, Allocation>,
    next: u64,
}

/// Why an access failed, before the interpreter adds the launch site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// No allocation holds all of `[address, address + len)`; the text says what is nearest.
    OutOfBounds(String),
    /// Some byte was never written.
    Uninitialized,
}

fn fits(base: u64, allocation: &Allocation, address: u64, len: usize) -> bool {
    (address - base)
        .checked_add(len as u64)
        .is_some_and(|end| end <= allocation.bytes.len() as u64)
}

fn out_of_bounds(nearest: Option<(&u64, &Allocation)>, address: u64) -> Fault {
    Fault::OutOfBounds(match nearest {
        None => "below every allocation".to_string(),
        Some((&base, allocation)) => format!(
            "the nearest allocation is 0x{base:x} of {} bytes (offset {})",
            allocation.bytes.len(),
            address - base
        ),
    })
}

/// `dst.copy_from_slice(src)` with the sizes of scalar and vector accesses spelled out, so they compile to moves
/// instead of a `memcpy` call (this is on every simulated global access).
pub(crate) fn copy_small(dst: &mut [u8], src: &[u8]) {
    match (dst.len(), src.len()) {
        (4, 4) => dst.copy_from_slice(&src[..4]),
        (8, 8) => dst.copy_from_slice(&src[..8]),
        (16, 16) => dst.copy_from_slice(&src[..16]),
        (2, 2) => dst.copy_from_slice(&src[..2]),
        _ => dst.copy_from_slice(src),
    }
}

impl Default for DeviceMemory {
    fn default() -> Self {
        DeviceMemory::new()
    }
}

const BASE: u64 = 0x7f00_0000_0000;
/// Allocations are 256-byte aligned, as cuMemAlloc's are, with a gap so an overrun never lands in a neighbour.
const ALIGN: u64 = 256;

impl DeviceMemory {
    pub fn new() -> Self {
        DeviceMemory {
            allocations: BTreeMap::new(),
            next: BASE,
        }
    }

    pub fn alloc(&mut self, len: usize) -> SimResult<u64> {
        let size = (len as u64).max(1);
        let address = self.next;
        let end = address
            .checked_add(size)
            .and_then(|e| e.checked_add(ALIGN))
            .ok_or_else(|| {
                SimError::Memory(format!(
                    "allocation of {len} bytes exhausts the address space"
                ))
            })?;
        self.next = end.div_ceil(ALIGN) * ALIGN;
        self.allocations.insert(
            address,
            Allocation {
                bytes: vec![0; len],
                written: vec![false; len],
            },
        );
        Ok(address)
    }

    pub fn free(&mut self, address: u64) -> SimResult<()> {
        self.allocations
            .remove(&address)
            .map(|_| ())
            .ok_or_else(|| {
                SimError::Memory(format!(
                    "free of 0x{address:x}, which is not the start of an allocation"
                ))
            })
    }

    /// The allocation holding `[address, address + len)` and the offset of `address` in it (one map lookup:
    /// this is on every global access of every simulated thread).
    fn locate(&self, address: u64, len: usize) -> Result<(&Allocation, usize), Fault> {
        match self.allocations.range(..=address).next_back() {
            Some((&base, allocation)) if fits(base, allocation, address, len) => {
                Ok((allocation, (address - base) as usize))
            }
            nearest => Err(out_of_bounds(nearest, address)),
        }
    }

    fn locate_mut(&mut self, address: u64, len: usize) -> Result<(&mut Allocation, usize), Fault> {
        match self.allocations.range_mut(..=address).next_back() {
            Some((&base, allocation)) if fits(base, allocation, address, len) => {
                Ok((allocation, (address - base) as usize))
            }
            nearest => Err(out_of_bounds(nearest.map(|(b, a)| (b, &*a)), address)),
        }
    }

    /// Reads device bytes; `check_written` makes a never-written byte a fault.
    pub fn read(&self, address: u64, out: &mut [u8], check_written: bool) -> Result<(), Fault> {
        let (allocation, offset) = self.locate(address, out.len())?;
        let range = offset..offset + out.len();
        if check_written && allocation.written[range.clone()].contains(&false) {
            return Err(Fault::Uninitialized);
        }
        copy_small(out, &allocation.bytes[range]);
        Ok(())
    }

    pub fn write(&mut self, address: u64, data: &[u8]) -> Result<(), Fault> {
        let (allocation, offset) = self.locate_mut(address, data.len())?;
        let range = offset..offset + data.len();
        copy_small(&mut allocation.bytes[range.clone()], data);
        allocation.written[range].fill(true);
        Ok(())
    }

    /// Bytes currently allocated (for cuMemGetInfo).
    pub fn allocated_bytes(&self) -> u64 {
        self.allocations
            .values()
            .map(|a| a.bytes.len() as u64)
            .sum()
    }
}
