//! `peerage-lab`: Peerage's experiment lab (see `peerage_experiments::lab::cli`).

use clap::Parser;
use peerage_experiments::lab::cli::Cli;
use std::process::ExitCode;

/// jemalloc instead of glibc's malloc (issue 4, session 4): the `superpeers` run at N = 10^6
/// held about 3 GB more resident than its live state in glibc's per-thread arenas, and the
/// protocol simulation allocates and frees a small buffer per message (docs/RESULTS.md).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
