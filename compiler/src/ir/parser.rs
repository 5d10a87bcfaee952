//! The text form's parser. Every error names the line and column where it was found and
//! what was expected; no input makes it panic.

use super::attr::{Attr, Elements, Literal};
use super::graph::{Graph, OpName, SourceLoc, Value};
use super::sharding::{Mesh, Origin, Sharding};
use super::types::{DType, Dim, SymRange, TensorType};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

impl std::error::Error for ParseError {}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Value(String),
    Global(String),
    Int(String),
    Float(String),
    Str(String),
    Punct(&'static str),
    Eof,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "'{s}'"),
            Tok::Value(s) => write!(f, "'%{s}'"),
            Tok::Global(s) => write!(f, "'@{s}'"),
            Tok::Int(s) | Tok::Float(s) => write!(f, "number '{s}'"),
            Tok::Str(_) => write!(f, "a string"),
            Tok::Punct(p) => write!(f, "'{p}'"),
            Tok::Eof => write!(f, "end of input"),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Pos {
    line: usize,
    col: usize,
}

impl From<Pos> for SourceLoc {
    fn from(p: Pos) -> SourceLoc {
        let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        SourceLoc { line: narrow(p.line), col: narrow(p.col) }
    }
}

struct Lexer<'a> {
    src: &'a [u8],
    i: usize,
    line: usize,
    col: usize,
}

const PUNCTS: [&str; 14] = ["->", "(", ")", "{", "}", "[", "]", "<", ">", ",", ":", "=", "#", "-"];

impl<'a> Lexer<'a> {
    fn err(&self, pos: Pos, message: impl Into<String>) -> ParseError {
        ParseError { line: pos.line, col: pos.col, message: message.into() }
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.i).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        if c == b'\n' {
            self.line += 1;
            self.col = 1;
        } else if c & 0xC0 != 0x80 {
            // Count columns in characters, not UTF-8 continuation bytes.
            self.col += 1;
        }
        Some(c)
    }

    fn skip_trivia(&mut self) {
        loop {
            match self.peek() {
                Some(c) if c.is_ascii_whitespace() => {
                    self.bump();
                }
                Some(b'/') if self.src.get(self.i + 1) == Some(&b'/') => {
                    while !matches!(self.peek(), None | Some(b'\n')) {
                        self.bump();
                    }
                }
                _ => return,
            }
        }
    }

    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> String {
        let start = self.i;
        while self.peek().is_some_and(&f) {
            self.bump();
        }
        String::from_utf8_lossy(&self.src[start..self.i]).into_owned()
    }

    fn next(&mut self) -> Result<(Tok, Pos), ParseError> {
        self.skip_trivia();
        let pos = Pos { line: self.line, col: self.col };
        let Some(c) = self.peek() else { return Ok((Tok::Eof, pos)) };
        let ident_char = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.';
        let tok = match c {
            b'%' | b'@' => {
                self.bump();
                // Graph names may carry '.' and '-' (module paths); value names may not.
                let global = c == b'@';
                let name =
                    self.take_while(|c| c.is_ascii_alphanumeric() || c == b'_' || (global && (c == b'.' || c == b'-')));
                if name.is_empty() {
                    return Err(self.err(pos, format!("expected a name after '{}'", c as char)));
                }
                if c == b'%' {
                    Tok::Value(name)
                } else {
                    Tok::Global(name)
                }
            }
            b'"' => Tok::Str(self.string(pos)?),
            c if c.is_ascii_digit() => self.number(),
            c if c.is_ascii_alphabetic() || c == b'_' => Tok::Ident(self.take_while(ident_char)),
            _ => {
                let rest = &self.src[self.i..];
                let Some(p) = PUNCTS.iter().find(|p| rest.starts_with(p.as_bytes())) else {
                    let ch = std::str::from_utf8(rest)
                        .ok()
                        .and_then(|s| s.chars().next())
                        .map(|c| format!("'{c}'"))
                        .unwrap_or_else(|| format!("byte 0x{c:02x}"));
                    return Err(self.err(pos, format!("unexpected character {ch}")));
                };
                for _ in 0..p.len() {
                    self.bump();
                }
                Tok::Punct(p)
            }
        };
        Ok((tok, pos))
    }

    fn number(&mut self) -> Tok {
        let mut s = self.take_while(|c| c.is_ascii_digit());
        let mut float = false;
        if self.peek() == Some(b'.') {
            float = true;
            self.bump();
            s.push('.');
            s.push_str(&self.take_while(|c| c.is_ascii_digit()));
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let save = (self.i, self.line, self.col);
            let mut exp = String::from("e");
            self.bump();
            if let Some(sign @ (b'+' | b'-')) = self.peek() {
                exp.push(sign as char);
                self.bump();
            }
            let digits = self.take_while(|c| c.is_ascii_digit());
            if digits.is_empty() {
                (self.i, self.line, self.col) = save;
            } else {
                float = true;
                s.push_str(&exp);
                s.push_str(&digits);
            }
        }
        if float {
            Tok::Float(s)
        } else {
            Tok::Int(s)
        }
    }

    fn string(&mut self, pos: Pos) -> Result<String, ParseError> {
        self.bump();
        let mut bytes = Vec::new();
        loop {
            let here = Pos { line: self.line, col: self.col };
            match self.bump() {
                None | Some(b'\n') => return Err(self.err(pos, "unterminated string")),
                Some(b'"') => break,
                Some(b'\\') => match self.bump() {
                    Some(b'"') => bytes.push(b'"'),
                    Some(b'\\') => bytes.push(b'\\'),
                    Some(b'n') => bytes.push(b'\n'),
                    Some(b't') => bytes.push(b'\t'),
                    Some(b'u') => {
                        if self.bump() != Some(b'{') {
                            return Err(self.err(here, "expected '{' after \\u"));
                        }
                        let hex = self.take_while(|c| c.is_ascii_hexdigit());
                        if self.bump() != Some(b'}') {
                            return Err(self.err(here, "expected '}' to close \\u{...}"));
                        }
                        let c = u32::from_str_radix(&hex, 16)
                            .ok()
                            .and_then(char::from_u32)
                            .ok_or_else(|| self.err(here, "invalid \\u{...} escape"))?;
                        bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                    }
                    _ => return Err(self.err(here, "unknown escape in string (expected \\\" \\\\ \\n \\t \\u{..})")),
                },
                Some(c) => bytes.push(c),
            }
        }
        String::from_utf8(bytes).map_err(|_| self.err(pos, "string is not valid UTF-8"))
    }
}

