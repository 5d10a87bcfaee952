"""Random numbers on the `tpu` device: one generator per process whose state lives in device
memory in the layout of PyTorch's Philox generators (CUDA's): `i64[2]`, the seed and the offset.
Each draw is a cached program `tpu.rng_*` that takes the state and returns the next state with
the values, so draws never leave the device: ThreeFry keyed by the seed, at the offset's counter,
and the offset advanced by the number of values drawn rounded up to a multiple of 4, as a CUDA
kernel advances its Philox offset (compiler/src/lower/ops/random.rs). `get_rng_state()` is the
16 bytes (seed, offset) CUDA's is, which DTensor's RNG tracker (`torch.distributed.tensor.
_random`), `torch.random.fork_rng` and activation checkpointing read and set.
`torch.manual_seed(s)` (through `torch.tpu.manual_seed_all`) and `torch.tpu.manual_seed(s)`
reset it to (s, 0). The values differ from the CPU generator's (another algorithm); a seed gives
the same sequence on every run.
"""

from __future__ import annotations

import math

import torch

from torchtpu.device import _checks, _programs, _storage
from torchtpu.ir_text import GraphWriter, float_text, type_text

aten = torch.ops.aten

_U64 = (1 << 64) - 1
STATE_BYTES = 16


def _signed(word: int) -> int:
    return word - (1 << 64) if word >= 1 << 63 else word


class Generator:
    """The device generator. `seed` mirrors the state's first word on the host (what
    `initial_seed()` answers without reading the device)."""

    __slots__ = ("seed", "state")

    def __init__(self):
        self.seed = None
        self.state = None

    def manual_seed(self, seed: int) -> None:
        self.seed = int(seed) & _U64
        self.state = _storage.upload(torch.tensor([_signed(self.seed), 0], dtype=torch.int64), 0)

    def current(self):
        if self.state is None:
            self.manual_seed(torch.initial_seed())
        return self.state

    def get_state(self) -> torch.Tensor:
        """The state as a CPU uint8 tensor of 16 bytes: the seed, then the offset (8 bytes each,
        native order), as `torch.cuda.get_rng_state()` gives it."""
        # Never pending: the draws' programs run at once, even in DeferAndFuse mode.
        values = torch.from_dlpack(self.current().to_host())
        # `clone` copies: the result owns its memory, not the host copy's capsule.
        return values.reshape(-1).clone().view(torch.uint8)

    def set_state(self, new_state: torch.Tensor) -> None:
        if (
            not isinstance(new_state, torch.Tensor)
            or new_state.dtype != torch.uint8
            or new_state.numel() != STATE_BYTES
        ):
            raise RuntimeError(
                "torchtpu: set_rng_state expects the 16-byte uint8 tensor (seed, offset) torch.tpu.get_rng_state() "
                f"returns, got {getattr(new_state, 'dtype', type(new_state))} of "
                f"{getattr(new_state, 'numel', lambda: '?')()} elements"
            )
        words = new_state.detach().cpu().contiguous().view(torch.int64)
        self.seed = int(words[0]) & _U64
        self.state = _storage.upload(words.clone(), 0)


default_generator = Generator()


def _program(kind: str, dtype, shape, attrs: dict):
    key = ("rng", kind, dtype, shape, tuple(sorted(attrs.items())))
    p = _programs._programs.get(key)
    if p is None:
        ty = type_text(dtype, shape)
        w = GraphWriter(f"eager_rng_{kind}")
        state = w.param("i64[2]")
        attrs = [(k, _attr(v)) for k, v in sorted(attrs.items())]
        drawn = w.op(f"tpu.rng_{kind}", [state], attrs, ["i64[2]", ty])
        text = w.text([w.result(drawn, 0), w.result(drawn, 1)], ["i64[2]", ty])
        p = _programs.build_text(key, text, f"eager_rng_{kind}")
    return p


def _attr(v) -> str:
    return float_text(v) if isinstance(v, float) else str(int(v))


def _check_no_generator(generator) -> None:
    if generator is not None:
        raise NotImplementedError(
            "torchtpu: explicit generators are not supported on the tpu device; seed the device's "
            "generator with torch.manual_seed or torch.tpu.manual_seed"
        )


def _draw(kind: str, t: torch.Tensor, generator, **attrs):
    _check_no_generator(generator)
    shape = tuple(t.shape)
    p = _program(kind, t.dtype, shape, attrs)
    state = default_generator.current()
    new_state, values = p.run([state], device=state.device)
    default_generator.state = new_state
    # One generator per process, its state on tpu:0: a draw for another device is copied there.
    device = _storage.slot_of(t).device
    _storage.write(t, values if values.device == device else values.copy_to(device))
    return t


