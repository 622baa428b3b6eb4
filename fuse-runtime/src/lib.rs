//! Run-time support for models compiled by fuse. (Temporary root; the lead extends it.)

pub mod cpu;
pub mod error;
pub mod tensor;
pub mod weights;

pub use error::{Error, Result};
pub use tensor::{DType, Tensor, TensorData};
