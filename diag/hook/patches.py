"""The wrappers the hook puts around torch entry points, and their exact undoing.

Every wrapper calls the real function unchanged (same arguments, same return value, the user's
exceptions propagate untouched); diag's own bookkeeping before and after is wrapped so that its
failures are counted by :meth:`HookCallbacks.error` and never reach the training loop. A wrapper
whose hook was uninstalled is a plain pass-through, so a reference someone kept stays harmless.

The wrappers know the hook only as :class:`HookCallbacks` (implemented by
:class:`diag.hook.core.Hook`): what they read on their fast path and the callbacks they make.

``Work.wait()`` is wrapped on the class (``torch.distributed.Work``): a wait on the training thread
outside any wrapped collective (``irecv(...).wait()``, an ``async_op=True`` all-reduce waited on
later) is time blocked on communication, which the step's compute/wait split must count as wait.
The waits torch's own blocking collectives make inside a wrapped call are already timed by it.
"""

from __future__ import annotations

import functools
import importlib
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from diag.hook.phases import BACKWARD, CHECKPOINT, DATA, OPTIMIZER, StepTracker

if TYPE_CHECKING:
    from diag.config import HookConfig
    from diag.hook.numerics import Numerics


class HookCallbacks(Protocol):
    """The job side of an installed hook, as the wrappers see it.

    ``active`` is False once the hook is uninstalled (every wrapper then passes through);
    ``train_tid`` the training thread's ident (the hot wrappers compare ``get_ident()`` with it
    inline rather than call ``on_train_thread``);
    ``clock`` is the hook's perf-counter ns clock; ``tracker`` the step tracker the region
    wrappers enter and exit; ``numerics`` the numerics tier (None when off). The methods are
    called on the thread that called the wrapped function; none of them raises (``error`` counts
    a failure of diag's own bookkeeping).
    """

    active: bool
    train_tid: int | None
    cfg: HookConfig
    torch: Any
    clock: Callable[[], int]
    tracker: StepTracker
    numerics: Numerics | None

    def error(self, exc: BaseException) -> None: ...
    def on_train_thread(self) -> bool: ...
    def optimizer_pre_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None: ...
    def optimizer_post_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None: ...
    def before_backward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...
    def after_backward(self, token: Any) -> None: ...
    def on_collective(
        self, op: str, t0: int, t1: int, nbytes: int, dtype: Any, group: Any, sync: bool, ok: bool
    ) -> None: ...
    def on_wait(self, t0: int, t1: int) -> None: ...
    def on_checkpoint(self, op: str, api: str, path: str, t0: int, t1: int, ok: bool) -> None: ...
    def add_replica(self, ddp: Any) -> None: ...
    def numerics_call(self, fn: Any, *args: Any) -> None: ...


#: torch.distributed functions timed and recorded, with where their payload tensor(s) sit
#: (positional index, keyword name) for num_bytes/dtype.
COLLECTIVES: dict[str, tuple[int, str]] = {
    "all_reduce": (0, "tensor"),
    "broadcast": (0, "tensor"),
    "all_gather": (1, "tensor"),
    "all_gather_into_tensor": (1, "input_tensor"),
    "reduce_scatter": (0, "output"),
    "reduce_scatter_tensor": (1, "input"),
    "reduce": (0, "tensor"),
    "all_to_all": (1, "input_tensor_list"),
    "all_to_all_single": (1, "input"),
    "gather": (0, "tensor"),
    "scatter": (0, "tensor"),
    "barrier": (-1, ""),
    "send": (0, "tensor"),
    "recv": (0, "tensor"),
    "isend": (0, "tensor"),
    "irecv": (0, "tensor"),
    "batch_isend_irecv": (-1, ""),
}
_ALWAYS_ASYNC = frozenset({"isend", "irecv", "batch_isend_irecv"})
#: ``depth``: wrapped collective calls in progress on this thread (their waits are theirs).
_IN_COLLECTIVE = threading.local()

#: Checkpoint functions: (module path, attribute, op).
CHECKPOINT_APIS: tuple[tuple[str, str, str], ...] = (
    ("torch", "save", "save"),
    ("torch", "load", "load"),
)
DCP_APIS: tuple[tuple[str, str, str], ...] = (
    ("torch.distributed.checkpoint", "save", "save"),
    ("torch.distributed.checkpoint", "load", "load"),
    ("torch.distributed.checkpoint", "async_save", "save"),
    ("torch.distributed.checkpoint", "save_state_dict", "save"),
    ("torch.distributed.checkpoint", "load_state_dict", "load"),
)


