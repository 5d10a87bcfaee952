"""Which size symbols of an ATen graph can be padded to a bucket without changing the real
rows (`buckets.py` pads them).

Every dim is followed as a row-major list of factors (ints and symbols: `[5, s0]` is a merge
of a static 5 with s0 inner), so reshapes that merge the batch with another dim and split it
again (a linear layer on a 3-d input, attention heads) are followed exactly. A symbol is padded
when every op either treats its positions independently (elementwise ops, views that keep its
factor whole, matrix products where it is a row, norms and reductions over other dims,
convolution and pooling on the batch dim, an embedding of zero-padded ids, indexing of its dim
by its own row numbers) or combines them in a way a mask makes exact: a sum, max, softmax,
logsumexp, product, any/all over it, or a matrix product contracting over it, gets its inputs
filled past the real size with the op's identity (`Plan.masks`; `buckets.masked_graph` puts
the `where`s in); a scan (cumsum) needs none, the real positions coming first. Anything else
that touches it keeps its exact sizes, and the reason (op and node) is kept in the plan: a
mean, var or std over it (the divisor), a sort, topk or flip along it, a reshape that splits
it, a slice, select or concatenation along it, indexing by data, a size used as a value
(`x / x.size(0)`), a size assertion, an output whose dim does not start with it, an op
without a rule here.
"""

from __future__ import annotations

import dataclasses
import math
import operator

import torch

# ---------------------------------------------------------------- factor lists


def _factors(expr) -> tuple:
    """A size as row-major factors where the order is unknown (a fresh tensor): ints first,
    then symbols by name; a size that is not a product (`s0 + 1`) is one opaque factor."""
    import sympy

    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return () if int(expr) == 1 else (int(expr),)
    coeff, syms = 1, []
    for term in sympy.Mul.make_args(expr):
        if term.is_Integer:
            coeff *= int(term)
        elif term.is_Symbol:
            syms.append(term)
        elif term.is_Pow and term.base.is_Symbol and term.exp.is_Integer and term.exp > 0:
            syms.extend([term.base] * int(term.exp))
        else:
            syms.append(term)  # opaque
    return ((coeff,) if coeff != 1 else ()) + tuple(sorted(syms, key=str))


def _normal(dim: tuple) -> tuple:
    """Adjacent ints merged, 1s dropped: `(2, 8, s0)` and `(16, s0)` are the same layout."""
    out: list = []
    for f in dim:
        if isinstance(f, int):
            if f == 1:
                continue
            if out and isinstance(out[-1], int):
                out[-1] *= f
                continue
        out.append(f)
    return tuple(out)


def _regroup(dims: list, sizes: list) -> list | None:
    """The factor lists of a row-major reshape of `dims` to `sizes` (sympy sizes), or None
    where a symbol would be split or the factors do not line up."""
    import sympy

    queue = [f for d in dims for f in d]
    out = []
    for size in sizes:
        need = _factors(size)
        need_int = math.prod(f for f in need if isinstance(f, int))
        need_syms = [f for f in need if not isinstance(f, int)]
        take: list = []
        while need_int != 1 or need_syms:
            if not queue:
                return None
            f = queue[0]
            if isinstance(f, int):
                if f == 1:
                    queue.pop(0)
                elif need_int == 1:
                    return None  # a symbol is due, an int comes first
                elif f % need_int == 0:  # the outer part of f: row-major order
                    take.append(need_int)
                    queue[0] = f // need_int
                    need_int = 1
                    if queue[0] == 1:
                        queue.pop(0)
                elif need_int % f == 0:
                    take.append(f)
                    need_int //= f
                    queue.pop(0)
                else:
                    return None
            elif any(sympy.sympify(f) == s for s in need_syms):
                need_syms.remove(next(s for s in need_syms if sympy.sympify(f) == s))
                take.append(f)
                queue.pop(0)
            else:
                return None
        out.append(_normal(tuple(take)))
    if any(f != 1 for f in queue):
        return None
    return out


# ---------------------------------------------------------------- the analysis


def _expr(v):
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return v.node.expr
    return v


def sym_shape(val) -> list:
    import sympy

    return [sympy.sympify(_expr(d)) for d in val.shape]


