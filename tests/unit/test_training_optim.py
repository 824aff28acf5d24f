"""rlvr.training.optim: AdamW with 8-bit moments, against torch's AdamW."""

import io

import pytest
import torch

from rlvr.training.optim import BLOCK, AdamW8bit, decode, encode, rounding_noise


def blocks_of(values: torch.Tensor) -> torch.Tensor:
    return values.reshape(-1, BLOCK)


def test_encoding_lands_on_the_e4m3_grid_within_one_step():
    torch.manual_seed(0)
    # 64 blocks, each a different magnitude, signs mixed
    values = blocks_of(torch.randn(64 * BLOCK) * torch.logspace(-6, 2, 64).repeat_interleave(BLOCK))
    gen = torch.Generator().manual_seed(1)
    codes, scales = encode(values.clone(), rounding_noise(values.shape, gen, "cpu")[0])
    assert codes.dtype == torch.uint8 and scales.shape == (64,)
    decoded = decode(codes, scales)
    normal = values.abs() >= values.abs().amax(1, keepdim=True) * 2**-6  # e4m3's normal range, scaled
    rel = ((decoded - values).abs() / values.abs())[normal]
    assert rel.max() < 0.125  # one step of a 3-bit mantissa, at most
    assert torch.equal(decoded.sign()[normal], values.sign()[normal])
    # each block's largest magnitude stays inside e4m3's range: no NaN code (0x7F, 0xFF)
    assert not torch.isnan(decoded).any() and ((codes & 0x7F) != 0x7F).all()


def test_rounding_is_unbiased():
    """The mean of many encodings is the value: the expected code is the value itself."""
    torch.manual_seed(0)
    values = blocks_of(torch.randn(8 * BLOCK))
    gen = torch.Generator().manual_seed(2)
    total = torch.zeros_like(values)
    for _ in range(400):
        total += decode(*encode(values.clone(), rounding_noise(values.shape, gen, "cpu")[0]))
    step = values.abs().amax(1, keepdim=True) / 8  # the grid's coarsest step in a block
    assert ((total / 400 - values).abs() / step).max() < 0.1
    # rounding to nearest would be off by up to half a step for some values
    nearest = decode(*encode(values.clone(), torch.full(values.shape, 1 << 19, dtype=torch.int32)))
    assert ((nearest - values).abs() / step).max() > 0.2


def test_small_parameters_take_torchs_adamw_step_exactly():
    torch.manual_seed(0)
    ours = torch.nn.Parameter(torch.randn(100, 10))
    theirs = torch.nn.Parameter(ours.detach().clone())
    opt_ours = AdamW8bit([ours], lr=1e-2, weight_decay=0.1, betas=(0.8, 0.99))
    opt_theirs = torch.optim.AdamW([theirs], lr=1e-2, weight_decay=0.1, betas=(0.8, 0.99))
    for _ in range(20):
        grad = torch.randn(100, 10)
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        opt_ours.step()
        opt_theirs.step()
    assert "exp_avg" in opt_ours.state[ours]  # 1,000 values: under min_8bit_numel, float32 moments
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)