class Patcher:
    """Remembers every attribute it replaced so :meth:`restore` puts the originals back."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []
        self.handles: list[Any] = []  # removable hook handles (optimizer hooks)

    def replace(self, owner: Any, name: str, make: Callable[[Any], Any]) -> Any:
        original = getattr(owner, name)
        if getattr(original, "__diag_wrapped__", False):
            return original
        wrapper = make(original)
        wrapper.__diag_wrapped__ = True
        self._saved.append((owner, name, original))
        setattr(owner, name, wrapper)
        return wrapper

    def patched(self, owner: Any, name: str) -> bool:
        return any(o is owner and n == name for o, n, _ in self._saved)

    def restore(self) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


def _payload(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, Any]:
    index, key = COLLECTIVES[op]
    if index < 0:
        return 0, None
    obj = kwargs.get(key) if key in kwargs else (args[index] if len(args) > index else None)
    tensors = obj if isinstance(obj, (list, tuple)) else (obj,)
    num_bytes, dtype = 0, None
    for t in tensors:
        nbytes = getattr(t, "nbytes", None)
        if nbytes is not None:
            num_bytes += int(nbytes)
            dtype = dtype or t.dtype
    return num_bytes, dtype


def _group(
    args: tuple[Any, ...], kwargs: dict[str, Any], pg_type: type, kinds: dict[type, bool]
) -> Any:
    """The process group a collective was called with (None: the default group). ``kinds``
    caches per argument type whether it is a process group: ``isinstance`` against
    ``ProcessGroup`` goes through a Python ``__instancecheck__`` (torch's opaque-object
    metaclass), a call per argument per collective otherwise."""
    group = kwargs.get("group")
    if group is None:
        for arg in args:
            kind = type(arg)
            is_group = kinds.get(kind)
            if is_group is None:
                is_group = kinds[kind] = isinstance(arg, pg_type)
            if is_group:
                return arg
    return group


def wrap_collective(hook: HookCallbacks, op: str, original: Any) -> Any:
    local = threading.local()
    pg_type = hook.torch.distributed.ProcessGroup
    kinds: dict[type, bool] = {}
    clock = hook.clock

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not hook.active or getattr(local, "depth", False):
            return original(*args, **kwargs)
        t0 = clock()
        local.depth = True
        _IN_COLLECTIVE.depth = int(getattr(_IN_COLLECTIVE, "depth", 0)) + 1
        ok = False
        try:
            result = original(*args, **kwargs)
            ok = True
            return result
        finally:
            t1 = clock()
            local.depth = False
            _IN_COLLECTIVE.depth -= 1
            try:
                sync = op not in _ALWAYS_ASYNC and not kwargs.get("async_op", False)
                nbytes, dtype = _payload(op, args, kwargs)
                hook.on_collective(
                    op, t0, t1, nbytes, dtype, _group(args, kwargs, pg_type, kinds), sync, ok
                )
            except Exception as exc:
                hook.error(exc)

    return wrapper


def wrap_wait(hook: HookCallbacks, original: Any) -> Any:
    """``Work.wait`` (see the module docstring): timed on the training thread outside wrapped
    collectives, a pass-through elsewhere."""
    clock = hook.clock

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth: int = getattr(_IN_COLLECTIVE, "depth", 0)
        if depth or not hook.active or threading.get_ident() != hook.train_tid:
            return original(self, *args, **kwargs)
        t0 = clock()
        try:
            return original(self, *args, **kwargs)
        finally:
            try:
                hook.on_wait(t0, clock())
            except Exception as exc:
                hook.error(exc)

    wait.__doc__ = getattr(original, "__doc__", None)
    return wait


def wrap_region(
    hook: HookCallbacks, phase: int, original: Any, after: Callable[[Any, int], None] | None = None
) -> Any:
    """A region wrapper for DataLoader ``__next__`` (phase DATA); ``after(result, step)`` sees
    what a tracked call returned (the numerics tier keeps the batch)."""
    tracker, clock = hook.tracker, hook.clock

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tracked = False
        if hook.active and threading.get_ident() == hook.train_tid:
            try:
                tracked = tracker.enter(phase, clock())
            except Exception as exc:
                hook.error(exc)
        try:
            result = original(*args, **kwargs)
        finally:
            if tracked:
                try:
                    tracker.exit(phase, clock())
                except Exception as exc:
                    hook.error(exc)
        if tracked and after is not None:
            try:
                after(result, tracker.step)
            except Exception as exc:
                hook.error(exc)
        return result

    return wrapper


def wrap_ddp_init(hook: HookCallbacks, original: Any) -> Any:
    """``DistributedDataParallel.__init__``: the numerics tier learns each replica."""

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if hook.active:
            try:
                hook.add_replica(self)
            except Exception as exc:
                hook.error(exc)

    return wrapper


def wrap_scaler_update(hook: HookCallbacks, original: Any) -> Any:
    """``GradScaler.update``: the numerics tier records the loss scale after it."""

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if hook.active and hook.numerics is not None and hook.on_train_thread():
            hook.numerics_call(hook.numerics.on_scale, self, hook.tracker.step)
        return result

    return wrapper


def wrap_backward(hook: HookCallbacks, original: Any) -> Any:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        token = None
        if hook.active and threading.get_ident() == hook.train_tid:
            try:
                token = hook.before_backward(args, kwargs)
            except Exception as exc:
                hook.error(exc)
        try:
            return original(*args, **kwargs)
        finally:
            if token is not None:
                try:
                    hook.after_backward(token)
                except Exception as exc:
                    hook.error(exc)

    return wrapper


def _path_of(api: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The file or directory a checkpoint call reads or writes; "" for buffers and streams."""
    if api == "save":
        target = kwargs.get("f", args[1] if len(args) > 1 else None)
    elif api == "load":
        target = kwargs.get("f", args[0] if args else None)
    else:
        target = kwargs.get("checkpoint_id")
        for obj in (kwargs.get("storage_writer"), kwargs.get("storage_reader"), *args[1:]):
            if target is None and obj is not None and hasattr(obj, "path"):
                target = obj.path
    if isinstance(target, (str, os.PathLike)):
        path = os.fspath(target)
        return path if isinstance(path, str) else os.fsdecode(path)
    return ""


