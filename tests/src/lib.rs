//! Test support for fuse: the f64 reference interpreter, the harness around it, and the drift check that
//! compares a model's fused and eager plans with it (`drift`).

pub mod check;
pub mod drift;
pub mod golden;
pub mod harness;
pub mod hidden_reference;
pub mod op_models;
pub mod random_views;
pub mod reference;
