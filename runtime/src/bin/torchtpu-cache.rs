//! `torchtpu-cache`: inspect and maintain torchtpu's persistent compilation cache, both
//! levels of its one store: graph entries (IR -> lowered StableHLO) and executable entries
//! (StableHLO -> serialized executable). list, show, stats, explain, verify, prune, clear;
//! see `docs/cache.md`.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{ArgGroup, Parser, Subcommand};
use serde::Serialize;
use torchtpu_runtime::cli::{eprint_line, Stdout};
use torchtpu_runtime::disk_cache::units::{
    format_age, format_size, format_unix_ms, now_unix_ms, parse_duration, parse_size,
};
use torchtpu_runtime::disk_cache::{EntryInfo, PruneReport, CACHE_DIR_ENV, CACHE_ENV};
use torchtpu_runtime::{Client, DiskCache, Level, Plugin};

#[derive(Parser)]
#[command(name = "torchtpu-cache", version, about = "Inspect and maintain torchtpu's persistent compilation cache")]
struct Cli {
    /// Cache folder [default: $TORCHTPU_CACHE_DIR, else $XDG_CACHE_HOME/torchtpu, else
    /// ~/.cache/torchtpu]
    #[arg(long, global = true, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Print JSON (for scripts) instead of text
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One line per entry of either level (graph, executable), most recently used first
    List,
    /// Everything about one entry (a unique key prefix is enough)
    Show {
        #[arg(value_parser = key_prefix)]
        key: String,
    },
    /// Entries, total size, hits and compile time saved
    Stats,
    /// Which key components differ between two entries
    Explain {
        #[arg(value_parser = key_prefix)]
        key1: String,
        #[arg(value_parser = key_prefix)]
        key2: String,
    },
    /// Check every entry's checksum (both levels) and that each executable entry loads into
    /// the current plugin; exits 1 listing bad entries
    Verify {
        /// Only check checksums (do not load the PJRT plugin)
        #[arg(long)]
        checksums_only: bool,
    },
    /// Remove entries unused for longer than --older-than, then the least recently used
    /// until the cache fits in --max-size
    #[command(group(ArgGroup::new("limit").required(true).multiple(true).args(["max_size", "older_than"])))]
    Prune {
        /// e.g. 500M, 2GiB, 1000000 (bytes)
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        max_size: Option<u64>,
        /// e.g. 30d, 12h, 90m
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        older_than: Option<Duration>,
    },
    /// Remove every entry (both levels)
    Clear,
}

/// A key prefix is hex digits: anything else is a bad argument (exit 2), found out before
/// the cache is read; a well-formed prefix that matches nothing is an error (exit 1).
fn key_prefix(s: &str) -> Result<String, String> {
    let p = s.trim();
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("not a key prefix (expected hex digits)".into());
    }
    Ok(p.to_string())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind::*;
            if matches!(e.kind(), DisplayHelp | DisplayVersion | DisplayHelpOnMissingArgumentOrSubcommand) {
                e.exit();
            }
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprint_line(&format!("torchtpu-cache: {first} (see --help)"));
            return ExitCode::from(2);
        }
    };
    // A closed stdout drops the output (`cli::Stdout`); the exit code stays the command's.
    let mut out = Stdout::lock();
    let code = match run(&cli, &mut out) {
        Ok(code) => code,
        Err(e) => {
            eprint_line(&format!("torchtpu-cache: {}", format!("{e:#}").replace('\n', " ")));
            ExitCode::from(1)
        }
    };
    let _ = out.flush();
    code
}

/// The cache to operate on: `--dir`, else the environment's folder; limits from the
/// environment. `TORCHTPU_CACHE=0` does not stop the tool.
fn open(cli: &Cli) -> Result<DiskCache> {
    let dir: Option<OsString> = cli.dir.clone().map(Into::into);
    DiskCache::from_vars(|name| match name {
        CACHE_ENV => None,
        CACHE_DIR_ENV => dir.clone().or_else(|| std::env::var_os(name)),
        _ => std::env::var_os(name),
    })
    .context(
        "cannot tell where the cache is: pass --dir, or set TORCHTPU_CACHE_DIR, \
         XDG_CACHE_HOME or HOME",
    )
}

