//! The parser and interpreter on a committed PTX module (no nvcc needed): parameter layout, debug directives,
//! hex float immediates, vector parameter loads, guards, dynamic shared memory, inline-asm scopes, packing.

mod common;

use common::{download, upload};
use gpusim::{launch, DeviceMemory, LaunchConfig, Module, ParamInfo, SimError};

const FIXTURE: &str = include_str!("fixtures/handwritten.ptx");

fn param(name: &str, size: u32, align: u32, offset: u32) -> ParamInfo {
    ParamInfo {
        name: name.into(),
        size,
        align,
        offset,
    }
}

#[test]
fn parameters_are_laid_out_with_their_alignment() {
    let module = Module::from_ptx(FIXTURE).unwrap();
    assert_eq!(module.kernels.len(), 3);
    let saxpy = module.kernel("saxpy").unwrap();
    assert_eq!(
        saxpy.params,
        vec![
            param("saxpy_param_0", 8, 8, 0),
            param("saxpy_param_1", 8, 8, 8),
            param("saxpy_param_2", 4, 4, 16),
            param("saxpy_param_3", 4, 4, 20),
            param("saxpy_param_4", 16, 8, 24),
        ]
    );
    assert_eq!(saxpy.params_bytes(), 40);
    assert_eq!(saxpy.static_shared_bytes, 0);
    assert!(matches!(
        module.kernel("nope"),
        Err(SimError::NoSuchKernel(_))
    ));
}

#[test]
fn saxpy_runs_with_a_guard_and_a_struct_parameter() {
    let module = Module::from_ptx(FIXTURE).unwrap();
    let kernel = module.kernel("saxpy").unwrap();
    let n = 300usize;
    let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
    let y: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
    let mut memory = DeviceMemory::new();
    let (dx, dy) = (upload(&mut memory, &x), upload(&mut memory, &y));
    let a = 1.5f32;
    let mut params = vec![0u8; 40];
    params[0..8].copy_from_slice(&dx.to_le_bytes());
    params[8..16].copy_from_slice(&dy.to_le_bytes());
    params[16..20].copy_from_slice(&a.to_le_bytes());
    params[20..24].copy_from_slice(&(n as u32).to_le_bytes());
    params[32..36].copy_from_slice(&7u32.to_le_bytes());
    params[36..40].copy_from_slice(&5u32.to_le_bytes());
    let config = LaunchConfig {
        grid: [3, 1, 1],
        block: [128, 1, 1],
        dynamic_shared_bytes: 0,
    };
    launch(&kernel, &mut memory, config, &params).unwrap();
    let got: Vec<f32> = download(&memory, dy, n);
    for i in 0..n {
        assert_eq!(got[i], a.mul_add(x[i], y[i]) + 1.0 + 5.0, "element {i}");
    }
}

#[test]
fn dynamic_shared_memory_and_a_barrier() {
    let module = Module::from_ptx(FIXTURE).unwrap();
    let kernel = module.kernel("rotate").unwrap();
    let mut memory = DeviceMemory::new();
    let out = memory.alloc(64 * 4).unwrap();
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [64, 1, 1],
        dynamic_shared_bytes: 256,
    };
    launch(&kernel, &mut memory, config, &out.to_le_bytes()).unwrap();
    let got: Vec<u32> = download(&memory, out, 64);
    let expected: Vec<u32> = (0..64).map(|t| 2 * ((t + 1) % 64)).collect();
    assert_eq!(got, expected);
    // Without the dynamic shared memory the first store is out of bounds, and the error says where.
    let config = LaunchConfig {
        dynamic_shared_bytes: 0,
        ..config
    };
    match launch(&kernel, &mut memory, config, &out.to_le_bytes()) {
        Err(SimError::OutOfBounds {
            access: "shared write",
            site,
            ..
        }) => {
            assert_eq!(site.kernel, "rotate");
            assert_eq!(site.ptx_line, 75);
        }
        other => panic!("expected a shared out-of-bounds write, got {other:?}"),
    }
}

#[test]
fn an_unknown_instruction_is_an_error_naming_it() {
    let text = FIXTURE.replace(
        "fma.rn.f32 \t%f4, %f1, %f2, %f3;",
        "frobnicate.f32 \t%f4, %f1, %f2, %f3;",
    );
    assert_ne!(text, FIXTURE);
    match Module::from_ptx(&text) {
        Err(SimError::UnsupportedInstruction { line, instruction }) => {
            assert_eq!(instruction, "frobnicate.f32");
            assert_eq!(line, 48);
        }
        other => panic!("expected UnsupportedInstruction, got {other:?}"),
    }
}

#[test]
fn a_syntax_error_names_its_line() {
    let text = FIXTURE.replace("add.s64 \t%rd6, %rd3, %rd5;", "add.s64 \t%rd6, %rd3 %rd5;");
    assert_ne!(text, FIXTURE);
    assert!(
        matches!(
            Module::from_ptx(&text),
            Err(SimError::Parse { line: 44, .. })
        ),
        "{:?}",
        Module::from_ptx(&text)
    );
}

#[test]
fn a_loop_runs_its_trip_count() {
    let module = Module::from_ptx(FIXTURE).unwrap();
    let kernel = module.kernel("spin").unwrap();
    let mut memory = DeviceMemory::new();
    let out = memory.alloc(128 * 4).unwrap();
    let mut params = vec![0u8; 12];
    params[..8].copy_from_slice(&out.to_le_bytes());
    params[8..].copy_from_slice(&100u32.to_le_bytes());
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [128, 1, 1],
        dynamic_shared_bytes: 0,
    };
    let stats = gpusim::launch_with_stats(&kernel, &mut memory, config, &params).unwrap();
    let got: Vec<f32> = download(&memory, out, 128);
    let expected: Vec<f32> = (0..128).map(|t| 50.0 * t as f32).collect();
    assert_eq!(got, expected);
    // 6 set-up instructions, 4 per trip, 5 after the loop.
    assert_eq!(stats.instructions, 128 * (6 + 4 * 100 + 5));
}

#[test]
fn truncated_or_garbled_ptx_is_an_error_never_a_panic() {
    for cut in (0..FIXTURE.len()).step_by(7) {
        if FIXTURE.is_char_boundary(cut) {
            let _ = Module::from_ptx(&FIXTURE[..cut]);
        }
    }
    for (i, c) in FIXTURE.char_indices().step_by(13) {
        let garbled: String = FIXTURE[..i].to_string() + "#" + &FIXTURE[i + c.len_utf8()..];
        let _ = Module::from_ptx(&garbled);
    }
}