@dataclasses.dataclass
class Plan:
    """What `analyse` found for one graph."""

    padded: dict  # symbol -> [(placeholder position, dim)]
    exact: dict  # symbol name -> why its sizes stay exact
    outputs: dict  # output position -> [(dim, symbol, inner factors)]
    size_inputs: dict  # placeholder position -> its size expression (SymInt inputs)
    size_outputs: dict  # output position -> its size expression (SymInt outputs)
    returned_inputs: dict  # output position -> placeholder position (an input returned as is)
    ties: list = dataclasses.field(default_factory=list)  # (s, t): padded where s == t only
    # node name -> [(argument, dim, fill, symbol)]: inputs masked past the real size before
    # the node combines values along a padded dim (`buckets.masked_graph`).
    masks: dict = dataclasses.field(default_factory=dict)

    @property
    def masked(self) -> list:
        """The padded symbols whose real sizes the masks read, in the order a bucket's program
        takes them (one 0-d int64 input each, after the graph's own)."""
        return sorted({m[3] for ms in self.masks.values() for m in ms}, key=str)

    @property
    def any(self) -> bool:
        return bool(self.padded)

    @property
    def symbols(self) -> list:
        """Every size symbol considered, padded or exact, by name."""
        return sorted(self.padded, key=str) + sorted(self.exact)

    @staticmethod
    def exact_only(gm: torch.fx.GraphModule, reason: str) -> Plan:
        """Nothing padded: every symbol that is a dim of an input keeps exact sizes, for `reason`."""
        names = set()
        for node in gm.graph.find_nodes(op="placeholder"):
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                names |= {str(s) for d in sym_shape(val) for s in d.free_symbols}
        return Plan({}, dict.fromkeys(sorted(names), reason), {}, {}, {}, {})


_VIEWS = frozenset("view _unsafe_view reshape view_copy _reshape_alias unsqueeze squeeze flatten unflatten".split())
_ELEMENTWISE_EXTRA = frozenset(
    "where clone _to_copy alias detach lift_fresh_copy convert_element_type masked_fill native_dropout "
    "bernoulli copy fill zeros_like ones_like full_like empty_like rand_like randn_like contiguous _conj "
    "clamp clamp_min clamp_max".split()
)
# Ops whose values do not move across the padded dim although they keep or drop others.
_REDUCTIONS = frozenset(
    "sum mean amax amin max min argmax argmin prod any all var var_mean std std_mean logsumexp "
    "linalg_vector_norm nansum count_nonzero".split()
)
# Along `dim`, keeping the shape: mixes values along it and nowhere else.
_ALONG_DIM = frozenset(
    "_softmax _log_softmax softmax log_softmax cumsum cumprod logcumsumexp cummax cummin sort argsort topk flip".split()
)
_FACTORIES = frozenset(
    "full zeros ones empty empty_strided new_zeros new_ones new_full new_empty new_empty_strided "
    "scalar_tensor rand randn".split()
)
# What a reduction over a padded dim fills the padded positions with so that they change
# nothing (`low`: -inf or the dtype's minimum). A mean, var or std is refused: its divisor
# would be the padded size.
_REDUCE_FILL = {
    **dict.fromkeys(("sum", "nansum", "count_nonzero", "any"), "zero"),
    **dict.fromkeys(("prod", "all"), "one"),
    **dict.fromkeys(("amax", "max", "argmax", "logsumexp"), "low"),
    **dict.fromkeys(("amin", "min", "argmin"), "high"),
}
_SOFTMAX = frozenset("_softmax _log_softmax softmax log_softmax".split())
# Scans: position i reads positions <= i only, so the real positions (first) never read padding.
_SCANS = frozenset("cumsum cumprod logcumsumexp cummax cummin".split())
# Results that hold their input's values: a zero-padded input stays zero-padded.
_KEEP_VALUES = {"_to_copy", "clone", "alias", "detach", "contiguous", "convert_element_type", "lift_fresh_copy"}
# Checks of dtype and device only.
_IGNORED = {"_assert_tensor_metadata"}
# Argument names that take sizes (the exporter evaluates them for the padded sizes).
_SIZE_ARGS = {"size", "shape", "sizes", "stride", "split_sizes", "pad", "N", "C", "HxW", "split_size"}


def _name(target) -> str:
    return target._schema.name.split("::", 1)[1] if isinstance(target, torch._ops.OpOverload) else ""


