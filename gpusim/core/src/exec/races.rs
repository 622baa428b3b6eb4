//! Shared-memory race detection. Between two block barriers, every byte of shared memory remembers its last
//! writer and its readers (one thread, or "several"). Two different threads touching the same byte with at least
//! one write is a race. Only `bar.sync` orders threads: warp-synchronous code that relies on a warp running in
//! lock step (no `__syncwarp`/barrier between the write and the other lane's read) is reported too, as the CUDA
//! memory model asks. Atomics are not tracked (they never race with each other).
//!
//! Instead of clearing the table at each barrier, each cell carries the barrier epoch it was last touched in.

const NOBODY: u32 = u32::MAX;
const SEVERAL: u32 = u32::MAX - 1;

#[derive(Clone, Copy)]
struct Cell {
    epoch: u32,
    writer: u32,
    writer_line: u32,
    reader: u32,
    reader_line: u32,
}

const EMPTY: Cell = Cell {
    epoch: 0,
    writer: NOBODY,
    writer_line: 0,
    reader: NOBODY,
    reader_line: 0,
};

/// The other side of a race: the thread (linear id, or `None` for "several threads") and its PTX line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Conflict {
    pub offset: u64,
    pub other_thread: Option<u32>,
    pub other_line: u32,
    pub other_wrote: bool,
}

pub(crate) struct RaceTracker {
    epoch: u32,
    cells: Vec<Cell>,
}

impl RaceTracker {
    pub fn new(bytes: usize) -> Self {
        RaceTracker {
            epoch: 1,
            cells: vec![EMPTY; bytes],
        }
    }

    /// A barrier (or a new block) orders everything before it.
    pub fn barrier(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.cells.fill(EMPTY);
            self.epoch = 1;
        }
    }

    fn cell(&mut self, offset: usize) -> &mut Cell {
        let epoch = self.epoch;
        let cell = &mut self.cells[offset];
        if cell.epoch != epoch {
            *cell = Cell { epoch, ..EMPTY };
        }
        cell
    }

    pub fn read(
        &mut self,
        offset: usize,
        len: usize,
        thread: u32,
        line: u32,
    ) -> Result<(), Conflict> {
        let epoch = self.epoch;
        for (k, cell) in self.cells[offset..offset + len].iter_mut().enumerate() {
            if cell.epoch != epoch {
                *cell = Cell { epoch, ..EMPTY };
            }
            if cell.writer != NOBODY && cell.writer != thread {
                return Err(Conflict {
                    offset: (offset + k) as u64,
                    other_thread: Some(cell.writer),
                    other_line: cell.writer_line,
                    other_wrote: true,
                });
            }
            if cell.reader == NOBODY {
                cell.reader = thread;
                cell.reader_line = line;
            } else if cell.reader != thread {
                cell.reader = SEVERAL;
            }
        }
        Ok(())
    }

    pub fn write(
        &mut self,
        offset: usize,
        len: usize,
        thread: u32,
        line: u32,
    ) -> Result<(), Conflict> {
        for o in offset..offset + len {
            let cell = self.cell(o);
            if cell.writer != NOBODY && cell.writer != thread {
                return Err(Conflict {
                    offset: o as u64,
                    other_thread: Some(cell.writer),
                    other_line: cell.writer_line,
                    other_wrote: true,
                });
            }
            if cell.reader != NOBODY && cell.reader != thread {
                let other_thread = (cell.reader != SEVERAL).then_some(cell.reader);
                return Err(Conflict {
                    offset: o as u64,
                    other_thread,
                    other_line: cell.reader_line,
                    other_wrote: false,
                });
            }
            cell.writer = thread;
            cell.writer_line = line;
        }
        Ok(())
    }
}
