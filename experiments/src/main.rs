//! `peerage-lab`: Peerage's experiment lab (see `peerage_experiments::lab::cli`).

use clap::Parser;
use peerage_experiments::lab::cli::Cli;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => "warn",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match cli.command.run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("peerage-lab: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
