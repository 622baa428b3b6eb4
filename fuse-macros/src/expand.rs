//! Expansion: each root model becomes a struct over `fuse_runtime::CompiledModel`, with its fused and eager
//! programs (CPU kernels written by `fuse_kernels::back::cpu`) in a private module beside it.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use fuse_kernels::contract::{self, Contract};
use fuse_kernels::front::{capture_with, model_source, CapturedModel};
use fuse_kernels::ir::{DType, Graph, NodeId, Op};
use fuse_kernels::plan::{plan, Mode};
use fuse_kernels::timing::{self, Timings};

mod cuda;

/// Expands a model module whose structs may use those of `libraries` (already collected, in `uses` order); every
/// model must meet `contract` and its `.fused()` promises, or the expansion carries their errors.
pub fn expand(
    module: &syn::ItemMod,
    libraries: &[syn::ItemMod],
    contract: &Contract,
) -> TokenStream {
    let mut timings = Timings::default();
    let cap = timings.time("capture", || capture_with(module, libraries));
    if let Some(errors) = cap.errors {
        return crate::fallback::stub(module, &cap.root_names, errors);
    }
    let source = model_source(module, libraries);
    let report = timing::requested(std::env::var(timing::ENV_VAR).ok().as_deref());
    let models = cap.models.iter().map(|m| {
        // Capture ran once for the module; each model's line repeats it.
        let mut timings = timings.clone();
        let tokens = crate::fallback::guarded(module, &m.name, || {
            expand_model(module, m, &source, contract, &mut timings, report)
        });
        if report {
            timings.size("tokens", count_tokens(&tokens));
            timings.size("bytes", tokens.to_string().len());
            eprintln!("fuse timings: macro, model {}: {timings}", m.name);
        }
        tokens
    });
    let consts = kept_items(module);
    replace_module(module, quote!(#(#consts)* #(#models)*))
}

/// The user's module (its attributes, visibility and name) with `body` as its new contents.
pub fn replace_module(module: &syn::ItemMod, body: TokenStream) -> TokenStream {
    let attrs = &module.attrs;
    let vis = &module.vis;
    let ident = &module.ident;
    quote! {
        #(#attrs)*
        #vis mod #ident {
            #body
        }
    }
}

/// The module's constants stay usable from outside (`encoder::HIDDEN`).
pub fn kept_items(module: &syn::ItemMod) -> Vec<syn::Item> {
    let Some((_, items)) = &module.content else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Const(c) => {
                // The model already used them at compile time; the user may or may not.
                let mut c = c.clone();
                c.attrs.push(syn::parse_quote!(#[allow(dead_code)]));
                Some(syn::Item::Const(c))
            }
            _ => None,
        })
        .collect()
}

fn forward_fn<'m>(module: &'m syn::ItemMod, model: &syn::Ident) -> Option<&'m syn::ImplItemFn> {
    let (_, items) = module.content.as_ref()?;
    items.iter().find_map(|item| match item {
        syn::Item::Impl(imp) => match imp.self_ty.as_ref() {
            syn::Type::Path(p) if p.path.is_ident(model) => {
                imp.items.iter().find_map(|i| match i {
                    syn::ImplItem::Fn(f) if f.sig.ident == "forward" => Some(f),
                    _ => None,
                })
            }
            _ => None,
        },
        _ => None,
    })
}

/// Random-init scale per parameter: matrices ~ N(0, 1/fan_in); norm gains ~ 1 + N(0, 0.1²); other vectors small.
fn param_init(g: &Graph, index: usize) -> (f32, f32) {
    let ty = &g.params[index].ty;
    let is_gain = g.nodes.iter().any(|n| match &n.op {
        Op::LayerNorm { gamma, .. } | Op::RmsNorm { gamma, .. } => {
            g.node(*gamma).op == Op::Param(index as u32)
        }
        _ => false,
    });
    if is_gain {
        return (1.0, 0.1);
    }
    match ty.shape.0.last().and_then(|d| d.as_static()) {
        Some(fan_in) if ty.shape.rank() >= 2 => (0.0, 1.0 / (fan_in as f32).sqrt()),
        _ => (0.0, 0.1),
    }
}

/// The smallest embedding table an input's ids index: its row count and name (checked at run time before
/// launch). One ids input may feed several tables; an id valid for the largest could still read past a smaller
/// one, so the bound is the minimum over every `embedding` the input reaches.
fn id_bound(g: &Graph, input: u32) -> Option<(usize, String)> {
    g.nodes
        .iter()
        .filter_map(|n| match n.op {
            Op::Embedding { table, ids } if reads_input(g, ids, input) => {
                let rows = g.ty(table).shape.0.first()?.as_static()?;
                Some((rows, table_name(g, table)))
            }
            _ => None,
        })
        .min_by_key(|(rows, _)| *rows)
}

