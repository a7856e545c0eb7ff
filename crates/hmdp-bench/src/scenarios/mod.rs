//! One module per scenario, plus the shared set-up and raw baselines.

pub mod abuse;
pub mod baselines;
pub mod close;
pub mod conns;
pub mod floor;
pub mod hot_voucher;
pub mod ids;
pub mod lock;
pub mod login;
pub mod publish;
pub mod queues;
pub mod seckill;
pub mod setup;
pub mod shop;
pub mod social;
pub mod uv;
