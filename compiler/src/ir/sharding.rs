//! Device meshes and value shardings: how an SPMD program lays each tensor over the devices.
//!
//! A [`Mesh`] names its axes (`["dp"=2, "tp"=2]`: 4 devices, row-major, device `d` at
//! coordinates `(d / 2, d % 2)`). A [`Sharding`] says, per tensor dim, which mesh axes split
//! it (major to minor), and which axes hold a pending sum (`partial`: each device has a
//! partial result that an all-reduce completes). Axes not named are replicated. The same
//! vocabulary as Shardy's `#sdy.sharding`, which the lowering emits.

use std::fmt;

use super::types::{Dim, TensorType};

/// A named, row-major grid of devices.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Mesh {
    pub axes: Vec<(String, i64)>,
}

impl Mesh {
    /// The number of devices: the product of the axis sizes.
    pub fn devices(&self) -> i64 {
        self.axes.iter().map(|(_, n)| *n).product()
    }

    pub fn axis_size(&self, axis: &str) -> Option<i64> {
        self.axes.iter().find(|(a, _)| a == axis).map(|(_, n)| *n)
    }

    /// Device `d`'s coordinate along each axis (row-major: the last axis varies fastest).
    pub fn coords(&self, device: i64) -> Vec<i64> {
        let mut rest = device;
        let mut coords = vec![0; self.axes.len()];
        for (i, (_, n)) in self.axes.iter().enumerate().rev() {
            coords[i] = rest % n;
            rest /= n;
        }
        coords
    }

    /// Checks the axes: at least one, unique non-empty names, sizes >= 1.
    pub fn check(&self) -> Result<(), String> {
        if self.axes.is_empty() {
            return Err("a mesh needs at least one axis".into());
        }
        for (i, (a, n)) in self.axes.iter().enumerate() {
            if a.is_empty() || !a.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!("mesh axis name '{a}' must be letters, digits or '_'"));
            }
            if *n < 1 {
                return Err(format!("mesh axis '{a}' has size {n}; sizes are >= 1"));
            }
            if self.axes[..i].iter().any(|(b, _)| b == a) {
                return Err(format!("mesh axis '{a}' is named twice"));
            }
        }
        if self.axes.iter().try_fold(1i64, |acc, (_, n)| acc.checked_mul(*n)).is_none() {
            return Err(format!("the {self} has more devices than fit in an i64"));
        }
        Ok(())
    }
}

impl fmt::Display for Mesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("mesh<[")?;
        for (i, (a, n)) in self.axes.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "\"{a}\"={n}")?;
        }
        f.write_str("]>")
    }
}

/// Where a value's sharding came from (what `torchtpu.sharding.explain` reports).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Origin {
    /// A user annotation: `torchtpu.shard` on an input, or `sharding_constraint`.
    User,
    /// Propagated by the named sharding rule of the op registry (`elementwise`, `dot`, ...).
    Rule(String),
    /// Produced by a reshard the propagation inserted.
    Reshard,
    /// The op has no sharding rule: its inputs were gathered and its results are replicated.
    NoRule,
    /// An input nobody annotated: replicated.
    Unannotated,
}

impl Origin {
    pub fn text(&self) -> String {
        match self {
            Origin::User => "user".into(),
            Origin::Rule(r) => format!("rule:{r}"),
            Origin::Reshard => "reshard".into(),
            Origin::NoRule => "no-rule".into(),
            Origin::Unannotated => "unannotated".into(),
        }
    }

    pub fn from_text(s: &str) -> Option<Origin> {
        match s {
            "user" => Some(Origin::User),
            "reshard" => Some(Origin::Reshard),
            "no-rule" => Some(Origin::NoRule),
            "unannotated" => Some(Origin::Unannotated),
            _ => s.strip_prefix("rule:").filter(|r| !r.is_empty()).map(|r| Origin::Rule(r.to_string())),
        }
    }
}

/// How one value is laid out over the mesh.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Sharding {
    /// Per tensor dim, the mesh axes that split it, major to minor (empty: whole on every device).
    pub dims: Vec<Vec<String>>,
    /// Axes over which each device holds a partial result (its piece's sum, max, ... as the
    /// op reduces), completed by an all-reduce of that reduction where a consumer needs it.
    pub partial: Vec<String>,
    pub origin: Origin,
}

impl Sharding {
    pub fn replicated(rank: usize, origin: Origin) -> Sharding {
        Sharding { dims: vec![Vec::new(); rank], partial: Vec::new(), origin }
    }

    /// Whether the layouts are the same (origins aside).
    pub fn same_layout(&self, other: &Sharding) -> bool {
        self.dims == other.dims && self.partial == other.partial
    }

    pub fn is_replicated(&self) -> bool {
        self.partial.is_empty() && self.dims.iter().all(Vec::is_empty)
    }

    /// Every axis the layout uses (dims, then partial).
    pub fn axes(&self) -> impl Iterator<Item = &String> {
        self.dims.iter().flatten().chain(&self.partial)
    }

    /// The product of the sizes of `dim`'s axes (how many pieces it is split into).
    pub fn splits(&self, mesh: &Mesh, dim: usize) -> i64 {
        self.dims.get(dim).map_or(1, |axes| axes.iter().map(|a| mesh.axis_size(a).unwrap_or(1)).product())
    }

