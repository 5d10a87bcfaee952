"""A DeferAndFuse region's program (`_defer.py` records and cuts; this compiles): the
recorded programs' FX graphs spliced into one graph whose placeholders are the buffers the
region read and whose outputs are the values still referenced, exported as IR and compiled
through the whole pipeline; kept by the region's structural key, here and natively
(`python/src/eager/cut.rs`, which finds and runs it at the next cut with no Python). On a miss,
`describe_miss` says what differs from the nearest cached key."""

from __future__ import annotations

import torch

from torchtpu import _C, _stats
from torchtpu.device._buffers import input_sources


class RegionProgram:
    """A compiled region: its executable, how its IR inputs come from the externals (or
    constants), and which value each output is."""

    __slots__ = ("compiled", "sources", "outputs", "live", "name", "n_ops", "memory", "donate")

    def __init__(self, compiled, sources, outputs, live, name, n_ops, dead: tuple):
        self.compiled = compiled
        self.sources = sources
        # IR inputs fed by dead externals: donated at each run (PJRT reuses those the program
        # aliases to an output; the others are freed right after anyway).
        dead = set(dead)
        self.donate = [i for i, (kind, v) in enumerate(sources) if kind == "ext" and v in dead]
        self.outputs = outputs
        self.live = live
        self.name = name
        self.n_ops = n_ops
        memory = compiled.memory
        self.memory = {k: memory.get(k) for k in ("input_bytes", "output_bytes", "peak_bytes")}


_programs: dict = {}  # region key -> RegionProgram
_by_length: dict = {}  # number of ops -> keys (for the nearest key of a miss)
_names: dict = {}  # program serial -> a description, for key diffs
REGION_LIMIT = 1024


def clear() -> None:
    """Forgets every region program (the engine's caches still hold the executables), so
    the next region of each key is a miss again."""
    _programs.clear()
    _by_length.clear()
    _C.defer_forget()


def _remember_names(r) -> None:
    # Descriptions of the recorded programs, for this and later misses' differences.
    for p, _, _ in r.records:
        if p.serial not in _names:
            _names[p.serial] = _program_text(p)


def compile_region(r, key) -> RegionProgram:
    """Compiles region `r` (a `_defer.Region`, its miss described first: `describe_miss`)
    under `key` and keeps it, here and for the native cut."""
    program = _compile(r, key[1], key)
    if len(_programs) >= REGION_LIMIT:
        clear()  # bounded: region shapes that change at every step would grow it without end
        _names.clear()
        _stats.bump("eager_cache_resets")
    _programs[key] = program
    _C.defer_keep(key, program)
    _by_length.setdefault(len(r.records), []).append(key)
    return program


def describe_miss(r, key) -> str:
    """What differs between `key` (region `r`'s, not cached) and the nearest cached key."""
    _remember_names(r)
    return nearest_difference(key)


def key_id(key) -> str:
    """The id the native cut gives `key` (explain records name regions by it)."""
    return _C.defer_key_id(key)


def _describe(token) -> str:
    serial, wiring = token
    name = _names.get(serial, f"program #{serial}")
    ins = ", ".join(f"%{w}" if w >= 0 else f"in{-1 - w}" for w in wiring)
    return f"{name} on ({ins})"


def nearest_difference(key) -> str:
    """What differs between a missed key and the nearest cached one (the longest common
    prefix of ops, among keys of the nearest length)."""
    tokens, live, dead = key
    if not _programs:
        return "first region compiled"
    best, best_prefix = None, -1
    lengths = sorted(_by_length, key=lambda n: abs(n - len(tokens)))[:3]
    for n in lengths:
        for other in _by_length[n]:
            o_tokens = other[0]
            prefix = 0
            for a, b in zip(tokens, o_tokens):
                if a != b:
                    break
                prefix += 1
            if prefix > best_prefix:
                best, best_prefix = other, prefix
    o_tokens, o_live, o_dead = best
    if o_tokens == tokens and o_live == live:
        return (
            f"same {len(tokens)} ops and outputs as region {key_id(best)}; the inputs only the region "
            f"still holds (donated) differ: in{', in'.join(map(str, dead)) or ' -'} here, "
            f"in{', in'.join(map(str, o_dead)) or ' -'} there"
        )
    if o_tokens == tokens:
        added = sorted(set(live) - set(o_live))
        dropped = sorted(set(o_live) - set(live))
        return (
            f"same {len(tokens)} ops as region {key_id(best)}; the values still referenced differ "
            f"(now also %{', %'.join(map(str, added)) or '-'}; no longer %{', %'.join(map(str, dropped)) or '-'})"
        )
    if best_prefix >= len(tokens) or best_prefix >= len(o_tokens):
        return f"region {key_id(best)} has the same first {best_prefix} ops; this one has {len(tokens)}, it {len(o_tokens)}"
    here, there = _describe(tokens[best_prefix]), _describe(o_tokens[best_prefix])
    if here == there:
        # The same text for two programs: say which is which rather than print one line twice.
        s, os_ = tokens[best_prefix][0], o_tokens[best_prefix][0]  # the serials
        here += f" (program #{s})" if s != os_ else " (wired differently)"
        there += f" (program #{os_})" if s != os_ else ""
    return (
        f"nearest region {key_id(best)} ({len(o_tokens)} ops) differs first at op {best_prefix}: "
        f"{here} here, {there} there"
    )


