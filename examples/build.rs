//! Compiles the CUDA kernels of this crate's models with nvcc (`fuse_build`), so the binaries carry AOT fatbins.
//! Without nvcc it prints one warning and the build goes on: the binaries then JIT the source the macro embeds
//! with NVRTC on a GPU host, or run on the CPU. Set `NVCC` (e.g. to `scripts/install-nvcc.sh`'s output) to build
//! the fatbins.
fn main() {
    if let Err(e) = fuse_build::compile() {
        panic!("{e}");
    }
}
