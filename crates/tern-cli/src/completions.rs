//! `tern completions SHELL`: a completion script for bash, zsh or fish, generated from the
//! same clap definition the commands are parsed with (so it never drifts from them).

use std::process::ExitCode;

use clap::{Args, ValueEnum};
use clap_complete::Shell;

#[derive(Args, Debug)]
#[command(after_long_help = "\
Install (or put the line in your shell's start-up file):
  bash: tern completions bash > ~/.local/share/bash-completion/completions/tern
  zsh:  tern completions zsh > \"${fpath[1]}/_tern\"
  fish: tern completions fish > ~/.config/fish/completions/tern.fish")]
pub struct CompletionsArgs {
    /// The shell to complete in
    pub shell: CompletionShell,
}

/// The shells supported (clap_complete knows more; these are the ones documented).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

/// `cli` is the whole command line's clap definition (`Cli::command()`).
pub fn run(args: &CompletionsArgs, mut cli: clap::Command) -> anyhow::Result<ExitCode> {
    let shell = match args.shell {
        CompletionShell::Bash => Shell::Bash,
        CompletionShell::Zsh => Shell::Zsh,
        CompletionShell::Fish => Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cli, "tern", &mut script);
    // Written with `?`: a closed pipe ends quietly in `main` instead of a panic.
    std::io::Write::write_all(&mut std::io::stdout().lock(), &script)?;
    Ok(ExitCode::SUCCESS)
}
