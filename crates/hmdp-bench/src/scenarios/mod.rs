//! One module per scenario.

pub mod shop;