    /// The shape one device holds (static dims divided by their splits).
    pub fn local_dims(&self, mesh: &Mesh, global: &[i64]) -> Vec<i64> {
        global.iter().enumerate().map(|(d, &n)| n / self.splits(mesh, d)).collect()
    }

    /// Checks the sharding against the mesh and the value's type: one entry per dim, known
    /// axes, each used once, static dims divisible by their splits.
    pub fn check(&self, mesh: &Mesh, ty: &TensorType) -> Result<(), String> {
        if self.dims.len() != ty.shape.len() {
            return Err(format!(
                "sharding {self} has {} dims but the type {ty} has {}",
                self.dims.len(),
                ty.shape.len()
            ));
        }
        let mut seen: Vec<&String> = Vec::new();
        for a in self.axes() {
            if mesh.axis_size(a).is_none() {
                return Err(format!("sharding {self} names axis '{a}', which the {mesh} does not have"));
            }
            if seen.contains(&a) {
                return Err(format!("sharding {self} uses axis '{a}' twice"));
            }
            seen.push(a);
        }
        for (d, dim) in ty.shape.iter().enumerate() {
            let splits = self.splits(mesh, d);
            if let Dim::Static(n) = dim {
                if n % splits != 0 {
                    return Err(format!(
                        "dim {d} of {ty} (size {n}) is not divisible by its mesh axes {:?} ({splits} pieces)",
                        self.dims[d]
                    ));
                }
            } else if splits > 1 {
                return Err(format!("dim {d} of {ty} is symbolic and cannot be sharded"));
            }
        }
        Ok(())
    }

    /// Shardy's form of the layout (`[{"dp"}, {}]`), without the mesh.
    pub fn sdy_dims(&self) -> String {
        let dims: Vec<String> = self
            .dims
            .iter()
            .map(|axes| format!("{{{}}}", axes.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", ")))
            .collect();
        format!("[{}]", dims.join(", "))
    }
}

impl fmt::Display for Sharding {
    /// `sharding<[{"dp"}, {}], partial = {"tp"}, origin = "rule:dot">`: the IR's text form
    /// (`origin` left out for user annotations).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sharding<{}", self.sdy_dims())?;
        if !self.partial.is_empty() {
            let axes: Vec<String> = self.partial.iter().map(|a| format!("\"{a}\"")).collect();
            write!(f, ", partial = {{{}}}", axes.join(", "))?;
        }
        if self.origin != Origin::User {
            write!(f, ", origin = \"{}\"", self.origin.text())?;
        }
        f.write_str(">")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    fn mesh() -> Mesh {
        Mesh { axes: vec![("dp".into(), 2), ("tp".into(), 2)] }
    }

    #[test]
    fn coordinates_are_row_major() {
        let m = mesh();
        assert_eq!(m.devices(), 4);
        let coords: Vec<Vec<i64>> = (0..4).map(|d| m.coords(d)).collect();
        assert_eq!(coords, vec![vec![0, 0], vec![0, 1], vec![1, 0], vec![1, 1]]);
    }

    #[test]
    fn checks_axes_and_divisibility() {
        let ty = TensorType::fixed(DType::F32, &[6, 4]);
        let s = |dims: Vec<Vec<&str>>| Sharding {
            dims: dims.into_iter().map(|d| d.into_iter().map(String::from).collect()).collect(),
            partial: vec![],
            origin: Origin::User,
        };
        assert!(s(vec![vec!["dp"], vec!["tp"]]).check(&mesh(), &ty).is_ok());
        assert!(s(vec![vec!["dp", "tp"], vec![]]).check(&mesh(), &ty).unwrap_err().contains("not divisible"));
        assert!(s(vec![vec!["dp"], vec!["dp"]]).check(&mesh(), &ty).unwrap_err().contains("twice"));
        assert!(s(vec![vec!["x"], vec![]]).check(&mesh(), &ty).unwrap_err().contains("'x'"));
        assert!(s(vec![vec![]]).check(&mesh(), &ty).unwrap_err().contains("has 1 dims"));
        assert_eq!(s(vec![vec!["dp"], vec![]]).local_dims(&mesh(), &[6, 4]), vec![3, 4]);
    }

    #[test]
    fn text_forms() {
        let s = Sharding {
            dims: vec![vec!["dp".into()], vec![]],
            partial: vec!["tp".into()],
            origin: Origin::Rule("dot".into()),
        };
        assert_eq!(s.to_string(), r#"sharding<[{"dp"}, {}], partial = {"tp"}, origin = "rule:dot">"#);
        assert_eq!(s.sdy_dims(), r#"[{"dp"}, {}]"#);
        let user = Sharding { origin: Origin::User, partial: vec![], ..s };
        assert_eq!(user.to_string(), r#"sharding<[{"dp"}, {}]>"#);
        assert_eq!(mesh().to_string(), r#"mesh<["dp"=2, "tp"=2]>"#);
        for o in [Origin::User, Origin::Reshard, Origin::NoRule, Origin::Unannotated, Origin::Rule("x".into())] {
            assert_eq!(Origin::from_text(&o.text()), Some(o));
        }
    }
}
