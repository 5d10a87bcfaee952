//! Runs a pipeline of registered passes with verification, IR printing and timing.

use super::{lookup, Pass, PassDecl, PassOptions, REGISTRY};
use crate::ir::{print_graph, verify, Graph, VerifyError};
use crate::target::Target;
use std::io::Write;
use std::time::{Duration, Instant};

/// The pipeline used when none is given.
pub const DEFAULT_PIPELINE: &str = "canonicalize,fold-constants,assign-layouts,cse,dce,schedule-memory";

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("unknown pass '{name}' (available: {available})")]
    UnknownPass { name: String, available: String },
    #[error("malformed pass pipeline '{pipeline}': {reason}")]
    Malformed { pipeline: String, reason: String },
    #[error("pass '{pass}': {reason}")]
    BadOptions { pass: String, reason: String },
    #[error("pass '{pass}' failed: {reason}")]
    PassFailed { pass: String, reason: String },
    #[error("IR is invalid after pass '{pass}': {error}")]
    VerifyFailed { pass: String, error: VerifyError },
    /// With `verify_each`, the input is verified too: passes assume verified IR, and a
    /// broken input must not be blamed on the first pass (or make it panic).
    #[error("IR is invalid before the pipeline: {0}")]
    InvalidInput(VerifyError),
    #[error("cannot write IR dump: {0}")]
    Io(#[from] std::io::Error),
}

#[derive(Clone, Debug)]
pub struct PipelineOptions {
    /// Verify after every pass (on by default; a pass that breaks the IR is named).
    pub verify_each: bool,
    pub print_before_all: bool,
    pub print_after_all: bool,
    pub print_before: Vec<String>,
    pub print_after: Vec<String>,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            verify_each: true,
            print_before_all: false,
            print_after_all: false,
            print_before: Vec::new(),
            print_after: Vec::new(),
        }
    }
}

/// What one pass did.
#[derive(Clone, Debug)]
pub struct PassRun {
    pub pass: &'static str,
    pub changed: bool,
    pub elapsed: Duration,
}

pub struct PassManager {
    /// Each pass with its declared name.
    passes: Vec<(&'static str, Box<dyn Pass>)>,
    options: PipelineOptions,
}

fn available() -> String {
    REGISTRY.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

/// Splits at commas outside `{...}`.
fn split_top_level(s: &str) -> Option<Vec<&str>> {
    let (mut depth, mut start, mut parts) = (0i32, 0usize, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth < 0 {
                    return None;
                }
            }
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    (depth == 0).then(|| {
        parts.push(&s[start..]);
        parts
    })
}

impl PassManager {
    /// Builds a manager from `name,name{opt=v},...`. Empty strings give an empty pipeline.
    pub fn from_pipeline(pipeline: &str, options: PipelineOptions) -> Result<PassManager, PipelineError> {
        let malformed = |reason: &str| PipelineError::Malformed { pipeline: pipeline.into(), reason: reason.into() };
        let mut passes = Vec::new();
        let trimmed = pipeline.trim();
        if !trimmed.is_empty() {
            for entry in split_top_level(trimmed).ok_or_else(|| malformed("unbalanced braces"))? {
                let entry = entry.trim();
                let (name, opts) = match entry.find('{') {
                    Some(i) if entry.ends_with('}') => (&entry[..i], parse_options(&entry[i + 1..entry.len() - 1])),
                    Some(_) => return Err(malformed("text after a pass's '}'")),
                    None => (entry, Ok(PassOptions::new())),
                };
                if name.is_empty() {
                    return Err(malformed("empty pass name"));
                }
                let info = lookup(name)
                    .ok_or_else(|| PipelineError::UnknownPass { name: name.into(), available: available() })?;
                let opts = opts.map_err(|reason| PipelineError::BadOptions { pass: name.into(), reason })?;
                let pass =
                    (info.create)(&opts).map_err(|reason| PipelineError::BadOptions { pass: name.into(), reason })?;
                passes.push((info.name, pass));
            }
        }
        for name in options.print_before.iter().chain(&options.print_after) {
            if lookup(name).is_none() {
                return Err(PipelineError::UnknownPass { name: name.clone(), available: available() });
            }
        }
        Ok(PassManager { passes, options })
    }

    /// An empty pipeline, to add passes built elsewhere to ([`PassManager::then`]).
    pub fn new(options: PipelineOptions) -> PassManager {
        PassManager { passes: Vec::new(), options }
    }

    /// This pipeline, then `pass` (built directly, with typed fields).
    pub fn then<P: PassDecl>(mut self, pass: P) -> PassManager {
        self.passes.push((P::NAME, Box::new(pass)));
        self
    }

    /// The passes `g` requires (`PassDecl::required`, for `target`) that this pipeline does
    /// not run, in registry order, with this pipeline's options.
    pub fn required_after(&self, g: &Graph, target: &Target) -> PassManager {
        let passes = REGISTRY
            .iter()
            .filter(|info| !self.contains(info.name))
            .filter_map(|info| Some((info.name, (info.required)(g, target)?)))
            .collect();
        PassManager { passes, options: self.options.clone() }
    }

    pub fn pass_names(&self) -> Vec<&'static str> {
        self.passes.iter().map(|(name, _)| *name).collect()
    }

    /// Whether the pipeline runs the pass `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.passes.iter().any(|(n, _)| *n == name)
    }

