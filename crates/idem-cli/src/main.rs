//! The `idem` binary: parse the command line, run it, exit with its code.

use std::process::ExitCode;

use clap::Parser;

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
