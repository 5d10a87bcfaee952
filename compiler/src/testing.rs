//! What `torchtpu-opt` offers tests, as in `mlir-opt`: several cases in one file
//! (`--split-input-file`) and checks of the errors they produce (`--verify-diagnostics`).
//!
//! - [`split_input_file`] cuts a file at lines `// -----` into chunks. Each chunk is padded with
//!   blank lines so that it starts at its own line: every position reported in a chunk (parse
//!   and verifier errors, `file:line:col`) is a position in the original file.
//! - [`expected_diagnostics`] reads `// expected-error {{substring}}` comments: on the line they
//!   are on, or `@+N` / `@-N` lines from there, or `@N` (line N of the file), or `@unknown` for an
//!   error that names no line (a pipeline or lowering error).
//! - [`verify_diagnostics`] compares them with the errors a chunk produced.
//! - [`run_chunks`] does it all around a caller's `process(chunk) -> output or error`.

/// The line that separates cases.
pub const SPLIT_MARKER: &str = "// -----";

/// One case of a split file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The case's text, after `start_line - 1` blank lines (so its lines keep their numbers).
    pub text: String,
    /// Line of the original file (1-based) at which the case starts.
    pub start_line: usize,
}

/// Cuts `text` at every line that is exactly [`SPLIT_MARKER`] (surrounding spaces allowed).
/// Without a marker the whole text is one chunk.
pub fn split_input_file(text: &str) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    let mut current = String::new();
    let mut start_line = 1;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if line.trim() == SPLIT_MARKER {
            chunks.push(Chunk { text: std::mem::take(&mut current), start_line });
            start_line = i + 2;
            current = "\n".repeat(i + 1);
        } else {
            current.push_str(line);
        }
    }
    chunks.push(Chunk { text: current, start_line });
    chunks
}

/// Joins the outputs of the chunks as mlir-opt does: separated by `// -----` lines.
pub fn join_outputs(outputs: &[String]) -> String {
    let mut out = String::new();
    for (i, o) in outputs.iter().enumerate() {
        if i > 0 {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(SPLIT_MARKER);
            out.push('\n');
        }
        out.push_str(o);
    }
    out
}

/// An error as reported: where (if it says) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// 1-based line, if the error names one.
    pub line: Option<usize>,
    pub message: String,
}

impl Diagnostic {
    /// Reads a one-line error of the form `<source>:LINE:COL: message` (or `<source>:LINE:
    /// message`); anything else is an error without a line. `source` is the file name the
    /// error was located with.
    pub fn parse(source: &str, rendered: &str) -> Diagnostic {
        let located = rendered.strip_prefix(source).and_then(|rest| rest.strip_prefix(':')).and_then(|rest| {
            let (line, rest) = rest.split_once(':')?;
            let line: usize = line.parse().ok()?;
            let rest = match rest.split_once(':') {
                Some((col, tail)) if col.parse::<usize>().is_ok() => tail,
                _ => rest,
            };
            Some((line, rest.trim_start().to_owned()))
        });
        match located {
            Some((line, message)) => Diagnostic { line: Some(line), message },
            None => Diagnostic { line: None, message: rendered.to_owned() },
        }
    }
}

/// An `expected-error` comment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The line the error must name (None: `@unknown`, an error without a line).
    pub line: Option<usize>,
    /// A substring of the error's message.
    pub substring: String,
    /// The line of the comment itself.
    pub comment_line: usize,
}

/// Every `expected-error` in `text` (line numbers as in `text`): the words `expected-error`
/// in a `//` comment, followed by `{{` or `@` (other mentions of the words are prose). A
/// malformed one (a bad `@` designator, a line before the file, no `{{...}}` after `@`) is an
/// error `LINE: malformed expected-error: why`.
pub fn expected_diagnostics(text: &str) -> Result<Vec<Expected>, String> {
    const TAG: &str = "expected-error";
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let comment_line = i + 1;
        let Some(comment) = line.find("//").map(|at| &line[at + 2..]) else {
            continue;
        };
        let Some(at) = comment.find(TAG) else {
            continue;
        };
        let rest = comment[at + TAG.len()..].trim_start();
        if !rest.starts_with('@') && !rest.starts_with("{{") {
            continue;
        }
        let (designator, rest) = match rest.strip_prefix('@') {
            Some(r) => {
                let end = r.find(char::is_whitespace).unwrap_or(r.len());
                (Some(&r[..end]), r[end..].trim_start())
            }
            None => (None, rest),
        };
        let bad = |why: &str| format!("{comment_line}: malformed expected-error: {why}");
        let target = match designator {
            None => Some(comment_line),
            Some("unknown") => None,
            Some(d) => {
                let n = |s: &str| s.parse::<usize>().map_err(|_| bad(&format!("bad line designator '@{d}'")));
                Some(if let Some(up) = d.strip_prefix('-') {
                    comment_line.checked_sub(n(up)?).filter(|&l| l >= 1).ok_or_else(|| bad("line before the file"))?
                } else if let Some(down) = d.strip_prefix('+') {
                    comment_line + n(down)?
                } else {
                    n(d)?
                })
            }
        };
        let Some(body) = rest.strip_prefix("{{") else {
            return Err(bad("expected '{{substring}}'"));
        };
        let Some(end) = body.find("}}") else {
            return Err(bad("missing '}}'"));
        };
        out.push(Expected { line: target, substring: body[..end].to_owned(), comment_line });
    }
    Ok(out)
}