fn print_json(out: &mut dyn Write, value: &impl Serialize) -> Result<()> {
    writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
    Ok(())
}

fn absent(cache: &DiskCache) -> anyhow::Error {
    anyhow::anyhow!(
        "no cache at {} (nothing has been cached there yet; the folder comes from --dir, \
         TORCHTPU_CACHE_DIR, XDG_CACHE_HOME or HOME)",
        cache.root().display()
    )
}

fn run(cli: &Cli, out: &mut dyn Write) -> Result<ExitCode> {
    let cache = open(cli)?;
    let needs_cache = !matches!(cli.command, Command::Prune { .. } | Command::Clear);
    if needs_cache && !cache.exists() {
        return Err(absent(&cache));
    }
    match &cli.command {
        Command::List => list(out, &cache, cli.json)?,
        Command::Show { key } => show(out, &cache, key, cli.json)?,
        Command::Stats => stats(out, &cache, cli.json)?,
        Command::Explain { key1, key2 } => explain(out, &cache, key1, key2, cli.json)?,
        Command::Verify { checksums_only } => return verify(out, &cache, *checksums_only, cli.json),
        Command::Prune { max_size, older_than } => {
            let report = if cache.exists() { cache.prune(*max_size, *older_than)? } else { PruneReport::default() };
            removal(out, &cache, &report, "pruned", cli.json)?
        }
        Command::Clear => {
            let report = if cache.exists() { cache.clear()? } else { PruneReport::default() };
            removal(out, &cache, &report, "cleared", cli.json)?
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn short(key: &str) -> &str {
    &key[..key.len().min(12)]
}

fn last_hit(e: &EntryInfo) -> String {
    match e.meta.as_ref().and_then(|m| m.last_hit_unix_ms) {
        Some(ms) => format!("{} ago", format_age(Duration::from_millis(now_unix_ms().saturating_sub(ms)))),
        None => "never".into(),
    }
}

/// `"1 graph, 2 executable"`.
fn per_level(counts: [usize; 2]) -> String {
    format!("{} {}, {} {}", counts[0], Level::Graph, counts[1], Level::Executable)
}

fn count_levels(entries: &[EntryInfo]) -> [usize; 2] {
    Level::ALL.map(|l| entries.iter().filter(|e| e.level == l).count())
}

fn list(out: &mut dyn Write, cache: &DiskCache, json: bool) -> Result<()> {
    let entries = cache.entries()?;
    if json {
        return print_json(out, &entries);
    }
    writeln!(
        out,
        "{:<10}  {:<12}  {:<24}  {:>10}  {:>9}  {:>5}  {:>9}",
        "LEVEL", "KEY", "GRAPH", "SIZE", "COMPILE", "HITS", "LAST HIT"
    )?;
    for e in &entries {
        let graph = e.meta.as_ref().and_then(|m| m.graph_name.clone());
        let compile = e.meta.as_ref().map_or("?".into(), |m| format!("{:.3}s", m.compile_seconds));
        let hits = e.meta.as_ref().map_or("?".into(), |m| m.hit_count.to_string());
        writeln!(
            out,
            "{:<10}  {:<12}  {:<24}  {:>10}  {:>9}  {:>5}  {:>9}",
            e.level.name(),
            short(&e.key),
            graph.as_deref().unwrap_or("-"),
            format_size(e.entry_bytes + e.sidecar_bytes),
            compile,
            hits,
            last_hit(e)
        )?;
    }
    let total: u64 = entries.iter().map(|e| e.entry_bytes + e.sidecar_bytes).sum();
    writeln!(out, "{} entries ({}), {}", entries.len(), per_level(count_levels(&entries)), format_size(total))?;
    Ok(())
}

fn show(out: &mut dyn Write, cache: &DiskCache, key: &str, json: bool) -> Result<()> {
    let e = cache.find(key)?;
    if json {
        return print_json(out, &e);
    }
    let mut row = |name: &str, value: &dyn std::fmt::Display| writeln!(out, "{name:<20} {value}");
    row("key", &e.key)?;
    row(
        "level",
        &match e.level {
            Level::Graph => "graph (a graph-cache entry: canonical IR + pipeline -> lowered StableHLO bytecode)",
            Level::Executable => "executable (StableHLO + options + toolchain -> the plugin's serialized executable)",
        },
    )?;
    row(&format!("{} folder", e.level.partition_meaning()), &e.partition)?;
    row("path", &e.path.display())?;
    row("entry size", &format!("{} ({} bytes)", format_size(e.entry_bytes), e.entry_bytes))?;
    row("sidecar size", &format!("{} bytes", e.sidecar_bytes))?;
    row("last used", &format_unix_ms(e.last_used_unix_ms))?;
    let Some(m) = &e.meta else {
        row("metadata", &format!("unavailable ({})", e.sidecar_error.as_deref().unwrap_or("?")))?;
        return Ok(());
    };
    row("graph", &m.graph_name.as_deref().unwrap_or("-"))?;
    row("payload size", &format!("{} bytes", m.payload_bytes))?;
    let what = if e.level == Level::Graph { "passes + lowering" } else { "compile time" };
    row(what, &format!("{:.3} s", m.compile_seconds))?;
    row("created", &format_unix_ms(m.created_unix_ms))?;
    row("last hit", &m.last_hit_unix_ms.map_or("never".into(), format_unix_ms))?;
    row("hits", &m.hit_count)?;
    writeln!(out, "key components:")?;
    for (name, value) in &m.components.0 {
        writeln!(out, "  {name:<20} {value}")?;
    }
    Ok(())
}

fn stats(out: &mut dyn Write, cache: &DiskCache, json: bool) -> Result<()> {
    let s = cache.summary()?;
    if json {
        return print_json(out, &s);
    }
    let counts = [s.levels[0].entries, s.levels[1].entries];
    writeln!(out, "cache folder         {}", s.root.display())?;
    writeln!(
        out,
        "entries              {} ({}; in {} toolchain folder{})",
        s.entries,
        per_level(counts),
        s.toolchains,
        if s.toolchains == 1 { "" } else { "s" }
    )?;
    writeln!(out, "total size           {} of {} limit", format_size(s.total_bytes), format_size(s.max_size))?;
    writeln!(out, "hits                 {}", s.hits)?;
    writeln!(out, "compile time saved   {:.3} s", s.compile_seconds_saved)?;
    writeln!(out, "compile time stored  {:.3} s", s.compile_seconds_stored)?;
    if s.stale_files > 0 {
        writeln!(
            out,
            "older layouts        {} files, {} (never read; pruned first)",
            s.stale_files,
            format_size(s.stale_bytes)
        )?;
    }
    writeln!(out, "{:<10}  {:>7}  {:>10}  {:>5}  {:>10}", "LEVEL", "ENTRIES", "SIZE", "HITS", "SAVED")?;
    for l in &s.levels {
        writeln!(
            out,
            "{:<10}  {:>7}  {:>10}  {:>5}  {:>8.3} s",
            l.level.map_or("all", Level::name),
            l.entries,
            format_size(l.total_bytes),
            l.hits,
            l.compile_seconds_saved
        )?;
    }
    Ok(())
}

#[derive(Serialize)]
struct Difference {
    component: String,
    key1: String,
    key2: String,
}

#[derive(Serialize)]
struct Explanation {
    key1: String,
    key2: String,
    level1: Level,
    level2: Level,
    differences: Vec<Difference>,
    same: Vec<String>,
}

fn explain(out: &mut dyn Write, cache: &DiskCache, key1: &str, key2: &str, json: bool) -> Result<()> {
    let (a, b) = (cache.find(key1)?, cache.find(key2)?);
    let components = |e: &EntryInfo| {
        e.meta.as_ref().map(|m| m.components.clone()).with_context(|| {
            format!("entry {} has no readable sidecar ({})", short(&e.key), e.sidecar_error.as_deref().unwrap_or("?"))
        })
    };
    let (ca, cb) = (components(&a)?, components(&b)?);
    let differences: Vec<Difference> =
        ca.differences(&cb).into_iter().map(|(component, key1, key2)| Difference { component, key1, key2 }).collect();
    let same = ca.names().filter(|name| differences.iter().all(|d| d.component != *name)).map(str::to_owned).collect();
    let explanation =
        Explanation { key1: a.key.clone(), key2: b.key.clone(), level1: a.level, level2: b.level, differences, same };
    if json {
        return print_json(out, &explanation);
    }
    if a.key == b.key {
        writeln!(out, "{} and {} are the same entry", key1, key2)?;
        return Ok(());
    }
    if a.level != b.level {
        let article = |l: Level| if l == Level::Executable { "an" } else { "a" };
        writeln!(
            out,
            "{} is {} {} entry and {} {} {} entry: different levels, keyed on different components \
             (see `show` for each)",
            short(&a.key),
            article(a.level),
            a.level,
            short(&b.key),
            article(b.level),
            b.level
        )?;
        return Ok(());
    }
    if explanation.differences.is_empty() {
        writeln!(
            out,
            "{} and {}: every key component is equal (the entries differ only in the key \
             encoding version)",
            short(&a.key),
            short(&b.key)
        )?;
    } else {
        writeln!(out, "{} vs {}:", short(&a.key), short(&b.key))?;
        for d in &explanation.differences {
            writeln!(out, "  {} differs:\n    {}\n    {}", d.component, d.key1, d.key2)?;
        }
    }
    writeln!(out, "same: {}", explanation.same.join(", "))?;
    Ok(())
}

fn verify(out: &mut dyn Write, cache: &DiskCache, checksums_only: bool, json: bool) -> Result<ExitCode> {
    let client = if checksums_only {
        None
    } else {
        let plugin =
            Plugin::load_default().context("cannot load the PJRT plugin to verify entries (try --checksums-only)")?;
        // Programs that call torchtpu's host kernels load only where the handlers are
        // registered, as they are in the processes that compiled them (a plugin without an FFI
        // extension has none, and its programs call none).
        let _ = plugin.host_kernels();
        Some(Client::new(plugin).context("cannot create a PJRT client to verify entries")?)
    };
    let report = cache.verify(client.as_ref())?;
    if json {
        print_json(out, &report)?;
    } else {
        for b in &report.bad {
            writeln!(out, "BAD  {}  {:<10}  {}  {}", short(&b.key), b.level.name(), b.path.display(), b.reason)?;
        }
        writeln!(
            out,
            "verified {} entries ({}): {} ok, {} bad, {} skipped (other toolchains){}",
            report.checked,
            per_level(report.checked_per_level),
            report.ok,
            report.bad.len(),
            report.skipped.len(),
            if report.loaded { "" } else { "; checksums only, no executable loaded" }
        )?;
    }
    Ok(if report.bad.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn removal(out: &mut dyn Write, cache: &DiskCache, r: &PruneReport, verb: &str, json: bool) -> Result<()> {
    if json {
        return print_json(out, r);
    }
    if !cache.exists() {
        writeln!(out, "nothing to do: no cache at {}", cache.root().display())?;
        return Ok(());
    }
    writeln!(
        out,
        "{verb}: removed {} entries ({}) and {} leftover files; {} entries ({}) remain",
        r.removed_entries,
        format_size(r.removed_bytes),
        r.removed_leftovers,
        r.remaining_entries,
        format_size(r.remaining_bytes)
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_sizes_and_durations_are_rejected() {
        assert!(Cli::try_parse_from(["t", "prune", "--max-size", "lots"]).is_err());
        assert!(Cli::try_parse_from(["t", "prune", "--older-than", "3y"]).is_err());
        assert!(Cli::try_parse_from(["t", "prune"]).is_err());
        assert!(Cli::try_parse_from(["t", "prune", "--max-size", "1G", "--json"]).is_ok());
    }
}