    /// Runs every pass in order; IR dumps go to `dump`. Returns per-pass results and timings.
    /// With `verify_each` the input is verified first (see [`PassManager::run_verified`]).
    pub fn run(&self, g: &mut Graph, dump: &mut dyn Write) -> Result<Vec<PassRun>, PipelineError> {
        if self.options.verify_each && !self.passes.is_empty() {
            verify(g).map_err(PipelineError::InvalidInput)?;
        }
        self.run_verified(g, dump)
    }

    /// [`PassManager::run`] on a graph the caller has just verified (the driver verifies at
    /// entry): the input is not verified again. With `verify_each`, the graph is verified
    /// after each pass that changed it; one that reports no change left it as verified.
    pub fn run_verified(&self, g: &mut Graph, dump: &mut dyn Write) -> Result<Vec<PassRun>, PipelineError> {
        let mut runs = Vec::with_capacity(self.passes.len());
        for &(name, ref pass) in &self.passes {
            if self.options.print_before_all || self.options.print_before.iter().any(|p| p == name) {
                write!(dump, "// -----// IR Dump Before {name} //----- //\n{}\n", print_graph(g))?;
            }
            let start = Instant::now();
            let changed =
                pass.run(g).map_err(|e| PipelineError::PassFailed { pass: name.into(), reason: e.to_string() })?;
            let elapsed = start.elapsed();
            if self.options.verify_each && changed {
                verify(g).map_err(|error| PipelineError::VerifyFailed { pass: name.into(), error })?;
            }
            if self.options.print_after_all || self.options.print_after.iter().any(|p| p == name) {
                write!(dump, "// -----// IR Dump After {name} //----- //\n{}\n", print_graph(g))?;
            }
            runs.push(PassRun { pass: name, changed, elapsed });
        }
        Ok(runs)
    }
}

