"""AdamW with its two moments held in 8 bits a value (``trainer.optimizer: adamw_8bit``).

torch's AdamW holds two float32 moments a parameter: 8 bytes, twice the float32 weights
themselves. Here each moment is held as float8 (e4m3: a sign, 4 exponent bits, 3 mantissa
bits) with one float32 scale for each block of ``BLOCK`` values, which maps the block's largest
magnitude to e4m3's largest (448): 1.02 bytes a value, 2.03 bytes a parameter for both moments.
The second moment is held as its square root, so that the 18 binades e4m3 spans below a block's
largest value (2^-9 to 448) cover 36 of ``v``'s.

The update itself is AdamW's, in float32: a chunk of the moments is decoded, updated with the
gradient, used for the step, and encoded again. Encoding rounds **stochastically**: each value
goes to one of its two neighbours on the e4m3 grid with the probabilities that make its
expected value exact. Rounding to nearest would lose every change smaller than half a step of
the grid (a step is 6-12% of the value). ``v`` decays by ``1 - beta2`` (0.1%) of itself a step:
where its block's scale does not carry that (a value that should decay while its block's
largest holds), ``v`` would stay where it stood. Stochastic rounding keeps every change in
expectation (``tests/unit/test_training_optim.py`` follows such values for 1,000 steps).

Parameters under ``min_8bit_numel`` values (norms, biases) keep float32 moments and take
exactly torch's AdamW step. The rounding draws from the optimizer's own generator (seeded, and
saved in its state dict), not the global one that sampling and dropout use.
"""

from __future__ import annotations

import math

import torch

BLOCK = 256
E4M3_MAX = 448.0
_MANTISSA_DROP = 20  # float32 has 23 mantissa bits, e4m3 keeps 3


def encode(values: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, scales) of ``values`` (float32, shape (blocks, BLOCK)): uint8 e4m3 codes and one
    float32 scale a block, so that ``decode(codes, scales)`` is ``values`` rounded stochastically
    to the block's grid. ``noise``: int32 of the same shape, uniform in [0, 2^20) (the
    chance of rounding up is the dropped mantissa bits' share of the step); values below e4m3's
    normal range (magnitudes under 2^-6 of the scaled maximum) then round to nearest, the others
    land on the grid exactly. ``values`` is overwritten."""
    # the block's largest magnitude maps a hair under 448, so that no rounding passes e4m3's range
    low, high = torch.aminmax(values, dim=1, keepdim=True)
    scales = torch.maximum(high, low.neg_()).mul_((1 + 2**-19) / E4M3_MAX)
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))
    bits = values.div_(scales).view(torch.int32)
    # Adding uniform noise below the kept mantissa bits and cutting them rounds the magnitude up
    # with probability (dropped part) / (grid step); sign and magnitude are apart in IEEE
    # floats, so negative values round the same way.
    bits.add_(noise).bitwise_and_(~((1 << _MANTISSA_DROP) - 1))
    codes = bits.view(torch.float32).to(torch.float8_e4m3fn).view(torch.uint8)
    return codes, scales.squeeze(1)


_TABLES: dict[torch.device, torch.Tensor] = {}


def decode(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The float32 values (shape (blocks, BLOCK)) of ``encode``'s codes and scales. A lookup in
    the 256 codes' values: faster on CPU than torch's float8 cast (11 against 20 ms for 4M)."""
    table = _TABLES.get(codes.device)
    if table is None:
        table = _TABLES[codes.device] = torch.arange(256, dtype=torch.uint8, device=codes.device).view(
            torch.float8_e4m3fn).to(torch.float32)
    values = table.index_select(0, codes.reshape(-1).to(torch.int32)).view(codes.shape)
    return values.mul_(scales.unsqueeze(1))


