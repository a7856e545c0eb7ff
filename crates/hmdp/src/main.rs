//! The `hmdp` binary: parses the command line and hands over to the library.
//!
//! glibc's allocator on purpose: mimalloc measured no faster on the flash sale here, and held
//! 60 % more memory with 10,000 idle connections open (docs/14-benchmarking.md, 分配器).

use clap::Parser;

#[tokio::main]
async fn main() {
    let code = hmdp::cli::run(hmdp::cli::Cli::parse()).await;
    std::process::exit(code);
}
