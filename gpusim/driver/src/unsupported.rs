//! Every other function cudarc's wrappers may resolve on fuse's paths (cudarc panics on a symbol the library
//! lacks): each returns `CUDA_ERROR_NOT_SUPPORTED` / `CUBLAS_STATUS_NOT_SUPPORTED` and records a message naming
//! the call (behind `cuGetErrorString`, printed to stderr once). The signatures are cudarc's `sys` bindings' for
//! CUDA 13.0, copied as they are: an argument list that matches keeps the C ABI exact.

/// Records that `call` is not simulated.
fn unsupported(call: &str) -> cudarc::driver::sys::CUresult {
    crate::state::fail(
        cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_SUPPORTED,
        format!("{call} is not supported by the simulator"),
    )
}

macro_rules! driver {
    ($(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> CUresult;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CUresult {
            unsupported(stringify!($name))
        }
    )*};
}

macro_rules! blas {
    ($(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> cublasStatus_t;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> cublasStatus_t {
            unsupported(stringify!($name));
            cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED
        }
    )*};
}

/// The driver API.
pub mod driver {
    use super::unsupported;
    use cudarc::driver::sys::*;

    driver! {
        fn cuCtxCreate_v4(_pctx: *mut CUcontext, _ctxCreateParams: *mut CUctxCreateParams, _flags: ::core::ffi::c_uint, _dev: CUdevice) -> CUresult;
        fn cuCtxDestroy_v2(_ctx: CUcontext) -> CUresult;
        fn cuCtxGetCacheConfig(_pconfig: *mut CUfunc_cache) -> CUresult;
        fn cuCtxGetLimit(_pvalue: *mut usize, _limit: CUlimit) -> CUresult;
        fn cuCtxSetCacheConfig(_config: CUfunc_cache) -> CUresult;
        fn cuCtxSetFlags(_flags: ::core::ffi::c_uint) -> CUresult;
        fn cuCtxSetLimit(_limit: CUlimit, _value: usize) -> CUresult;
        fn cuDestroyExternalMemory(_extMem: CUexternalMemory) -> CUresult;
        fn cuDeviceGetDefaultMemPool(_pool_out: *mut CUmemoryPool, _dev: CUdevice) -> CUresult;
        fn cuDeviceGetMemPool(_pool: *mut CUmemoryPool, _dev: CUdevice) -> CUresult;
        fn cuDeviceSetMemPool(_dev: CUdevice, _pool: CUmemoryPool) -> CUresult;
        fn cuExternalMemoryGetMappedBuffer(_devPtr: *mut CUdeviceptr, _extMem: CUexternalMemory, _bufferDesc: *const CUDA_EXTERNAL_MEMORY_BUFFER_DESC) -> CUresult;
        fn cuImportExternalMemory(_extMem_out: *mut CUexternalMemory, _memHandleDesc: *const CUDA_EXTERNAL_MEMORY_HANDLE_DESC) -> CUresult;
        fn cuLaunchCooperativeKernel(_f: CUfunction, _gridDimX: ::core::ffi::c_uint, _gridDimY: ::core::ffi::c_uint, _gridDimZ: ::core::ffi::c_uint, _blockDimX: ::core::ffi::c_uint, _blockDimY: ::core::ffi::c_uint, _blockDimZ: ::core::ffi::c_uint, _sharedMemBytes: ::core::ffi::c_uint, _hStream: CUstream, _kernelParams: *mut *mut ::core::ffi::c_void) -> CUresult;
        fn cuLaunchHostFunc(_hStream: CUstream, _fn_: CUhostFn, _userData: *mut ::core::ffi::c_void) -> CUresult;
        fn cuMemAdvise_v2(_devPtr: CUdeviceptr, _count: usize, _advice: CUmem_advise, _location: CUmemLocation) -> CUresult;
        fn cuMemAllocFromPoolAsync(_dptr: *mut CUdeviceptr, _bytesize: usize, _pool: CUmemoryPool, _hStream: CUstream) -> CUresult;
        fn cuMemAllocManaged(_dptr: *mut CUdeviceptr, _bytesize: usize, _flags: ::core::ffi::c_uint) -> CUresult;
        fn cuMemFreeHost(_p: *mut ::core::ffi::c_void) -> CUresult;
        fn cuMemHostAlloc(_pp: *mut *mut ::core::ffi::c_void, _bytesize: usize, _Flags: ::core::ffi::c_uint) -> CUresult;
        fn cuMemPoolCreate(_pool: *mut CUmemoryPool, _poolProps: *const CUmemPoolProps) -> CUresult;
        fn cuMemPoolDestroy(_pool: CUmemoryPool) -> CUresult;
        fn cuMemPoolGetAttribute(_pool: CUmemoryPool, _attr: CUmemPool_attribute, _value: *mut ::core::ffi::c_void) -> CUresult;
        fn cuMemPoolSetAttribute(_pool: CUmemoryPool, _attr: CUmemPool_attribute, _value: *mut ::core::ffi::c_void) -> CUresult;
        fn cuMemPoolTrimTo(_pool: CUmemoryPool, _minBytesToKeep: usize) -> CUresult;
        fn cuMemPrefetchAsync_v2(_devPtr: CUdeviceptr, _count: usize, _location: CUmemLocation, _flags: ::core::ffi::c_uint, _hStream: CUstream) -> CUresult;
        fn cuMemcpyPeerAsync(_dstDevice: CUdeviceptr, _dstContext: CUcontext, _srcDevice: CUdeviceptr, _srcContext: CUcontext, _ByteCount: usize, _hStream: CUstream) -> CUresult;
        fn cuModuleGetGlobal_v2(_dptr: *mut CUdeviceptr, _bytes: *mut usize, _hmod: CUmodule, _name: *const ::core::ffi::c_char) -> CUresult;
        fn cuModuleLoad(_module: *mut CUmodule, _fname: *const ::core::ffi::c_char) -> CUresult;
        fn cuOccupancyAvailableDynamicSMemPerBlock(_dynamicSmemSize: *mut usize, _func: CUfunction, _numBlocks: ::core::ffi::c_int, _blockSize: ::core::ffi::c_int) -> CUresult;
        fn cuOccupancyMaxActiveBlocksPerMultiprocessor(_numBlocks: *mut ::core::ffi::c_int, _func: CUfunction, _blockSize: ::core::ffi::c_int, _dynamicSMemSize: usize) -> CUresult;
        fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(_numBlocks: *mut ::core::ffi::c_int, _func: CUfunction, _blockSize: ::core::ffi::c_int, _dynamicSMemSize: usize, _flags: ::core::ffi::c_uint) -> CUresult;
        fn cuOccupancyMaxActiveClusters(_numClusters: *mut ::core::ffi::c_int, _func: CUfunction, _config: *const CUlaunchConfig) -> CUresult;
        fn cuOccupancyMaxPotentialBlockSize(_minGridSize: *mut ::core::ffi::c_int, _blockSize: *mut ::core::ffi::c_int, _func: CUfunction, _blockSizeToDynamicSMemSize: CUoccupancyB2DSize, _dynamicSMemSize: usize, _blockSizeLimit: ::core::ffi::c_int) -> CUresult;
        fn cuOccupancyMaxPotentialBlockSizeWithFlags(_minGridSize: *mut ::core::ffi::c_int, _blockSize: *mut ::core::ffi::c_int, _func: CUfunction, _blockSizeToDynamicSMemSize: CUoccupancyB2DSize, _dynamicSMemSize: usize, _blockSizeLimit: ::core::ffi::c_int, _flags: ::core::ffi::c_uint) -> CUresult;
        fn cuOccupancyMaxPotentialClusterSize(_clusterSize: *mut ::core::ffi::c_int, _func: CUfunction, _config: *const CUlaunchConfig) -> CUresult;
        fn cuProfilerStart() -> CUresult;
        fn cuProfilerStop() -> CUresult;
        fn cuStreamAttachMemAsync(_hStream: CUstream, _dptr: CUdeviceptr, _length: usize, _flags: ::core::ffi::c_uint) -> CUresult;
        fn cuStreamGetCaptureInfo_v3(_hStream: CUstream, _captureStatus_out: *mut CUstreamCaptureStatus, _id_out: *mut cuuint64_t, _graph_out: *mut CUgraph, _dependencies_out: *mut *const CUgraphNode, _edgeData_out: *mut *const CUgraphEdgeData, _numDependencies_out: *mut usize) -> CUresult;
        fn cuGraphCreate(_phGraph: *mut CUgraph, _flags: ::core::ffi::c_uint) -> CUresult;
        fn cuGraphAddKernelNode_v2(_phGraphNode: *mut CUgraphNode, _hGraph: CUgraph, _dependencies: *const CUgraphNode, _numDependencies: usize, _nodeParams: *const CUDA_KERNEL_NODE_PARAMS) -> CUresult;
    }
}

