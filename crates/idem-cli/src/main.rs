//! The `idem` binary: parse the command line, run it, exit with its code.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

/// mimalloc instead of the system allocator: measured in docs/performance.md (server CPU per
/// claim+complete pair over HTTP −9 %, pairs/s +8 %; peak RSS +13 MiB). Built with only its
/// small pages kept in its arena (`.cargo/config.toml`): blocks above 10 KiB live in pages
/// taken from and given back to the OS directly, so large effect answers do not stay resident
/// after they are freed.
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

#[cfg(test)]
mod tests {
    /// The resident set of this process, MiB (0 when it cannot be read, which fails the test).
    fn rss_mib() -> f64 {
        idem_bench::history::rss_mib(std::process::id())
    }

    /// The binary's allocator gives large blocks back to the OS as soon as they are freed
    /// (`MI_DEFAULT_ARENA_MAX_OBJECT_SIZE`, `.cargo/config.toml`): 64 blocks of 256 KiB, every
    /// byte written, then freed, and the resident set falls by most of their 16 MiB at once.
    /// With mimalloc's default (a build without the define, or
    /// `MIMALLOC_ARENA_MAX_OBJECT_SIZE` set large in the environment) they stay in its arena
    /// for its purge delay and the resident set does not move. Three tries, so another thread
    /// of the test harness allocating at that moment cannot make it fail.
    #[test]
    fn large_blocks_go_back_to_the_os_when_freed() {
        const BLOCKS: usize = 64;
        const BLOCK: usize = 256 * 1024;
        let mut seen = Vec::new();
        for _ in 0..3 {
            let blocks: Vec<Vec<u8>> = (1..=BLOCKS)
                .map(|i| vec![u8::try_from(i).unwrap_or(1); BLOCK])
                .collect();
            let held = rss_mib();
            let written: usize = blocks.iter().map(|b| usize::from(b[BLOCK - 1])).sum();
            assert_eq!(written, BLOCKS * (BLOCKS + 1) / 2);
            drop(blocks);
            let after = rss_mib();
            // 16 MiB were freed; at least half of it must be off the resident set.
            if held - after >= 8.0 {
                return;
            }
            seen.push((held, after));
        }
        panic!("freed 64 x 256 KiB, resident MiB (held, after) per try: {seen:?}");
    }
}