def _float_check(t, what):
    if not t.dtype.is_floating_point:
        raise RuntimeError(f"{what} expects a floating point tensor, got {t.dtype}")


def normal_(self, mean=0.0, std=1.0, *, generator=None):
    _float_check(self, "normal_")
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return _draw("normal", self, generator, mean=float(mean), std=float(std))


def uniform_(self, from_=0.0, to=1.0, *, generator=None):
    _float_check(self, "uniform_")
    if not from_ <= to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_} > to={to}")
    return _draw("uniform", self, generator, low=float(from_), high=float(to))


def _default_high(dtype) -> int:
    if dtype == torch.bool:
        return 2
    if dtype.is_floating_point:
        return (1 << torch.finfo(dtype).nmant + 1) + 1
    return torch.iinfo(dtype).max + 1 if dtype != torch.int64 else (1 << 63) - 1


def random_(self, *, generator=None):
    return _draw("integers", self, generator, low=0, high=_default_high(self.dtype))


def random_to(self, to, *, generator=None):
    return random_from(self, 0, to, generator=generator)


def random_from(self, from_, to=None, *, generator=None):
    high = _default_high(self.dtype) if to is None else int(to)
    if not from_ < high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={from_} >= to={high}")
    return _draw("integers", self, generator, low=int(from_), high=high)


def _uniform_like(t: torch.Tensor, dtype=None) -> torch.Tensor:
    u = _storage.new_tensor(
        tuple(t.shape), dtype or (t.dtype if t.dtype.is_floating_point else torch.float32), device=t.device.index
    )
    return _draw("uniform", u, None, low=0.0, high=1.0)


def bernoulli_float(self, p=0.5, *, generator=None):
    if generator is not None:
        _draw("uniform", self, generator)  # raises the explicit-generator error
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    self.copy_(_uniform_like(self) < p)
    return self


def bernoulli_tensor(self, p, *, generator=None):
    if generator is not None:
        _draw("uniform", self, generator)
    self.copy_(_uniform_like(self, p.dtype if p.dtype.is_floating_point else None) < p)
    return self


def bernoulli(self, *, generator=None):
    if generator is not None:
        _draw("uniform", self, generator)
    return (_uniform_like(self) < self).to(self.dtype)


def native_dropout(input, p, train):
    if not train or p == 0:
        return input.clone(), torch.ones_like(input, dtype=torch.bool)
    if p == 1:
        return torch.zeros_like(input), torch.zeros_like(input, dtype=torch.bool)
    mask = _uniform_like(input) >= p
    return input * mask * (1.0 / (1.0 - p)), mask


def _fill(self, values: torch.Tensor) -> torch.Tensor:
    self.copy_(values)
    return self


def _floats(self, what: str) -> torch.Tensor:
    """Uniform floats in [0, 1) of `self`'s shape, in f32 for a half dtype (its transforms then
    round once, at the end)."""
    _float_check(self, what)
    return _uniform_like(self, torch.float32 if self.element_size() < 4 else self.dtype)


def exponential_(self, lambd=1.0, *, generator=None):
    """`-log(1 - u) / lambd`, as CUDA's transform (`u` in [0, 1), so the log is finite)."""
    _check_no_generator(generator)
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    return _fill(self, -torch.log1p(-_floats(self, "exponential_")) / lambd)


def geometric_(self, p, *, generator=None):
    """The number of Bernoulli(p) trials to the first success: `ceil(log(1 - u) / log(1 - p))`,
    at least 1."""
    _check_no_generator(generator)
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    u = _uniform_like(self, torch.float32)
    return _fill(self, torch.clamp(torch.ceil(torch.log1p(-u) / math.log1p(-p)), min=1))


def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    _check_no_generator(generator)
    if not sigma > 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma}")
    u = _floats(self, "cauchy_")
    return _fill(self, median + sigma * torch.tan(math.pi * (u - 0.5)))


def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    _check_no_generator(generator)
    _float_check(self, "log_normal_")
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std}")
    z = _storage.new_tensor(
        tuple(self.shape), torch.float32 if self.element_size() < 4 else self.dtype, device=self.device.index
    )
    normal_(z, mean, std)
    return _fill(self, torch.exp(z))


