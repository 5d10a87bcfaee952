//! Shardy's attributes as typed values: the module's mesh and a value's sharding, each built
//! into an MLIR attribute without going through text. Shardy is not registered in our MLIR
//! context (toolchain.md), so the attribute is the opaque one MLIR keeps for an unregistered
//! dialect, which is exactly what parsing `#sdy.sharding<...>` would give (tested below).

use std::fmt;

use melior::ir::Attribute;
use melior::Context;

use super::mlir_ffi::opaque_attribute;
use crate::ir::{parse_layout, Mesh, ParseError, Sharding};

/// The mesh symbol every sharding of a lowered module refers to.
pub const MESH_SYMBOL: &str = "mesh";

/// `#sdy.mesh<["dp"=2, "tp"=2]>`: the axes of the module's mesh, in order.
pub struct MeshAttr<'m>(pub &'m Mesh);

/// `#sdy.sharding<@mesh, [{"dp"}, {}]>`: for each dim, the mesh axes it is split over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardingAttr {
    pub dims: Vec<Vec<String>>,
}

impl ShardingAttr {
    /// The layout a sharding decides (its pending `partial` axes are not Shardy's to know).
    pub fn of(s: &Sharding) -> ShardingAttr {
        ShardingAttr { dims: s.dims.clone() }
    }

    /// A layout op's `sharding` attribute, in the IR's `[{"dp"}, {}]` form.
    pub fn from_layout(text: &str) -> Result<ShardingAttr, ParseError> {
        Ok(ShardingAttr { dims: parse_layout(text)? })
    }

    pub fn build<'c>(&self, ctx: &'c Context) -> Attribute<'c> {
        opaque_attribute(ctx, "sdy", &self.body())
    }

    fn body(&self) -> String {
        let quoted = |axes: &[String]| axes.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", ");
        let dims: Vec<String> = self.dims.iter().map(|axes| format!("{{{}}}", quoted(axes))).collect();
        format!("sharding<@{MESH_SYMBOL}, [{}]>", dims.join(", "))
    }
}

impl MeshAttr<'_> {
    pub fn build<'c>(&self, ctx: &'c Context) -> Attribute<'c> {
        opaque_attribute(ctx, "sdy", &self.body())
    }

    fn body(&self) -> String {
        let axes: Vec<String> = self.0.axes.iter().map(|(a, n)| format!("\"{a}\"={n}")).collect();
        format!("mesh<[{}]>", axes.join(", "))
    }
}

impl fmt::Display for ShardingAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#sdy.{}", self.body())
    }
}

impl fmt::Display for MeshAttr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#sdy.{}", self.body())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> Context {
        let ctx = Context::new();
        ctx.set_allow_unregistered_dialects(true);
        ctx
    }

    #[test]
    fn built_attributes_are_the_ones_their_text_parses_to() {
        let ctx = context();
        let mesh = Mesh { axes: vec![("dp".into(), 2), ("tp".into(), 4)] };
        let m = MeshAttr(&mesh);
        assert_eq!(m.to_string(), r#"#sdy.mesh<["dp"=2, "tp"=4]>"#);
        assert_eq!(Some(m.build(&ctx)), Attribute::parse(&ctx, &m.to_string()));
        let s = ShardingAttr::from_layout(r#"[{"dp", "tp"}, {}]"#).unwrap();
        assert_eq!(s.dims, vec![vec!["dp".to_string(), "tp".to_string()], vec![]]);
        assert_eq!(s.to_string(), r#"#sdy.sharding<@mesh, [{"dp", "tp"}, {}]>"#);
        assert_eq!(Some(s.build(&ctx)), Attribute::parse(&ctx, &s.to_string()));
        // And it prints back as Shardy's own form, which XLA reads.
        assert_eq!(s.build(&ctx).to_string(), s.to_string());
    }

    #[test]
    fn a_malformed_layout_is_a_parse_error() {
        assert!(ShardingAttr::from_layout(r#"[{"dp"}"#).is_err());
        assert!(ShardingAttr::from_layout(r#"[{dp}]"#).is_err());
        assert!(ShardingAttr::from_layout(r#"[{"dp"}] x"#).is_err());
    }
}
