//! The `idem` binary: parse the command line, run it, exit with its code.

use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of the system allocator: measured in docs/performance.md (server CPU per
/// claim+complete pair over HTTP −9 %, pairs/s +8 %; peak RSS +13 MiB).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = idem_cli::args::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("idem: error: cannot start the async runtime: {e}");
            return ExitCode::from(idem_cli::exit::ERROR);
        }
    };
    ExitCode::from(runtime.block_on(idem_cli::run(cli)))
}