/// cuBLAS.
pub mod cublas {
    use super::unsupported;
    use cudarc::cublas::sys::*;

    blas! {
        fn cublasDasum_v2(_handle: cublasHandle_t, _n: ::core::ffi::c_int, _x: *const f64, _incx: ::core::ffi::c_int, _result: *mut f64) -> cublasStatus_t;
        fn cublasDgemmStridedBatched(_handle: cublasHandle_t, _transa: cublasOperation_t, _transb: cublasOperation_t, _m: ::core::ffi::c_int, _n: ::core::ffi::c_int, _k: ::core::ffi::c_int, _alpha: *const f64, _A: *const f64, _lda: ::core::ffi::c_int, _strideA: ::core::ffi::c_longlong, _B: *const f64, _ldb: ::core::ffi::c_int, _strideB: ::core::ffi::c_longlong, _beta: *const f64, _C: *mut f64, _ldc: ::core::ffi::c_int, _strideC: ::core::ffi::c_longlong, _batchCount: ::core::ffi::c_int) -> cublasStatus_t;
        fn cublasDgemm_v2(_handle: cublasHandle_t, _transa: cublasOperation_t, _transb: cublasOperation_t, _m: ::core::ffi::c_int, _n: ::core::ffi::c_int, _k: ::core::ffi::c_int, _alpha: *const f64, _A: *const f64, _lda: ::core::ffi::c_int, _B: *const f64, _ldb: ::core::ffi::c_int, _beta: *const f64, _C: *mut f64, _ldc: ::core::ffi::c_int) -> cublasStatus_t;
        fn cublasDgemv_v2(_handle: cublasHandle_t, _trans: cublasOperation_t, _m: ::core::ffi::c_int, _n: ::core::ffi::c_int, _alpha: *const f64, _A: *const f64, _lda: ::core::ffi::c_int, _x: *const f64, _incx: ::core::ffi::c_int, _beta: *const f64, _y: *mut f64, _incy: ::core::ffi::c_int) -> cublasStatus_t;
        fn cublasGemmEx(_handle: cublasHandle_t, _transa: cublasOperation_t, _transb: cublasOperation_t, _m: ::core::ffi::c_int, _n: ::core::ffi::c_int, _k: ::core::ffi::c_int, _alpha: *const ::core::ffi::c_void, _A: *const ::core::ffi::c_void, _Atype: cudaDataType, _lda: ::core::ffi::c_int, _B: *const ::core::ffi::c_void, _Btype: cudaDataType, _ldb: ::core::ffi::c_int, _beta: *const ::core::ffi::c_void, _C: *mut ::core::ffi::c_void, _Ctype: cudaDataType, _ldc: ::core::ffi::c_int, _computeType: cublasComputeType_t, _algo: cublasGemmAlgo_t) -> cublasStatus_t;
        fn cublasGemmGroupedBatchedEx(_handle: cublasHandle_t, _transa_array: *const cublasOperation_t, _transb_array: *const cublasOperation_t, _m_array: *const ::core::ffi::c_int, _n_array: *const ::core::ffi::c_int, _k_array: *const ::core::ffi::c_int, _alpha_array: *const ::core::ffi::c_void, _Aarray: *const *const ::core::ffi::c_void, _Atype: cudaDataType_t, _lda_array: *const ::core::ffi::c_int, _Barray: *const *const ::core::ffi::c_void, _Btype: cudaDataType_t, _ldb_array: *const ::core::ffi::c_int, _beta_array: *const ::core::ffi::c_void, _Carray: *const *mut ::core::ffi::c_void, _Ctype: cudaDataType_t, _ldc_array: *const ::core::ffi::c_int, _group_count: ::core::ffi::c_int, _group_size: *const ::core::ffi::c_int, _computeType: cublasComputeType_t) -> cublasStatus_t;
        fn cublasSasum_v2(_handle: cublasHandle_t, _n: ::core::ffi::c_int, _x: *const f32, _incx: ::core::ffi::c_int, _result: *mut f32) -> cublasStatus_t;
        fn cublasSgemm_v2(_handle: cublasHandle_t, _transa: cublasOperation_t, _transb: cublasOperation_t, _m: ::core::ffi::c_int, _n: ::core::ffi::c_int, _k: ::core::ffi::c_int, _alpha: *const f32, _A: *const f32, _lda: ::core::ffi::c_int, _B: *const f32, _ldb: ::core::ffi::c_int, _beta: *const f32, _C: *mut f32, _ldc: ::core::ffi::c_int) -> cublasStatus_t;
        fn cublasSgemv_v2(_handle: cublasHandle_t, _trans: cublasOperation_t, _m: ::core::ffi::c_int, _n: ::core::ffi::c_int, _alpha: *const f32, _A: *const f32, _lda: ::core::ffi::c_int, _x: *const f32, _incx: ::core::ffi::c_int, _beta: *const f32, _y: *mut f32, _incy: ::core::ffi::c_int) -> cublasStatus_t;
        fn cublasGetMathMode(_handle: cublasHandle_t, _mode: *mut cublasMath_t) -> cublasStatus_t;
    }
}
