//! The text form's printer. Values are renumbered in canonical order (`%arg0..` for inputs,
//! `%0..` for nodes), so the printed text of a graph is canonical: it is what cache keys and
//! dumps use, and `parse(print(g))` gives back `g`.

use super::attr::{Attr, Elements, Literal};
use super::graph::{Graph, NodeId, NodeKind, Value};
use super::types::DType;
use std::collections::HashMap;
use std::fmt::Write;

/// Printed names of the values of a graph (`%arg0`, `%3`, `%3#1`).
pub struct ValueNames {
    node_names: HashMap<NodeId, String>,
}

impl ValueNames {
    pub fn new(g: &Graph, order: &[NodeId]) -> ValueNames {
        let mut node_names = HashMap::with_capacity(order.len());
        let mut next = 0usize;
        for &id in order {
            let name = match g.node(id).kind {
                NodeKind::Input(i) => format!("%arg{i}"),
                NodeKind::Op(_) => {
                    next += 1;
                    format!("%{}", next - 1)
                }
            };
            node_names.insert(id, name);
        }
        ValueNames { node_names }
    }

    /// Names for any graph, even one with a cycle (then in creation order).
    pub fn for_graph(g: &Graph) -> ValueNames {
        ValueNames::new(g, &print_order(g))
    }

    pub fn node(&self, id: NodeId) -> &str {
        self.node_names.get(&id).map(String::as_str).unwrap_or("%<deleted>")
    }

    pub fn value(&self, g: &Graph, v: Value) -> String {
        let base = self.node(v.node);
        let multi = g.contains(v.node) && g.node(v.node).results.len() != 1;
        if multi {
            format!("{base}#{}", v.result)
        } else {
            base.to_string()
        }
    }
}

/// Canonical order, or creation order when the graph has a cycle (printing never fails).
fn print_order(g: &Graph) -> Vec<NodeId> {
    g.topo_order().unwrap_or_else(|_| {
        let mut ids: Vec<NodeId> = g.petgraph().node_indices().collect();
        ids.sort();
        ids
    })
}

pub fn print_graph(g: &Graph) -> String {
    let order = print_order(g);
    let names = ValueNames::new(g, &order);
    let mut out = String::new();
    write!(out, "graph @{}(", g.name).unwrap();
    for (i, &id) in g.inputs().iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write!(out, "{}: {}", names.node(id), g.node(id).results[0]).unwrap();
        if let Some(sh) = g.sharding(Value::new(id, 0)) {
            write!(out, " {sh}").unwrap();
        }
    }
    out.push_str(") -> (");
    for (i, &v) in g.outputs().iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        match g.try_value_type(v) {
            Some(t) => write!(out, "{t}").unwrap(),
            None => out.push_str("<invalid>"),
        }
    }
    out.push_str(") {\n");
    for (s, r) in &g.symbols {
        write!(out, "  sym s{s} in [{}, ", r.min).unwrap();
        match r.max {
            Some(m) => writeln!(out, "{m}]").unwrap(),
            None => out.push_str("inf]\n"),
        }
    }
    if let Some(mesh) = &g.mesh {
        writeln!(out, "  {mesh}").unwrap();
    }
    for &id in &order {
        let node = g.node(id);
        let NodeKind::Op(op) = &node.kind else { continue };
        out.push_str("  ");
        match node.results.len() {
            0 => {}
            1 => write!(out, "{} = ", names.node(id)).unwrap(),
            n => write!(out, "{}:{n} = ", names.node(id)).unwrap(),
        }
        write!(out, "{op}(").unwrap();
        for (i, &v) in node.operands.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&names.value(g, v));
        }
        out.push(')');
        if !node.attrs.is_empty() {
            out.push_str(" {");
            for (i, (k, a)) in node.attrs.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write!(out, "{k} = ").unwrap();
                print_attr(&mut out, a);
            }
            out.push('}');
        }
        out.push_str(" : ");
        let typed = |out: &mut String, r: usize| {
            write!(out, "{}", node.results[r]).unwrap();
            if let Some(sh) = g.sharding(Value::new(id, r as u32)) {
                write!(out, " {sh}").unwrap();
            }
        };
        if node.results.len() == 1 {
            typed(&mut out, 0);
        } else {
            out.push('(');
            for r in 0..node.results.len() {
                if r > 0 {
                    out.push_str(", ");
                }
                typed(&mut out, r);
            }
            out.push(')');
        }
        out.push('\n');
    }
    out.push_str("  return");
    for (i, &v) in g.outputs().iter().enumerate() {
        out.push_str(if i == 0 { " " } else { ", " });
        out.push_str(&names.value(g, v));
    }
    out.push_str("\n}\n");
    out
}

/// Shortest text that parses back to exactly `x` (f64), always with a `.`/`e` or a keyword,
/// so a float never reads back as an int.
pub fn format_f64(x: f64) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        }
    } else {
        format!("{x:?}")
    }
}

/// Shortest text for a value stored in `dtype` (f32 elements print as f32).
fn format_elem(dtype: DType, x: f64) -> String {
    match dtype {
        DType::F64 => format_f64(x),
        _ if x.is_finite() => format!("{:?}", x as f32),
        _ => format_f64(x),
    }
}

pub fn print_attr(out: &mut String, a: &Attr) {
    match a {
        Attr::None => out.push_str("none"),
        Attr::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Attr::Int(i) => write!(out, "{i}").unwrap(),
        Attr::Float(x) => out.push_str(&format_f64(*x)),
        Attr::Str(s) => print_string(out, s),
        Attr::DType(d) => out.push_str(d.name()),
        Attr::IntList(v) => {
            out.push('[');
            for (i, x) in v.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write!(out, "{x}").unwrap();
            }
            out.push(']');
        }
        Attr::FloatList(v) => {
            out.push('[');
            for (i, x) in v.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&format_f64(*x));
            }
            out.push(']');
        }
        Attr::Tensor(l) => print_literal(out, l),
    }
}

fn print_literal(out: &mut String, l: &Literal) {
    out.push_str("dense<[");
    let sep = |out: &mut String, i: usize| {
        if i > 0 {
            out.push_str(", ")
        }
    };
    match &l.elems {
        Elements::Float(v) => v.iter().enumerate().for_each(|(i, x)| {
            sep(out, i);
            out.push_str(&format_elem(l.ty.dtype, *x));
        }),
        Elements::Int(v) => v.iter().enumerate().for_each(|(i, x)| {
            sep(out, i);
            write!(out, "{x}").unwrap();
        }),
        Elements::Bool(v) => v.iter().enumerate().for_each(|(i, x)| {
            sep(out, i);
            out.push_str(if *x { "true" } else { "false" });
        }),
    }
    write!(out, "] : {}>", l.ty).unwrap();
}

fn print_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => write!(out, "\\u{{{:x}}}", c as u32).unwrap(),
            c => out.push(c),
        }
    }
    out.push('"');
}

impl std::fmt::Display for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&print_graph(self))
    }
}