def regression(optimizer_cls, steps: int = 300, **kwargs):
    torch.manual_seed(0)
    layer = torch.nn.Linear(256, 128)
    inputs = torch.randn(512, 256)
    targets = inputs @ torch.randn(256, 128) * 0.1
    opt = optimizer_cls(layer.parameters(), lr=1e-2, weight_decay=0.01, **kwargs)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((layer(inputs) - targets) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, layer.weight.detach()


def test_it_trains_as_adamw_does():
    theirs, w_theirs = regression(torch.optim.AdamW)
    ours, w_ours = regression(AdamW8bit, min_8bit_numel=1)  # the 128-value bias in 8 bits too
    assert ours[-1] < 1e-3 * ours[0]
    assert ours[-1] < 2 * theirs[-1]
    assert (w_ours - w_theirs).norm() < 1e-3 * w_theirs.norm()


def test_the_second_moment_forgets_at_beta2s_rate():
    """Half of each block's values see a gradient of 1 throughout (they hold the block's scale
    still); the other half see 1 for 10 steps, then 0.01. Their ``v`` must then decay by
    beta2 a step, 0.1% of it, far under the grid's step (6-12%): rounded to nearest it would stay
    where it was; rounded stochastically it follows the float32 recurrence."""
    param = torch.nn.Parameter(torch.zeros(16 * BLOCK))
    opt = AdamW8bit([param], lr=1e-3, min_8bit_numel=1)
    fading = torch.arange(param.numel()) % 2 == 1
    v = torch.zeros(param.numel(), dtype=torch.float64)
    m = torch.zeros(param.numel(), dtype=torch.float64)
    for step in range(1000):
        grad = torch.where(fading & (step >= 10), 0.01, 1.0)
        v = 0.999 * v + 0.001 * grad.double() ** 2
        m = 0.9 * m + 0.1 * grad.double()
        param.grad = grad
        opt.step()
    state = opt.state[param]
    root = decode(state["root_exp_avg_sq_codes"], state["root_exp_avg_sq_scales"]).view(-1).double()
    error = (root - v.sqrt()) / v.sqrt()
    assert error[fading].mean().abs() < 0.02 and error[~fading].abs().mean() < 0.01
    mean = decode(state["exp_avg_codes"], state["exp_avg_scales"]).view(-1).double()
    assert ((mean - m) / m)[fading].mean().abs() < 0.02


def test_moments_take_about_two_bytes_a_parameter():
    param = torch.nn.Parameter(torch.randn(1000, 1000))
    param.grad = torch.randn(1000, 1000)
    opt = AdamW8bit([param])
    opt.step()
    held = sum(t.numel() * t.element_size() for t in opt.state[param].values() if torch.is_tensor(t))
    assert 2.0 <= held / param.numel() < 2.1


def test_uneven_shapes_and_bfloat16_parameters():
    """A parameter whose size is no multiple of a block, chunks that cut through it, and a
    bfloat16 parameter (updated in float32, written back in its dtype)."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(37, 113)), torch.nn.Parameter(torch.randn(5000, dtype=torch.bfloat16))]
    reference = [torch.nn.Parameter(p.detach().float().clone()) for p in params]
    starts = [r.detach().clone() for r in reference]
    # steps of 0.02 outweigh bfloat16's rounding of the weights (2^-8 of them)
    ours = AdamW8bit(params, lr=2e-2, min_8bit_numel=1, chunk_values=3 * BLOCK)
    theirs = torch.optim.AdamW(reference, lr=2e-2)
    for _ in range(10):
        for p, r in zip(params, reference):
            grad = torch.randn(p.shape)
            p.grad, r.grad = grad.to(p.dtype), grad
        ours.step()
        theirs.step()
    for p, r, start in zip(params, reference, starts):
        assert p.dtype in (torch.float32, torch.bfloat16)
        assert (p.detach().float() - start).abs().mean() > 0.03  # it moved (about 0.02 x sqrt(10))
        torch.testing.assert_close(p.detach().float(), r.detach(), atol=0.03, rtol=0.02)


def test_state_dict_round_trip_continues_bit_for_bit():
    """Saved, read back as data (``weights_only``) and loaded into a new optimizer, it takes the
    same next steps as the one that never stopped: codes stay uint8, the rounding generator comes back."""
    torch.manual_seed(0)
    start = torch.randn(64, 300)
    grads = [torch.randn(64, 300) for _ in range(6)]

    def fresh():
        param = torch.nn.Parameter(start.clone())
        return param, AdamW8bit([param], lr=1e-2, min_8bit_numel=1, seed=7)

    straight, opt = fresh()
    for grad in grads:
        straight.grad = grad.clone()
        opt.step()
    first, opt_first = fresh()
    for grad in grads[:3]:
        first.grad = grad.clone()
        opt_first.step()
    buffer = io.BytesIO()
    torch.save({"param": first.detach(), "optimizer": opt_first.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    resumed = torch.nn.Parameter(saved["param"].clone())
    opt_resumed = AdamW8bit([resumed], lr=1e-2, min_8bit_numel=1, seed=0)  # the saved seed wins
    opt_resumed.load_state_dict(saved["optimizer"])
    assert opt_resumed.state[resumed]["exp_avg_codes"].dtype == torch.uint8
    for grad in grads[3:]:
        resumed.grad = grad.clone()
        opt_resumed.step()
    assert torch.equal(resumed, straight)


def test_rounding_leaves_the_global_generator_alone():
    param = torch.nn.Parameter(torch.randn(10_000))
    param.grad = torch.randn(10_000)
    opt = AdamW8bit([param])
    before = torch.get_rng_state()
    opt.step()
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("kwargs", [dict(lr=0.0), dict(betas=(1.0, 0.9)), dict(eps=0.0), dict(weight_decay=-1.0)])
def test_bad_hyperparameters_are_refused(kwargs):
    with pytest.raises(ValueError, match="AdamW8bit"):
        AdamW8bit([torch.nn.Parameter(torch.zeros(3))], **kwargs)
