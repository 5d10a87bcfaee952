//! An operator's kind, read off its schema's alias annotations: the one classification of ops.
//! The dispatcher shim asks it once per operator (through the native API) and the Python path
//! once per overload (`_C.eager_classify`, read by `device/_dispatch.OpInfo`).
//!
//! - A **view** writes nothing and returns an alias of an argument (`transpose`, `t`): PyTorch's
//!   Meta kernel computes it on the tpu tensors themselves.
//! - A **functional** op writes nothing and returns new tensors.
//! - An **in-place** op writes its first, positional argument (`add_`); an **out=** op writes
//!   keyword-only arguments only (`add.out`). Each runs its functional form, which only Python can
//!   find (it looks the overload up in `torch.ops`); where there is none the op is mutating.
//! - Any other writer is **mutating**: it has a kernel of its own or runs on the CPU.

/// One schema argument or return as its annotation says: `Tensor(a!) self` is aliased, alias
/// set `"a"`, written, positional; `Tensor(a)[]`, a list of aliases, is aliased with no set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Param {
    /// Whether it carries an alias annotation.
    pub aliased: bool,
    /// The alias set before the call (`"a"` for `Tensor(a)`, sets joined by `|`), or empty.
    pub alias: String,
    pub writes: bool,
    pub kwarg_only: bool,
}

/// What kind of op a schema describes (above).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    View,
    Functional,
    InPlace,
    Out,
    Mutating,
}

impl Kind {
    pub const ALL: [Kind; 5] = [Kind::View, Kind::Functional, Kind::InPlace, Kind::Out, Kind::Mutating];

    /// Its name in Python (`OpInfo.kind`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::View => "view",
            Kind::Functional => "functional",
            Kind::InPlace => "inplace",
            Kind::Out => "out",
            Kind::Mutating => "mutating",
        }
    }

    /// Its code across the shim's ABI (`native_api.h`'s `OpKind`).
    pub fn code(self) -> i32 {
        self as i32
    }
}

/// A schema's classification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classified {
    pub kind: Kind,
    /// The arguments the op writes, in order.
    pub written: Vec<usize>,
    /// Per argument: whether it is an out= argument (written and keyword-only), which the call
    /// writes and does not read.
    pub out_args: Vec<bool>,
    /// Per return: the argument it is (the same alias set), or None for a new tensor.
    pub return_alias: Vec<Option<usize>>,
}

/// Classifies a schema from its arguments and returns.
pub fn classify(args: &[Param], returns: &[Param]) -> Classified {
    let written: Vec<usize> = (0..args.len()).filter(|&i| args[i].writes).collect();
    let out_args = args.iter().map(|a| a.writes && a.kwarg_only).collect();
    let return_alias: Vec<Option<usize>> = returns
        .iter()
        .map(|r| if r.alias.is_empty() { None } else { args.iter().position(|a| a.alias == r.alias) })
        .collect();
    let aliased_return = returns.iter().any(|r| r.aliased);
    let kind = if written.is_empty() {
        if aliased_return {
            Kind::View
        } else {
            Kind::Functional
        }
    } else if written == [0] && !args[0].kwarg_only {
        Kind::InPlace
    } else if written.iter().all(|&i| args[i].kwarg_only) {
        Kind::Out
    } else {
        Kind::Mutating
    };
    Classified { kind, written, out_args, return_alias }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(alias: &str, writes: bool, kwarg_only: bool) -> Param {
        Param { aliased: true, alias: alias.to_string(), writes, kwarg_only }
    }

    fn plain() -> Param {
        Param::default()
    }

    #[test]
    fn a_view_returns_an_alias_and_writes_nothing() {
        // transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)
        let c = classify(&[p("a", false, false), plain(), plain()], &[p("a", false, false)]);
        assert_eq!(c.kind, Kind::View);
        assert_eq!(c.return_alias, vec![Some(0)]);
        assert!(c.written.is_empty());
    }

    #[test]
    fn a_functional_op_returns_new_tensors() {
        // add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
        let c = classify(&[plain(), plain(), p("", false, true)], &[plain()]);
        assert_eq!(c.kind, Kind::Functional);
        assert_eq!(c.return_alias, vec![None]);
        assert_eq!(c.out_args, vec![false; 3]);
    }

    #[test]
    fn an_in_place_op_writes_its_first_positional_argument() {
        // add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)
        let c = classify(&[p("a", true, false), plain(), p("", false, true)], &[p("a", true, false)]);
        assert_eq!(c.kind, Kind::InPlace);
        assert_eq!(c.written, vec![0]);
        assert_eq!(c.return_alias, vec![Some(0)]);
        assert_eq!(c.out_args, vec![false; 3]);
    }

    #[test]
    fn an_out_op_writes_keyword_only_arguments_only() {
        // max.dim_max(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) max, Tensor(b!) max_values)
        //   -> (Tensor(a!) values, Tensor(b!) indices)
        let args = [plain(), plain(), plain(), p("a", true, true), p("b", true, true)];
        let c = classify(&args, &[p("a", true, false), p("b", true, false)]);
        assert_eq!(c.kind, Kind::Out);
        assert_eq!(c.written, vec![3, 4]);
        assert_eq!(c.out_args, vec![false, false, false, true, true]);
        assert_eq!(c.return_alias, vec![Some(3), Some(4)]);
    }

    #[test]
    fn any_other_writer_is_mutating() {
        // _amp_foreach_non_finite_check_and_unscale_(Tensor(a!)[] self, Tensor(b!) found_inf, Tensor inv_scale)
        let c = classify(&[p("a", true, false), p("b", true, false), plain()], &[]);
        assert_eq!(c.kind, Kind::Mutating);
        assert_eq!(c.written, vec![0, 1]);
        // An in-place op whose target is keyword-only but also writes a positional one.
        let c = classify(&[p("a", true, false), p("b", true, true)], &[]);
        assert_eq!(c.kind, Kind::Mutating);
    }

    #[test]
    fn a_list_of_aliases_is_a_view() {
        // split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]
        let c = classify(&[p("a", false, false), plain(), plain()], &[p("", false, false)]);
        assert_eq!(c.kind, Kind::View);
        assert_eq!(c.return_alias, vec![None]);
    }

    #[test]
    fn a_return_of_an_unknown_alias_set_is_a_new_tensor() {
        let c = classify(&[p("a", false, false)], &[p("b", false, false)]);
        assert_eq!(c.return_alias, vec![None]);
        assert_eq!(c.kind, Kind::View); // it still aliases something: PyTorch's Meta kernel says what
    }

    #[test]
    fn kinds_have_distinct_names_and_codes() {
        let names: std::collections::HashSet<_> = Kind::ALL.iter().map(|k| k.name()).collect();
        let codes: std::collections::HashSet<_> = Kind::ALL.iter().map(|k| k.code()).collect();
        assert_eq!((names.len(), codes.len()), (5, 5));
        assert_eq!(Kind::ALL.iter().map(|k| k.code()).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    }
}
