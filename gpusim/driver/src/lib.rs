//! A stand-in for `libcuda.so` (the CUDA driver API) and `libcublas.so`, over the gpusim interpreter.
//! (To be written.)
