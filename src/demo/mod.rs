//! placeholder until the demo branch merges
pub async fn run(_args: crate::cli::DemoArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("the demo is not built yet")
}
