//! The values of every `arange` a CPU call reads: one table `0, 1, 2, ..` shared by the executor's calls, each
//! arange a window of it at its start. A call allocates nothing for them; the table grows (to the next power of
//! two, never shrinking) only when a call needs a longer one, and calls already running keep the table they took.

use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};

pub(crate) struct Iota(Mutex<Arc<[i64]>>);

impl Default for Iota {
    fn default() -> Self {
        Iota(Mutex::new(Arc::from(Vec::new())))
    }
}

impl Iota {
    /// The table, at least `len` values long.
    pub(crate) fn at_least(&self, len: usize) -> Result<Arc<[i64]>> {
        // The table is replaced whole, so a panic elsewhere cannot leave it half-written.
        let mut table = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if table.len() < len {
            let len = len.checked_next_power_of_two().unwrap_or(len);
            let last = i64::try_from(len).map_err(|_| Error::DimArgTooLarge { value: len })?;
            // Checked against what the process may still use first: a reservation the system overcommits would
            // only fail as the values are written.
            let mut values = crate::tensor::try_with_capacity(len, "the arange table")?;
            values.extend(0..last);
            *table = Arc::from(values);
        }
        Ok(Arc::clone(&table))
    }
}
