"""The patches to torch a program that uses the tpu device needs, each for a gap PyTorch's
registration points leave for a PrivateUse1 backend (each says which). `import torch` applies
only `patch_accelerator` (C++ makes the renamed backend the accelerator at once); the rest are
applied by `apply_for_tpu_use`: at the first tpu tensor, at the first tpu_dist group, when
torch first answers that tpu is the accelerator, or when torch starts where tpu is expected to
be the machine's accelerator. A program that never touches tpu runs with torch's own
functions (`test_first_hour.py`, `_TORCH_ORIGINALS`)."""

from __future__ import annotations

import sys
import threading

import torch

from torchtpu.device._devices import accelerator_detected, synchronize_all

_original_synchronize = None


def patch_accelerator(without_tpu: torch.device | None) -> None:
    """C++ names PrivateUse1 the current accelerator as soon as it is renamed, which the
    `torch.backends` entry point does at `import torch`. The bindings Python asks,
    `torch._C._accelerator_getAccelerator()` (behind `torch.accelerator.*` and
    `torch.get_device_module()`) and `torch._C._get_accelerator()` (torch.distributed's), answer
    as without torchtpu unless tpu is detected as the machine's accelerator
    (`accelerator_detected`): `without_tpu` (what the first said before the rename: CUDA on a
    CUDA build, None on a CPU one), and for the second that device where it is available, else
    CPU. So CPU and CUDA programs (torch.distributed's default backend, transformers' device
    choice and continuous batching) are what they are without torchtpu.

    `torch.accelerator.synchronize()` calls a C++ device hook that a Python backend cannot
    provide; for the tpu device it is routed to `torch.tpu.synchronize`."""
    global _original_synchronize
    if _original_synchronize is not None:
        return
    _original_synchronize = torch.accelerator.synchronize
    original_accelerator = torch._C._accelerator_getAccelerator

    def _accelerator_getAccelerator():
        acc = original_accelerator()
        if acc is not None and acc.type == "tpu":
            if not accelerator_detected():
                return without_tpu
            # A program told that tpu is the accelerator (TORCHTPU_DEVICE=1 set after torch
            # started, too) is about to use it.
            apply_for_tpu_use()
        return acc

    _accelerator_getAccelerator.__doc__ = original_accelerator.__doc__
    torch._C._accelerator_getAccelerator = _accelerator_getAccelerator

    # `barrier(device_ids=[i])` builds its device from this one, as do FSDP's default mesh
    # and device.
    original_get = torch._C._get_accelerator

    def _get_accelerator(check: bool = False):
        acc = original_get(check)
        if acc.type == "tpu":
            if not accelerator_detected():
                other = without_tpu.type if without_tpu is not None else "cpu"
                available = other != "cpu" and getattr(torch, other).is_available()
                return torch.device(other if available else "cpu")
            apply_for_tpu_use()
        return acc

    _get_accelerator.__doc__ = original_get.__doc__
    torch._C._get_accelerator = _get_accelerator

    def synchronize(device=None, /):
        # Another accelerator that is there (CUDA where tpu is not detected) is torch's own;
        # otherwise tpu is waited for (an explicit device="tpu" works either way).
        kind = torch.device(device).type if isinstance(device, (str, torch.device)) else None
        if kind is None:
            acc = _accelerator_getAccelerator()
            kind = acc.type if acc is not None and getattr(torch, acc.type).is_available() else "tpu"
        if kind == "tpu":
            return synchronize_all()
        return getattr(torch, kind).synchronize(device)

    synchronize.__doc__ = _original_synchronize.__doc__
    torch.accelerator.synchronize = synchronize


_original_str = None


def patch_printing() -> None:
    """Printing a tensor runs slicing and masked selection on it; for xla and lazy tensors
    PyTorch prints a CPU copy instead, to avoid compiling those ops, and so does the tpu
    device (the device suffix added back)."""
    global _original_str
    if _original_str is not None:
        return
    import torch._tensor_str as tensor_str

    _original_str = tensor_str._str

    def _str(self, *, tensor_contents=None):
        if self.device.type != "tpu":
            return _original_str(self, tensor_contents=tensor_contents)
        from torchtpu.device import _defer

        with torch.no_grad(), _defer.cause("host_read", "printing a tensor"):
            text = _original_str(self.detach().to("cpu"), tensor_contents=tensor_contents)
        suffix = f"device='{self.device}'"
        at = text.find(", dtype=")
        text = text[:at] + ", " + suffix + text[at:] if at >= 0 else text[:-1] + ", " + suffix + ")"
        if self.grad_fn is not None:
            text = text[:-1] + f", grad_fn=<{type(self.grad_fn).__name__}>)"
        elif self.requires_grad:
            text = text[:-1] + ", requires_grad=True)"
        return text

    tensor_str._str = _str


_original_clone = None