def wrap_checkpoint(hook: HookCallbacks, api: str, op: str, original: Any) -> Any:
    local = threading.local()
    clock = hook.clock

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not hook.active or getattr(local, "depth", False):
            return original(*args, **kwargs)
        tracked = False
        on_train = hook.on_train_thread()
        t0 = clock()
        if on_train:
            try:
                tracked = hook.tracker.enter(CHECKPOINT, t0)
            except Exception as exc:
                hook.error(exc)
        local.depth = True
        ok = False
        try:
            result = original(*args, **kwargs)
            ok = True
            return result
        finally:
            t1 = clock()
            local.depth = False
            try:
                if tracked:
                    hook.tracker.exit(CHECKPOINT, t1)
                path = _path_of(api, args, kwargs)
                hook.on_checkpoint(op, api, path, t0, t1, ok)
            except Exception as exc:
                hook.error(exc)

    return wrapper


def apply(hook: HookCallbacks, patcher: Patcher) -> None:
    """Install every wrapper ``hook.cfg`` asks for onto ``hook.torch``."""
    torch = hook.torch
    cfg = hook.cfg
    optim = importlib.import_module("torch.optim.optimizer")
    patcher.replace(torch.autograd, "backward", functools.partial(wrap_backward, hook))
    patcher.handles.append(optim.register_optimizer_step_pre_hook(hook.optimizer_pre_hook))
    patcher.handles.append(optim.register_optimizer_step_post_hook(hook.optimizer_post_hook))
    if cfg.capture_dataloader:
        loader = importlib.import_module("torch.utils.data.dataloader")
        iter_cls = loader._BaseDataLoaderIter
        after = hook.numerics.on_batch if hook.numerics is not None else None
        patcher.replace(
            iter_cls, "__next__", functools.partial(wrap_region, hook, DATA, after=after)
        )
    if hook.numerics is not None:
        ddp = importlib.import_module("torch.nn.parallel.distributed").DistributedDataParallel
        patcher.replace(ddp, "__init__", functools.partial(wrap_ddp_init, hook))
        scaler = importlib.import_module("torch.amp.grad_scaler").GradScaler
        patcher.replace(scaler, "update", functools.partial(wrap_scaler_update, hook))
    if cfg.capture_checkpoints:
        for _module, name, op in CHECKPOINT_APIS:
            patcher.replace(torch, name, functools.partial(wrap_checkpoint, hook, name, op))
        patch_dcp(hook, patcher)
    if cfg.capture_collectives and torch.distributed.is_available():
        c10d = torch.distributed.distributed_c10d
        for op in COLLECTIVES:
            original = getattr(c10d, op, None)
            if original is None:
                continue
            wrapper = patcher.replace(c10d, op, functools.partial(wrap_collective, hook, op))
            if getattr(torch.distributed, op, None) is original:
                patcher._saved.append((torch.distributed, op, original))
                setattr(torch.distributed, op, wrapper)
        work = getattr(c10d, "Work", None)
        if work is not None and hasattr(work, "wait"):
            patcher.replace(work, "wait", functools.partial(wrap_wait, hook))


def patch_dcp(hook: HookCallbacks, patcher: Patcher) -> bool:
    """Wrap torch.distributed.checkpoint's save/load if that module is imported; True if done."""
    import sys

    dcp = sys.modules.get("torch.distributed.checkpoint")
    if dcp is None or patcher.patched(dcp, "save"):
        return dcp is not None
    for _module, name, op in DCP_APIS:
        if hasattr(dcp, name):
            api = f"dcp.{name}"
            patcher.replace(dcp, name, functools.partial(wrap_checkpoint, hook, api, op))
    return True


__all__ = ["BACKWARD", "OPTIMIZER", "HookCallbacks", "Patcher", "apply", "patch_dcp"]
