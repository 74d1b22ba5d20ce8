//! `peerage-lab`: Peerage's experiment lab (see `peerage_experiments::lab::cli`).

use clap::Parser;
use peerage_experiments::lab::cli::Cli;
use std::process::ExitCode;

/// jemalloc instead of glibc's malloc: the `superpeers` run at N = 10^6
/// held about 3 GB more resident than its live state in glibc's per-thread arenas, and the
/// protocol simulation allocates and frees a small buffer per message.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's start-up options, which jemalloc reads from this symbol (tikv-jemalloc-sys
/// builds it with the `_rjem_` prefix; a NUL-terminated string behind a thin pointer, as C's
/// `const char *malloc_conf`). `thp:always`: transparent huge pages for jemalloc's memory.
/// This machine's kernel gives huge pages only on request (`madvise` in
/// /sys/kernel/mm/transparent_hugepage/enabled), and the simulator reads node states, ids
/// and coordinates at random places across gigabytes: with 4 KiB pages nearly every such
/// read also missed the TLB (in a VM, a two-level page walk). N = 10^6 took 777 s instead of
/// 909 s with a 0.1 GiB higher peak. Where the kernel never gives huge
/// pages this does nothing; `_RJEM_MALLOC_CONF=thp:default` turns it off for one run.
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: &[u8; 11] = b"thp:always\0";

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