struct Parser<'a> {
    lex: Lexer<'a>,
    tok: Tok,
    pos: Pos,
    values: HashMap<String, (Value, usize)>,
    graph: Graph,
}

pub fn parse_graph(src: &str) -> Result<Graph, ParseError> {
    let mut lex = Lexer { src: src.as_bytes(), i: 0, line: 1, col: 1 };
    let (tok, pos) = lex.next()?;
    let mut p = Parser { lex, tok, pos, values: HashMap::new(), graph: Graph::new("") };
    p.graph()?;
    Ok(p.graph)
}

/// A layout in the text form's `[{"dp"}, {}]` (one axis set per dim): what a layout op's
/// `sharding` attribute holds.
pub fn parse_layout(src: &str) -> Result<Vec<Vec<String>>, ParseError> {
    let mut lex = Lexer { src: src.as_bytes(), i: 0, line: 1, col: 1 };
    let (tok, pos) = lex.next()?;
    let mut p = Parser { lex, tok, pos, values: HashMap::new(), graph: Graph::new("") };
    p.expect_punct("[")?;
    let dims = p.list("]", |p| p.axis_set())?;
    if !matches!(p.tok, Tok::Eof) {
        return Err(p.expected("the end of the layout"));
    }
    Ok(dims)
}

type PResult<T> = Result<T, ParseError>;

impl<'a> Parser<'a> {
    fn advance(&mut self) -> PResult<()> {
        let (t, p) = self.lex.next()?;
        self.tok = t;
        self.pos = p;
        Ok(())
    }

    fn err_at(&self, pos: Pos, msg: impl Into<String>) -> ParseError {
        ParseError { line: pos.line, col: pos.col, message: msg.into() }
    }

    fn expected(&self, what: &str) -> ParseError {
        self.err_at(self.pos, format!("expected {what}, found {}", self.tok))
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(&self.tok, Tok::Punct(q) if *q == p)
    }

    fn is_keyword(&self, k: &str) -> bool {
        matches!(&self.tok, Tok::Ident(s) if s == k)
    }