/// Matches `produced` against `expected`: each expected error must be produced (at its line,
/// containing its substring) and each produced error must be expected. Returns one message
/// per mismatch (empty: verified), naming `source` and the lines.
pub fn verify_diagnostics(source: &str, expected: &[Expected], produced: &[Diagnostic]) -> Vec<String> {
    let mut used = vec![false; produced.len()];
    let mut problems = Vec::new();
    for e in expected {
        let found = produced
            .iter()
            .enumerate()
            .find(|(i, d)| !used[*i] && d.line == e.line && d.message.contains(&e.substring));
        match found {
            Some((i, _)) => used[i] = true,
            None => {
                let at = e.line.map_or("with no line".to_owned(), |l| format!("at line {l}"));
                let near = produced
                    .iter()
                    .zip(&used)
                    .find(|(d, u)| !**u && d.line == e.line)
                    .map_or(String::new(), |(d, _)| format!(" (the error there is: {})", d.message));
                problems.push(format!(
                    "{source}:{}: expected error {at} containing \"{}\" was not produced{near}",
                    e.comment_line, e.substring
                ));
            }
        }
    }
    for (d, u) in produced.iter().zip(&used) {
        if !*u {
            match d.line {
                Some(l) => problems.push(format!("{source}:{l}: unexpected error: {}", d.message)),
                None => problems.push(format!("{source}: unexpected error: {}", d.message)),
            }
        }
    }
    problems
}

/// What [`run_chunks`] produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunksOutcome {
    /// The chunks' outputs, joined by `// -----` when split (a failed chunk adds nothing).
    pub output: String,
    /// Error lines for standard error, in chunk order.
    pub errors: Vec<String>,
    /// Every chunk succeeded (or, when verifying, every chunk produced exactly the expected
    /// errors).
    pub ok: bool,
}