def _normal(mean, std, generator):
    """`mean + std * z`, z standard normal of the broadcast shape; a negative std raises at the
    next host read (CPU eager raises at once)."""
    _check_no_generator(generator)
    like = mean if isinstance(mean, torch.Tensor) else std
    shape = torch.broadcast_shapes(*(t.shape for t in (mean, std) if isinstance(t, torch.Tensor)))
    dtype = like.dtype
    if not dtype.is_floating_point:
        raise RuntimeError(f"normal expects floating point mean and std, got {dtype}")
    z = _storage.new_tensor(tuple(shape), dtype, device=like.device.index)
    normal_(z)
    if isinstance(std, torch.Tensor):
        _checks.check_arguments((std < 0).any(), "normal expects all elements of std >= 0.0")
    elif std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return z * std + mean


def normal_tensor_tensor(mean, std, *, generator=None):
    return _normal(mean, std, generator)


def normal_tensor_float(mean, std=1.0, *, generator=None):
    return _normal(mean, std, generator)


def normal_float_tensor(mean, std, *, generator=None):
    return _normal(mean, std, generator)


def bernoulli_p(self, p=0.5, *, generator=None):
    _check_no_generator(generator)
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli expects p to be in [0, 1], but got p={p}")
    return (_uniform_like(self) < p).to(self.dtype)


# Above this many keys (rows x samples x categories), sampling with replacement would hold a
# large key tensor: it refuses rather than exhaust device memory.
_MAX_RACE_KEYS = 1 << 27


def multinomial(self, num_samples, replacement=False, *, generator=None):
    """Categorical draws as an exponential race: category i's key is `log(p_i) - log(e_i)`,
    e_i ~ Exp(1) independent; the largest key is category i with probability p_i / sum(p),
    and the k largest are k draws without replacement (top-k). With replacement each of the
    k draws races on keys of its own. All on the device: no host round trip. Invalid rows
    (a negative, infinite or NaN probability, a zero sum) raise CPU eager's error at the next
    host read. Without replacement, more samples than nonzero categories take zero-probability
    ones after the others, as CPU eager does."""
    _check_no_generator(generator)
    if self.dim() not in (1, 2):
        raise RuntimeError(f"prob_dist must be 1 or 2 dim, got {self.dim()}")
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {self.dtype}")
    n = self.shape[-1]
    if num_samples <= 0:
        raise RuntimeError(f"cannot sample n_sample <= 0 samples, got {num_samples}")
    if not replacement and num_samples > n:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if n == 0:
        raise RuntimeError("multinomial: the distribution has no categories")
    p = self.to(torch.float32) if self.element_size() < 4 else self
    bad_values = ((p < 0) | ~torch.isfinite(p)).any()
    _checks.check_arguments(bad_values, "probability tensor contains either `inf`, `nan` or element < 0")
    _checks.check_arguments((p.sum(-1) <= 0).any(), "invalid multinomial distribution (sum of probabilities <= 0)")
    rows = p.shape[:-1]
    draws = 1 if not replacement else num_samples
    if replacement and math.prod(rows) * num_samples * n > _MAX_RACE_KEYS:
        raise NotImplementedError(
            f"torchtpu: multinomial with replacement of {num_samples} samples from {n} categories holds "
            f"{math.prod(rows) * num_samples * n} keys on the device (limit {_MAX_RACE_KEYS}); draw in chunks"
        )
    u = _storage.new_tensor((*rows, draws, n), p.dtype, device=self.device.index)
    _draw("uniform", u, None, low=0.0, high=1.0)
    e = torch.clamp(-torch.log1p(-u), min=torch.finfo(p.dtype).tiny)  # Exp(1), never 0
    keys = torch.log(p).unsqueeze(-2) - torch.log(e)  # p = 0: -inf, never drawn
    if replacement:
        return torch.argmax(keys, dim=-1)
    return torch.topk(keys.squeeze(-2), num_samples, dim=-1).indices


def randperm_out(n, *, generator=None, out):
    """A uniform permutation: the order of n random 62-bit keys (ties have probability ~n^2/2^63)."""
    _check_no_generator(generator)
    if n < 0:
        raise RuntimeError(f"randperm: n must be non-negative, got {n}")
    keys = _storage.new_tensor((n,), torch.int64, device=out.device.index)
    _draw("integers", keys, None, low=0, high=1 << 62)
    perm = torch.argsort(keys, stable=True)
    out.resize_(n)
    return _fill(out, perm.to(out.dtype))