    fn eat_punct(&mut self, p: &str) -> PResult<bool> {
        if self.is_punct(p) {
            self.advance()?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    fn expect_punct(&mut self, p: &str) -> PResult<()> {
        if self.eat_punct(p)? {
            Ok(())
        } else {
            Err(self.expected(&format!("'{p}'")))
        }
    }

    fn expect_keyword(&mut self, k: &str) -> PResult<()> {
        if self.is_keyword(k) {
            self.advance()
        } else {
            Err(self.expected(&format!("'{k}'")))
        }
    }

    /// Comma-separated items up to `close` (consumed).
    fn list<T>(&mut self, close: &str, mut item: impl FnMut(&mut Self) -> PResult<T>) -> PResult<Vec<T>> {
        let mut items = Vec::new();
        if self.eat_punct(close)? {
            return Ok(items);
        }
        loop {
            items.push(item(self)?);
            if self.eat_punct(close)? {
                return Ok(items);
            }
            if !self.eat_punct(",")? {
                return Err(self.expected(&format!("',' or '{close}'")));
            }
        }
    }

    fn graph(&mut self) -> PResult<()> {
        self.expect_keyword("graph")?;
        let Tok::Global(name) = self.tok.clone() else { return Err(self.expected("a graph name like '@main'")) };
        self.graph.name = name;
        self.advance()?;
        self.expect_punct("(")?;
        self.list(")", |p| {
            let pos = p.pos;
            let Tok::Value(name) = p.tok.clone() else { return Err(p.expected("an input like '%arg0: f32[2]'")) };
            p.advance()?;
            p.expect_punct(":")?;
            let ty = p.tensor_type()?;
            let sharding = p.opt_sharding()?;
            let v = p.graph.add_input(ty);
            p.graph.set_loc(v.node, pos.into());
            if let Some(s) = sharding {
                p.graph.set_sharding(v, s);
            }
            p.define(pos, name, v, 1)
        })?;
        self.expect_punct("->")?;
        self.expect_punct("(")?;
        let out_types = self.list(")", |p| Ok((p.pos, p.tensor_type()?)))?;
        self.expect_punct("{")?;
        while self.is_keyword("sym") {
            self.sym_decl()?;
        }
        if self.is_keyword("mesh") {
            self.mesh_decl()?;
        }
        while !self.is_keyword("return") {
            if self.tok == Tok::Eof || self.is_punct("}") {
                return Err(self.expected("a node or 'return'"));
            }
            self.node()?;
        }
        let return_pos = self.pos;
        self.advance()?;
        let mut outputs = Vec::new();
        if matches!(self.tok, Tok::Value(_)) {
            loop {
                outputs.push(self.value_ref()?);
                if !self.eat_punct(",")? {
                    break;
                }
            }
        }
        self.expect_punct("}")?;
        if self.tok != Tok::Eof {
            return Err(self.expected("end of input after the graph's '}'"));
        }
        if outputs.len() != out_types.len() {
            return Err(self.err_at(
                return_pos,
                format!("return has {} values but the signature declares {}", outputs.len(), out_types.len()),
            ));
        }
        for (i, ((pos, declared), v)) in out_types.iter().zip(&outputs).enumerate() {
            let actual = self.graph.value_type(*v);
            if actual != declared {
                return Err(self.err_at(*pos, format!("result {i} is declared {declared} but return gives {actual}")));
            }
        }
        self.graph.set_outputs(outputs);
        Ok(())
    }

    fn define(&mut self, pos: Pos, name: String, v: Value, results: usize) -> PResult<()> {
        if self.values.contains_key(&name) {
            return Err(self.err_at(pos, format!("redefinition of value '%{name}'")));
        }
        self.values.insert(name, (v, results));
        Ok(())
    }

    fn sym_decl(&mut self) -> PResult<()> {
        self.advance()?;
        let pos = self.pos;
        let sym = match &self.tok {
            Tok::Ident(s) => parse_symbol(s).ok_or_else(|| self.expected("a symbol like 's0'"))?,
            _ => return Err(self.expected("a symbol like 's0'")),
        };
        if self.graph.symbols.contains_key(&sym) {
            return Err(self.err_at(pos, format!("symbol 's{sym}' declared twice")));
        }
        self.advance()?;
        self.expect_keyword("in")?;
        self.expect_punct("[")?;
        let min = self.int()?;
        self.expect_punct(",")?;
        let max = if self.is_keyword("inf") {
            self.advance()?;
            None
        } else {
            let max_pos = self.pos;
            let m = self.int()?;
            if m < min {
                return Err(self.err_at(max_pos, format!("symbol range [{min}, {m}] is empty")));
            }
            Some(m)
        };
        self.expect_punct("]")?;
        self.graph.symbols.insert(sym, SymRange { min, max });
        Ok(())
    }

    /// `mesh<["dp"=2, "tp"=2]>`.
    fn mesh_decl(&mut self) -> PResult<()> {
        let pos = self.pos;
        self.advance()?;
        self.expect_punct("<")?;
        self.expect_punct("[")?;
        let axes = self.list("]", |p| {
            let Tok::Str(name) = p.tok.clone() else { return Err(p.expected("a mesh axis like '\"dp\"=2'")) };
            p.advance()?;
            p.expect_punct("=")?;
            Ok((name, p.int()?))
        })?;
        self.expect_punct(">")?;
        let mesh = Mesh { axes };
        mesh.check().map_err(|m| self.err_at(pos, m))?;
        self.graph.mesh = Some(mesh);
        Ok(())
    }

    /// `{"dp", "tp"}`: a set of mesh axes.
    fn axis_set(&mut self) -> PResult<Vec<String>> {
        self.expect_punct("{")?;
        self.list("}", |p| {
            let Tok::Str(a) = p.tok.clone() else { return Err(p.expected("a mesh axis name like '\"dp\"'")) };
            p.advance()?;
            Ok(a)
        })
    }

    /// An optional `sharding<[{"dp"}, {}], partial = {"tp"}, origin = "rule:dot">` after a type.
    fn opt_sharding(&mut self) -> PResult<Option<Sharding>> {
        if !self.is_keyword("sharding") {
            return Ok(None);
        }
        self.advance()?;
        self.expect_punct("<")?;
        self.expect_punct("[")?;
        let dims = self.list("]", |p| p.axis_set())?;
        let mut s = Sharding { dims, partial: Vec::new(), origin: Origin::User };
        while self.eat_punct(",")? {
            let pos = self.pos;
            let key = match &self.tok {
                Tok::Ident(k) => k.clone(),
                _ => return Err(self.expected("'partial' or 'origin'")),
            };
            self.advance()?;
            self.expect_punct("=")?;
            match key.as_str() {
                "partial" => s.partial = self.axis_set()?,
                "origin" => {
                    let Tok::Str(text) = self.tok.clone() else { return Err(self.expected("an origin string")) };
                    s.origin = Origin::from_text(&text).ok_or_else(|| {
                        self.err_at(
                            self.pos,
                            format!("unknown origin '{text}' (user, reshard, no-rule, unannotated, rule:NAME)"),
                        )
                    })?;
                    self.advance()?;
                }
                _ => return Err(self.err_at(pos, format!("unknown sharding field '{key}' (partial, origin)"))),
            }
        }
        self.expect_punct(">")?;
        Ok(Some(s))
    }

    fn node(&mut self) -> PResult<()> {
        let def_pos = self.pos;
        let mut def: Option<(String, Option<(usize, Pos)>)> = None;
        if let Tok::Value(name) = self.tok.clone() {
            self.advance()?;
            let mut count = None;
            if self.eat_punct(":")? {
                let pos = self.pos;
                let n = self.int()?;
                if n < 0 {
                    return Err(self.err_at(pos, "result count must be non-negative"));
                }
                count = Some((n as usize, pos));
            }
            self.expect_punct("=")?;
            def = Some((name, count));
        }
        let op_pos = self.pos;
        let op = match &self.tok {
            Tok::Ident(s) => OpName::parse(s)
                .ok_or_else(|| self.err_at(op_pos, format!("'{s}' is not an op name like 'aten.add.Tensor'")))?,
            _ => return Err(self.expected("an op name like 'aten.add.Tensor'")),
        };
        self.advance()?;
        self.expect_punct("(")?;
        let operands = self.list(")", |p| p.value_ref())?;
        let mut attrs = BTreeMap::new();
        if self.eat_punct("{")? {
            let entries = self.list("}", |p| {
                let pos = p.pos;
                let key = match &p.tok {
                    Tok::Ident(k) if !k.contains('.') => k.clone(),
                    _ => return Err(p.expected("an attribute name")),
                };
                p.advance()?;
                p.expect_punct("=")?;
                Ok((pos, key, p.attr()?))
            })?;
            for (pos, key, value) in entries {
                if attrs.insert(key.clone(), value).is_some() {
                    return Err(self.err_at(pos, format!("duplicate attribute '{key}'")));
                }
            }
        }
        self.expect_punct(":")?;
        let types_pos = self.pos;
        let typed = |p: &mut Self| Ok((p.tensor_type()?, p.opt_sharding()?));
        let typed_results = if self.eat_punct("(")? { self.list(")", typed)? } else { vec![typed(self)?] };
        let (results, shardings): (Vec<TensorType>, Vec<Option<Sharding>>) = typed_results.into_iter().unzip();
        match def {
            None if !results.is_empty() => {
                return Err(self.err_at(def_pos, format!("op with {} results needs a name: '%x = ...'", results.len())))
            }
            Some((_, None)) if results.len() != 1 => {
                return Err(self.err_at(
                    types_pos,
                    format!("{} result types for a single value; write '%x:{} = ...'", results.len(), results.len()),
                ))
            }
            Some((_, Some((n, pos)))) if n != results.len() => {
                return Err(self.err_at(pos, format!("'{n}' results declared but {} result types given", results.len())))
            }
            _ => {}
        }
        let n = results.len();
        let id = self.graph.add_op(op, operands, attrs, results);
        self.graph.set_loc(id, def_pos.into());
        for (r, s) in shardings.into_iter().enumerate() {
            if let Some(s) = s {
                self.graph.set_sharding(Value::new(id, r as u32), s);
            }
        }
        if let Some((name, _)) = def {
            self.define(def_pos, name, Value::new(id, 0), n)?;
        }
        Ok(())
    }

    fn value_ref(&mut self) -> PResult<Value> {
        let pos = self.pos;
        let Tok::Value(name) = self.tok.clone() else { return Err(self.expected("a value like '%0'")) };
        self.advance()?;
        let &(v, count) =
            self.values.get(&name).ok_or_else(|| self.err_at(pos, format!("use of undefined value '%{name}'")))?;
        if self.eat_punct("#")? {
            let ipos = self.pos;
            let i = self.int()?;
            if i < 0 || i as usize >= count {
                return Err(self.err_at(ipos, format!("'%{name}' has {count} results; #{i} is out of range")));
            }
            Ok(Value::new(v.node, i as u32))
        } else if count != 1 {
            Err(self.err_at(pos, format!("'%{name}' has {count} results; pick one with '%{name}#N'")))
        } else {
            Ok(v)
        }
    }

    fn int(&mut self) -> PResult<i64> {
        let pos = self.pos;
        let neg = self.eat_punct("-")?;
        let Tok::Int(s) = self.tok.clone() else { return Err(self.expected("an integer")) };
        let text = if neg { format!("-{s}") } else { s };
        let v =
            text.parse::<i64>().map_err(|_| self.err_at(pos, format!("integer '{text}' is out of range for i64")))?;
        self.advance()?;
        Ok(v)
    }

    fn tensor_type(&mut self) -> PResult<TensorType> {
        let pos = self.pos;
        let dtype = match &self.tok {
            Tok::Ident(s) => DType::from_name(s).ok_or_else(|| {
                self.err_at(
                    pos,
                    format!("unknown dtype '{s}' (expected one of f16 bf16 f32 f64 i8 i16 i32 i64 u8 bool c64 c128)"),
                )
            })?,
            _ => return Err(self.expected("a tensor type like 'f32[2, 3]'")),
        };
        self.advance()?;
        self.expect_punct("[")?;
        let shape = self.list("]", |p| {
            let pos = p.pos;
            match &p.tok {
                Tok::Ident(s) => {
                    let sym = parse_symbol(s).ok_or_else(|| p.expected("a dimension (integer or symbol like 's0')"))?;
                    p.advance()?;
                    Ok(Dim::Sym(sym))
                }
                _ => {
                    let n = p.int()?;
                    if n < 0 {
                        return Err(p.err_at(pos, format!("dimension {n} is negative")));
                    }
                    Ok(Dim::Static(n))
                }
            }
        })?;
        Ok(TensorType { dtype, shape })
    }

    /// A number literal: (is_float, text with sign), including `inf`, `-inf` and `nan`.
    fn number(&mut self) -> PResult<Option<(bool, String)>> {
        let neg = self.is_punct("-");
        if neg {
            self.advance()?;
        }
        let sign = if neg { "-" } else { "" };
        let r = match &self.tok {
            Tok::Int(s) => Some((false, format!("{sign}{s}"))),
            Tok::Float(s) => Some((true, format!("{sign}{s}"))),
            Tok::Ident(s) if s == "inf" || s == "nan" => Some((true, format!("{sign}{s}"))),
            _ if neg => return Err(self.expected("a number after '-'")),
            _ => None,
        };
        if r.is_some() {
            self.advance()?;
        }
        Ok(r)
    }

    fn float_of(&self, pos: Pos, text: &str) -> PResult<f64> {
        text.parse::<f64>().map_err(|_| self.err_at(pos, format!("invalid float '{text}'")))
    }

    fn int_of(&self, pos: Pos, text: &str) -> PResult<i64> {
        text.parse::<i64>().map_err(|_| self.err_at(pos, format!("integer '{text}' is out of range for i64")))
    }

    fn attr(&mut self) -> PResult<Attr> {
        let pos = self.pos;
        if let Some((is_float, text)) = self.number()? {
            return Ok(if is_float {
                Attr::Float(self.float_of(pos, &text)?)
            } else {
                Attr::Int(self.int_of(pos, &text)?)
            });
        }
        let attr = match self.tok.clone() {
            Tok::Str(s) => Attr::Str(s),
            Tok::Ident(k) => match k.as_str() {
                "none" => Attr::None,
                "true" => Attr::Bool(true),
                "false" => Attr::Bool(false),
                "dense" => {
                    self.advance()?;
                    return self.dense(pos);
                }
                _ => match DType::from_name(&k) {
                    Some(d) => Attr::DType(d),
                    None => return Err(self.expected("an attribute value")),
                },
            },
            Tok::Punct("[") => {
                self.advance()?;
                let items = self.list("]", |p| {
                    let pos = p.pos;
                    let n = p.number()?.ok_or_else(|| p.expected("a number in the list"))?;
                    Ok((pos, n))
                })?;
                let any_float = items.iter().any(|(_, (f, _))| *f);
                return if any_float {
                    let v = items.iter().map(|(pos, (_, t))| self.float_of(*pos, t)).collect::<PResult<Vec<_>>>()?;
                    Ok(Attr::FloatList(v))
                } else {
                    let v = items.iter().map(|(pos, (_, t))| self.int_of(*pos, t)).collect::<PResult<Vec<_>>>()?;
                    Ok(Attr::IntList(v))
                };
            }
            _ => return Err(self.expected("an attribute value")),
        };
        self.advance()?;
        Ok(attr)
    }

    /// `dense<[e0, e1, ...] : type>`; elements are read in the literal's dtype.
    fn dense(&mut self, pos: Pos) -> PResult<Attr> {
        self.expect_punct("<")?;
        self.expect_punct("[")?;
        let items = self.list("]", |p| {
            let pos = p.pos;
            if p.is_keyword("true") || p.is_keyword("false") {
                let b = p.is_keyword("true");
                p.advance()?;
                return Ok((pos, None, b));
            }
            let n = p.number()?.ok_or_else(|| p.expected("a literal element"))?;
            Ok((pos, Some(n), false))
        })?;
        self.expect_punct(":")?;
        let ty = self.tensor_type()?;
        self.expect_punct(">")?;
        let dtype = ty.dtype;
        let bad = |p: &Self, pos: Pos| p.err_at(pos, format!("element does not fit a {dtype} literal"));
        let elems = if dtype == DType::Bool {
            Elements::Bool(
                items
                    .iter()
                    .map(|(p, n, b)| if n.is_none() { Ok(*b) } else { Err(bad(self, *p)) })
                    .collect::<PResult<_>>()?,
            )
        } else if dtype.is_integer() {
            Elements::Int(
                items
                    .iter()
                    .map(|(p, n, _)| match n {
                        Some((false, t)) => self.int_of(*p, t),
                        _ => Err(bad(self, *p)),
                    })
                    .collect::<PResult<_>>()?,
            )
        } else if dtype.is_float() {
            Elements::Float(
                items
                    .iter()
                    .map(|(p, n, _)| match n {
                        // f32 (and narrower) elements are read as f32 directly: no double rounding.
                        Some((_, t)) if dtype != DType::F64 => t
                            .parse::<f32>()
                            .map(|x| x as f64)
                            .map_err(|_| self.err_at(*p, format!("invalid float '{t}'"))),
                        Some((_, t)) => self.float_of(*p, t),
                        None => Err(bad(self, *p)),
                    })
                    .collect::<PResult<_>>()?,
            )
        } else {
            return Err(self.err_at(pos, format!("dense literals of dtype {dtype} are not supported")));
        };
        Literal::new(ty, elems).map(Attr::Tensor).map_err(|m| self.err_at(pos, m))
    }
}

fn parse_symbol(s: &str) -> Option<u32> {
    let digits = s.strip_prefix('s')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    digits.parse().ok()
}
