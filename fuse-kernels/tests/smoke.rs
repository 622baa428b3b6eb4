#[test]
fn encoder_plans() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/src/models/encoder.rs")).unwrap();
    let file: syn::File = syn::parse_str(&src).unwrap();
    let m = file.items.iter().find_map(|i| if let syn::Item::Mod(m) = i { Some(m.clone()) } else { None }).unwrap();
    let cap = fuse_kernels::front::capture(&m);
    if let Some(e) = &cap.errors { panic!("{e}"); }
    let g = &cap.models[0].graph;
    println!("{}", fuse_kernels::plan::dump_graph(g));
    let p = fuse_kernels::plan::plan(g, fuse_kernels::plan::Mode::Fused);
    println!("{}", fuse_kernels::plan::dump(&p));
    let p = fuse_kernels::plan::plan(g, fuse_kernels::plan::Mode::Eager);
    println!("{}", fuse_kernels::plan::dump(&p));
}
