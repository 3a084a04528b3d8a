//! The `idem` command as a library: argument types ([`args`]) and one function per command.
//! `main.rs` only parses the command line and calls [`run`].
//!
//! Output discipline: stdout carries only what a script would capture (the key, the token
//! secret, the command's own output, a table or the raw JSON answer); progress, warnings and
//! errors go to stderr. Exit codes are in [`exit`].

pub mod action;
pub mod args;
pub mod audit;
pub mod bench;
pub mod client;
pub mod drill;
pub mod exit;
pub mod gate;
pub mod offline;
pub mod ops;
pub mod put;
pub mod runner;
pub mod source;
pub mod table;
pub mod util;
pub mod verbs;

use args::{ActionCmd, Cli, Command, KeyCmd, NsCmd, SourceCmd, TokenCmd};
use exit::CliError;

/// Runs one parsed command line; answers the process exit code.
pub async fn run(cli: Cli) -> u8 {
    match dispatch(cli.command).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("idem: error: {e:#}");
            e.exit_code()
        }
    }
}

async fn dispatch(command: Command) -> Result<u8, CliError> {
    match command {
        Command::Serve(c) => offline::serve(c).await,
        Command::DefaultConfig => offline::default_config(),
        Command::Token(TokenCmd::Create(c)) => offline::token_create(&c).await,
        Command::Token(TokenCmd::List(c)) => offline::token_list(&c).await,
        Command::Token(TokenCmd::Revoke(c)) => offline::token_revoke(&c).await,
        Command::Key(KeyCmd::Derive(c)) => offline::key_derive(&c, &mut std::io::stdin().lock()),
        Command::Claim(c) => verbs::claim(c).await,
        Command::Effect(c) => verbs::effect(c).await,
        Command::Prepare(c) => verbs::prepare(c).await,
        Command::Heartbeat(c) => verbs::heartbeat(c).await,
        Command::Complete(c) => verbs::complete(c).await,
        Command::Fail(c) => verbs::fail(c).await,
        Command::Get(c) => verbs::get(c).await,
        Command::Ls(c) => verbs::ls(c).await,
        Command::Review(c) => verbs::review(c).await,
        Command::Resolve(c) => verbs::resolve(c).await,
        Command::Approve(c) => verbs::note_action(c, "approve").await,
        Command::Reject(c) => verbs::note_action(c, "reject").await,
        Command::Pause(c) => verbs::pause_resume(c, "pause").await,
        Command::Resume(c) => verbs::pause_resume(c, "resume").await,
        Command::Ns(NsCmd::Get(c)) => verbs::ns_get(c).await,
        Command::Ns(NsCmd::Set(c)) => verbs::ns_set(c).await,
        Command::Source(SourceCmd::Put(c)) => source::put(c).await,
        Command::Source(SourceCmd::Get(c)) => source::get(c).await,
        Command::Source(SourceCmd::List(c)) => source::list(c).await,
        Command::Source(SourceCmd::Delete(c)) => source::delete(c).await,
        Command::Action(ActionCmd::Put(c)) => action::put(c).await,
        Command::Action(ActionCmd::Get(c)) => action::get(c).await,
        Command::Action(ActionCmd::List(c)) => action::list(c).await,
        Command::Action(ActionCmd::Delete(c)) => action::delete(c).await,
        Command::Run(c) => runner::run(c).await,
        Command::Drill(c) => drill::run(c).await,
        Command::Bench(c) => bench::run(c).await,
        Command::Audit(c) => audit::run(
            &c,
            &mut std::io::stdin().lock(),
            &mut std::io::stdout().lock(),
        ),
        Command::Backup(c) => ops::backup(c).await,
        Command::Healthcheck(c) => ops::healthcheck(&c).await,
    }
}
