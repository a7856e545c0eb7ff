//! `hmdp-bench`: see `hmdp-bench --help` and BENCHMARKS.md.

use clap::Parser;

/// The same allocator as the `hmdp` binary, so that a server started in-process measures
/// what the shipped server does.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let cli = hmdp_bench::Cli::parse();
    if let Err(e) = hmdp_bench::run(cli).await {
        eprintln!("hmdp-bench: {e:#}");
        std::process::exit(1);
    }
}
