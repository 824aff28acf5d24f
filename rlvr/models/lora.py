"""LoRA adapters merged into their base weights for a while, for sampling at the base model's
speed, or one merged weight at a time as a sampler takes them (``merged_weight``), the modules
that hold them named (``adapted_parameters``); for training, the adapters' product added to the
base layer's output inside one matmul, and the frozen base held in bfloat16 under autocast."""

from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache
from typing import Iterator


@contextmanager
def merged_adapters(model) -> Iterator[None]:
    """A peft model's LoRA adapters merged into its base weights inside the block, unmerged after.

    Generation with merged weights runs one matmul per projection instead of three (the
    base weight and the adapter's two factors). The base weights come back exactly: they are
    copied before the merge and copied back after, because ``W + BA - BA`` is not ``W`` in
    floating point (in bfloat16 a merge and unmerge per step would move the frozen weights by
    rounding errors that add up). A model without adapters is left alone.
    """
    import torch

    layers = [m for m in model.modules() if hasattr(m, "base_layer") and hasattr(m, "merge") and hasattr(m, "unmerge")]
    if not layers or not hasattr(model, "merge_adapter"):
        yield
        return
    with torch.no_grad():
        saved = [(m.base_layer.weight, m.base_layer.weight.detach().clone()) for m in layers]
    model.merge_adapter()
    try:
        yield
    finally:
        model.unmerge_adapter()  # peft's own bookkeeping: the layers count as unmerged again
        with torch.no_grad():
            for weight, original in saved:
                weight.copy_(original)


def hold_frozen_linears(model, dtype) -> int:
    """Hold the weights (and biases) of every ``torch.nn.Linear`` of ``model`` that is not trained
    in ``dtype``, in place of their float32 copies: a LoRA model's base projections and its output
    head. For a trainer under bfloat16 autocast that is what autocast casts them to in every
    forward pass anyway, so the forward computes the same; the casts, and the bfloat16 copies
    autocast keeps for the backward pass, are gone, and the frozen weights take half the memory.
    Left alone: trained layers (the adapters), and a head that shares its weight with the input
    embeddings (the residual stream starts from those, and stays float32). Returns how many
    parameters (elements) changed dtype."""
    import torch

    embedded = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    count = 0
    for module in model.modules():
        if type(module) is not torch.nn.Linear or id(module.weight) in embedded:
            continue
        params = list(module.parameters(recurse=False))
        if any(p.requires_grad for p in params) or all(p.dtype == dtype for p in params):
            continue
        module.to(dtype)
        count += sum(p.numel() for p in params)
    return count


def fuse_lora_adds(model) -> int:
    """Make each plain LoRA layer of a peft ``model`` add its adapters' product to the base
    layer's output inside one matmul: ``addmm(base(x), A(x), B.T, alpha=scaling)`` instead of
    peft's ``base(x) + B(A(x)) * scaling``, which writes three tensors of the layer's output size
    (for a 0.5B model's MLP, 4864 values a token: on a CPU, 10 s of a 90 s update went to them).
    The outputs and gradients are peft's up to rounding.

    Plain: one adapter, no dropout, no bias on B, no variant (DoRA and the like), a
    ``torch.nn.Linear`` base. Anything else, and any call peft's own forward handles differently
    (adapters disabled or merged, a mixed batch, extra arguments, weights partitioned by ZeRO-3)
    goes to peft's forward.
    Returns how many layers now add in one matmul."""
    import torch

    try:
        from peft.tuners.lora.layer import Linear
    except ImportError:
        return 0
    fused = _fused_linear_class(Linear)
    count = 0
    for module in model.modules():
        if type(module) is Linear and _plain(module) and isinstance(module.lora_dropout[_adapter(module)],
                                                                    torch.nn.Identity):
            module.__class__ = fused
            count += 1
    return count


def _adapter(layer) -> str:
    return next(iter(layer.lora_A.keys()))


