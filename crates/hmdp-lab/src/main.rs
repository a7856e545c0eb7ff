//! The `hmdp-lab` binary: parses the command line and hands over to the library.

use clap::Parser;

#[tokio::main]
async fn main() {
    let code = hmdp_lab::run(hmdp_lab::Cli::parse()).await;
    std::process::exit(code);
}
