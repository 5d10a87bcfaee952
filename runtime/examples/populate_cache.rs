//! Fills a cache folder with a few entries (for trying `torchtpu-cache` by hand).
//! `cargo run -p torchtpu-runtime --example populate_cache -- DIR`
use torchtpu_runtime::{Client, CompileOptions, DiskCache, ExecutableCache, Plugin};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: populate_cache DIR")?;
    let client = Client::new(Plugin::load_default()?)?;
    let cache = ExecutableCache::with_disk(DiskCache::new(&dir));
    for (n, name) in [(4, "forward"), (8, "backward")] {
        let module = format!(
            "func.func @main(%a: tensor<{n}xf32>) -> tensor<{n}xf32> {{\n  %0 = stablehlo.negate %a : tensor<{n}xf32>\n  return %0 : tensor<{n}xf32>\n}}"
        );
        cache.get_or_compile_named(&client, &module, &CompileOptions::default(), Some(name))?;
    }
    println!("{:?}", cache.stats());
    Ok(())
}