def _plain(layer) -> bool:
    """A peft LoRA ``Linear`` (fused or not) with one adapter, no variant (DoRA and the like), no
    bias on B, over a ``torch.nn.Linear``: its merged weight is ``W + scaling * B @ A``."""
    import torch

    return (isinstance(layer.base_layer, torch.nn.Linear) and len(layer.lora_A) == 1
            and not layer.lora_variant and layer.lora_B[_adapter(layer)].bias is None)


def _is_lora(module) -> bool:
    return hasattr(module, "base_layer") and hasattr(module, "lora_A")


def lora_layers(model) -> list:
    """The peft LoRA layers of ``model`` (none for a model without adapters)."""
    return [m for m in model.modules() if _is_lora(m)]


def merges_apart(model) -> dict[int, object]:
    """For a model whose LoRA layers are all plain (``_plain``) and unmerged: each layer by the
    ``id`` of its base weight, for ``merged_weight``. Empty when some layer is not (its merge is
    peft's to do: ``merged_adapters``) or there are none."""
    layers = lora_layers(model)
    if not layers or any(m.merged or not _plain(m) for m in layers):
        return {}
    return {id(m.base_layer.weight): m for m in layers}


def adapted_parameters(model) -> set[int]:
    """The ``id`` of every parameter a LoRA run's sampler must be sent for its weights to be the
    trainer's, given that it holds the others already: all parameters of each module that holds a
    LoRA layer (its siblings too: vLLM packs q, k and v, or gate and up, into one layer and loads
    such a layer only whole), and any trained parameter."""
    modules = dict(model.named_modules())
    ids = {id(p) for p in model.parameters() if p.requires_grad}
    for name in [n for n, m in modules.items() if _is_lora(m)]:
        ids.update(id(p) for p in modules[name.rpartition(".")[0]].parameters())
    return ids


def merged_weight(layer, dtype=None):
    """A plain LoRA layer's merged weight ``W + scaling * B @ A``, as a new tensor in ``dtype``
    (default: the base weight's); nothing of the layer changes. One ``addmm`` in float32, rounded
    to ``dtype`` once: 2.9 ms for a 0.5B model's 4864 x 896 projection on 2 cores, where peft's
    steps (product, scaled, added: three tensors of the weight's size) took 6.2."""
    import torch

    name = _adapter(layer)
    weight, a, b = layer.base_layer.weight, layer.lora_A[name].weight.float(), layer.lora_B[name].weight.float()
    first, second = (a.T, b.T) if layer.fan_in_fan_out else (b, a)
    with torch.no_grad():
        return torch.addmm(weight.float(), first, second, alpha=layer.scaling[name]).to(dtype or weight.dtype)


@lru_cache(maxsize=None)
def _fused_linear_class(base):
    import torch

    class FusedAddLoraLinear(base):
        """peft's LoRA ``Linear`` whose forward adds its adapter inside one matmul (``fuse_lora_adds``)."""

        def forward(self, x, *args, **kwargs):
            name = self.active_adapters[0] if len(self.active_adapters) == 1 else None
            if args or kwargs or self.disable_adapters or self.merged or name not in self.lora_A \
                    or hasattr(self.lora_B[name].weight, "ds_id"):  # ZeRO-3 gathers B only when B is called
                return super().forward(x, *args, **kwargs)
            weight, a_dtype = self.lora_B[name].weight, self.lora_A[name].weight.dtype
            autocast = torch.is_autocast_enabled(x.device.type)
            # mixed dtypes outside autocast: peft's promotion, decided before anything is computed
            if not autocast and not self.base_layer.weight.dtype == a_dtype == weight.dtype:
                return super().forward(x)
            result = self.base_layer(x)
            # under autocast A's product runs in bfloat16 whatever x's dtype: peft's cast of x to
            # A's float32 would only write x twice more (there and back), and its gradient again
            a = self.lora_A[name](x if autocast else self._cast_input_dtype(x, a_dtype))
            flat = torch.addmm(result.reshape(-1, result.shape[-1]), a.reshape(-1, a.shape[-1]), weight.t(),
                               alpha=self.scaling[name])
            return flat.view(result.shape).to(result.dtype)

    return FusedAddLoraLinear
