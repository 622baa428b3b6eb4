//! The device allocation table. Addresses are never reused while the table lives, so a stale pointer is caught
//! as out-of-bounds rather than reading someone else's buffer.

use crate::error::{SimError, SimResult};
use std::collections::BTreeMap;

struct Allocation {
    bytes: Vec<u8>,
    /// One flag per byte: written at least once (by a copy, a memset or a kernel).
    written: Vec<bool>,
}

#[derive(Default)]
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

    /// The start and size of the allocation holding `[address, address + len)`, with the offset of `address`.
    fn find(&self, address: u64, len: usize) -> Result<(u64, usize), Fault> {
        let (&base, allocation) = self
            .allocations
            .range(..=address)
            .next_back()
            .ok_or_else(|| Fault::OutOfBounds("below every allocation".to_string()))?;
        let offset = address - base;
        let size = allocation.bytes.len() as u64;
        if offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= size)
        {
            Ok((base, offset as usize))
        } else {
            Err(Fault::OutOfBounds(format!(
                "the nearest allocation is 0x{base:x} of {size} bytes (offset {offset})"
            )))
        }
    }

    /// Reads device bytes; `check_written` makes a never-written byte a fault.
    pub fn read(&self, address: u64, out: &mut [u8], check_written: bool) -> Result<(), Fault> {
        let (base, offset) = self.find(address, out.len())?;
        let Some(allocation) = self.allocations.get(&base) else {
            return Err(Fault::OutOfBounds("freed meanwhile".to_string()));
        };
        let range = offset..offset + out.len();
        if check_written && allocation.written[range.clone()].iter().any(|w| !w) {
            return Err(Fault::Uninitialized);
        }
        out.copy_from_slice(&allocation.bytes[range]);
        Ok(())
    }

    pub fn write(&mut self, address: u64, data: &[u8]) -> Result<(), Fault> {
        let (base, offset) = self.find(address, data.len())?;
        let Some(allocation) = self.allocations.get_mut(&base) else {
            return Err(Fault::OutOfBounds("freed meanwhile".to_string()));
        };
        let range = offset..offset + data.len();
        allocation.bytes[range.clone()].copy_from_slice(data);
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