def _compile(r, live: tuple, key) -> RegionProgram:
    """The region's graph (dead externals first), exported and compiled."""
    from torchtpu.compiled.exporter import export

    dead = key[2]
    # Dead externals first: the compiler pairs each output with the first unpaired input of
    # its type (`donation_pairs`), so outputs alias what can be donated before anything else.
    dead_set = set(dead)
    order = list(dead) + [k for k in range(len(r.externals)) if k not in dead_set]
    graph, root = _splice(r, live, order)
    gm = torch.fx.GraphModule(root, graph)
    # One name for every region: the IR text, and so the engine's persistent cache key, then
    # depends on the region's content only (the key id names serials, which differ per process).
    name = "eager_region"
    exported = export(gm, name)
    sources = [("ext", order[v]) if k == "arg" else (k, v) for k, v in input_sources(exported)]
    # Aliases only where something can be donated: on a plugin that reads inputs in place an
    # alias to a kept input costs a copy (docs/passes.md, "Buffer donation").
    compiled = _C.compile(exported.text, donate=bool(dead))
    return RegionProgram(compiled, sources, exported.outputs, live, name, len(r.records), dead)


def _splice(r, live: tuple, order: list):
    """One FX graph of the region: its placeholders the externals (in `order`), the recorded
    programs' graphs copied in order with their placeholders replaced by what fed them, its
    outputs the live values."""
    import copy

    graph = torch.fx.Graph()
    root = torch.nn.Module()
    ext_nodes: list = [None] * len(r.externals)
    # Placeholders first, typed as each external's first reader saw it.
    first_reader: dict = {}
    for program, wiring, _ in r.records:
        for ph, w in zip(program.placeholders(), wiring):
            if w < 0:
                first_reader.setdefault(-1 - w, ph)
    for k in order:
        node = ext_nodes[k] = graph.placeholder(f"in{k}")
        node.meta = copy.copy(first_reader[k].meta)
    values: list = [None] * len(r.values)
    n_attrs = 0
    for program, wiring, base in r.records:
        gm = program.gm
        env = {}
        for ph, w in zip(program.placeholders(), wiring):
            env[ph] = values[w] if w >= 0 else ext_nodes[-1 - w]
        for node in gm.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            if node.op == "get_attr":
                name = f"_c{n_attrs}"
                n_attrs += 1
                setattr(root, name, getattr(gm, node.target))
                new = graph.get_attr(name)
                new.meta = copy.copy(node.meta)
            else:
                new = graph.node_copy(node, env.__getitem__)
            env[node] = new
        outs = gm.graph.output_node().args[0]
        for k, j in enumerate(program.ir_nodes):
            values[base + k] = env[outs[j]]
    graph.output(tuple(values[i] for i in live))
    graph.eliminate_dead_code()
    return graph, root


def _program_text(program) -> str:
    from torchtpu.compiled.exporter import tensor_type
    from torchtpu.ir_text import IR_DTYPES

    types = [
        tensor_type(ph.meta["val"]) for ph in program.placeholders() if isinstance(ph.meta.get("val"), torch.Tensor)
    ]
    outs = [f"{IR_DTYPES.get(d, d)}[{', '.join(map(str, s))}]" for d, s in program.out_types if d is not None]
    values = _key_values(program.key)
    text = f"{program.name.removeprefix('eager_')}[{', '.join(types)}] -> [{', '.join(outs)}]"
    return text + (f" with {', '.join(values)}" if values else "")


def _key_values(key) -> list:
    """The numbers an op's key holds besides its tensors (`_dispatch._flatten`): ints, bools and
    baked floats, which a program bakes and a change of batch size changes (a view's shape, a
    mean's divisor)."""
    if not isinstance(key, tuple):
        return []
    out = []
    for part in key[2:]:
        if isinstance(part, tuple) and len(part) == 2 and part[0] in (int, bool):
            out.append(repr(part[1]))
        elif isinstance(part, float):
            out.append(repr(part))
    return out