/// Runs `process` on each case of `text` (the whole text unless `split`). `process` returns
/// the case's output, or its error as one line (`<source>:line:col: ...` where it has a place).
/// Without `verify`, each failed case adds its error and processing continues; with `verify`,
/// the errors are compared with the cases' `expected-error` comments instead.
pub fn run_chunks(
    source: &str,
    text: &str,
    split: bool,
    verify: bool,
    mut process: impl FnMut(&str) -> Result<String, String>,
) -> ChunksOutcome {
    let chunks = if split { split_input_file(text) } else { vec![Chunk { text: text.to_owned(), start_line: 1 }] };
    let mut outcome = ChunksOutcome { ok: true, ..ChunksOutcome::default() };
    let mut outputs = Vec::with_capacity(chunks.len());
    for chunk in &chunks {
        let result = process(&chunk.text);
        if !verify {
            match result {
                Ok(o) => outputs.push(o),
                Err(e) => {
                    outcome.errors.push(e);
                    outcome.ok = false;
                    outputs.push(String::new());
                }
            }
            continue;
        }
        let expected = match expected_diagnostics(&chunk.text) {
            Ok(e) => e,
            Err(e) => {
                outcome.errors.push(format!("{source}:{e}"));
                outcome.ok = false;
                outputs.push(String::new());
                continue;
            }
        };
        let (output, produced) = match result {
            Ok(o) => (o, Vec::new()),
            Err(e) => (String::new(), vec![Diagnostic::parse(source, &e)]),
        };
        let problems = verify_diagnostics(source, &expected, &produced);
        if !problems.is_empty() {
            outcome.ok = false;
            outcome.errors.extend(problems);
        }
        outputs.push(output);
    }
    outcome.output = if split { join_outputs(&outputs) } else { outputs.concat() };
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "a\n// -----\nb\nc\n  // -----  \n\nd";

    #[test]
    fn split_keeps_line_numbers() {
        let chunks = split_input_file(FILE);
        assert_eq!(chunks.len(), 3);
        assert_eq!((chunks[0].text.as_str(), chunks[0].start_line), ("a\n", 1));
        assert_eq!((chunks[1].text.as_str(), chunks[1].start_line), ("\n\nb\nc\n", 3));
        assert_eq!((chunks[2].text.as_str(), chunks[2].start_line), ("\n\n\n\n\n\nd", 6));
        // Line 7 of the file ("d") is line 7 of its chunk.
        assert_eq!(chunks[2].text.lines().nth(6), Some("d"));
        assert_eq!(split_input_file("x\ny\n"), vec![Chunk { text: "x\ny\n".into(), start_line: 1 }]);
        // A marker inside a line is not a separator.
        assert_eq!(split_input_file("x // ----- y\n").len(), 1);
    }

    #[test]
    fn outputs_are_joined_by_markers() {
        assert_eq!(join_outputs(&["a\n".into(), "b".into(), "c\n".into()]), "a\n// -----\nb\n// -----\nc\n");
        assert_eq!(join_outputs(&["a\n".into()]), "a\n");
        assert_eq!(join_outputs(&[String::new(), "b\n".into()]), "// -----\nb\n");
    }

    #[test]
    fn diagnostics_parse_their_place() {
        let d = Diagnostic::parse("f.ir", "f.ir:3:5: node %1 (aten.add.Tensor): bad");
        assert_eq!(d, Diagnostic { line: Some(3), message: "node %1 (aten.add.Tensor): bad".into() });
        assert_eq!(Diagnostic::parse("f.ir", "f.ir:4: x").line, Some(4));
        let d = Diagnostic::parse("f.ir", "unknown pass 'nope'");
        assert_eq!((d.line, d.message.as_str()), (None, "unknown pass 'nope'"));
        assert_eq!(Diagnostic::parse("f.ir", "g.ir:3:1: x").line, None);
    }

    #[test]
    fn expected_errors_and_their_designators() {
        let text = "// expected-error @+1 {{first}}\nx\ny // expected-error {{same line}}\n\
                    // expected-error @-1 {{above}}\n// expected-error @2 {{absolute}}\n\
                    // expected-error @unknown {{nowhere}}\n// not an expected error\n";
        let e = expected_diagnostics(text).unwrap();
        let got: Vec<(Option<usize>, &str, usize)> =
            e.iter().map(|e| (e.line, e.substring.as_str(), e.comment_line)).collect();
        assert_eq!(
            got,
            [
                (Some(2), "first", 1),
                (Some(3), "same line", 3),
                (Some(3), "above", 4),
                (Some(2), "absolute", 5),
                (None, "nowhere", 6)
            ]
        );
        for (bad, why) in [
            ("// expected-error @+x {{a}}", "bad line designator"),
            ("// expected-error @-5 {{a}}", "before the file"),
            ("// expected-error @+1 no braces", "expected '{{substring}}'"),
            ("// expected-error {{open", "missing '}}'"),
        ] {
            let err = expected_diagnostics(bad).unwrap_err();
            assert!(err.starts_with("1: malformed expected-error") && err.contains(why), "{bad}: {err}");
        }
        // Prose that mentions the words is not a check.
        assert_eq!(
            expected_diagnostics(
                "// each case has an expected-error comment
"
            )
            .unwrap(),
            []
        );
    }

    #[test]
    fn verification_reports_missing_and_unexpected_errors() {
        let expected = expected_diagnostics("// expected-error @+1 {{broadcast}}\nx\n").unwrap();
        let at = |line, m: &str| Diagnostic { line, message: m.into() };
        assert!(verify_diagnostics("f", &expected, &[at(Some(2), "does not broadcast")]).is_empty());
        let p = verify_diagnostics("f", &expected, &[at(Some(2), "something else")]);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("f:1: expected error at line 2 containing \"broadcast\" was not produced"), "{p:?}");
        assert!(p[0].contains("the error there is: something else"), "{p:?}");
        assert_eq!(p[1], "f:2: unexpected error: something else");
        let p = verify_diagnostics("f", &expected, &[]);
        assert_eq!(p.len(), 1);
        let p = verify_diagnostics("f", &[], &[at(None, "unknown pass")]);
        assert_eq!(p, ["f: unexpected error: unknown pass"]);
    }

    #[test]
    fn run_chunks_continues_after_errors_and_verifies() {
        let text = "ok 1\n// -----\nfail // expected-error {{boom}}\n// -----\nok 3\n";
        let process = |chunk: &str| {
            let line = chunk.lines().position(|l| !l.is_empty()).unwrap() + 1;
            if chunk.contains("fail") {
                Err(format!("f.ir:{line}:1: boom here"))
            } else {
                Ok(format!("out {line}\n"))
            }
        };
        let plain = run_chunks("f.ir", text, true, false, process);
        assert_eq!(plain.output, "out 1\n// -----\n// -----\nout 5\n");
        assert_eq!((plain.errors.as_slice(), plain.ok), (&["f.ir:3:1: boom here".to_string()][..], false));

        let verified = run_chunks("f.ir", text, true, true, process);
        assert!(verified.ok, "{verified:?}");
        assert!(verified.errors.is_empty());

        // An expected error that does not come, in an unsplit file.
        let missing = run_chunks("f.ir", "ok // expected-error {{boom}}\n", false, true, process);
        assert!(!missing.ok);
        assert_eq!(missing.output, "out 1\n");
        assert!(missing.errors[0].contains("was not produced"), "{missing:?}");
    }
}
