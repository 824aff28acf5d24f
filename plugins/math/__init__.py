"""Math answer checker: reward 1.0 when the completion's final answer equals the gold answer.

Registered as reward ``math``. Dataset column ``answer``: a final answer (``"42"``,
``"\\frac{1}{2}"``) or a full solution (GSM8K ``... #### 42``, MATH ``... \\boxed{42}``).

Pipeline, per sample, in a worker process of :class:`rlvr.kit.workers.DeadlinePool`
(math-verify times out with ``signal.alarm``, which only works in a main thread,
and sympy can hang inside C code where no signal handler runs, so a worker that
overruns ``timeout`` is killed from outside and replaced; a softer SIGALRM limit
at 85% of it usually stops the work first and keeps the worker: ``rlvr.kit.deadline``):

1. extract the gold answer (``gold`` option) and the predicted answer (``extract``).
   The default, ``answer``, reads what the completion marks as its answer --
   ``<answer>..</answer>``, ``\\boxed{}`` or ``#### N``, whichever comes last -- and
   nothing else: a model earns no credit for a number it did not mark. ``auto`` also
   reads "the answer is ..." (up to where that answer ends) and else the last complete
   expression (a math environment, or plain text such as ``3+2``; never the 3 of
   ``$10^3$``), for scoring free-form output. Boxes joined by "and" or commas
   (``\\boxed{1}, \\boxed{2}``) are one answer, a list;
2. normalise both strings (math delimiters, ``\\dfrac``, ``\\mathrm{e}``, units,
   thousands separators, ``\\$``, degrees, scientific notation, repeating decimals,
   lists joined by words and the units of each item (one letter in ``\\text{ m}``, never a bare
   ``2m``), a worked computation ``1+18 = 19``
   (``500 + 500 = 1,000``) as its result, mixed numbers ``4 4/9``, a trailing ``\\\\`` or
   spacing command);
3. equal if identical after math-verify's normalisation; times of day (never ratios:
   ``12:00`` is not ``1:00``) and ratios part by part; plain numbers (``-12``,
   ``1,000``, ``0.25``, ``\\frac{3}{4}``) are compared exactly without sympy;
4. otherwise parse both with math-verify, each wrapped in ``\\boxed{}`` so that only
   its LaTeX parser runs on the whole string (its plain-text extractor takes the
   last number out of ``3x-y+13=0``); a parse is rejected unless it consumed the
   whole normalised string (math-verify's unit stripping turned
   ``1-\\frac{1}{\\mathrm{e}}`` into ``1-\\frac{1}{``, read as 1);
5. our own checks decide where they apply -- exact comparison of numbers
   (math-verify chops differences below 1e-15: ``1/2004!`` equalled ``1/2006!``),
   a relative tolerance of 2e-6 once a decimal appears, equations vs values (only
   ``x = 5`` may stand for ``5``, never ``x^2+1=0`` for ``0``), equations vs
   equations (equal up to a nonzero factor, so lines in any form), inequalities,
   tuples, sets, intervals and matrices element-wise, expression trees equal up to
   the order of terms and factors (before any evaluation: a reordered symbolic sum
   would take seconds at random points), symbolic expressions at random rational
   points with adaptive-precision evaluation; a decimal as written (``2.6667``, alone or in
   a tuple, interval or matrix) equals an exact rational value that it correctly rounds with
   4+ significant digits and within 1e-4 relative (``0.3333`` is ``\\frac{1}{3}``, ``0.333``
   is not), see ``rounding._decimal_rounds``; an irrational gold (``\\pi``, ``\\sqrt{2}``) wants
   its exact form, as in math-verify and MATH's graders (a full-precision float, 15+ digits,
   aside), unless ``approximate_irrational`` lets the same rule take ``3.1416`` for ``\\pi``
   (``3.14`` never), as Qwen2.5-Math's grader does; arithmetic on decimals of fewer
   than 10 significant digits never equals an irrational value;
6. ``math_verify.verify`` for everything else (text answers, sets vs relations, ...);
   Named values against an unnamed list (``x=2 and y=3`` vs ``(2, 3)``) are compared in order
   before all this (never as a set); a decimal equals what it rounds (see ``rounding.numbers_close``);
7. where the literal reading is not equal, other readings of either side: a gold
   ``label = value`` (``V_1:V_2=11:21``, ``AB=4, CD=5``) against a bare value, and a
   decimal comma (``1,22``) where the comma cannot separate thousands.

Percentages: an answer marked as one (``50\\%``, ``50 percent``) equals both 50 and 0.5, as in
math-verify; bare numbers are never rescaled (0.5 is not 50), unlike Qwen2.5-Math's grader,
whose ``include_percentage`` also takes 50 for 0.5.

Values: 1.0 equal, 0.0 different / no answer found / too slow (reason in
``info["why"]``), ``None`` when the gold answer cannot be parsed or the checker
itself failed.

The modules, in pipeline order: ``extract`` (the answer in a completion or a gold solution),
``normalise`` (string and LaTeX clean-up), ``rounding`` (plain numbers, decimals as roundings),
``parse`` (the math stack, one side parsed), ``compare`` (sympy checks, then math-verify),
``verdict`` (the literal and the other readings of a pair), ``worker`` (one sample under the
soft limit; ``check_answer``); this one holds the reward and its registration.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Sequence

from annotated_types import Ge, Gt

from rlvr import RlvrError, Score, hookimpl
from rlvr.kit import completion_text, last_boxed, map_with_deadline, shared_pool, soft_seconds, unfinished

from .extract import EXTRACT_MODES, GOLD_MODES, ExtractMode, GoldMode, boxed_answer, extract_answer, extract_gold
from .normalise import normalize_answer
from .parse import init_worker
from .worker import check_answer, score_item

__all__ = ["math_reward", "check_answer", "extract_answer", "extract_gold", "last_boxed", "boxed_answer",
           "normalize_answer", "EXTRACT_MODES", "GOLD_MODES", "rlvr_register_rewards"]


def _pool(workers: int = 0):
    """The shared worker pool of that size (see :func:`rlvr.kit.shared_pools.shared_pool`).

    ``workers=0``: $RLVR_MATH_WORKERS, else the CPU count clamped to 2..8.
    """
    if workers <= 0:
        size = os.environ.get("RLVR_MATH_WORKERS")
        try:
            workers = max(1, int(size)) if size else 0
        except ValueError:
            raise RlvrError(f"RLVR_MATH_WORKERS must be an integer, got {size!r}") from None
    # 2 GiB of growth per worker: far more than any sane answer needs, and a cap
    # on what a pathological one can take from the trainer beside it.
    return shared_pool(workers, init_worker, memory_limit_mb=2048)


def math_reward(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    completion_ids: Sequence[Any] | None,
    *,
    answer: Sequence[Any],
    extract: ExtractMode = "answer",
    gold: GoldMode = "auto",
    timeout: Annotated[float, Gt(0)] = 5.0,
    max_answer_chars: Annotated[int, Gt(0)] = 1000,
    workers: Annotated[int, Ge(0)] = 0,
    approximate_irrational: bool = False,
) -> list[Score]:
    """1.0 if the completion's final answer equals the gold ``answer``, else 0.0.

    Options: ``extract`` = "answer" (the default: the last of ``<answer>..</answer>``,
    ``\\boxed{}``, ``#### N``; never a guess from free text, so a model earns nothing
    for an answer it did not mark), "boxed", "tag", "hash" (that mark only),
    "last_number", or "auto" (the marks, "the answer is ...", else the last complete
    expression: for scoring other models' free-form output); ``gold`` = "auto"
    (``####``, else ``\\boxed{}``, else "The final answer is", else the whole string),
    "hash", "boxed" or "raw"; ``timeout`` = hard limit in seconds per sample;
    ``max_answer_chars`` = longer extracted answers score 0; ``workers`` = checker
    processes (0: automatic, see :func:`_pool`); ``approximate_irrational`` = a decimal that
    correctly rounds an irrational gold (4+ significant digits, within 1e-4 relative: 3.1416
    for \\pi) scores 1, as in Qwen2.5-Math's grader; off, the gold's exact form is wanted
    (math-verify, MATH), so a policy is not rewarded for approximating instead of solving.
    """
    if extract not in EXTRACT_MODES:
        raise RlvrError(f"math reward: extract must be one of {', '.join(EXTRACT_MODES)}, got {extract!r}")
    if gold not in GOLD_MODES:
        raise RlvrError(f"math reward: gold must be one of {', '.join(GOLD_MODES)}, got {gold!r}")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise RlvrError(f"math reward: timeout must be a positive number of seconds, got {timeout!r}")
    if len(answer) != len(completions):
        raise RlvrError(f"math reward: {len(completions)} completions but {len(answer)} answers")
    # The worker stops itself a little before the hard limit, keeping the process (and its
    # warm caches) alive; the hard limit catches what a signal cannot interrupt.
    soft = soft_seconds(timeout)
    items = []
    for completion, gold_value in zip(completions, answer):
        gold_text = "" if gold_value is None else str(gold_value)
        items.append((completion_text(completion), gold_text, extract, gold, int(max_answer_chars), soft,
                      bool(approximate_irrational)))
    results = map_with_deadline(_pool(int(workers)), score_item, items, timeout=float(timeout), reward="math")
    scores = []
    for result in results:
        if result.ok:
            scores.append(Score(result.value["value"], result.value["info"]))
        else:
            value, why = unfinished(result, timeout, "checking")
            scores.append(Score(value, {"why": why}))
    return scores


@hookimpl
def rlvr_register_rewards(register):
    register(
        "math",
        math_reward,
        description="1.0 if the final answer (<answer>, \\boxed{} or ####; extract=auto also reads free text) "
        "equals the gold answer; "
        "math-verify with exactness fixes, hard time limit per sample",
    )
