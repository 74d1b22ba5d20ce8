//! PLACEHOLDER: the `peerage` command line is being built in this session.
fn main() -> anyhow::Result<()> {
    anyhow::bail!("peerage: not built yet")
}