/// Whether `node` is the input itself or a view of it (the ids an embedding reads).
fn reads_input(g: &Graph, mut node: NodeId, which: u32) -> bool {
    loop {
        match &g.node(node).op {
            Op::Input(i) => return *i == which,
            Op::Permute { input, .. } | Op::Reshape { input, .. } | Op::Slice { input, .. } => {
                node = *input
            }
            _ => return false,
        }
    }
}

/// The checkpoint name of the parameter an embedding table is (or is a view of), for the error message.
fn table_name(g: &Graph, mut node: NodeId) -> String {
    loop {
        match &g.node(node).op {
            Op::Param(i) => return g.params[*i as usize].name.clone(),
            Op::Permute { input, .. } | Op::Reshape { input, .. } | Op::Slice { input, .. } => {
                node = *input
            }
            _ => return "the embedding table".into(),
        }
    }
}

fn dtype(d: DType) -> TokenStream {
    match d {
        DType::I64 => quote!(::fuse_runtime::DType::I64),
        DType::F32 | DType::Bool => quote!(::fuse_runtime::DType::F32),
    }
}

/// Token trees in `tokens`, groups counted with their contents: a measure of what rustc has to parse.
fn count_tokens(tokens: &TokenStream) -> usize {
    tokens
        .clone()
        .into_iter()
        .map(|t| match t {
            proc_macro2::TokenTree::Group(g) => 1 + count_tokens(&g.stream()),
            _ => 1,
        })
        .sum()
}

/// Top-level functions among generated items (one per distinct kernel).
fn count_functions(items: &TokenStream) -> usize {
    items
        .clone()
        .into_iter()
        .filter(|t| matches!(t, proc_macro2::TokenTree::Ident(i) if i == "fn"))
        .count()
}

