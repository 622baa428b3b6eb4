//! Streams, events, stream capture and graphs.
//!
//! Operations run at enqueue, so a stream is always idle: synchronising is only checked against capture rules,
//! and an event's time is when it was recorded. A captured stream records its operations instead; the graph
//! owns them, and each `cuGraphLaunch` of its instantiation runs them in order.

use std::ffi::{c_int, c_uint, c_ulonglong};
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::{
    CUevent, CUgraph, CUgraphExec, CUgraphExecUpdateResult, CUgraphExecUpdateResultInfo, CUresult,
    CUstream, CUstreamCaptureMode, CUstreamCaptureStatus,
};

use super::{code, put, stream_key, with_state, with_stream};
use crate::gemm::GemmCall;
use crate::ops::{enqueue, Op};
use crate::state::{fail, from_handle, to_handle, Capture, State, Stream, DEFAULT_STREAM};

fn new_stream(out: *mut CUstream, call: &str) -> CUresult {
    with_state(call, |state| {
        let id = state.new_handle();
        state.streams.insert(id, Stream::default());
        // SAFETY: the caller passes a valid out-pointer (or null, refused).
        unsafe { put(out, to_handle(id), call) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(phStream: *mut CUstream, _Flags: c_uint) -> CUresult {
    new_stream(phStream, "cuStreamCreate")
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    phStream: *mut CUstream,
    _flags: c_uint,
    _priority: c_int,
) -> CUresult {
    new_stream(phStream, "cuStreamCreateWithPriority")
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(hStream: CUstream) -> CUresult {
    let call = "cuStreamDestroy_v2";
    with_stream(call, hStream, |state, key| {
        if key == DEFAULT_STREAM {
            return fail(
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                format!("{call}: the default stream cannot be destroyed"),
            );
        }
        state.streams.remove(&key);
        CUresult::CUDA_SUCCESS
    })
}

fn synchronise(stream: CUstream, call: &str) -> CUresult {
    with_stream(call, stream, |state, key| {
        if let Some(capture) = state.streams.get_mut(&key).and_then(|s| s.capture.as_mut()) {
            capture
                .invalidated
                .get_or_insert_with(|| format!("{call} on the capturing stream"));
            return fail(
                CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                format!("{call} on a stream being captured (the capture is invalidated)"),
            );
        }
        match state.forbid_during_capture(call) {
            Ok(()) => CUresult::CUDA_SUCCESS,
            Err((c, m)) => fail(c, m),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(hStream: CUstream) -> CUresult {
    synchronise(hStream, "cuStreamSynchronize")
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(hStream: CUstream) -> CUresult {
    synchronise(hStream, "cuStreamQuery")
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(
    hStream: CUstream,
    hEvent: CUevent,
    _Flags: c_uint,
) -> CUresult {
    let call = "cuStreamWaitEvent";
    with_state(call, |state| {
        code(stream_key(state, hStream, call).and_then(|_| event_exists(state, hEvent, call)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2(
    hStream: CUstream,
    mode: CUstreamCaptureMode,
) -> CUresult {
    let call = "cuStreamBeginCapture_v2";
    with_stream(call, hStream, |state, key| {
        if key == DEFAULT_STREAM {
            return fail(
                CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                format!("{call}: the legacy default stream cannot be captured"),
            );
        }
        let Some(stream) = state.streams.get_mut(&key) else {
            return fail(
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                format!("{call}: no stream"),
            );
        };
        if stream.capture.is_some() {
            return fail(
                CUresult::CUDA_ERROR_ILLEGAL_STATE,
                format!("{call}: the stream is already being captured"),
            );
        }
        stream.capture = Some(Capture {
            ops: Vec::new(),
            mode,
            thread: std::thread::current().id(),
            invalidated: None,
        });
        CUresult::CUDA_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture(hStream: CUstream, phGraph: *mut CUgraph) -> CUresult {
    let call = "cuStreamEndCapture";
    with_stream(call, hStream, |state, key| {
        let Some(capture) = state.streams.get_mut(&key).and_then(|s| s.capture.take()) else {
            return fail(
                CUresult::CUDA_ERROR_ILLEGAL_STATE,
                format!("{call}: the stream is not being captured"),
            );
        };
        if capture.mode == CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            && capture.thread != std::thread::current().id()
        {
            return fail(
                CUresult::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
                format!("{call}: a thread-local capture was ended by another thread"),
            );
        }
        if let Some(why) = capture.invalidated {
            if !phGraph.is_null() {
                // SAFETY: non-null out-pointer, valid by the caller's contract.
                unsafe { phGraph.write(std::ptr::null_mut()) };
            }
            return fail(
                CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                format!("{call}: {why}"),
            );
        }
        let id = state.new_handle();
        state.graphs.insert(id, Arc::new(capture.ops));
        // SAFETY: the caller passes a valid out-pointer (or null, refused).
        unsafe { put(phGraph, to_handle(id), call) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(
    hStream: CUstream,
    captureStatus: *mut CUstreamCaptureStatus,
) -> CUresult {
    let call = "cuStreamIsCapturing";
    with_stream(call, hStream, |state, key| {
        let status = match state.streams.get(&key).and_then(|s| s.capture.as_ref()) {
            None => CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE,
            Some(c) if c.invalidated.is_some() => {
                CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED
            }
            Some(_) => CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE,
        };
        // SAFETY: as above.
        unsafe { put(captureStatus, status, call) }
    })
}

fn event_exists(state: &State, event: CUevent, call: &str) -> Result<(), CUresult> {
    let id = from_handle(event);
    if state.events.contains_key(&id) {
        Ok(())
    } else {
        Err(fail(
            CUresult::CUDA_ERROR_INVALID_HANDLE,
            format!("{call}: event 0x{id:x} does not exist"),
        ))
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(phEvent: *mut CUevent, _Flags: c_uint) -> CUresult {
    let call = "cuEventCreate";
    with_state(call, |state| {
        let id = state.new_handle();
        state.events.insert(id, None);
        // SAFETY: as above.
        unsafe { put(phEvent, to_handle(id), call) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(hEvent: CUevent) -> CUresult {
    let call = "cuEventDestroy_v2";
    with_state(call, |state| {
        if let Err(c) = event_exists(state, hEvent, call) {
            return c;
        }
        state.events.remove(&from_handle(hEvent));
        CUresult::CUDA_SUCCESS
    })
}

/// Stamps the event with the time now; inside a capture it orders nothing here (one device, run at enqueue).
#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(hEvent: CUevent, hStream: CUstream) -> CUresult {
    let call = "cuEventRecord";
    with_state(call, |state| {
        let checked =
            stream_key(state, hStream, call).and_then(|_| event_exists(state, hEvent, call));
        if let Err(c) = checked {
            return c;
        }
        state
            .events
            .insert(from_handle(hEvent), Some(Instant::now()));
        CUresult::CUDA_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(hEvent: CUevent) -> CUresult {
    let call = "cuEventSynchronize";
    with_state(call, |state| code(event_exists(state, hEvent, call)))
}

#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(hEvent: CUevent) -> CUresult {
    let call = "cuEventQuery";
    with_state(call, |state| code(event_exists(state, hEvent, call)))
}

/// Host time between the two records: the simulator's, nothing like a GPU's.
#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    pMilliseconds: *mut f32,
    hStart: CUevent,
    hEnd: CUevent,
) -> CUresult {
    let call = "cuEventElapsedTime_v2";
    with_state(call, |state| {
        let stamp = |e: CUevent| state.events.get(&from_handle(e)).copied();
        match (stamp(hStart), stamp(hEnd)) {
            (Some(Some(a)), Some(Some(b))) => {
                let ms = b.saturating_duration_since(a).as_secs_f64() * 1e3;
                // SAFETY: as above.
                unsafe { put(pMilliseconds, ms as f32, call) }
            }
            (Some(_), Some(_)) => fail(
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                format!("{call}: an event was never recorded"),
            ),
            _ => fail(
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                format!("{call}: an event does not exist"),
            ),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    phGraphExec: *mut CUgraphExec,
    hGraph: CUgraph,
    _flags: c_ulonglong,
) -> CUresult {
    let call = "cuGraphInstantiateWithFlags";
    with_state(call, |state| {
        let id = from_handle(hGraph);
        let Some(ops) = state.graphs.get(&id).cloned() else {
            return fail(
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                format!("{call}: graph 0x{id:x} does not exist"),
            );
        };
        let exec = state.new_handle();
        state.execs.insert(exec, ops);
        // SAFETY: as above.
        unsafe { put(phGraphExec, to_handle(exec), call) }
    })
}

/// Why the operations of a graph cannot replace those of an instantiation, as the driver's update judges it:
/// the same number of nodes of the same kinds, each kernel the same function, and each GEMM the same problem
/// (cuBLAS picks its kernels by the sizes, so a different problem may be different kernels). Parameters,
/// pointers, grids and strides may all change.
///
/// With `GPUSIM_REFUSE_GRAPH_UPDATES=1` every update is refused, as a driver may refuse one the simulator would
/// accept (cuBLAS choosing other kernels for other strides): the path that instantiates again is tested.
fn update_refused(exec: &[Op], graph: &[Op]) -> Option<(CUgraphExecUpdateResult, String)> {
    use CUgraphExecUpdateResult::*;
    if std::env::var("GPUSIM_REFUSE_GRAPH_UPDATES").as_deref() == Ok("1") {
        let why = "every update is refused (GPUSIM_REFUSE_GRAPH_UPDATES=1)".to_string();
        return Some((CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED, why));
    }
    if exec.len() != graph.len() {
        let why = format!("{} nodes, against {}", graph.len(), exec.len());
        return Some((CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, why));
    }
    for (i, (old, new)) in exec.iter().zip(graph).enumerate() {
        let refused = match (old, new) {
            (Op::Launch { kernel: a, .. }, Op::Launch { kernel: b, .. }) => (a.name != b.name)
                .then(|| {
                    (
                        CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED,
                        format!("`{}` became `{}`", a.name, b.name),
                    )
                }),
            (Op::Gemm(a), Op::Gemm(b)) => {
                let problem = |g: &GemmCall| {
                    (
                        g.trans_a,
                        g.trans_b,
                        g.m,
                        g.n,
                        g.k,
                        g.batch,
                        g.a.storage,
                        g.c.storage,
                    )
                };
                (problem(a) != problem(b)).then(|| {
                    (
                        CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED,
                        "a GEMM of other sizes".to_string(),
                    )
                })
            }
            (Op::Copy { .. }, Op::Copy { .. }) | (Op::Memset { .. }, Op::Memset { .. }) => None,
            _ => Some((
                CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED,
                "a node of another kind".to_string(),
            )),
        };
        if let Some((result, why)) = refused {
            return Some((result, format!("node {i}: {why}")));
        }
    }
    None
}

/// Gives the instantiation `hGraphExec` the parameters of `hGraph`'s nodes when the two have the same structure
/// (see [`update_refused`]); otherwise the instantiation is left as it was and `resultInfo` says why.
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecUpdate_v2(
    hGraphExec: CUgraphExec,
    hGraph: CUgraph,
    resultInfo: *mut CUgraphExecUpdateResultInfo,
) -> CUresult {
    let call = "cuGraphExecUpdate_v2";
    with_state(call, |state| {
        let (exec_id, graph_id) = (from_handle(hGraphExec), from_handle(hGraph));
        let (Some(exec), Some(graph)) = (state.execs.get(&exec_id), state.graphs.get(&graph_id))
        else {
            return fail(
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                format!("{call}: graph exec 0x{exec_id:x} or graph 0x{graph_id:x} does not exist"),
            );
        };
        let refused = update_refused(exec, graph);
        let result = refused
            .as_ref()
            .map_or(CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS, |r| {
                r.0
            });
        let info = CUgraphExecUpdateResultInfo {
            result,
            errorNode: std::ptr::null_mut(),
            errorFromNode: std::ptr::null_mut(),
        };
        // SAFETY: the caller passes a valid out-pointer (or null, refused).
        let put_info = unsafe { put(resultInfo, info, call) };
        if put_info != CUresult::CUDA_SUCCESS {
            return put_info;
        }
        if let Some((_, why)) = refused {
            return fail(
                CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
                format!("{call}: the graph differs from the instantiation ({why})"),
            );
        }
        let ops = graph.clone();
        state.execs.insert(exec_id, ops);
        CUresult::CUDA_SUCCESS
    })
}

/// Runs the graph's operations in capture order (or records them, when `hStream` is itself being captured).
#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(hGraphExec: CUgraphExec, hStream: CUstream) -> CUresult {
    let call = "cuGraphLaunch";
    with_stream(call, hStream, |state, key| {
        let id = from_handle(hGraphExec);
        let Some(ops) = state.execs.get(&id).cloned() else {
            return fail(
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                format!("{call}: graph exec 0x{id:x} does not exist"),
            );
        };
        for (i, op) in ops.iter().enumerate() {
            if let Err(mut e) = enqueue(state, key, Op::clone(op)) {
                e.message = format!("{call}: node {i} of {}: {}", ops.len(), e.message);
                return e.report();
            }
        }
        CUresult::CUDA_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphUpload(hGraphExec: CUgraphExec, hStream: CUstream) -> CUresult {
    let call = "cuGraphUpload";
    with_state(call, |state| {
        let id = from_handle(hGraphExec);
        if !state.execs.contains_key(&id) {
            return fail(
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                format!("{call}: graph exec 0x{id:x} does not exist"),
            );
        }
        code(stream_key(state, hStream, call).map(drop))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(hGraphExec: CUgraphExec) -> CUresult {
    let call = "cuGraphExecDestroy";
    with_state(call, |state| {
        let id = from_handle(hGraphExec);
        match state.execs.remove(&id) {
            Some(_) => CUresult::CUDA_SUCCESS,
            None => fail(
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                format!("{call}: graph exec 0x{id:x} does not exist"),
            ),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphDestroy(hGraph: CUgraph) -> CUresult {
    let call = "cuGraphDestroy";
    with_state(call, |state| {
        let id = from_handle(hGraph);
        match state.graphs.remove(&id) {
            Some(_) => CUresult::CUDA_SUCCESS,
            None => fail(
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                format!("{call}: graph 0x{id:x} does not exist"),
            ),
        }
    })
}