def patch_storage() -> None:
    """Storages on tpu have no host-side bytes and PyTorch has no allocator for them (a Python
    backend cannot register one), so the storage methods that would allocate through it
    (and crash) are routed here:
    - `UntypedStorage.clone` (what `copy.deepcopy` of a tensor copies) makes a new storage
      holding the same device buffer (buffers are never changed in place, so sharing one is a
      copy);
    - `UntypedStorage.cpu` copies the buffer's bytes to the host;
    - `torch.UntypedStorage(n, device="tpu")` raises instead of crashing."""
    global _original_clone
    if _original_clone is not None:
        return
    _original_clone = torch.UntypedStorage.clone
    original_cpu = torch.UntypedStorage.cpu
    original_new = torch.UntypedStorage.__new__

    def cpu(self):
        if self.device.type != "tpu":
            return original_cpu(self)
        from torchtpu.device import _storage

        slot = _storage.slot_of_storage(self)
        if slot.buffer is None:
            return torch.UntypedStorage(slot.numel * slot.dtype.itemsize)
        host = torch.from_dlpack(slot.buffer.to_host()).reshape(-1)
        return host.view(torch.uint8).untyped_storage() if slot.dtype != torch.bool else host.untyped_storage()

    def new(cls, *args, device=None, **kwargs):
        if device is not None and torch.device(device).type == "tpu":
            raise RuntimeError(
                "torchtpu: storages cannot be allocated on the tpu device directly; make a tensor "
                "(torch.empty(n, dtype=torch.uint8, device='tpu')) and use its storage"
            )
        return (
            original_new(cls, *args, device=device, **kwargs)
            if device is not None
            else original_new(cls, *args, **kwargs)
        )

    cpu.__doc__ = original_cpu.__doc__
    torch.UntypedStorage.cpu = cpu
    torch.UntypedStorage.__new__ = new

    def clone(self):
        if self.device.type != "tpu":
            return _original_clone(self)
        from torchtpu.device import _storage

        slot = _storage.slot_of_storage(self)
        return _storage.new_tensor(slot.shape, slot.dtype, slot.buffer).untyped_storage()

    clone.__doc__ = _original_clone.__doc__
    torch.UntypedStorage.clone = clone


_conversion = None


def patch_module_conversion() -> None:
    """`Module.to("tpu")` (and back) keeps each Parameter object, as on CUDA: tied weights stay
    tied and an optimizer made before the move trains the moved weights.

    `Module._apply` keeps a Parameter (`param.data = new`) only where PyTorch's C++ finds the
    two tensor types compatible, which it never does for a PrivateUse1 backend; it then makes
    a new Parameter, unless it swaps (`torch.utils.swap_tensors`), which it does for tensor
    subclasses or under `torch.__future__.set_swap_module_params_on_conversion(True)`. Its
    per-parameter test is widened to every conversion from or to a tpu tensor: to tpu, the
    converted tensor says so; from tpu, the module's own parameters (one flag per thread,
    set while such a module converts)."""
    global _conversion
    if _conversion is not None:
        return
    import weakref

    import torch.nn.modules.module as module_py

    state = _conversion = threading.local()
    is_subclass = module_py.is_traceable_wrapper_subclass
    original_apply = torch.nn.Module._apply

    def swaps(t) -> bool:
        if is_subclass(t):
            return True
        if not isinstance(t, torch.Tensor):
            return False
        if getattr(state, "inside", False):
            return state.swappable and (t.device.type == "tpu" or state.from_tpu)
        # Outside the wrapper: the conversion that made the process's first tpu tensor began
        # before this patch (it is applied at that tensor), so its parameter is read from
        # torch's own loop, the caller.
        caller = sys._getframe(1)
        param = caller.f_locals.get("param") if caller.f_code is original_apply.__code__ else None
        if isinstance(param, torch.Tensor) and weakref.getweakrefcount(param):
            return False
        return t.device.type == "tpu" or (isinstance(param, torch.Tensor) and param.device.type == "tpu")

    def _apply(self, fn, recurse=True):
        # The module's own parameters decide for its own loop; `original_apply` converts the
        # children first (each through this wrapper), so the state is restored after them.
        own = [p for p in self._parameters.values() if p is not None]
        saved = getattr(state, "inside", False), getattr(state, "from_tpu", False), getattr(state, "swappable", True)
        state.inside = True
        state.from_tpu = any(p.device.type == "tpu" for p in own)
        # swap_tensors refuses tensors with weak references: those keep PyTorch's default
        # (new Parameter objects) rather than failing the whole conversion.
        state.swappable = not any(weakref.getweakrefcount(p) for p in own)
        try:
            return original_apply(self, fn, recurse)
        finally:
            state.inside, state.from_tpu, state.swappable = saved

    _apply.__doc__ = original_apply.__doc__
    module_py.is_traceable_wrapper_subclass = swaps
    torch.nn.Module._apply = _apply


_original_data_ptr = None


