"""The loss registry: each variant is declared once (``rlvr.recipe.loss_variants``), the recipe
schema offers exactly the declared ones, every declared policy loss has exactly one function in
``rlvr.training.losses`` (and every function a declaration), each declared section is a field of
the schema, and every registered loss keeps the contract the learner relies on. A new variant
is checked here without a line added to this file."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
import torch
from pydantic import BaseModel, create_model

from rlvr.recipe.loss_variants import AGGREGATIONS, POLICY_LOSSES, Aggregation, PolicyLoss
from rlvr.recipe.spec import AlgorithmConfig, ISCorrectionConfig, KLConfig
from rlvr.training.learner import loss_bounds
from rlvr.training.losses import (POLICY_LOSS_FNS, aggregate, importance_weights, kl_estimate,
                                  register_policy_loss, surrogate_loss)

ROOT = Path(__file__).resolve().parents[2]


def choices(model, field: str) -> tuple:
    return typing.get_args(model.model_fields[field].annotation)


def registry_problems(schema, losses: dict[str, PolicyLoss], functions, aggregations: dict[str, Aggregation]) -> list[str]:
    """What keeps the schema (an ``AlgorithmConfig``), the declarations and the functions from
    naming the same variants; empty when they agree."""
    problems = []
    if choices(schema, "policy_loss") != tuple(losses):
        problems.append(f"schema policy_loss {choices(schema, 'policy_loss')} != declared {tuple(losses)}")
    if choices(schema, "loss_aggregation") != tuple(aggregations):
        problems.append(f"schema loss_aggregation {choices(schema, 'loss_aggregation')} != declared {tuple(aggregations)}")
    if set(functions) != set(losses):
        problems.append(f"declared without a function: {sorted(set(losses) - set(functions))}; "
                        f"a function without a declaration: {sorted(set(functions) - set(losses))}")
    for loss in losses.values():
        if loss.section and loss.section not in schema.model_fields:
            problems.append(f"{loss.name}'s section algorithm.{loss.section} is not in the schema")
        elif loss.section and not {"eps_low", "eps_high"} <= set(_model_of(schema, loss.section).model_fields):
            problems.append(f"algorithm.{loss.section} has no eps_low/eps_high for {loss.name}'s bounds")
        if loss.needs_bounds and not (loss.section and loss.example):
            problems.append(f"{loss.name} needs bounds but names no section or no example of it")
    return problems


def _model_of(schema, field: str):
    """The model of ``field`` (``X`` or ``X | None``)."""
    annotation = schema.model_fields[field].annotation
    return next(a for a in (annotation, *typing.get_args(annotation)) if isinstance(a, type) and issubclass(a, BaseModel))


def test_schema_declarations_and_functions_name_the_same_variants():
    assert registry_problems(AlgorithmConfig, POLICY_LOSSES, POLICY_LOSS_FNS, AGGREGATIONS) == []


def test_the_check_above_can_fail():
    """Each way the three can drift is caught."""
    def schema(losses=tuple(POLICY_LOSSES), aggregations=tuple(AGGREGATIONS)):
        return create_model("Probe", __base__=AlgorithmConfig, policy_loss=(typing.Literal[losses], "ppo"),
                            loss_aggregation=(typing.Literal[aggregations], "token_mean"))

    def found(*args) -> str:
        problems = registry_problems(*args)
        assert len(problems) == 1, problems
        return problems[0]

    # The schema's Literal written by hand and missing a variant, or listing one undeclared.
    assert "schema policy_loss" in found(schema(("ppo", "gspo")), POLICY_LOSSES, POLICY_LOSS_FNS, AGGREGATIONS)
    assert "schema loss_aggregation" in found(schema(aggregations=("token_mean",)), POLICY_LOSSES, POLICY_LOSS_FNS,
                                              AGGREGATIONS)
    # A declaration without its function, and a function without its declaration.
    extra = {**POLICY_LOSSES, "sapo": PolicyLoss("sapo", "probe", section=None)}
    assert "declared without a function: ['sapo']" in found(schema(tuple(extra)), extra, POLICY_LOSS_FNS, AGGREGATIONS)
    fns = {**POLICY_LOSS_FNS, "sapo": POLICY_LOSS_FNS["ppo"]}
    assert "without a declaration: ['sapo']" in found(AlgorithmConfig, POLICY_LOSSES, fns, AGGREGATIONS)
    # A section the schema lacks; one without bounds; bounds required but no example to show.
    for loss, message in ((PolicyLoss("sapo", "probe", section="sapo"), "algorithm.sapo is not in the schema"),
                          (PolicyLoss("sapo", "probe", section="kl"), "no eps_low/eps_high"),
                          (PolicyLoss("sapo", "probe", section="gspo", needs_bounds=True), "no example")):
        declared = {**POLICY_LOSSES, "sapo": loss}
        assert message in found(schema(tuple(declared)), declared, fns, AGGREGATIONS)


def test_register_refuses_an_undeclared_or_a_second_function():
    with pytest.raises(ValueError, match="not declared in rlvr.recipe.loss_variants"):
        register_policy_loss("sapo")
    with pytest.raises(ValueError, match="registered twice"):
        register_policy_loss("gspo")(lambda *args: args)
    assert POLICY_LOSS_FNS["gspo"].__name__ == "gspo_loss"


def test_docs_table_lists_every_policy_loss():
    section = (ROOT / "docs" / "training.md").read_text().split("## Loss variants", 1)[1].split("\n## ", 1)[0]
    header, *rows = re.findall(r"^\| `(\w+)`", section, re.M)
    assert header == "policy_loss" and rows == list(POLICY_LOSSES)
    for mode in AGGREGATIONS:
        assert f"`{mode}`" in section, mode


# ----------------------------------------------------------------- what every registered loss keeps
def cases():
    for name, loss in POLICY_LOSSES.items():
        yield name, (0.2, 0.28)
        if not loss.needs_bounds:
            yield name, None


@pytest.mark.parametrize("kind, bounds", list(cases()))
def test_every_registered_loss_keeps_the_learners_contract(kind, bounds):
    """Per-token loss and boolean indicators of the input's shape; exactly 0 loss and gradient
    where the advantage is 0 (what lets the learner skip such sequences), with ratios far out
    of bounds; a gradient where it is not; and bounds refused missing when the declaration
    needs them."""
    gen = torch.Generator().manual_seed(3)
    logp = -torch.rand(4, 5, generator=gen) * 3
    old = logp + torch.randn(4, 5, generator=gen)
    mask = torch.ones(4, 5)
    mask[3, 3:] = 0
    adv = torch.tensor([0.0, 1.0, -1.0, 0.0])
    a = logp.clone().requires_grad_()
    loss, low, high = surrogate_loss(kind, a, logp.detach(), adv, mask, bounds)  # at ratio 1: nothing clipped
    assert loss.shape == low.shape == high.shape == logp.shape and low.dtype == high.dtype == torch.bool
    (loss * mask).sum().backward()
    assert not (low | high).any() and bool(a.grad[1:3].abs().min() > 0)
    a.grad = None
    loss, low, high = surrogate_loss(kind, a, old, adv, mask, bounds)
    (loss * mask).sum().backward()
    assert torch.all(loss[[0, 3]] == 0) and torch.all(a.grad[[0, 3]] == 0) and not (low | high)[[0, 3]].any()
    if POLICY_LOSSES[kind].needs_bounds:
        with pytest.raises(ValueError, match="needs its clip bounds"):
            surrogate_loss(kind, a, old, adv, mask, None)


@pytest.mark.parametrize("kind", list(POLICY_LOSSES))
def test_every_declared_loss_has_its_rules_in_the_schema(kind):
    """The schema reads each declaration: a required section missing is named with its example;
    a one-epoch run of a ratio-based loss is refused; another variant's section is refused."""
    loss = POLICY_LOSSES[kind]
    section = {loss.section: {"eps_low": 0.1, "eps_high": 0.2}} if loss.section else {}
    algo = AlgorithmConfig(policy_loss=kind, ppo_epochs=2, **section)
    assert algo.policy_loss == kind
    assert loss_bounds(algo) == ((0.1, 0.2) if loss.section else None)
    if loss.needs_bounds:
        with pytest.raises(ValueError, match=re.escape(f"algorithm.{loss.section}: {loss.example}")):
            AlgorithmConfig(policy_loss=kind, ppo_epochs=2)
    if loss.multi_epoch:
        with pytest.raises(ValueError, match="ppo_epochs 1 is plain REINFORCE"):
            AlgorithmConfig(policy_loss=kind, **section)
    for other in POLICY_LOSSES.values():
        if other.needs_bounds and other.section != loss.section:
            with pytest.raises(ValueError, match=f"algorithm.{other.section} is set but policy_loss is {kind}"):
                AlgorithmConfig(policy_loss=kind, ppo_epochs=2, **section, **{other.section: {"eps_low": 0.1, "eps_high": 0.2}})


# --------------------------------------------------------- the other choices the tensor code reads
def test_every_schema_choice_is_computed_and_no_other():
    """Aggregations, KL estimators and importance-sampling modes: each choice the schema offers
    is one the tensor function computes (``auto`` is resolved before it), and another is refused."""
    values, mask = torch.rand(2, 3), torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    for mode, declared in AGGREGATIONS.items():
        assert torch.isfinite(aggregate(values, mask, mode, 5.0, 2.0, 4 if declared.norm_tokens else None))
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        aggregate(values, mask, "seq_sum", 5.0, 2.0)
    for estimator in choices(KLConfig, "estimator"):
        assert torch.isfinite(kl_estimate(values, values * 0.5, estimator)).all()
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_estimate(values, values, "k4")
    for mode in set(choices(ISCorrectionConfig, "mode")) - {"auto"}:
        importance_weights(values, values * 0.9, mask, mode, 2.0)
    with pytest.raises(ValueError, match="unknown importance-sampling correction"):
        importance_weights(values, values, mask, "auto", 2.0)
