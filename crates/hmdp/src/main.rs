//! The `hmdp` binary: parses the command line and hands over to the library.

use clap::Parser;

/// mimalloc instead of glibc's malloc: a profile of the flash sale put glibc's
/// `malloc`/`free` at about a quarter of the server's CPU (many small, short-lived
/// allocations per request on several threads); see BENCHMARKS.md for the measured effect.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let code = hmdp::cli::run(hmdp::cli::Cli::parse()).await;
    std::process::exit(code);
}