def patch_default_compile() -> None:
    """`torch.compile(model)` with its default backend on tpu tensors compiles with torchtpu.

    Inductor has no code generator for this device (its device named tpu is a Pallas
    generator that needs JAX), so a CUDA user's unchanged `torch.compile(model)` would fail
    inside it. A graph with any tpu input (the model's parameters are inputs) goes to the
    torchtpu backend instead, with one warning, and so does a graph that makes tpu tensors;
    graphs on other devices still go to Inductor.
    Inductor's `mode=` has no torchtpu meaning and is dropped (docs/eager.md)."""
    wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
    call = getattr(wrapper, "__call__", None)  # noqa: B004 - the class's method itself, to patch
    if call is None or getattr(call, "_torchtpu", False):
        return

    def __call__(self, model_, inputs_, **kwargs):
        if _graph_touches_tpu(model_, inputs_):
            from torchtpu._log import warn_once
            from torchtpu.compiled.backend import torchtpu_backend

            warn_once(
                "inductor-on-tpu",
                "torch.compile: Inductor cannot generate code for tpu tensors; this graph is compiled "
                'with torchtpu (write backend="torchtpu" to say so and to pass options=)',
            )
            return torchtpu_backend(model_, inputs_)
        return call(self, model_, inputs_, **kwargs)

    __call__._torchtpu = True
    wrapper.__call__ = __call__


def _on_tpu(value) -> bool:
    if isinstance(value, (tuple, list)):
        return any(_on_tpu(v) for v in value)
    return isinstance(value, torch.Tensor) and value.device.type == "tpu"


def _graph_touches_tpu(gm, inputs) -> bool:
    """A tpu input, or a tensor the graph makes on tpu (`create_block_mask(..., device="tpu",
    _compile=True)` has only integer inputs and builds its masks with `arange(device="tpu")`)."""
    if _on_tpu(list(inputs)):
        return True
    graph = getattr(gm, "graph", None)
    return graph is not None and any(_on_tpu(n.meta.get("example_value")) for n in graph.nodes)


def patch_data_ptr() -> None:
    """`data_ptr()` of tpu tensors and storages: a storage has no host pointer, so PyTorch
    gives 0 for all of them, and transformers, accelerate and safetensors, which tell tied
    or shared weights by `(device, storage data_ptr, nbytes)`, take every tpu weight for one
    shared tensor (`save_pretrained` refuses). Each tpu storage has an address of its own
    instead, as a CUDA storage has (given in C++, `create_empty_tensor`): unique while it
    lives, ranges that never overlap, a view at its offset (an empty view too). It is not
    dereferenceable (neither is a CUDA pointer on the host)."""
    global _original_data_ptr
    if _original_data_ptr is not None:
        return

    _original_data_ptr = original_tensor = torch.Tensor.data_ptr
    original_storage = torch.UntypedStorage.data_ptr  # a tpu storage's address, from C++
    original_nbytes = torch.UntypedStorage.nbytes

    def nbytes(self):
        # The slot's: C++ has the same count (set at creation and by `resize_`), except where a
        # Meta `set_` grew it past the device data.
        if self.device.type != "tpu":
            return original_nbytes(self)
        from torchtpu.device import _storage  # not at registration: `import torch` stays light

        slot = _storage.storage_slot(self)
        return slot.numel * slot.dtype.itemsize if slot is not None else original_nbytes(self)

    def tensor_data_ptr(self):
        if self.is_cpu or self.device.type != "tpu":
            return original_tensor(self)
        # PyTorch's own gives 0 for an empty tensor; a view keeps its place in the storage.
        return original_storage(self.untyped_storage()) + self.storage_offset() * self.element_size()

    tensor_data_ptr.__doc__ = original_tensor.__doc__
    nbytes.__doc__ = original_nbytes.__doc__
    torch.UntypedStorage.nbytes = nbytes
    torch.Tensor.data_ptr = tensor_data_ptr


_applied = False


def apply_for_tpu_use() -> None:
    """The patches a tpu program needs before its first tpu tensor, beyond `patch_accelerator`
    (idempotent): module conversion, the default `torch.compile` backend, `init_process_group`'s
    default backend, FSDP2's state move and accelerate's device choice. Those only tensors need
    (printing, storages, `data_ptr`) are `apply_for_tpu_tensors`."""
    global _applied
    if _applied:
        return
    _applied = True
    from torchtpu import distributed
    from torchtpu.device import _accelerate

    patch_module_conversion()
    patch_default_compile()
    distributed.patch_for_tpu_use()
    _accelerate.install()  # device_map="auto" (accelerate's get_max_memory) where tpu is the accelerator


def apply_for_tpu_tensors() -> None:
    """At the first tpu tensor: `apply_for_tpu_use`, and printing, storages, `data_ptr` and
    `flex_attention`'s device check."""
    from torchtpu.compiled import flex_attention

    apply_for_tpu_use()
    patch_printing()
    patch_storage()
    patch_data_ptr()
    flex_attention.allow_tpu_tensors()