def _bind(node) -> dict:
    """`node`'s arguments by schema name, defaults filled in."""
    schema = node.target._schema
    out = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args) and not arg.kwarg_only:
            out[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
    return out


class _Analysis:
    def __init__(self, gm: torch.fx.GraphModule):
        import sympy

        self.gm = gm
        self.sympy = sympy
        self.dims: dict = {}  # node -> list of factor tuples, or a list of those (multi-output)
        # What a node's padded rows hold, where it is known: ("zero",) the inputs' fill, or
        # ("iota", s) the row's own index along s (an `arange(s)`, viewed).
        self.known: dict = {}
        self.ties: list = []  # (s, t): padded only in calls where s and t are equal
        # node name -> [(argument, dim, fill, symbol)]: masked before the node combines values
        # along a padded dim (a softmax, a sum, a contraction over the keys).
        self.masks: dict = {}
        self.candidates: dict = {}  # symbol -> [(placeholder position, dim)]
        self.bad: dict = {}  # symbol -> reason
        self.size_inputs: dict = {}

    # -- bookkeeping

    def _syms(self, items) -> set:
        found = set()
        for item in items:
            for f in item if isinstance(item, tuple) else (item,):
                if isinstance(f, self.sympy.Basic):
                    found |= {s for s in f.free_symbols if s in self.candidates}
        return found

    def refuse(self, symbols, reason: str) -> None:
        for s in symbols:
            if s in self.candidates and s not in self.bad:
                self.bad[s] = reason

    def where(self, node) -> str:
        return f"{node.target} ({node.name})"

    # -- the walk

    def run(self) -> Plan:
        nodes = list(self.gm.graph.nodes)
        placeholders = [n for n in nodes if n.op == "placeholder"]
        # Candidates: symbols that are a whole dim of some input.
        for pos, node in enumerate(placeholders):
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                for d, size in enumerate(sym_shape(val)):
                    if size.is_Symbol:
                        self.candidates.setdefault(size, []).append((pos, d))
            elif isinstance(val, torch.SymInt):
                self.size_inputs[pos] = self.sympy.sympify(_expr(val))
        for node in placeholders:
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                shape = sym_shape(val)
                for size in shape:
                    if not size.is_Symbol:
                        self.refuse(self._syms([size]), f"input {node.name} has a dim of size {size}")
                self.dims[node] = [_factors(s) for s in shape]
                self.known[node] = ("zero",)
        for node in nodes:
            if node.op == "call_function":
                self.call(node)
            elif node.op == "get_attr":
                value = operator.attrgetter(node.target)(self.gm)
                if isinstance(value, torch.Tensor):
                    self.dims[node] = [_factors(s) for s in value.shape]
        outputs, size_outputs = self.outputs(nodes[-1])
        changed = True
        while changed:  # a tie is padded on both sides or on neither
            changed = False
            for a, b in self.ties:
                for x, y in ((a, b), (b, a)):
                    if x in self.bad and y not in self.bad:
                        self.refuse([y], f"{self.bad[x]} (tied to {x})")
                        changed = True
        padded = {s: where for s, where in self.candidates.items() if s not in self.bad}
        return Plan(
            padded=padded,
            exact={str(s): why for s, why in self.bad.items()},
            outputs={k: [c for c in cuts if c[1] in padded] for k, cuts in outputs.items()},
            size_inputs=self.size_inputs,
            size_outputs={k: e for k, e in size_outputs.items() if e.free_symbols & padded.keys()},
            returned_inputs={k: placeholders.index(n) for k, n in returned_inputs(nodes[-1]).items()},
            ties=[(a, b) for a, b in self.ties if a in padded],
            masks={
                name: [m for m in ms if m[3] in padded]
                for name, ms in self.masks.items()
                if any(m[3] in padded for m in ms)
            },
        )

    def outputs(self, out_node):
        items = out_node.args[0]
        items = list(items) if isinstance(items, (list, tuple)) else [items]
        cuts, sizes = {}, {}
        for k, item in enumerate(items):
            if not isinstance(item, torch.fx.Node):
                continue
            val = item.meta.get("val")
            if isinstance(val, torch.SymInt):
                expr = self.sympy.sympify(_expr(val))
                if self._syms([expr]):
                    sizes[k] = expr
                continue
            if not isinstance(val, torch.Tensor) or item.op == "placeholder":
                continue
            dims = self.dims.get(item)
            if not isinstance(dims, list) or len(dims) != val.dim() or any(not isinstance(d, tuple) for d in dims):
                self.refuse(self._syms(sym_shape(val)), f"output {k}: its dims were not followed")
                continue
            if _views_an_input(item):
                # AOTAutograd rebuilds such an output from the caller's tensor with the
                # program's sizes and strides: a cut of a padded copy has neither.
                self.refuse(self._syms(dims), f"output {k} is a view of an input")
                continue
            for d, factors in enumerate(dims):
                syms = self._syms([factors])
                if not syms:
                    continue
                if len(syms) > 1 or not factors or factors[0] not in syms or self._syms([factors[1:]]):
                    self.refuse(
                        syms, f"output {k} has a dim laid out {list(factors)} (the padded rows are not its first)"
                    )
                    continue
                cuts.setdefault(k, []).append((d, factors[0], factors[1:]))
        return cuts, sizes

    def value_uses(self, node) -> None:
        """Sizes of candidate symbols used as values (not as sizes) by `node`."""
        for name, value in _bind(node).items():
            if name in _SIZE_ARGS:
                continue
            found = []
            torch.fx.node.map_aggregate(value, found.append)
            for v in found:
                val = v.meta.get("val") if isinstance(v, torch.fx.Node) else v
                if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                    expr = self.sympy.sympify(_expr(val))
                    self.refuse(self._syms([expr]), f"{self.where(node)} uses the size {expr} as a value")

    def call(self, node) -> None:
        from torchtpu.compiled.specialize import is_size_node

        val = node.meta.get("val")
        if node.target is torch.ops.aten._assert_scalar.default:
            refs = []
            torch.fx.node.map_arg(node.args, refs.append)
            syms = set()
            for r in refs:
                v = r.meta.get("val")
                if isinstance(v, (torch.SymInt, torch.SymBool, torch.SymFloat)):
                    syms |= self._syms([self.sympy.sympify(_expr(v))])
            self.refuse(syms, f"a size assertion ({node.name}) holds for the real sizes only")
            return
        if is_size_node(node):
            return
        if node.target is operator.getitem:
            src, idx = node.args
            multi = self.dims.get(src)
            if isinstance(multi, list) and multi and isinstance(multi[0], list) and idx < len(multi):
                self.dims[node] = multi[idx]
                if src in self.known:
                    self.known[node] = self.known[src]
            else:
                self.generic(node, "getitem of an unknown value")
            return
        name = _name(node.target)
        if not name:
            self.generic(node, "is not an ATen op")
            return
        if name in _IGNORED:
            return
        rule = _RULES.get(name)
        if rule is None:
            if torch.Tag.pointwise in node.target.tags or name in _ELEMENTWISE_EXTRA:
                rule = _Analysis.elementwise
            elif name in _REDUCTIONS:
                rule = _Analysis.reduction
            elif name in _ALONG_DIM:
                rule = _Analysis.along_dim
            elif name in _FACTORIES:
                rule = _Analysis.factory
            else:
                self.generic(node, "has no padding rule")
                return
        rule(self, node, _bind(node), val)

    # -- helpers for rules

    def of(self, arg):
        return self.dims.get(arg) if isinstance(arg, torch.fx.Node) else None

    def fresh(self, node, val, why: str) -> None:
        """Dims the rule cannot follow: from the result's sizes, any candidate in them refused."""
        if isinstance(val, torch.Tensor):
            dims = [_factors(s) for s in sym_shape(val)]
            self.refuse(self._syms(dims), f"{self.where(node)} {why}")
            self.dims[node] = dims
        elif isinstance(val, (list, tuple)):
            multi = []
            for v in val:
                dims = [_factors(s) for s in sym_shape(v)] if isinstance(v, torch.Tensor) else []
                self.refuse(self._syms(dims), f"{self.where(node)} {why}")
                multi.append(dims)
            self.dims[node] = multi

    def generic(self, node, why: str) -> None:
        ins = []
        torch.fx.node.map_arg((node.args, node.kwargs), ins.append)
        syms = set()
        for n in ins:
            dims = self.dims.get(n)
            if isinstance(dims, list):
                flat = [d for x in dims for d in (x if isinstance(x, list) else [x])]
                syms |= self._syms(flat)
            v = n.meta.get("val")
            if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                syms |= self._syms([self.sympy.sympify(_expr(v))])
        self.refuse(syms, f"{self.where(node)} {why}")
        self.fresh(node, node.meta.get("val"), why)

    def set(self, node, dims, keeps_zero: bool = False, source=None) -> None:
        self.dims[node] = dims
        if keeps_zero and source in self.known:
            self.known[node] = self.known[source]

    def broadcast(self, node, tensors: list, rank: int, out_shape: list):
        """The factor lists of an elementwise result: aligned from the right, size-1 dims
        broadcast; inputs that lay a dim out differently refuse its symbols."""
        out = []
        for i in range(rank):
            found = []
            for dims in tensors:
                j = len(dims) - rank + i
                if j >= 0 and dims[j] != ():
                    found.append(_normal(dims[j]))
            if not found:
                out.append(_factors(out_shape[i]))
                continue
            if any(f != found[0] for f in found[1:]):
                self.refuse(self._syms(found), f"{self.where(node)} combines dims laid out {found}")
            out.append(found[0])
        return out

    def mask_symbol(self, dim: tuple):
        """The candidate symbol a dim is exactly, else None: only such a dim can be masked
        (its valid positions are `arange(bucket) < real size`)."""
        return dim[0] if len(dim) == 1 and dim[0] in self.candidates else None

    def mask(self, node, arg: str, d: int, dim: tuple, fill) -> bool:
        """Records that `node`'s argument `arg` is to be masked along its dim `d` with `fill`
        (low: -inf or the dtype's minimum, high, zero, one) before `node` combines values
        along it; False where that dim cannot be masked."""
        s = self.mask_symbol(dim)
        if s is None or fill is None:
            return False
        self.masks.setdefault(node.name, []).append((arg, d, fill, s))
        return True

    def contract(self, node, names: tuple, positions: tuple, da: tuple, db: tuple) -> None:
        """A matrix product contracting `da` with `db`: over a padded dim, both operands are
        zeroed past the real size (0 * NaN would poison the sum)."""
        syms = self._syms([da, db])
        if not syms:
            return
        if da != db or not (
            self.mask(node, names[0], positions[0], da, "zero") and self.mask(node, names[1], positions[1], db, "zero")
        ):
            self.masks.pop(node.name, None)
            self.refuse(syms, f"{self.where(node)} contracts over the padded dim (merged with others)")

    # -- rules

    def elementwise(self, node, args, val):
        self.value_uses(node)
        tensors, source = [], None
        for value in args.values():
            for v in value if isinstance(value, (list, tuple)) else [value]:
                d = self.of(v)
                if isinstance(d, list) and (not d or not isinstance(d[0], list)):
                    tensors.append(d)
                    source = source or v
        results = [
            self.broadcast(node, tensors, out.dim(), sym_shape(out)) if isinstance(out, torch.Tensor) else []
            for out in (val if isinstance(val, (list, tuple)) else [val])
        ]
        keeps = _name(node.target) in _KEEP_VALUES or (
            _name(node.target) in ("add", "sub") and args.get("other") == 0 and args.get("alpha", 1) == 1
        )  # `arange(n) + 0` (transformers' kv offset) is still the row numbers
        if isinstance(val, (list, tuple)):
            self.dims[node] = results
        else:
            self.set(node, results[0], keeps_zero=keeps, source=source)

    def view(self, node, args, val):
        src = args.get("self")
        dims = self.of(src)
        if dims is None:
            return self.generic(node, "views an unknown value")
        shape = sym_shape(val)
        out = _regroup(dims, shape)
        if out is None:
            syms = self._syms(dims) | self._syms([_factors(s) for s in shape])
            self.refuse(syms, f"{self.where(node)} reshapes {list(map(list, dims))} to {shape}, splitting a padded dim")
            out = [_factors(s) for s in shape]
        self.set(node, out, keeps_zero=True, source=src)

    def expand(self, node, args, val):
        src = args.get("self")
        dims = self.of(src)
        if dims is None:
            return self.generic(node, "expands an unknown value")
        shape = sym_shape(val)
        lead = len(shape) - len(dims)
        out = [_factors(s) for s in shape[:lead]]
        for d, s in zip(dims, shape[lead:]):
            out.append(_factors(s) if d == () and s != 1 else d)
        self.set(node, out, keeps_zero=True, source=src)

    def permute(self, node, args, val):
        src = args.get("self")
        dims = self.of(src)
        if dims is None:
            return self.generic(node, "permutes an unknown value")
        name = _name(node.target)
        n = len(dims)
        if name == "permute":
            order = [d % n for d in args["dims"]]
        elif name in ("t", "numpy_T"):
            order = list(range(n))[::-1]
        else:  # transpose
            a, b = args["dim0"] % n, args["dim1"] % n
            order = list(range(n))
            order[a], order[b] = order[b], order[a]
        self.set(node, [dims[i] for i in order], keeps_zero=True, source=src)

    def slice(self, node, args, val):
        src = args.get("self")
        dims = self.of(src)
        if dims is None:
            return self.generic(node, "slices an unknown value")
        dim = args.get("dim", 0) % len(dims)
        if self._syms([dims[dim]]):
            # Only the whole dim (`x[:, :]` after a view) keeps the padded rows where they are.
            size = math.prod(self.sympy.sympify(f) for f in dims[dim])
            end = args.get("end")
            end = (
                None
                if end is None
                else self.sympy.sympify(_expr(end.meta["val"] if isinstance(end, torch.fx.Node) else end))
            )
            whole = args.get("start") in (None, 0) and args.get("step", 1) == 1
            if whole and (end is None or end == size or (end.is_Integer and int(end) >= 2**62)):
                return self.set(node, list(dims), keeps_zero=True, source=src)
            self.refuse(self._syms([dims[dim]]), f"{self.where(node)} slices the padded dim")
        out = list(dims)
        out[dim] = _factors(sym_shape(val)[dim])
        self.refuse(self._syms([out[dim]]), f"{self.where(node)} gives a slice a padded size")
        self.set(node, out, keeps_zero=True, source=src)

    def select(self, node, args, val):
        src = args.get("self")
        dims = self.of(src)
        if dims is None:
            return self.generic(node, "selects from an unknown value")
        dim = args["dim"] % len(dims)
        self.refuse(self._syms([dims[dim]]), f"{self.where(node)} selects a row of the padded dim")
        self.set(node, dims[:dim] + dims[dim + 1 :], keeps_zero=True, source=src)

    def split(self, node, args, val):
        src = args.get("self")
        dims = self.of(src)
        if dims is None:
            return self.generic(node, "splits an unknown value")
        dim = args.get("dim", 0) % len(dims)
        self.refuse(self._syms([dims[dim]]), f"{self.where(node)} splits the padded dim")
        multi = []
        for v in val:
            d = list(dims)
            if _name(node.target) == "unbind":
                d.pop(dim)
            else:
                d[dim] = _factors(sym_shape(v)[dim])
            multi.append(d)
        self.dims[node] = multi

    def cat(self, node, args, val):
        tensors = [self.of(t) for t in args["tensors"]]
        if any(t is None for t in tensors):
            return self.generic(node, "concatenates unknown values")
        shape = sym_shape(val)
        dim = args.get("dim", 0) % len(shape)
        full = [t for t in tensors if len(t) == len(shape)]
        for t in full:
            self.refuse(self._syms([t[dim]]), f"{self.where(node)} concatenates along the padded dim")
        out = []
        for i in range(len(shape)):
            if i == dim:
                out.append(_factors(shape[i]))
                continue
            found = [_normal(t[i]) for t in full]
            if any(f != found[0] for f in found[1:]):
                self.refuse(self._syms(found), f"{self.where(node)} combines dims laid out {found}")
            out.append(found[0] if found else _factors(shape[i]))
        self.dims[node] = out

    def matmul(self, node, args, val):
        name = _name(node.target)
        a, b = (
            (args["mat1"], args["mat2"])
            if name == "addmm"
            else (args["batch1"], args["batch2"])
            if name == "baddbmm"
            else (args["self"], args.get("mat2", args.get("vec")))
        )
        da, db = self.of(a), self.of(b)
        if da is None or db is None:
            return self.generic(node, "multiplies unknown values")
        names = {"addmm": ("mat1", "mat2"), "baddbmm": ("batch1", "batch2"), "mv": ("self", "vec")}.get(
            name, ("self", "mat2")
        )
        if name == "mv":
            self.contract(node, names, (1, 0), da[1], db[0])
            out = [da[0]]
        elif name in ("mm", "addmm"):
            self.contract(node, names, (1, 0), da[1], db[0])
            out = [da[0], db[1]]
        else:  # bmm, baddbmm
            self.contract(node, names, (2, 1), da[2], db[1])
            if _normal(da[0]) != _normal(db[0]):
                self.refuse(self._syms([da[0], db[0]]), f"{self.where(node)} combines batch dims laid out differently")
            out = [da[0], da[1], db[2]]
        if name in ("addmm", "baddbmm"):
            bias = self.of(args["self"])
            if bias is None:
                return self.generic(node, "adds an unknown value")
            out = self.broadcast(node, [out, bias], len(out), sym_shape(val))
        self.value_uses(node)
        self.dims[node] = out

    def reduction(self, node, args, val):
        src = args.get("self", args.get("input"))
        dims = self.of(src)
        if dims is None:
            return self.generic(node, "reduces an unknown value")
        dim = args.get("dim")
        n = len(dims)
        if n == 0 or dim is None or dim == []:
            reduced = list(range(n))
        else:
            reduced = [d % n for d in ([dim] if isinstance(dim, int) else dim)]
        fill = _REDUCE_FILL.get(_name(node.target))
        for d in reduced:
            if self._syms([dims[d]]) and not self.mask(node, "self" if "self" in args else "input", d, dims[d], fill):
                why = "its divisor is the padded size" if fill is None else "the dim merges it with others"
                self.refuse(self._syms([dims[d]]), f"{self.where(node)} reduces over the padded dim ({why})")
        keep = bool(args.get("keepdim", False))
        out = (
            [() if i in reduced else d for i, d in enumerate(dims)]
            if keep
            else [d for i, d in enumerate(dims) if i not in reduced]
        )
        if isinstance(val, (list, tuple)):
            self.dims[node] = [list(out) for _ in val]
        else:
            self.dims[node] = out

    def along_dim(self, node, args, val):
        src = args.get("self", args.get("input"))
        dims = self.of(src)
        if dims is None:
            return self.generic(node, "works on an unknown value")
        along = args["dims"] if _name(node.target) == "flip" else [args.get("dim", -1)]
        along = {d % max(len(dims), 1) for d in along}
        name = _name(node.target)
        for d in along:
            if not self._syms([dims[d]]):
                continue
            if name in _SCANS and self.mask_symbol(dims[d]) is not None:
                continue  # a prefix: the real positions come first and never read the padded ones
            if name in _SOFTMAX and self.mask(node, "self" if "self" in args else "input", d, dims[d], "low"):
                continue
            self.refuse(self._syms([dims[d]]), f"{self.where(node)} mixes values along the padded dim")
        outs = [
            [_factors(size) if i in along else dims[i] for i, size in enumerate(sym_shape(v))]
            for v in (val if isinstance(val, (list, tuple)) else [val])
        ]
        self.dims[node] = outs if isinstance(val, (list, tuple)) else outs[0]

    def layer_norm(self, node, args, val):
        dims = self.of(args["input"])
        if dims is None:
            return self.generic(node, "normalises an unknown value")
        k = len(args["normalized_shape"])
        lead = dims[: len(dims) - k]
        self.refuse(self._syms(dims[len(dims) - k :]), f"{self.where(node)} normalises over the padded dim")
        self.dims[node] = [list(dims), lead + [()] * k, lead + [()] * k]

    def group_norm(self, node, args, val):
        dims = self.of(args["input"])
        if dims is None:
            return self.generic(node, "normalises an unknown value")
        self.refuse(self._syms(dims[1:]), f"{self.where(node)} normalises over the padded dim")
        self.dims[node] = [list(dims)] + [[dims[0]] + [_factors(s) for s in sym_shape(v)[1:]] for v in val[1:]]

    def batch_norm(self, node, args, val):
        dims = self.of(args["input"])
        if dims is None:
            return self.generic(node, "normalises an unknown value")
        training = args.get("training", _name(node.target) != "_native_batch_norm_legit_no_training")
        if training:
            self.refuse(self._syms(dims), f"{self.where(node)} takes batch statistics over the padded dim")
        else:
            self.refuse(self._syms(dims[1:2]), f"{self.where(node)} pads the channel dim")
        self.dims[node] = [list(dims)] + [[_factors(s) for s in sym_shape(v)] for v in val[1:]]

    def per_sample(self, node, args, val, spatial: int):
        """Convolution, pooling, upsampling: the leading (batch, channel) dims are independent;
        the last `spatial` dims mix neighbours."""
        dims = self.of(args.get("input", args.get("self")))
        if dims is None:
            return self.generic(node, "works on an unknown value")
        keep = 1 if _name(node.target) == "convolution" else len(dims) - spatial
        self.refuse(self._syms(dims[keep:]), f"{self.where(node)} mixes neighbours along the padded dim")
        for name in ("weight", "bias"):
            w = self.of(args.get(name))
            if w:
                self.refuse(self._syms(w), f"{self.where(node)} pads its {name}")
        vals = val if isinstance(val, (list, tuple)) else [val]
        outs = [dims[:keep] + [_factors(s) for s in sym_shape(v)[keep:]] for v in vals]
        self.dims[node] = outs if isinstance(val, (list, tuple)) else outs[0]

    def embedding(self, node, args, val):
        weight, indices = self.of(args["weight"]), self.of(args["indices"])
        if weight is None or indices is None:
            return self.generic(node, "looks up unknown values")
        self.refuse(self._syms(weight), f"{self.where(node)} pads its table")
        if self._syms(indices) and self.known.get(args["indices"]) != ("zero",):
            self.refuse(self._syms(indices), f"{self.where(node)} reads indices computed from padded rows")
        self.dims[node] = list(indices) + [weight[-1]]

    def factory(self, node, args, val):
        # Uniform values (or independent random ones): a padded size is just a bigger tensor.
        self.value_uses(node)
        self.dims[node] = [_factors(s) for s in sym_shape(val)]

    def arange(self, node, args, val):
        (size,) = sym_shape(val)
        start, step = args.get("start", 0), args.get("step", 1)
        syms = self._syms([size])
        if syms and not (size.is_Symbol and start == 0 and step == 1):
            self.refuse(syms, f"{self.where(node)} counts to a padded size")
        elif syms:
            self.known[node] = ("iota", size)
        self.dims[node] = [_factors(size)]

    def index(self, node, args, val):
        """`x[i0, i1, ...]` with index tensors: a padded dim of `x` may be indexed only by its
        own row numbers (`arange(s)`, as transformers' masks read `mask[batch_idx, kv_idx]`):
        row b of the result reads row b of `x`, and the padded rows stay in range. Other index
        tensors must not vary along a padded dim unless they hold the zero fill there."""
        dims = self.of(args["self"])
        indices = args["indices"]
        tensors = [self.of(t) if t is not None else None for t in indices]
        if dims is None or any(t is None and i is not None for t, i in zip(tensors, indices)):
            return self.generic(node, "indexes with unknown values")
        present = [k for k, t in enumerate(indices) if t is not None]
        shape = sym_shape(val)
        rank = max(len(tensors[k]) for k in present)
        # The index tensors' broadcast shape, laid out from their own dims.
        bdims = self.broadcast(node, [tensors[k] for k in present], rank, [1] * rank)
        for k in present:
            t, known = tensors[k], self.known.get(indices[k])
            if self._syms([dims[k]]):
                s = known[1] if known and known[0] == "iota" else None
                rows = [p for p, d in enumerate(t) if d == (s,)]
                own = len(dims[k]) == 1 and dims[k][0] in self.candidates
                if s is not None and own and dims[k] != (s,) and len(rows) == 1:
                    # Another symbol's row numbers (an attention mask's own batch symbol):
                    # equal sizes at run time are required, else the call runs exact.
                    self.ties.append((s, dims[k][0]))
                elif s is None or dims[k] != (s,) or len(rows) != 1:
                    syms = self._syms([dims[k]]) | self._syms(t)
                    self.refuse(syms, f"{self.where(node)} indexes the padded dim by data")
            elif self._syms(t) and known != ("zero",):
                self.refuse(self._syms(t), f"{self.where(node)} reads indices that vary along the padded dim")
        adjacent = present == list(range(present[0], present[-1] + 1))
        first = present[0] if adjacent else 0
        rest = [d for k, d in enumerate(dims) if k not in present]
        out = rest[:first] + bdims + rest[first:]
        if len(out) != len(shape):
            return self.generic(node, "indexes in a form the analysis does not follow")
        self.dims[node] = out


def _views_an_input(node) -> bool:
    while node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and node.target.is_view:
        node = node.args[0]
        if not isinstance(node, torch.fx.Node):
            return False
    return node.op == "placeholder"


def returned_inputs(out_node) -> dict:
    items = out_node.args[0]
    items = list(items) if isinstance(items, (list, tuple)) else [items]
    return {k: n for k, n in enumerate(items) if isinstance(n, torch.fx.Node) and n.op == "placeholder"}


def _per_sample(spatial):
    return lambda self, node, args, val: _Analysis.per_sample(self, node, args, val, spatial)


_RULES = {
    **{name: _Analysis.view for name in _VIEWS},
    "expand": _Analysis.expand,
    "permute": _Analysis.permute,
    "transpose": _Analysis.permute,
    "t": _Analysis.permute,
    "numpy_T": _Analysis.permute,
    "slice": _Analysis.slice,
    "select": _Analysis.select,
    "split": _Analysis.split,
    "split_with_sizes": _Analysis.split,
    "unbind": _Analysis.split,
    "cat": _Analysis.cat,
    "mm": _Analysis.matmul,
    "addmm": _Analysis.matmul,
    "bmm": _Analysis.matmul,
    "baddbmm": _Analysis.matmul,
    "mv": _Analysis.matmul,
    "native_layer_norm": _Analysis.layer_norm,
    "native_group_norm": _Analysis.group_norm,
    "_native_batch_norm_legit_no_training": _Analysis.batch_norm,
    "_native_batch_norm_legit_functional": _Analysis.batch_norm,
    "_native_batch_norm_legit": _Analysis.batch_norm,
    "native_batch_norm": _Analysis.batch_norm,
    "convolution": _per_sample(0),
    "max_pool2d_with_indices": _per_sample(2),
    "avg_pool2d": _per_sample(2),
    "_adaptive_avg_pool2d": _per_sample(2),
    "max_pool3d_with_indices": _per_sample(3),
    "avg_pool3d": _per_sample(3),
    "avg_pool1d": _per_sample(1),
    "_adaptive_avg_pool1d": _per_sample(1),
    "upsample_nearest2d": _per_sample(2),
    "upsample_bilinear2d": _per_sample(2),
    "embedding": _Analysis.embedding,
    "arange": _Analysis.arange,
    "index": _Analysis.index,
}


def analyse(gm: torch.fx.GraphModule) -> Plan:
    """Which size symbols of `gm` can be padded, where, and why the others cannot."""
    return _Analysis(gm).run()