fn parse_options(body: &str) -> Result<PassOptions, String> {
    let mut opts = PassOptions::new();
    for kv in body.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("option '{kv}' is not key=value"))?;
        if opts.insert(k.trim().to_string(), v.trim().to_string()).is_some() {
            return Err(format!("option '{}' given twice", k.trim()));
        }
    }
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::parse_graph;
    use crate::passes::PassError;

    const G: &str = "graph @g(%x: f32[2]) -> (f32[2]) {\n  %0 = aten.neg.default(%x) : f32[2]\n  %1 = aten.neg.default(%x) : f32[2]\n  %2 = aten.add.Tensor(%0, %1) : f32[2]\n  return %2\n}\n";

    #[test]
    fn pipelines_parse_with_options() {
        let pm = PassManager::from_pipeline(
            " canonicalize , fold-constants{max-elements=8} ,cse,dce ",
            PipelineOptions::default(),
        )
        .unwrap();
        assert_eq!(pm.pass_names(), vec!["canonicalize", "fold-constants", "cse", "dce"]);
        assert!(PassManager::from_pipeline("", PipelineOptions::default()).unwrap().pass_names().is_empty());
        let e = PassManager::from_pipeline("cse,,dce", PipelineOptions::default()).err().unwrap();
        assert_eq!(e.to_string(), "malformed pass pipeline 'cse,,dce': empty pass name");
        let e =
            PassManager::from_pipeline("fold-constants{max-elements=-3}", PipelineOptions::default()).err().unwrap();
        assert_eq!(
            e.to_string(),
            "pass 'fold-constants': max-elements must be an integer from 0 to 16777216, got '-3'"
        );
        let e = PassManager::from_pipeline("dce{x=1}", PipelineOptions::default()).err().unwrap();
        assert_eq!(e.to_string(), "pass 'dce': unknown option 'x'");
    }

    #[test]
    fn a_graph_with_a_mesh_requires_propagation_unless_the_pipeline_runs_it() {
        let meshed = parse_graph("graph @g(%x: f32[4] sharding<[{\"dp\"}]>) -> (f32[4]) {\n  mesh<[\"dp\"=2]>\n  %0 = aten.neg.default(%x) : f32[4]\n  return %0\n}\n").unwrap();
        let target = Target { reduce_scatter: false, ..Target::default() };
        let pm = PassManager::from_pipeline("cse,dce", PipelineOptions::default()).unwrap();
        assert_eq!(pm.required_after(&meshed, &target).pass_names(), vec!["propagate-sharding"]);
        assert!(pm.required_after(&parse_graph(G).unwrap(), &target).pass_names().is_empty());
        let runs_it = PassManager::from_pipeline("cse,propagate-sharding", PipelineOptions::default()).unwrap();
        assert!(runs_it.required_after(&meshed, &target).pass_names().is_empty());
    }

    #[test]
    fn every_default_pass_is_registered_once() {
        let mut names: Vec<&str> = REGISTRY.iter().map(|p| p.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), REGISTRY.len());
        assert!(PassManager::from_pipeline(DEFAULT_PIPELINE, PipelineOptions::default()).is_ok());
    }

    #[test]
    fn runs_report_change_and_time() {
        let mut g = parse_graph(G).unwrap();
        let pm = PassManager::from_pipeline("cse,dce,cse", PipelineOptions::default()).unwrap();
        let runs = pm.run(&mut g, &mut std::io::sink()).unwrap();
        let changed: Vec<bool> = runs.iter().map(|r| r.changed).collect();
        assert_eq!(changed, vec![true, false, false]);
        assert_eq!(g.op_count(), 2);
    }

    /// A pass that corrupts the IR: gives a permute an invalid permutation.
    #[derive(Default)]
    struct Breaker;
    impl PassDecl for Breaker {
        const NAME: &'static str = "breaker";
        const DESCRIPTION: &'static str = "corrupts the graph";
    }
    impl Pass for Breaker {
        fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
            let id = g.topo_order().unwrap()[1];
            crate::registry::attrs::DIMS.set(g.node_attrs_mut(id), vec![0, 0]);
            Ok(true)
        }
    }

    #[test]
    fn verification_after_each_pass_names_the_culprit() {
        let text = "graph @g(%x: f32[2, 3]) -> (f32[3, 2]) {\n  %0 = aten.permute.default(%x) {dims = [1, 0]} : f32[3, 2]\n  return %0\n}\n";
        let mut g = parse_graph(text).unwrap();
        let pm = PassManager::new(PipelineOptions::default()).then(Breaker);
        let e = pm.run(&mut g, &mut std::io::sink()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "IR is invalid after pass 'breaker': node %0 (aten.permute.default): dims [0, 0] is not a permutation of rank 2"
        );
        let mut g = parse_graph(text).unwrap();
        let pm = PassManager::new(PipelineOptions { verify_each: false, ..Default::default() }).then(Breaker);
        assert!(pm.run(&mut g, &mut std::io::sink()).is_ok());
    }

    /// `Breaker`'s corruption, reported as no change: the contract is that such a pass left the
    /// graph as it was, so the manager does not verify after it.
    #[derive(Default)]
    struct QuietBreaker;
    impl PassDecl for QuietBreaker {
        const NAME: &'static str = "quiet-breaker";
        const DESCRIPTION: &'static str = "corrupts the graph and says it changed nothing";
    }
    impl Pass for QuietBreaker {
        fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
            Breaker.run(g).map(|_| false)
        }
    }

    #[test]
    fn only_a_pass_that_changed_the_graph_is_verified_after() {
        let text = "graph @g(%x: f32[2, 3]) -> (f32[3, 2]) {\n  %0 = aten.permute.default(%x) {dims = [1, 0]} : f32[3, 2]\n  return %0\n}\n";
        let mut g = parse_graph(text).unwrap();
        let pm = PassManager::new(PipelineOptions::default()).then(QuietBreaker);
        assert!(pm.run(&mut g, &mut std::io::sink()).is_ok());
        // The next pass that changes the graph is verified, and named.
        let pm = PassManager::new(PipelineOptions::default()).then(Breaker);
        let e = pm.run_verified(&mut g, &mut std::io::sink()).unwrap_err();
        assert!(matches!(&e, PipelineError::VerifyFailed { pass, .. } if pass == "breaker"), "{e}");
    }

    #[test]
    fn an_invalid_input_is_reported_before_any_pass_runs() {
        // Verified, the input never reaches `Breaker` (which would otherwise be blamed).
        let text = "graph @g(%x: f32[2, 3]) -> (f32[2, 3]) {\n  %0 = aten.permute.default(%x) {dims = [0, 0]} : f32[2, 3]\n  return %0\n}\n";
        let mut g = parse_graph(text).unwrap();
        let pm = PassManager::new(PipelineOptions::default()).then(Breaker);
        let e = pm.run(&mut g, &mut std::io::sink()).unwrap_err();
        assert!(matches!(e, PipelineError::InvalidInput(_)), "{e}");
        assert_eq!(
            e.to_string(),
            "IR is invalid before the pipeline: node %0 (aten.permute.default): dims [0, 0] is not a permutation of rank 2"
        );
    }

    #[test]
    fn dumps_before_and_after() {
        let mut g = parse_graph(G).unwrap();
        let opts = PipelineOptions { print_before: vec!["dce".into()], print_after_all: true, ..Default::default() };
        let pm = PassManager::from_pipeline("cse,dce", opts).unwrap();
        let mut out = Vec::new();
        pm.run(&mut g, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        let headers: Vec<&str> = out.lines().filter(|l| l.starts_with("// -----//")).collect();
        assert_eq!(
            headers,
            vec![
                "// -----// IR Dump After cse //----- //",
                "// -----// IR Dump Before dce //----- //",
                "// -----// IR Dump After dce //----- //"
            ]
        );
    }
}
