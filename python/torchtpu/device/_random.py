"""Random numbers on the `tpu` device: one generator per process whose state (a threefry key
and counter, `i64[2]`) lives in device memory. Each draw is a cached program `tpu.rng_*` that
takes the state and returns the next state with the values, so draws never leave the device.
`torch.manual_seed(s)` (through `torch.tpu.manual_seed_all`) and `torch.tpu.manual_seed(s)`
reset it. The values differ from the CPU generator's (another algorithm); a seed gives the same
sequence on every run.
"""

from __future__ import annotations

import torch

from torchtpu.device import _programs, _storage
from torchtpu.exporter import IR_DTYPES

aten = torch.ops.aten


class Generator:
    __slots__ = ("seed", "state")

    def __init__(self):
        self.seed = None
        self.state = None

    def manual_seed(self, seed: int) -> None:
        self.seed = int(seed) & ((1 << 64) - 1)
        signed = self.seed - (1 << 64) if self.seed >= 1 << 63 else self.seed
        self.state = _storage.upload(torch.tensor([signed, 0], dtype=torch.int64), 0)

    def current(self):
        if self.state is None:
            self.manual_seed(torch.initial_seed())
        return self.state

    def get_state(self) -> torch.Tensor:
        """The state as a CPU uint8 tensor: the seed, then the device key and counter (8 bytes
        each, native order)."""
        # Never pending: the draws' programs run at once, even in DeferAndFuse mode.
        values = torch.from_dlpack(self.current().to_host())
        signed = self.seed - (1 << 64) if self.seed >= 1 << 63 else self.seed
        # `cat` copies: the result owns its memory, not the host copy's capsule.
        return torch.cat([torch.tensor([signed], dtype=torch.int64), values.reshape(-1)]).view(torch.uint8)

    def set_state(self, new_state: torch.Tensor) -> None:
        if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8 or new_state.numel() != 24:
            raise RuntimeError(
                "torchtpu: set_rng_state expects the 24-byte uint8 tensor torch.tpu.get_rng_state() returns, "
                f"got {getattr(new_state, 'dtype', type(new_state))} of {getattr(new_state, 'numel', lambda: '?')()} elements"
            )
        words = new_state.detach().cpu().contiguous().view(torch.int64)
        self.seed = int(words[0]) & ((1 << 64) - 1)
        self.state = _storage.upload(words[1:].clone(), 0)


default_generator = Generator()


def _program(kind: str, dtype, shape, attrs: dict):
    key = ("rng", kind, dtype, shape, tuple(sorted(attrs.items())))
    p = _programs._programs.get(key)
    if p is None:
        ty = f"{IR_DTYPES[dtype]}[{', '.join(str(d) for d in shape)}]"
        attr_text = ", ".join(f"{k} = {_attr(v)}" for k, v in sorted(attrs.items()))
        text = (
            f"graph @eager_rng_{kind}(%in0: i64[2]) -> (i64[2], {ty}) {{\n"
            f"  %v1:2 = tpu.rng_{kind}(%in0) {{{attr_text}}} : (i64[2], {ty})\n"
            f"  return %v1#0, %v1#1\n}}\n"
        )
        p = _programs.build_text(key, text, f"eager_rng_{kind}")
    return p


def _attr(v) -> str:
    if isinstance(v, float):
        r = repr(v)
        return r if ("." in r or "e" in r or "n" in r) else r + ".0"
    return str(int(v))


def _draw(kind: str, t: torch.Tensor, generator, **attrs):
    if generator is not None:
        raise NotImplementedError(
            "torchtpu: explicit generators are not supported on the tpu device; seed the device's "
            "generator with torch.manual_seed or torch.tpu.manual_seed"
        )
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


KERNELS = {
    "normal_": normal_,
    "uniform_": uniform_,
    "random_": random_,
    "random_.to": random_to,
    "random_.from": random_from,
    "bernoulli_.float": bernoulli_float,
    "bernoulli_.Tensor": bernoulli_tensor,
    "bernoulli": bernoulli,
    "native_dropout": native_dropout,
}
