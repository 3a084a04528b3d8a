//! The `idem` binary: parse the command line, run it, exit with its code.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

/// mimalloc instead of the system allocator: measured in docs/performance.md (server CPU per
/// claim+complete pair over HTTP −9 %, pairs/s +8 %; peak RSS +13 MiB).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `idem --version`: the package version and the commit it was built from (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("IDEM_GIT_COMMIT"),
    ")"
);

fn main() -> ExitCode {
    let matches = idem_cli::args::Cli::command()
        .version(VERSION)
        .get_matches();
    let cli = match idem_cli::args::Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
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
