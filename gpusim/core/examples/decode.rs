//! Parses and decodes PTX files, printing each kernel with its parameters and instruction count, or the first
//! error: `cargo run -p gpusim --example decode -- a.ptx b.ptx`.

use gpusim::Module;

fn main() {
    let mut failed = false;
    for path in std::env::args().skip(1) {
        let decoded = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|text| Module::from_ptx(&text).map_err(|e| e.to_string()));
        match decoded {
            Ok(module) => {
                for k in &module.kernels {
                    let params: Vec<String> = k
                        .params
                        .iter()
                        .map(|p| format!("{}@{}", p.size, p.offset))
                        .collect();
                    println!(
                        "{path}: {} ({} instructions, {} B static shared, {} B local, params {})",
                        k.name,
                        k.instruction_count(),
                        k.static_shared_bytes,
                        k.local_bytes(),
                        params.join(" ")
                    );
                }
            }
            Err(e) => {
                failed = true;
                println!("{path}: {e}");
            }
        }
    }
    std::process::exit(i32::from(failed));
}
