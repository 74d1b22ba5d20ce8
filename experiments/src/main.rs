//! PLACEHOLDER: `peerage-lab` is being built in this session.
fn main() -> anyhow::Result<()> {
    anyhow::bail!("peerage-lab: not built yet")
}
