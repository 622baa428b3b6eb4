pub mod gemm; pub mod math; pub mod rows;
