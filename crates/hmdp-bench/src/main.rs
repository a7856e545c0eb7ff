//! `hmdp-bench`: see `hmdp-bench --help` and BENCHMARKS.md.

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = hmdp_bench::Cli::parse();
    if let Err(e) = hmdp_bench::run(cli).await {
        eprintln!("hmdp-bench: {e:#}");
        std::process::exit(1);
    }
}
