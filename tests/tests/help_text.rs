//! The command lines' help texts read as prose for a user: every help text of `peerage` and
//! `peerage-lab` (the command's and each subcommand's, at any depth) carries no rustdoc link
//! (`[`x`]`) and no Rust path (`a::b`), which the doc comments behind clap's derive would
//! otherwise leak.

use clap::CommandFactory;

/// Lines of `cmd`'s long help, and of its subcommands', that a user should not see.
fn leaks(cmd: &mut clap::Command, path: &str, bad: &mut Vec<String>) {
    let text = cmd.render_long_help().to_string();
    for line in text.lines() {
        if line.contains("[`") || line.split_whitespace().any(|w| w.contains("::")) {
            bad.push(format!("{path}: {}", line.trim()));
        }
    }
    for sub in cmd.get_subcommands_mut() {
        let p = format!("{path} {}", sub.get_name());
        leaks(sub, &p, bad);
    }
}

#[test]
fn help_texts_carry_no_rustdoc_links_or_rust_paths() {
    let mut bad = Vec::new();
    for mut cmd in [peerage_node::cli::Cli::command(), peerage_experiments::lab::cli::Cli::command()] {
        let name = cmd.get_name().to_string();
        leaks(&mut cmd, &name, &mut bad);
    }
    assert!(bad.is_empty(), "help text a user should not see:\n{}", bad.join("\n"));
}
