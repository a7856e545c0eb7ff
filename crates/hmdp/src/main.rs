//! The `hmdp` binary: parses the command line and hands over to the library.

use clap::Parser;

#[tokio::main]
async fn main() {
    let code = hmdp::cli::run(hmdp::cli::Cli::parse()).await;
    std::process::exit(code);
}