def rounding_noise(shape, generator: torch.Generator, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Two int32 tensors of ``shape``, uniform in [0, 2^20), for ``encode``: the low and high
    words of one draw of 64-bit integers (one call instead of two), masked in one pass."""
    draw = torch.empty(*shape, dtype=torch.int64, device=device).random_(generator=generator)
    draw.bitwise_and_(((1 << _MANTISSA_DROP) - 1) * ((1 << 32) + 1))
    words = draw.view(torch.int32).view(*shape[:-1], shape[-1], 2)
    return words[..., 0], words[..., 1]


class AdamW8bit(torch.optim.Optimizer):
    """``torch.optim.AdamW``'s update (decoupled weight decay, bias correction, ``eps`` added to
    the corrected root) with its moments held in 8 bits (see the module's docstring).

    ``chunk_values``: how many values of a parameter are decoded at a time; the float32 moments
    and temporaries live only for one chunk (about 10 float32 copies of it), not for the model.
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, *, min_8bit_numel: int = 4096, chunk_values: int = 1 << 22, seed: int = 0):
        if not lr > 0 or not eps > 0 or not 0 <= betas[0] < 1 or not 0 <= betas[1] < 1 or weight_decay < 0:
            raise ValueError(f"AdamW8bit: invalid lr={lr}, betas={betas}, eps={eps} or weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.min_8bit_numel = min_8bit_numel
        self.chunk_blocks = max(1, chunk_values // BLOCK)
        self._seed = seed
        self._generators: dict[torch.device, torch.Generator] = {}

    def _generator(self, device: torch.device) -> torch.Generator:
        if device not in self._generators:
            self._generators[device] = torch.Generator(device=device).manual_seed(self._seed)
        return self._generators[device]

    def _init_state(self, param: torch.Tensor) -> dict:
        if param.numel() < self.min_8bit_numel:
            return {"step": 0, "exp_avg": torch.zeros_like(param, dtype=torch.float32),
                    "exp_avg_sq": torch.zeros_like(param, dtype=torch.float32)}
        blocks = -(-param.numel() // BLOCK)
        zeros = dict(dtype=torch.uint8, device=param.device)
        ones = dict(dtype=torch.float32, device=param.device)
        # code 0 is +0.0 in e4m3: zero moments whatever the scales
        return {"step": 0, "exp_avg_codes": torch.zeros(blocks, BLOCK, **zeros), "exp_avg_scales": torch.ones(blocks, **ones),
                "root_exp_avg_sq_codes": torch.zeros(blocks, BLOCK, **zeros),
                "root_exp_avg_sq_scales": torch.ones(blocks, **ones)}

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                if param.grad.is_sparse:
                    raise RuntimeError("AdamW8bit does not take sparse gradients")
                state = self.state[param]
                if not state:
                    state.update(self._init_state(param))
                state["step"] += 1
                step = state["step"]
                if decay:
                    param.mul_(1 - lr * decay)
                hyper = (lr / (1 - beta1 ** step), math.sqrt(1 - beta2 ** step), beta1, beta2, eps)
                if "exp_avg" in state:
                    self._step_float32(param, state, *hyper)
                else:
                    self._step_8bit(param, state, *hyper)
        return loss

    @staticmethod
    def _step_float32(param, state, step_size, root_correction, beta1, beta2, eps):
        grad = param.grad.to(torch.float32)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = (exp_avg_sq.sqrt() / root_correction).add_(eps)
        param.add_((exp_avg / denom).mul_(-step_size).to(param.dtype))

    def _step_8bit(self, param, state, step_size, root_correction, beta1, beta2, eps):
        flat, grad = param.view(-1), param.grad.reshape(-1)
        numel, generator = flat.numel(), self._generator(param.device)
        m_codes, m_scales = state["exp_avg_codes"], state["exp_avg_scales"]
        r_codes, r_scales = state["root_exp_avg_sq_codes"], state["root_exp_avg_sq_scales"]
        for first in range(0, m_codes.shape[0], self.chunk_blocks):
            last = min(first + self.chunk_blocks, m_codes.shape[0])
            begin, end = first * BLOCK, min(last * BLOCK, numel)
            g = torch.empty(last - first, BLOCK, dtype=torch.float32, device=flat.device)
            g.view(-1)[: end - begin] = grad[begin:end]
            g.view(-1)[end - begin:] = 0  # the last block's tail past the parameter
            exp_avg = decode(m_codes[first:last], m_scales[first:last]).lerp_(g, 1 - beta1)
            root = decode(r_codes[first:last], r_scales[first:last])
            root = root.mul_(root).mul_(beta2).addcmul_(g, g, value=1 - beta2).sqrt_()  # sqrt(v) anew
            denom = g.copy_(root).div_(root_correction).add_(eps)  # g is spent: its memory reused
            target = flat[begin:end]
            if target.dtype == torch.float32:
                target.addcdiv_(exp_avg.view(-1)[: end - begin], denom.view(-1)[: end - begin], value=-step_size)
            else:
                target.add_((exp_avg / denom).view(-1)[: end - begin].mul_(-step_size).to(target.dtype))
            low, high = rounding_noise(g.shape, generator, flat.device)
            m_codes[first:last], m_scales[first:last] = encode(exp_avg, low)
            r_codes[first:last], r_scales[first:last] = encode(root, high)

    def state_dict(self):
        saved = super().state_dict()
        saved["rounding_rng"] = {str(device): gen.get_state() for device, gen in self._generators.items()}
        saved["rounding_seed"] = self._seed
        return saved

    def load_state_dict(self, state_dict):
        """torch's ``Optimizer.load_state_dict`` casts every floating-point parameter's state
        tensors to the parameter's dtype, which is right for its own moments and wrong for codes
        and scales: this one puts each saved tensor back as it was saved, on its parameter's device."""
        groups, saved_groups = self.param_groups, state_dict["param_groups"]
        if len(groups) != len(saved_groups) or any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("the optimizer state was saved for other parameter groups")
        state: dict = {}
        for group, saved in zip(groups, saved_groups):
            group.update({key: value for key, value in saved.items() if key != "params"})
            for param, saved_id in zip(group["params"], saved["params"]):
                if saved_id in state_dict["state"]:
                    state[param] = {key: value.to(param.device) if torch.is_tensor(value) else value
                                    for key, value in state_dict["state"][saved_id].items()}
        self.state.clear()
        self.state.update(state)
        self._seed = state_dict.get("rounding_seed", self._seed)
        self._generators = {}
        for device, rng in state_dict.get("rounding_rng", {}).items():
            self._generator(torch.device(device)).set_state(rng.cpu())  # a generator's state is a CPU tensor, CUDA's too