fn expand_model(
    module: &syn::ItemMod,
    m: &CapturedModel,
    source: &str,
    contract: &Contract,
    timings: &mut Timings,
    report: bool,
) -> TokenStream {
    let g = &m.graph;
    let name = &m.name;
    let name_str = name.to_string();
    let private = format_ident!("__fuse_{}", name_str.to_lowercase());
    let (fused, eager) = timings.time("plan", || (plan(g, Mode::Fused), plan(g, Mode::Eager)));
    // A broken contract is reported beside a working model, so the user sees only that error.
    let broken_contract =
        contract::check(&fused, &name_str, contract).map(|e| e.into_compile_error());
    let (fused_cpu, eager_cpu) = timings.time("write cpu", || {
        (
            fuse_kernels::back::cpu::write_program(&fused, &name_str),
            fuse_kernels::back::cpu::write_program(&eager, &name_str),
        )
    });
    let (fused_items, fused_program) = (fused_cpu.items, fused_cpu.program);
    let (eager_items, eager_program) = (eager_cpu.items, eager_cpu.program);
    let rt = quote!(::fuse_runtime::__private);
    let params = g.params.iter().enumerate().map(|(i, p)| {
        let pname = &p.name;
        let dims = p.ty.shape.0.iter().map(|d| d.as_static().unwrap_or(0));
        let (mean, std) = param_init(g, i);
        // `ParamSpec` is imported in the private module: a deep model has hundreds of parameters.
        quote!(ParamSpec::new(#pname, &[#(#dims),*], #mean, #std))
    });
    let inputs = g.inputs.iter().enumerate().map(|(i, input)| {
        let iname = &input.name;
        let dt = dtype(input.ty.dtype);
        let dims = input.ty.shape.0.iter().map(|d| match d.syms.first() {
            Some(&s) => {
                let s = s as usize;
                quote!(#rt::DimSpec::Dyn(#s))
            }
            None => {
                let c = d.coeff;
                quote!(#rt::DimSpec::Fixed(#c))
            }
        });
        let text = g.fmt_shape(&input.ty.shape);
        let bound = match id_bound(g, i as u32) {
            Some((rows, table)) => quote!(Some(#rt::IdBound { rows: #rows, table: #table })),
            None => quote!(None),
        };
        let binds = match input.binds {
            Some(sym) => {
                let dim = sym as usize;
                let may_be_zero = g.may_be_zero(sym);
                quote!(Some(#rt::DimArg { dim: #dim, may_be_zero: #may_be_zero }))
            }
            None => quote!(None),
        };
        quote!(#rt::InputSpec { name: #iname, dtype: #dt, dims: &[#(#dims),*], shape_text: #text, id_bound: #bound, binds: #binds })
    });
    let dyn_dims = &g.dyn_dims;
    let arg_names: Vec<syn::Ident> = g
        .inputs
        .iter()
        .map(|i| format_ident!("{}", i.name))
        .collect();
    // A `#[dim]` argument is a `usize` in the typed API and an i64 scalar tensor in the untyped one.
    let arg_params: Vec<TokenStream> = g
        .inputs
        .iter()
        .zip(&arg_names)
        .map(|(input, name)| match input.binds {
            Some(_) => quote!(#name: usize),
            None => quote!(#name: &::fuse_runtime::Tensor),
        })
        .collect();
    let dim_args: Vec<TokenStream> = g
        .inputs
        .iter()
        .zip(&arg_names)
        .filter(|(input, _)| input.binds.is_some())
        .map(|(_, name)| quote!(let #name = &#rt::dim_arg(#name)?;))
        .collect();
    let n_out = g.outputs.len();
    // A model with `#[state]` fields runs with the caller's session, its first argument.
    let stateful = !g.states.is_empty();
    let (session_param, session_arg) = if stateful {
        (
            quote!(session: &mut ::fuse_runtime::Session,),
            quote!(session,),
        )
    } else {
        (quote!(), quote!())
    };
    let (run_one, run_all) = if stateful {
        (
            quote!(self.core.run_one_session(__fuse_mode, session, &[#(#arg_names),*])),
            quote!(self.core.run_session(__fuse_mode, session, &[#(#arg_names),*])),
        )
    } else {
        (
            quote!(self.core.run_one(__fuse_mode, &[#(#arg_names),*])),
            quote!(self.core.run(__fuse_mode, &[#(#arg_names),*])),
        )
    };
    let session_fn = if stateful {
        quote! {
            /// Zeroed state (`#[state]` fields) for a stream of calls, at the dims its shapes name
            /// (`[("batch", 2)]`); pass it to every `forward`. One model serves many sessions.
            pub fn session(&self, sizes: &[(&str, usize)]) -> ::fuse_runtime::Result<::fuse_runtime::Session> {
                self.core.session(sizes)
            }
        }
    } else {
        quote!()
    };
    let (ret_ty, ret_expr) = if n_out == 1 {
        (quote!(::fuse_runtime::Tensor), run_one)
    } else {
        let tys = (0..n_out).map(|_| quote!(::fuse_runtime::Tensor));
        let vars: Vec<syn::Ident> = (0..n_out).map(|i| format_ident!("out{}", i)).collect();
        (
            quote!((#(#tys),*)),
            quote! {{
                let mut outs = #run_all?.into_iter();
                #(let #vars = outs.next().ok_or(::fuse_runtime::Error::InputCount { expected: #n_out, found: 0 })?;)*
                Ok((#(#vars),*))
            }},
        )
    };
    let docs = forward_fn(module, name)
        .map(|f| {
            f.attrs
                .iter()
                .filter(|a| a.path().is_ident("doc"))
                .cloned()
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let plan_hash = fused.hash;
    let cuda_spec = timings.time("write cuda", || cuda::spec(&fused, &eager, &name_str));
    // Measuring walks (and prints) everything generated: only when asked.
    if report {
        timings.size("fused kernels", fused.kernels.len());
        timings.size("fused functions", count_functions(&fused_items));
        timings.size("eager kernels", eager.kernels.len());
        timings.size("eager functions", count_functions(&eager_items));
        // The kernel functions are what rustc compiles; the rest is literals (tables, CUDA sources, the source).
        timings.size(
            "kernel tokens",
            count_tokens(&fused_items) + count_tokens(&eager_items),
        );
        timings.size("cuda bytes", cuda_spec.to_string().len());
    }
    let vis = quote!(pub);
    quote! {
        #broken_contract
        #[doc = concat!("The compiled model `", #name_str, "`: weights plus its fused and eager plans.")]
        #vis struct #name {
            core: ::fuse_runtime::CompiledModel,
        }

        #[doc(hidden)]
        mod #private {
            use ::fuse_runtime::__private::ParamSpec;
            #fused_items
            #eager_items
            pub static FUSED: #rt::EmbeddedProgram = #fused_program;
            pub static EAGER: #rt::EmbeddedProgram = #eager_program;
            pub static CUDA: #rt::CudaSpec = #cuda_spec;
            pub static SPEC: ::fuse_runtime::ModelSpec = ::fuse_runtime::ModelSpec {
                name: #name_str,
                dyn_dims: &[#(#dyn_dims),*],
                inputs: &[#(#inputs),*],
                params: &[#(#params),*],
                fused: &FUSED,
                eager: &EAGER,
                source: #source,
                cuda: Some(&CUDA),
            };
        }

        impl #name {
            /// The hash of the fused plan; GPU code built for another plan is refused at load time.
            pub const PLAN_HASH: u64 = #plan_hash;

            /// Loads the weights from a safetensors file (names are the field paths, renames applied).
            pub fn load(path: impl ::std::convert::AsRef<::std::path::Path>) -> ::fuse_runtime::Result<Self> {
                ::fuse_runtime::CompiledModel::load(&#private::SPEC, path.as_ref()).map(|core| Self { core })
            }

            /// Loads the weights with the CPU GEMMs whose B is a weight in `precision` from the start: each is
            /// packed (and its f32 copy dropped where only packs read it) before the next is read; see
            /// `CompiledModel::load_in`.
            pub fn load_in(path: impl ::std::convert::AsRef<::std::path::Path>, precision: ::fuse_runtime::CpuPrecision) -> ::fuse_runtime::Result<Self> {
                ::fuse_runtime::CompiledModel::load_in(&#private::SPEC, path.as_ref(), precision).map(|core| Self { core })
            }

            /// Seeded random weights, for examples and tests. Panics with the error of [`Self::try_random`] when
            /// the weights do not fit in memory.
            pub fn random(seed: u64) -> Self {
                Self { core: ::fuse_runtime::CompiledModel::random(&#private::SPEC, seed) }
            }

            /// Seeded random weights, or `Error::OutOfMemory` when they do not fit in memory.
            pub fn try_random(seed: u64) -> ::fuse_runtime::Result<Self> {
                ::fuse_runtime::CompiledModel::try_random(&#private::SPEC, seed).map(|core| Self { core })
            }

            /// The model with its CPU GEMMs whose B is a weight computed in `precision` (int8: weights quantised
            /// once, now); see `CompiledModel::with_cpu_precision`.
            pub fn with_cpu_precision(self, precision: ::fuse_runtime::CpuPrecision) -> ::fuse_runtime::Result<Self> {
                self.core.with_cpu_precision(precision).map(|core| Self { core })
            }

            /// Weights in declaration order (see [`Self::spec`] for names and shapes).
            pub fn from_weights(weights: ::std::vec::Vec<::fuse_runtime::Tensor>) -> ::fuse_runtime::Result<Self> {
                ::fuse_runtime::CompiledModel::from_weights(&#private::SPEC, weights).map(|core| Self { core })
            }

            /// `from_weights` with the CPU GEMMs whose B is a weight in `precision` from the start; see
            /// `CompiledModel::from_weights_in`.
            pub fn from_weights_in(weights: ::std::vec::Vec<::fuse_runtime::Tensor>, precision: ::fuse_runtime::CpuPrecision) -> ::fuse_runtime::Result<Self> {
                ::fuse_runtime::CompiledModel::from_weights_in(&#private::SPEC, weights, precision).map(|core| Self { core })
            }

            #session_fn

            #(#docs)*
            #[allow(clippy::too_many_arguments)]
            pub fn forward(&self, #session_param #(#arg_params),*) -> ::fuse_runtime::Result<#ret_ty> {
                self.forward_with(::fuse_runtime::PlanMode::Fused, #session_arg #(#arg_names),*)
            }

            /// `forward` on the unfused plan (one kernel per op).
            #[allow(clippy::too_many_arguments)]
            pub fn forward_eager(&self, #session_param #(#arg_params),*) -> ::fuse_runtime::Result<#ret_ty> {
                self.forward_with(::fuse_runtime::PlanMode::Eager, #session_arg #(#arg_names),*)
            }

            #[allow(clippy::too_many_arguments)]
            pub fn forward_with(&self, __fuse_mode: ::fuse_runtime::PlanMode, #session_param #(#arg_params),*) -> ::fuse_runtime::Result<#ret_ty> {
                #(#dim_args)*
                #ret_expr
            }

            /// The fused plan's report.
            pub fn plan(&self) -> ::fuse_runtime::PlanReport {
                self.core.report(::fuse_runtime::PlanMode::Fused)
            }

            pub fn eager_plan(&self) -> ::fuse_runtime::PlanReport {
                self.core.report(::fuse_runtime::PlanMode::Eager)
            }

            pub fn spec() -> &'static ::fuse_runtime::ModelSpec {
                &#private::SPEC
            }

            /// The f32 weights in declaration order; `Error::WeightsReleased` for a model holding some only packed
            /// (made with `*_in`, or after `with_cpu_precision` in int8, bf16 or f16).
            pub fn weights(&self) -> ::fuse_runtime::Result<&[::fuse_runtime::Tensor]> {
                self.core.weights()
            }

            pub fn compiled(&self) -> &::fuse_runtime::CompiledModel {
                &self.core
            }

            /// The untyped model, to run through `CompiledModel::run` with a slice of inputs.
            pub fn into_compiled(self) -> ::fuse_runtime::CompiledModel {
                self.core
            }
        }
    }
}
