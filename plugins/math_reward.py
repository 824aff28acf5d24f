"""Math answer checker: reward 1.0 when the completion's final answer equals the gold answer.

Registered as reward ``math``. Dataset column ``answer``: a final answer (``"42"``,
``"\\frac{1}{2}"``) or a full solution (GSM8K ``... #### 42``, MATH ``... \\boxed{42}``).

Pipeline, per sample, in a worker process of :class:`rlvr.kit.workers.DeadlinePool`
(math-verify times out with ``signal.alarm``, which only works in a main thread,
and sympy can hang inside C code where no signal handler runs, so a worker that
overruns ``timeout`` is killed from outside and replaced; a softer SIGALRM limit
at 85% of it usually stops the work first and keeps the worker):

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
   a tuple, interval or matrix) equals an exact value, rational or irrational, that it
   correctly rounds with 4+ significant digits and within 1e-4 relative (``3.1416`` is
   ``\\pi``, ``3.14`` is not), see ``_decimal_rounds``; arithmetic on decimals of fewer
   than 10 significant digits never equals an irrational value;
6. ``math_verify.verify`` for everything else (text answers, sets vs relations, ...);
   Named values against an unnamed list (``x=2 and y=3`` vs ``(2, 3)``) are compared in order
   before all this (never as a set); a decimal equals what it rounds (see ``_numbers_close``);
7. where the literal reading is not equal, other readings of either side: a gold
   ``label = value`` (``V_1:V_2=11:21``, ``AB=4, CD=5``) against a bare value, and a
   decimal comma (``1,22``) where the comma cannot separate thousands.

Percentages: an answer marked as one (``50\\%``, ``50 percent``) equals both 50 and 0.5, as in
math-verify; bare numbers are never rescaled (0.5 is not 50), unlike Qwen2.5-Math's grader,
whose ``include_percentage`` also takes 50 for 0.5.

Values: 1.0 equal, 0.0 different / no answer found / too slow (reason in
``info["why"]``), ``None`` when the gold answer cannot be parsed or the checker
itself failed.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from fractions import Fraction
from typing import Annotated, Any, Literal, Sequence, get_args

from annotated_types import Ge, Gt

from rlvr import RlvrError, Score, hookimpl
from rlvr.kit import completion_text

__all__ = ["math_reward", "check_answer", "extract_answer", "extract_gold", "last_boxed", "boxed_answer",
           "rlvr_register_rewards"]

# The options' allowed values, as annotations (the option checker reads them) and as tuples.
ExtractMode = Literal["answer", "boxed", "hash", "tag", "last_number", "auto"]
GoldMode = Literal["auto", "hash", "boxed", "raw"]
EXTRACT_MODES = get_args(ExtractMode)
GOLD_MODES = get_args(GoldMode)

# --------------------------------------------------------------------------- extraction
# Pure string work, no math imports: usable and testable in the host process. Every finder
# is linear in the text (completions of megabytes must not stall the host).

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BRACE_RE = re.compile(r"\\.|[{}]", re.DOTALL)
_BOX_TOKEN_RE = re.compile(r"[^\s$]+")


def _balanced_group(text: str, open_index: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_index`` (``\\{``/``\\}`` skipped), or None."""
    depth = 0
    for m in _BRACE_RE.finditer(text, open_index):
        token = m.group(0)
        if token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
            if depth == 0:
                return m.start()
    return None


def _box_at(text: str, start: int) -> tuple[str, int] | None:
    """(content, end) of the box whose command starts at ``start``; None if it is not closed."""
    m = _BOX_RE.match(text, start)
    i = m.end()
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] == "{":
        end = _balanced_group(text, i)
        return None if end is None else (text[i + 1 : end].strip(), end + 1)
    token = _BOX_TOKEN_RE.match(text, i)  # "\boxed 5" is valid TeX
    if token is None:
        return None
    return token.group(0).rstrip("."), token.end()


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces kept), or of ``\\boxed 5``.

    ``None`` when there is none or the last one is not closed (a cut-off answer).
    """
    match = None
    for match in _BOX_RE.finditer(text):
        pass
    if match is None:
        return None
    box = _box_at(text, match.start())
    return None if box is None else box[0]


_GAP_TEXT_RE = re.compile(r"\\(?:text|textrm|textnormal|textbf|textit|mathrm|mbox)\s*\{([^{}]*)\}")
_GAP_NOISE_RE = re.compile(r"\\[()\[\]]|\$|\\(?:quad|qquad|[,;:! ])|~|\\\\|\*\*")
# The label of the next box: "... and \( y_2 = \boxed{...}".
_GAP_LABEL_RE = re.compile(r"(?:[A-Za-z]\w*(?:_\{?\w+\}?)?|[A-Za-z]+\([^()]*\))\s*=$")
_GAP_JOIN_RE = re.compile(r"[,;&]?|[,;]?\s*(?:[a-z()]+\s+){0,4}(?:and|or)")


def _joins(gap: str) -> bool:
    """Do two boxes separated by ``gap`` form one answer (``\\boxed{1}, \\boxed{2}``,
    ``\\boxed{(2,2)} \\text{ and } \\boxed{(6,2)}``, ``\\boxed{1} papers and \\boxed{2}``)?
    Not when the gap is a sentence: the first box is then a draft or an intermediate result."""
    if len(gap) > 80:
        return False
    g = _GAP_NOISE_RE.sub(" ", _GAP_TEXT_RE.sub(r" \1 ", gap)).strip()
    g = _GAP_LABEL_RE.sub("", g).strip()
    return bool(_GAP_JOIN_RE.fullmatch(" ".join(g.split()).lower()))


def _boxed_span(text: str) -> tuple[str, int] | None:
    """The answer in the last box, or in the last run of boxes joined by "and", "," ...
    (then their contents joined by commas: a set or list), with the end of the last box."""
    starts = [m.start() for m in _BOX_RE.finditer(text)]
    if not starts:
        return None
    last = _box_at(text, starts[-1])
    if last is None:
        return None
    parts, first_start, end = [last[0]], starts[-1], last[1]
    for start in reversed(starts[-20:-1]):
        box = _box_at(text, start)
        if box is None or box[1] > first_start or not _joins(text[box[1] : first_start]):
            break
        parts.insert(0, box[0])
        first_start = start
    return ", ".join(parts), end


def boxed_answer(text: str) -> str | None:
    """Content of the last ``\\boxed{}`` -- or of the last boxes joined into one answer."""
    found = _boxed_span(text)
    return None if found is None else found[0]


_HASH_RE = re.compile(r"####[ \t]*([^\n]*)")
_NUMBER_RE = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")


def _hash_span(text: str) -> tuple[str, int] | None:
    found = None
    for found in _HASH_RE.finditer(text):
        pass
    if found is None:
        return None
    answer = found.group(1).strip().rstrip(".").strip()
    return (answer, found.end()) if answer else None


def _hash_answer(text: str) -> str | None:
    found = _hash_span(text)
    return None if found is None else found[0]


def _tag_span(text: str) -> tuple[str, int] | None:
    # rfind rather than a regex: linear even for a text full of unclosed <answer> tags.
    lower = text.lower()
    end = lower.rfind("</answer>")
    start = lower.rfind("<answer>", 0, max(end, 0))
    if end < 0 or start < 0:
        return None
    inner = text[start + len("<answer>") : end].strip()
    boxed = boxed_answer(inner)
    answer = boxed if boxed is not None else inner
    return (answer, end + len("</answer>")) if answer else None


# ---- math environments and plain-text expressions

# $$..$$, \[..\] and \(..\), $..$; the inline ones end at a line break (as in math-verify).
_MATH_TOKEN_RE = re.compile(r"\\\\|\\\$|\$\$|\$|\\\(|\\\)|\\\[|\\\]|\n")
_CLOSER = {"$$": "$$", "$": "$", "\\(": "\\)", "\\[": "\\]"}
_COMMAND_ARG_RE = re.compile(r"\\[A-Za-z]+\s*(?:\{[^{}]*\})?")
_WORD_RE = re.compile(r"(?<![A-Za-z])[A-Za-z]{3,}")


def _is_currency(text: str, after: int) -> bool:
    """A ``$`` before a digit with words (outside LaTeX commands) before the next ``$`` or line end."""
    if after >= len(text) or not text[after].isdigit():
        return False
    close = text.find("$", after)
    line = text.find("\n", after)
    stop = min(x for x in (close, line, len(text)) if x >= 0)
    return bool(_WORD_RE.search(_COMMAND_ARG_RE.sub(" ", text[after:stop])))


def _math_envs(text: str, start: int = 0) -> list[tuple[int, int, str]]:
    """(start, end, content) of the math environments in ``text[start:]``, in order, in one pass.

    A ``$`` followed by a digit and, before the next ``$``, by words is a currency sign
    ("costs $10 per pound, so $\\frac{7}{9} \\times 10$"), not an opening."""
    envs, opened, open_at, content_at = [], None, 0, 0
    for m in _MATH_TOKEN_RE.finditer(text, start):
        token = m.group(0)
        if opened is None:
            if token in _CLOSER:
                if token == "$" and _is_currency(text, m.end()):
                    continue
                opened, open_at, content_at = token, m.start(), m.end()
        elif token == _CLOSER[opened] or (opened == "$" and token == "$$"):
            envs.append((open_at, m.end(), text[content_at : m.start()].strip()))
            opened = None
        elif token == "\n" and opened in ("$", "\\("):
            opened = None
    return [env for env in envs if env[2]]


# Bounded repetitions: an unbounded group would rescan a long run of "111 111 ..." from every
# group it could start at (quadratic time on adversarial text).
_NUM = r"(?:\d{1,3}(?:,\d{3}){1,10}(?![\d,])|\d{1,3}(?: \d{3}){1,10}(?![\d ])|\d+)(?:[.,]\d+)?|\.\d+"

_OPERAND = rf"[-+]?(?:{_NUM}|\([-+*/^.,\s\d]*\d[-+*/^.,\s\d]*\))"
_PLAIN_EXPR_RE = re.compile(rf"(?<![\w.]){_OPERAND}(?:\s*(?:\*\*|[-+*/^×÷])\s*{_OPERAND})*(?:\s*%)?(?![\d])")
_MARKUP = set("\\{}^_")
_RUN_CHARS = set("0123456789+-*/^_=().,|!<>{}[] \t'")


def _math_run(text: str, start: int, end: int, lo: int, hi: int) -> tuple[str, int] | None:
    """Widen ``text[start:end]`` to the LaTeX written around it outside ``$``: ``\\frac{3}{4}``
    rather than its 4, ``x = 2^{10}`` rather than 10. Words of two letters or more end it."""

    def letters_left(i: int) -> int:
        j = i
        while j > lo and text[j - 1].isalpha():
            j -= 1
        return j

    i = start
    while i > lo:
        c = text[i - 1]
        if c.isalpha():
            j = letters_left(i)
            if j > lo and text[j - 1] == "\\":
                i = j - 1
            elif i - j == 1:
                i = j
            else:
                break
        elif c in _RUN_CHARS or c == "\\":
            i -= 1
        else:
            break
    k = end
    while k < hi:
        c = text[k]
        if c == "\\" and k + 1 < hi and text[k + 1].isalpha():
            k += 1
            while k < hi and text[k].isalpha():
                k += 1
        elif c.isalpha():
            j = k
            while j < hi and text[j].isalpha():
                j += 1
            if j - k > 1:
                break
            k = j
        elif c in _RUN_CHARS:
            k += 1
        else:
            break
    run = text[i:k].strip(" \t.,;:")
    if not run or run.count("{") != run.count("}") or run.count("(") != run.count(")"):
        return None
    return run, i + len(text[i:k]) - len(text[i:k].lstrip(" \t.,;:")) + len(run)


def _plain_candidate(text: str, m: re.Match, lo: int, hi: int) -> tuple[str, int]:
    """A plain-text expression, widened when it touches LaTeX markup."""
    before = text[m.start() - 1] if m.start() > lo else ""
    after = text[m.end()] if m.end() < hi else ""
    if before in _MARKUP or after in _MARKUP or _depth_at(text[lo : m.start()], m.start() - lo) > 0:
        run = _math_run(text, m.start(), m.end(), lo, hi)
        if run is not None:
            return run
    return m.group(0), m.end()


def _last_expression(text: str, start: int = 0, end: int | None = None) -> tuple[str, int] | None:
    """The last complete expression in ``text[start:end]``: a math environment's content, or a
    plain-text expression (``3+2``, ``1,000.99``, ``-3/4``, ``\\frac{3}{4}``) outside them; never a
    piece of one (``10^3``, not 3)."""
    end = len(text) if end is None else end
    envs = _math_envs(text[:end], start)
    best, position = ((envs[-1][2], envs[-1][1]), envs[-1][1]) if envs else (None, start)
    last = None
    for last in _PLAIN_EXPR_RE.finditer(text, position, end):
        pass
    if last is not None:
        best = _plain_candidate(text, last, position, end)
    return best


def _last_number(text: str) -> str | None:
    # Look at the tail first: a long text has a million numbers but we want the last one.
    for window in (4096, len(text)):
        tail = text[-window:]
        last = None
        for last in _NUMBER_RE.finditer(tail):
            pass
        if last is not None and (last.start() > 0 or window >= len(text)):
            return last.group(0)
        if window >= len(text):
            break
    return None


# ---- "the answer is ..."

# "answer is", "answers are" (several answers: "The answers are 3 cm and 5 cm").
_ANSWER_WORD_RE = re.compile(r"(?i)\banswers?\b")
_ANSWER_LEAD_RE = re.compile(
    r"(?i)(?:\s*(?:\*\*)?\s*(?:(?:is|are|was|were|would\s+be|will\s+be|should\s+be|equals?)\b|:|=)){1,3}\s*(?:\*\*)?[ \t]*")

# Where an answer stated in a sentence ends: a full stop, a line break, or a clause that
# explains it ("x = 5, since ...", "42 because ...").
_SENTENCE_END_RE = re.compile(
    r"\n|\.(?=\s|$|I\s+hope\b)|\s+I hope\b|\*\*|,?\s+(?:because|since|which|where|as|so|but|when|if|hence|thus|therefore)\b")
_VERDICT_RE = re.compile(r"(?i)(?:correct|right|true|the\s+(?:correct\s+|right\s+|final\s+)?(?:answer|choice|option))\b")
_IS_RE = re.compile(r"\s(?:is|are|equals|=)\s")
_WORDS_RE = re.compile(r"[A-Za-z]{2,}(?:\s+[A-Za-z]{2,}){0,3}")


def _sentence_end(text: str, start: int, limit: int = 400) -> int:
    """Where the sentence from ``start`` ends: a line break or a full stop outside math and braces."""
    stop = min(len(text), start + limit)
    envs = _math_envs(text[:stop], start)
    i = start
    for m in _SENTENCE_END_RE.finditer(text, start, stop):
        inside = any(s < m.start() < e for s, e, _ in envs) or _depth_at(text[i:m.start()], m.start() - i) > 0
        if not inside and m.start() > start:
            return m.start()
    return stop


def _depth_at(s: str, index: int) -> int:
    depth, i = 0, 0
    while i < index:
        if s[i] == "\\":
            i += 2
            continue
        depth += s[i] == "{"
        depth -= s[i] == "}"
        i += 1
    return depth


# "3 cm and 5 cm", "2 apples, 3 pears": several numbers, each with its unit words ("and"/"or"
# join them, never a unit). Read whole: the last number alone would drop the other answers.
_QTY = rf"[-+]?(?:{_NUM})(?:\s*/\s*\d+)?(?:\s+(?!(?:and|or)\b)[A-Za-z]{{2,}}){{0,3}}"
_QUANTITY_LIST_RE = re.compile(rf"{_QTY}(?:\s*(?:,\s*(?:(?:and|or)\s+)?|\s+(?:and|or)\s+){_QTY}){{1,20}}")


def _quantity_list(text: str) -> str | None:
    """``text`` if it is nothing but a list of quantities (``3 cm and 5 cm``), else None."""
    s = text.strip().rstrip(".").strip()
    return s if len(s) <= 300 and _QUANTITY_LIST_RE.fullmatch(s) else None


_QUOTES_RE = re.compile(r"[ \t]*(?:\\?[\"'`]+[ \t]*)?")


def _leading_answer(text: str, start: int, depth: int = 0) -> tuple[str, int] | None:
    """The answer that ``text[start:]`` begins with, ending where the answer ends: a math
    environment, a box, a short phrase (``5 apples``, ``(C)``), or, in a sentence such as
    "The largest $n$ is 34", what follows "is"; else the sentence's last expression."""
    lead = _QUOTES_RE.match(text, start)
    start = lead.end()
    if _BOX_RE.match(text, start):
        return _box_at(text, start)
    envs = _math_envs(text[: start + 2000], start)
    if envs and envs[0][0] == start:
        parts, end = [envs[0][2]], envs[0][1]
        for env_start, env_end, content in envs[1:]:  # "$12$ and $13$": one answer
            if not _joins(text[end:env_start]):
                break
            parts.append(content)
            end = env_end
        joined = ", ".join(parts)
        return (boxed_answer(joined) or joined) if _BOX_RE.search(joined) else joined, end
    end = _sentence_end(text, start)
    sentence = text[start:end].strip()
    if not sentence:
        return None
    if _quantity_list(sentence):
        return sentence.rstrip(".,"), end
    lead = _PLAIN_EXPR_RE.match(text, start)
    if lead and (lead.end() >= end or _WORDS_RE.fullmatch(text[lead.end() : end].strip(" .,"))):
        return text[start:end].strip().rstrip(".,"), end  # "42", "5 apples": units go in normalisation
    if len(sentence) <= 30 and not _IS_RE.search(sentence) and "$" not in sentence:
        return sentence.rstrip(".,"), end
    verb = _IS_RE.search(text, start, end)
    if verb and _VERDICT_RE.match(text, verb.end()):  # "(C) is correct": the answer comes first
        return text[start : verb.start()].strip(), verb.start()
    if verb and depth == 0:
        return _leading_answer(text, verb.end(), depth + 1)
    return _last_expression(text, start, end)


def _phrase_span(text: str) -> tuple[str, int] | None:
    """The answer after the last "answer is" / "answer:" / "Final Answer: ... is" that has one."""
    tail_start = max(0, len(text) - 20000)
    words = list(_ANSWER_WORD_RE.finditer(text, tail_start))
    for word in reversed(words[-5:]):
        lead = _ANSWER_LEAD_RE.match(text, word.end())
        if lead is None or _CHECKING_RE.search(text, max(0, word.start() - 40), word.start()):
            continue  # "answer the question", "We may check our answer: ..."
        found = _leading_answer(text, lead.end())
        if found is not None and found[0] and not _CHECKED_RE.fullmatch(found[0]):
            return found
        return None  # the last statement about the answer says nothing of it: no answer here
    return None


# "We may check our answer: ..., so our answer is correct.": remarks about the answer.
_CHECKING_RE = re.compile(r"(?i)\b(?:check|checking|verify|verifying|confirm|test|testing)\s+(?:\w+\s+){0,2}$")

_CHECKED_RE = re.compile(r"(?i)(?:(?:not|also|indeed|definitely)\s+)?(?:in)?correct|right|wrong|(?:in)?valid|verified|confirmed")



# Chat-template tokens: what follows one is another turn, not this completion's answer.
_SPECIAL_TOKEN_RE = re.compile(r"<\|(?:im_start|im_end|endoftext|eot_id|end_of_text|end|user|assistant)\|>")


def _final_part(text: str) -> str:
    """The part after the last ``</think>`` (reasoning may contain drafts of answers), up to
    the first chat-template token after it."""
    cut = text.rfind("</think>")
    text = text if cut < 0 else text[cut + len("</think>") :]
    m = _SPECIAL_TOKEN_RE.search(text)
    while m is not None and not text[: m.start()].strip():  # a leading token: skip it
        text = text[m.end() :]
        m = _SPECIAL_TOKEN_RE.search(text)
    return text if m is None else text[: m.start()]


_BARE_WORD_RE = re.compile(r"(?<![A-Za-z])[A-Za-z]{2,}")
_DELIMITED_RE = re.compile(r"[\n$]|\\[(\[]")  # line breaks, math delimiters: not a bare answer


def _bare_answer(text: str) -> tuple[str, int] | None:
    """A completion that is nothing but an answer (``(x-2)(x+2)``, ``\\frac{1}{2}``, no words):
    all of it, not its last number."""
    s = text.strip()
    if _quantity_list(s):  # "3 cm and 5 cm": words, but only units between numbers
        return s.rstrip("."), len(text)
    if 0 < len(s) <= 200 and not _DELIMITED_RE.search(s) and not _BARE_WORD_RE.search(_COMMAND_ARG_RE.sub(" ", s)):
        return s, len(text)
    return None


def _marked_span(text: str, phrases: bool) -> tuple[str, int] | None:
    """The marked answer that ends last: ``<answer>``, ``\\boxed{}``, ``####`` (and, if
    ``phrases``, "the answer is ..."). Ties go to the more explicit mark."""
    best = None
    finders = (_tag_span, _boxed_span, _hash_span) + ((_phrase_span,) if phrases else ())
    for finder in finders:
        found = finder(text)
        if found is not None and (best is None or found[1] > best[1]):
            best = found
    return best


def extract_answer(text: str, mode: str = "answer") -> str | None:
    """The final answer in a completion, by ``mode`` (see ``EXTRACT_MODES``), or None.

    - ``answer``: what the completion marks as its answer -- ``<answer>..</answer>``,
      ``\\boxed{}`` (several joined by "and"/"," make one list) or ``#### N``, whichever
      comes last; nothing is guessed from free text.
    - ``boxed`` / ``tag`` / ``hash``: that mark only. ``last_number``: the last number.
    - ``auto``: the marks above or "the answer is ..." (the last of them), else the last
      complete expression -- a math environment or a plain-text expression, never a
      piece of one (``$10^3$`` gives ``10^3``, not 3).
    """
    text = _final_part(text)
    if mode == "answer":
        found = _marked_span(text, phrases=False)
    elif mode == "boxed":
        found = _boxed_span(text)
    elif mode == "hash":
        found = _hash_span(text)
    elif mode == "tag":
        found = _tag_span(text)
    elif mode == "last_number":
        return _last_number(text)
    elif mode == "auto":
        found = (_marked_span(text, phrases=True) or _bare_answer(text)
                 or _last_expression(text, max(0, len(text) - 20000)))
    else:
        raise ValueError(f"unknown extract mode {mode!r}")
    return None if found is None else found[0]


def extract_gold(text: str, mode: str = "auto") -> str | None:
    """The gold final answer by ``mode`` (see ``GOLD_MODES``): ``auto`` takes the answer after
    ``####`` (commas dropped), else in the last ``\\boxed{}`` (or joined boxes), else after
    "The final answer is" in a solution text, else the whole string."""
    text = text.strip()
    if mode in ("auto", "hash") and "####" in text:
        answer = _hash_answer(text)
        return None if answer is None else re.sub(r"(?<=\d),(?=\d{3}\b)", "", answer)
    if mode == "hash":
        return None
    if mode in ("auto", "boxed") and _BOX_RE.search(text):
        return boxed_answer(text)
    if mode == "boxed":
        return None
    if mode == "auto" and _ANSWER_WORD_RE.search(text):
        found = _phrase_span(text)
        if found is not None:
            return found[0]
    return text or None


# --------------------------------------------------------------------------- normalisation

_DELIMS = ((r"$$", r"$$"), ("$", "$"), (r"\(", r"\)"), (r"\[", r"\]"))
_FONT_LETTER_RE = re.compile(r"\\(?:mathrm|mathit|mathbf|mathsf|mathtt|mathnormal|textrm|textit|textbf|text|operatorname)\s*\{\s*([A-Za-z])\s*\}")
# A trailing degree sign is a unit (30^\circ = 30); inside trigonometry it is a conversion,
# which math-verify drops (it reads \cos 60^\circ as cos(60 radians)).
_TRIG_RE = re.compile(r"\\(?:sin|cos|tan|cot|sec|csc)(?![A-Za-z])")
_DEGREE_ARG_RE = re.compile(r"(\d+(?:\.\d+)?)\s*\^\s*\{?\s*\\circ\s*\}?")
_DEGREE_RE = re.compile(r"(?:\^\s*\{?\s*\\circ\s*\}?|\\degree|°)\s*(?:\\text\s*\{\s*[CF]?\s*\}|[CF])?\s*$")
_THIN_SEP_RE = re.compile(r"(?<=\d)(?:\\,|\\;|\\:|\\ |~|\{,\})(?=\d{3}(?!\d))")
_SPACING_RE = re.compile(r"(?<!\\)\\(?:,|;|:|\s|quad|qquad)|~")  # not the "\\" row break
_TEXT_NUMBER_RE = re.compile(r"\\(?:text|textrm|textnormal|textbf|mbox|mathrm)\s*\{\s*([-+]?\.?\d[^{}]*)\}")
_SPACED_THOUSANDS_RE = re.compile(r"[-+]?\d{1,3}(?: \d{3})+(?:\.\d+)?")
_SCI_RE = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*[eE]\s*([-+]?\d+)")
_REPEATING_RE = re.compile(r"(-?)(\d*)\.(\d*)\\overline\s*\{(\d+)\}")
_UNIT_TEXT_RE = re.compile(
    r"\\(?:text|textrm|textnormal|textit|textbf|textsf|textup|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}\s*(?:\^\s*\{?\s*[23]\s*\}?)?\s*$"
)
_UNIT_WORDS_RE = re.compile(r"(?:(?<=[\d}])|(?<=\\pi))\s+([A-Za-z]{2,}(?:\s+[A-Za-z]{2,})*)\.?\s*(?:\^\s*\{?\s*[23]\s*\}?)?\s*$")
# Words that are mathematics, not units, when they trail an expression.
_MATH_WORDS = {"pi", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "inf", "infinity",
               "percent", "percentage", "pct", "and", "or", "mod", "degrees", "degree", "radians", "rad",
               "am", "pm"}  # 12:00 PM: a time of day keeps its half


# What may trail an answer and carries nothing: a row break \\ ending a display line, a lone
# backslash (left of "\$" or "\,"), spacing commands and "~": 5\\ , 12\, , \boxed{5\quad}.
_TRAILING_NOISE_RE = re.compile(
    r"(?:~|\\\\|\\(?:quad|qquad|enspace|enskip|thinspace|medspace|thickspace|hfill)(?![A-Za-z])"
    r"|\\(?:hspace|hskip|vspace)\*?\s*\{[^{}]*\}|\\[,;:!]|\\)$")


def _strip_trailing_noise(s: str) -> str:
    """One token at a time from the end (a single regex over a run of spaces would be quadratic)."""
    s = s.rstrip()
    for _ in range(20):
        m = _TRAILING_NOISE_RE.search(s)
        if m is None:
            break
        s = s[: m.start()].rstrip()
    return s


# A mixed number: a whole number, a space, a proper fraction ("4 4/9", "2 \frac{1}{3}", "-1 \frac12").
# Only a proper fraction makes one: "2 4/3" and "2 3" stay ambiguous (and unparsed), and the
# space is never read as a product ("4 4/9" is 40/9, not 16/9).
_MIXED_RE = re.compile(
    r"([-+]?)(\d+)\s+(?:(\d+)\s*/\s*(\d+)|\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}|\\frac\s*(\d)(\d))")


def _mixed_number(s: str) -> str:
    """``4 4/9`` -> ``\\frac{40}{9}``, ``-2 \\frac{1}{3}`` -> ``-\\frac{7}{3}``; anything else unchanged."""
    m = _MIXED_RE.fullmatch(s.strip())
    if m is None:
        return s
    numerator, denominator = [int(x) for x in m.groups()[2:] if x is not None]
    if not 0 < numerator < denominator:
        return s
    total = int(m.group(2)) * denominator + numerator
    return f"{'-' if m.group(1) == '-' else ''}\\frac{{{total}}}{{{denominator}}}"


def _strip_delimiters(s: str) -> str:
    changed = True
    while changed:
        changed = False
        s = s.strip()
        for left, right in _DELIMS:
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                s = s[len(left) : len(s) - len(right)]
                changed = True
                break
    return s


def _strip_units(s: str) -> str:
    """Drop trailing units: ``5\\text{ cm}^2``, ``12 square feet``; never text inside braces."""
    for _ in range(2):
        m = _UNIT_TEXT_RE.search(s)
        if m and s[: m.start()].strip() and _depth_at(s, m.start()) == 0:
            s = s[: m.start()].rstrip()
            continue
        m = _UNIT_WORDS_RE.search(s)
        if m and not (set(m.group(1).lower().split()) & _MATH_WORDS) and _depth_at(s, m.start()) == 0:
            s = s[: m.start()].rstrip()
            continue
        break
    return s


# A one-letter unit in text mode after a number, ending the answer or one of its items:
# "3\text{ m}, 5\text{ m}", "12\textrm{ s}", "5 \text{g}^2". Text mode marks a word, not a
# variable (a bare "2m" stays 2*m); \mathrm{..} is left alone (\mathrm{e}, \mathrm{i}, \mathrm{d}x),
# and so are e and i in any font.
_LETTER_UNIT_RE = re.compile(
    r"(?<=[\d}.])\s*\\(?:text|textrm|textnormal|textup|mbox)\s*\{\s*[A-DF-HJ-Za-df-hj-z]\s*\}"
    r"(?:\s*\^\s*\{?\s*[23]\s*\}?)?"
    r"(?=\s*(?:$|[,;]|(?:and|or)\b|\\(?:text|textrm|textnormal|mbox)\s*\{\s*(?:and|or)\s*\}))")


def _strip_letter_units(s: str) -> str:
    """``3\\text{ m}, 5\\text{ m}`` -> ``3, 5`` (top level only: ``\\{2\\text{ m}\\}`` is kept)."""
    if "\\" not in s:
        return s
    out, last = [], 0
    for m in itertools.islice(_LETTER_UNIT_RE.finditer(s), 50):  # _depth_at is linear: a bounded count
        if _depth_at(s, m.start()) == 0:
            out.append(s[last : m.start()])
            last = m.end()
    return "".join(out) + s[last:] if out else s


# Separators of list items; not a thousands comma ("x = 1,000" is one item).
_ITEM_SEP_RE = re.compile(r";|,(?!\d{3}(?![\d.]))")


def _strip_item_units(s: str) -> str:
    """``3\\text{ cm}, 5\\text{ cm}`` -> ``3, 5``: the units of each item of a list (the whole-answer
    pass only sees the last one). Unchanged unless an item lost a unit."""
    items = _top_level(s, _ITEM_SEP_RE)
    if len(items) < 2 or len(items) > 50:
        return s
    stripped = [_strip_units(item.strip()) for item in items]
    if all(a == b.strip() for a, b in zip(stripped, items)) or not all(stripped):
        return s
    return ", ".join(stripped)


def _repeating_to_fraction(m: re.Match) -> str:
    sign, whole, fixed, period = m.group(1), m.group(2) or "0", m.group(3), m.group(4)
    # x = whole.fixed(period)(period)...  =>  x = (whole fixed period - whole fixed) / (10^k (10^p - 1))
    denominator = (10 ** len(period) - 1) * 10 ** len(fixed)
    numerator = int(whole + fixed + period) - int(whole + fixed)
    return f"{sign}\\frac{{{numerator}}}{{{denominator}}}"


_UNICODE = str.maketrans({"\u2212": "-", "\u2013": "-", "\u00d7": "\\times ", "\u00f7": "\\div ", "\u00b7": "\\cdot ",
                          "\u22c5": "\\cdot ", "\u03c0": "\\pi ", "\u221e": "\\infty ", "\u221a": "\\sqrt ", "\u00a0": " ",
                          "\u2009": " ", "\u202f": " ", "\u2264": "\\le ", "\u2265": "\\ge ", "\u2260": "\\ne "})


# "11,\! 111": a thousands separator with a negative thin space, then a space; "14{, }916".
_BANG_SEP_RE = re.compile(r"(?<=\d)\s*(?:,\s*\\!|\{\s*,\s*\})\s*(?=\d{3}(?!\d))")
# "$125$ miles": a math part followed by words (the gold answers of some data sets).
_MATH_THEN_WORDS_RE = re.compile(r"\$([^$]+)\$\s*([A-Za-z][A-Za-z .]*)")
# "12\text{ and }13", "19, 46, and 82": items of a list joined by words.
_TEXT_JOIN_RE = re.compile(r"\s*,?\s*\\(?:text|textrm|textnormal|mbox|mathrm)\s*\{\s*(?:and|or)\s*\}\s*,?\s*")
_WORD_JOIN_RE = re.compile(r"\s*,?\s+(?:and|or)\s+|(?<=[\d)}])\s*(?:and|or)\s*(?=[-+(\\A-Z\d])")
_INEQUALITY_RE = re.compile(r"[<>]|\\(?:le|ge|leq|geq|lt|gt|leqslant|geqslant)(?![A-Za-z])")


def _join_words(s: str) -> str:
    """``a \\text{ and } b`` / ``a, and b`` / ``a or b`` -> ``a, b`` at the top level; not between
    inequalities ("x < 1 or x > 2" is a union, which math-verify reads as such)."""
    if _INEQUALITY_RE.search(s):
        return s
    s = _TEXT_JOIN_RE.sub(", ", s)
    out, last = [], 0
    for m in _WORD_JOIN_RE.finditer(s):
        if _depth_at(s, m.start()) == 0 and "\\text" not in s[max(0, m.start() - 6) : m.start()]:
            out.append(s[last : m.start()])
            out.append(", ")
            last = m.end()
    return "".join(out) + s[last:] if out else s


def normalize_answer(s: str) -> str:
    """String-level clean-up before parsing; conservative: it never drops digits or signs inside braces."""
    s = s.strip().translate(_UNICODE)
    m = _MATH_THEN_WORDS_RE.fullmatch(s)
    if m:
        s = f"{m.group(1)} {m.group(2)}"
    s = _strip_trailing_noise(_strip_delimiters(s))
    s = _BANG_SEP_RE.sub(",", s)
    s = s.replace("\\displaystyle", "").replace("\\$", "").replace("\\!", "")
    s = re.sub(r"\\[dtc]frac", r"\\frac", s)
    s = _strip_letter_units(s)
    # math-verify turns \mathrm{..} into \text{..} and then drops a \text{..} at the end of the
    # string as a unit -- even inside a fraction: "1-\frac{1}{\mathrm{e}}" parsed as "1-\frac{1}{".
    s = _FONT_LETTER_RE.sub(r"\1", s)
    if _TRIG_RE.search(s):
        s = _DEGREE_ARG_RE.sub(r"(\1\\cdot\\frac{\\pi}{180})", s)
    else:
        s = _DEGREE_RE.sub("", s)
    s = _THIN_SEP_RE.sub("", s)
    s = _SPACING_RE.sub(" ", s)
    m = _TEXT_NUMBER_RE.fullmatch(s.strip())
    if m:  # "\text{5 cm}": the whole answer written as text
        s = m.group(1)
    s = _strip_units(s)
    s = s.strip().rstrip(".").strip() if not s.endswith("..") else s.strip()
    if _SPACED_THOUSANDS_RE.fullmatch(s):
        s = s.replace(" ", "")
    s = _mixed_number(s)
    m = _SCI_RE.fullmatch(s)
    if m:
        s = f"{m.group(1)}\\times 10^{{{m.group(2)}}}"
    s = _REPEATING_RE.sub(_repeating_to_fraction, s)
    s = _join_words(s)
    s = _strip_item_units(s)
    s = _reduce_chain(s)
    return re.sub(r"\s+", " ", s).strip()


_OPEN, _CLOSE = set("([{"), set(")]}")


def _top_level(s: str, sep: re.Pattern) -> list[str]:
    """``s`` split at the matches of ``sep`` outside brackets of any kind (half-open
    intervals such as ``[1, 2)`` still balance: any opener and any closer count)."""
    parts, depth, last, i = [], 0, 0, 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            m = sep.match(s, i) if depth == 0 else None
            if m and m.end() > i:
                parts.append(s[last:i])
                last = i = m.end()
                continue
            i += 2
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif depth == 0:
            m = sep.match(s, i)
            if m and m.end() > i:
                parts.append(s[last:i])
                last = i = m.end()
                continue
        i += 1
    parts.append(s[last:])
    return parts


_EQ_SEP_RE = re.compile(r"(?<![<>!=:\\])=(?!=)")
_APPROX_SEP_RE = re.compile(r"\\approx(?![A-Za-z])|≈")
_LIST_SEP_RE = re.compile(r"[,;]")
_LATEX_CMD_RE = re.compile(r"\\[A-Za-z]+")


def _has_letters(s: str) -> bool:
    """Letters outside LaTeX commands: ``x``, ``f(n)``, ``\\frac{NO}{BO}``; not ``\\frac{1}{2}``."""
    return bool(re.search(r"[A-Za-z]", _LATEX_CMD_RE.sub("", s)))


def _reduce_chain(s: str) -> str:
    """A worked computation as its result: ``x = 5+5+1 = 11`` -> ``x = 11``, ``1 + 18 = 19`` ->
    ``19``; ``x = 1/3 \\approx 0.33`` -> ``x = 1/3``, ``x \\approx 11`` -> ``x = 11``. Lists are
    left alone (``a=1, b=2``)."""
    if "=" not in s and "\\approx" not in s and "≈" not in s:
        return s
    if len(_top_level(s, _ITEM_SEP_RE)) > 1:  # "a=1, b=2"; not "500 + 500 = 1,000"
        return s
    approx = _top_level(s, _APPROX_SEP_RE)
    if len(approx) > 1:  # "x = 1/3 \approx 0.33" and "\pi \approx 3.14" keep the exact value
        head = approx[0].strip()
        if not head:
            s = approx[-1]
        elif len(_top_level(head, _EQ_SEP_RE)) > 1 or not _is_label(head):
            s = head
        else:  # "x \approx 11": the value of x
            s = f"{head} = {approx[-1].strip()}"
    parts = [p.strip() for p in _top_level(s, _EQ_SEP_RE)]
    if len(parts) < 2 or not all(parts):
        return s
    if len(parts) == 2:  # "1 + 2 \times 9 = 19"; not the equation "7 = 11a+c"
        return parts[-1] if not (_has_letters(parts[0]) or _has_letters(parts[1])) else s
    return f"{parts[0]} = {parts[-1]}" if _has_letters(parts[0]) else parts[-1]  # "1 = \zzz = x = 0"


def _key(s: str) -> str:
    return re.sub(r"\s+", "", s)


# --------------------------------------------------------------------------- worker-side checking
# Everything below imports math-verify/sympy lazily and runs in worker processes.

_MV: dict[str, Any] = {}


class _SoftTimeout(BaseException):
    """Raised by SIGALRM inside a worker; a BaseException so that no ``except Exception`` swallows it."""


def _on_alarm(signum, frame):  # pragma: no cover - timing dependent
    raise _SoftTimeout()


def _init_worker() -> None:
    """Worker initializer: import the math stack once and quiet its per-sample warnings."""
    import logging
    import signal

    import math_verify
    import sympy
    from latex2sympy2_extended.latex2sympy2 import NormalizationConfig, normalize_latex

    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    norm = NormalizationConfig(basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="all", equations=False)
    _MV.update(
        parse=math_verify.parse,
        verify=math_verify.verify,
        normalize=normalize_latex,
        norm_last=NormalizationConfig(**{**norm.__dict__, "boxed": "last"}),
        # Units are handled by normalize_answer: math-verify's unit stripping truncates (see there).
        latex_cfg=[math_verify.LatexExtractionConfig(boxed_match_priority=0, normalization_config=norm)],
        expr_cfg=[math_verify.ExprExtractionConfig()],
        sympy=sympy,
    )
    signal.signal(signal.SIGALRM, _on_alarm)
    _Parsed("\\frac{1}{2}+x").expr  # noqa: B018 - warms the regex and parser caches


def _show(x: Any, limit: int = 200) -> str:
    try:
        text = str(x)
    except Exception:  # noqa: BLE001 - e.g. integers beyond the str() digit limit
        text = f"<{type(x).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


_PLAIN_DECIMAL_RE = re.compile(r"[-+]?(?:[1-9]\d{0,2}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")
_PLAIN_FRACTION_RE = re.compile(r"([-+]?)(?:\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}|\\frac(\d)(\d)|(\d+)\s*/\s*(\d+))")


def _decimal_digits(text: str) -> tuple[int, int]:
    """(decimal places, significant digits) of a decimal as written: ``0.014286`` -> (6, 5),
    ``1,234.50`` -> (2, 6); trailing zeros count (they are written precision)."""
    digits = re.sub(r"[^\d.]", "", text)
    places = len(digits) - digits.index(".") - 1
    return places, len(digits.replace(".", "").lstrip("0"))


def _plain_number(clean: str):
    """(Fraction, (places, significant digits) if written as a decimal else None) for answers like ``-12``, ``1,000``, ``0.25``, ``\\frac{3}{4}``, ``3/4``.

    Most GSM8K answers and many MATH ones are such numbers: they are compared exactly
    without sympy, which is where most of the checking time goes (the LaTeX parser).
    """
    from fractions import Fraction

    if len(clean) > 200:
        return None
    if _PLAIN_DECIMAL_RE.fullmatch(clean):
        text = clean.replace(",", "")
        return Fraction(text), (_decimal_digits(text) if "." in text else None)
    m = _PLAIN_FRACTION_RE.fullmatch(clean)
    if m:
        numerator, denominator = [int(x) for x in m.groups()[1:] if x is not None]
        if denominator == 0:
            return None
        value = Fraction(numerator, denominator)
        return (-value if m.group(1) == "-" else value), None
    return None


class _Parsed:
    """One side of a comparison: the normalised text, its key for exact matching, a plain
    number when it is one, and the sympy parse -- done on first use of ``expr`` only."""

    __slots__ = ("text", "key", "number", "_expr", "_note")

    def __init__(self, text: str):
        self.text = text
        self.key = _key(_MV["normalize"]("\\boxed{" + text + "}", _MV["norm_last"]).strip())
        self.number = _plain_number(text)
        self._note: str | None = None
        self._expr: Any = None

    @property
    def expr(self) -> Any:
        if self._note is None:
            self._expr, self._note = _parse_expr(self.text, self.key)
        return self._expr

    @property
    def note(self) -> str:
        self.expr  # noqa: B018 - parses if not done yet
        return self._note or ""


def _parse_expr(clean: str, key: str) -> tuple[Any, str]:
    """math-verify's parse of the whole answer, or (None, why not)."""
    parse = _MV["parse"]
    found = parse("\\boxed{" + clean + "}", extraction_config=_MV["latex_cfg"], fallback_mode="first_match", parsing_timeout=None)
    expr = found[0] if found and not isinstance(found[0], str) else None
    if expr is not None:
        got = found[-1] if isinstance(found[-1], str) else ""
        # The parse must stand for the whole answer: math-verify may parse a piece of it.
        if _key(got) != key or key.count("{") != key.count("}"):
            return None, f"partial parse rejected ({_show(got, 60)!r})"
        if re.search(r"\d\s+\d", got):
            # latex2sympy reads "2 3" as 2+3 and "1 000" as 1*0.
            return None, "digits separated by spaces are ambiguous"
        return _imaginary_unit(expr), "parsed"
    if not re.search(r"\\[A-Za-z]", clean):
        # Plain-text maths such as "sqrt(2)/2"; accepted only if the whole string was used.
        found = parse(clean, extraction_config=_MV["expr_cfg"], fallback_mode="first_match", parsing_timeout=None)
        if found and not isinstance(found[0], str) and _key(str(found[-1])) == _key(clean):
            return found[0], "parsed"
    return None, "could not parse"


def _imaginary_unit(expr):
    """latex2sympy reads ``i`` as a symbol (``e^{i\\pi}`` stays exp(i*pi), not -1): make it sympy's I."""
    try:
        unit = {s: _MV["sympy"].I for s in expr.free_symbols if s.name == "i"}
        return expr.xreplace(unit) if unit else expr
    except Exception:  # noqa: BLE001 - not a sympy object with free symbols
        return expr


# ---- exact and numeric comparison of sympy objects -------------------------------------------

_REL_TOL_FLOAT = 2e-6  # arithmetic on decimals, and 15+ digit floats (a written decimal: _decimal_rounds)
_ZERO_PREC_BITS = 10  # evalf returns "0.e-160" (precision ~1 bit) for a zero it cannot prove


def _combine(verdicts) -> bool | None:
    verdicts = list(verdicts)
    if any(v is False for v in verdicts):
        return False
    if verdicts and all(v is True for v in verdicts):
        return True
    return None


def _has_float(e) -> bool:
    sp = _MV["sympy"]
    try:
        return bool(e.atoms(sp.Float))
    except Exception:  # noqa: BLE001
        return False


def _is_zero_value(v) -> bool | None:
    """Is the evalf result ``v`` zero? sympy's evalf is adaptive: a nonzero difference
    comes back with full precision, one it cannot tell from zero as ``0.e-160``."""
    sp = _MV["sympy"]
    if v == 0:
        return True
    parts = [sp.re(v), sp.im(v)] if not v.is_real else [v]
    result = True
    for part in parts:
        if part == 0:
            continue
        if not isinstance(part, sp.Float):
            return None
        if part._prec > _ZERO_PREC_BITS:
            result = False
    return result


def _numbers_equal(g, p) -> bool | None:
    """Exact comparison of constant expressions; a written decimal against an exact value or another
    decimal as a rounding (:func:`_numbers_close`); relative tolerance for other decimal arithmetic."""
    sp = _MV["sympy"]
    try:
        written = g, p
        g, p = g.doit(), p.doit()
        if g == p:
            return True
        if isinstance(g, sp.Rational) and isinstance(p, sp.Rational):
            return False
        gv, pv = g.evalf(30), p.evalf(30)
        if not (gv.is_number and pv.is_number):
            return None
        if gv.is_finite is False or pv.is_finite is False:
            return bool(gv == pv)
        plain = [_as_plain(w, e) for w, e in zip(written, (g, p))]
        if None not in plain and (plain[0][1] or plain[1][1]):  # a decimal as written: what it rounds
            return _numbers_close(*plain)
        if _rounded_irrational(g, p) or _rounded_irrational(p, g):
            return False
        if _has_float(g) or _has_float(p):
            scale = max(abs(gv), abs(pv))
            return bool(abs(gv - pv) <= _REL_TOL_FLOAT * scale)
        return _is_zero_value((g - p).evalf(30))
    except _SoftTimeout:
        raise
    except Exception:  # noqa: BLE001 - sympy raises many things on odd input
        return None


def _literal_decimal(e) -> tuple | None:
    """A decimal as the parser read it (``2.6667``, ``-3.141593``: a Float or its negation, not
    arithmetic on one) -> (value as written, (places, significant digits)); None otherwise, and
    for a literal longer than a double holds (the parser keeps its digits: see
    :func:`_rounded_irrational`). The written digits come back as the shortest decimal that
    reads as the same double (a written trailing zero is lost: ``2.6670`` reads as ``2.667``)."""
    from decimal import Decimal

    sp = _MV["sympy"]
    sign = 1
    if isinstance(e, sp.Mul) and len(e.args) == 2 and e.args[0] == -1:
        e, sign = e.args[1], -1
    if not isinstance(e, sp.Float) or e._prec > 53:
        return None
    written = Decimal(repr(float(e)))
    if not written.is_finite():
        return None
    _, digits, exponent = written.as_tuple()
    return sign * Fraction(written), (max(-exponent, 0), len("".join(map(str, digits)).lstrip("0")))


_EXACT_DIGITS = 40  # an exact irrational value is compared through this many digits


def _as_plain(written, value) -> tuple | None:
    """A side of :func:`_numbers_equal` as :func:`_numbers_close` takes it: a literal decimal
    with its written digits, or an exact real value (no float in it) as a Fraction -- an
    irrational one (``\\pi``, ``\\sqrt{2}``, ``e``) through 40 correct digits; None for anything
    else (arithmetic on decimals, complex values, a value evalf cannot pin down)."""
    sp = _MV["sympy"]
    literal = _literal_decimal(written)
    if literal is not None:
        return literal
    if _has_float(value) or _has_float(written):
        return None
    if isinstance(value, sp.Rational):
        return Fraction(int(value.p), int(value.q)), None
    approx = value.evalf(_EXACT_DIGITS)
    if not (isinstance(approx, sp.Float) and approx._prec >= 3.3 * _EXACT_DIGITS):
        return None  # not real, or evalf could not reach the precision (a zero it cannot prove)
    exact = sp.Rational(approx)  # the binary value of the approximation, exactly
    return Fraction(int(exact.p), int(exact.q)), None


_FULL_PRECISION_DIGITS = 10


def _rounded_irrational(decimal, exact) -> bool:
    """Is ``decimal`` arithmetic on decimals of fewer than 10 significant digits that evaluates
    to one (``2 \\times 1.414214``) and ``exact`` an exact irrational value? Then they differ: no
    written digit says how it was rounded. (A decimal as written is compared through
    :func:`_as_plain` before this.) A full-precision decimal (a float printed by a program) is
    the value itself; rationals keep the float tolerance."""
    sp = _MV["sympy"]
    if not _has_float(decimal) or _has_float(exact):
        return False
    value = decimal.doit()
    if not (value.is_Float or (value.is_Mul and len(value.args) == 2 and -1 in value.args and value.is_number
                                and any(a.is_Float for a in value.args))):
        return False
    if decimal.atoms(sp.NumberSymbol, sp.Function) or any(not a.exp.is_Integer for a in decimal.atoms(sp.Pow)):
        return False
    if exact.is_rational is not False:
        return False
    digits = min(len(re.sub(r"[^0-9]", "", str(f)).strip("0")) for f in decimal.atoms(sp.Float))
    return digits < _FULL_PRECISION_DIGITS


def _sample_points(symbols, count: int):
    import random

    rng = random.Random(20240917)  # fixed: the same pair always gets the same verdict
    sp = _MV["sympy"]
    for _ in range(count):
        yield {s: sp.Rational(rng.choice([-1, 1]) * rng.randint(3, 97), rng.randint(2, 29)) for s in symbols}


def _values_at(exprs, point):
    """30-digit values at a point, or None where one is undefined (or sympy cannot evaluate it). ``evalf(subs=)`` is
    adaptive: a difference that cancels to 1e-40 comes back as 1e-40, not 0, and huge
    powers are not expanded as exact rationals."""
    sp = _MV["sympy"]
    values = []
    try:
        for e in exprs:
            v = e.evalf(30, subs=point)
            if not v.is_number or v.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
                return None
            values.append(v)
    except _SoftTimeout:
        raise
    except Exception:  # noqa: BLE001 - sympy fails in many ways at a bad point: treat as undefined
        return None
    return values


def _texty(e) -> bool:
    """``Monday`` parses as M*o*n*d*a*y: math-verify compares such things as text."""
    sp = _MV["sympy"]
    return isinstance(e, sp.Symbol) or (isinstance(e, sp.Mul) and all(isinstance(a, sp.Symbol) or a == sp.E for a in e.args))


def _summed(e):
    """``e`` with its sums and products in closed form where sympy finds one; None where one
    stays symbolic: random rational values of a summation bound mean nothing."""
    sp = _MV["sympy"]
    if not e.has(sp.Sum, sp.Product):
        return e
    done = e.doit()
    return None if done.has(sp.Sum, sp.Product) else done


def _functions_equal(g, p) -> bool | None:
    """Numeric identity test at a few random rational points: False is a proof of difference."""
    g, p = _summed(g), _summed(p)
    if g is None or p is None:
        return None
    symbols = sorted(g.free_symbols | p.free_symbols, key=str)
    tol_float = _has_float(g) or _has_float(p)
    agreed = 0
    for point in _sample_points(symbols, 4):
        values = _values_at((g, p, g - p), point)
        if values is None:
            continue
        gv, pv, dv = values
        if tol_float:
            same = abs(gv - pv) <= _REL_TOL_FLOAT * max(abs(gv), abs(pv))
        else:
            same = _is_zero_value(dv) is True
        if not same:
            return False
        agreed += 1
    return True if agreed >= 2 else None


def _proportional(e1, e2, positive: bool = False) -> bool | None:
    """Do ``e1 = 0`` and ``e2 = 0`` describe the same equation (e1 = c * e2, c a nonzero
    constant, positive if asked)?

    Tested at random points p_k against a reference point p_0 through the cross product
    e1(p_k) e2(p_0) - e2(p_k) e1(p_0), evaluated as one expression so that evalf resolves
    a tiny difference (``x = 10^{-40}`` vs ``x = 0``) instead of rounding it away.
    """
    sp = _MV["sympy"]
    e1, e2 = _summed(e1), _summed(e2)
    if e1 is None or e2 is None:
        return None
    symbols = sorted(e1.free_symbols | e2.free_symbols, key=str)
    if not symbols:
        return None
    tol_float = _has_float(e1) or _has_float(e2)
    here = {s: sp.Dummy() for s in symbols}
    there = {s: sp.Dummy() for s in symbols}
    cross = e1.xreplace(here) * e2.xreplace(there) - e2.xreplace(here) * e1.xreplace(there)
    points = []
    for point in _sample_points(symbols, 6):
        values = _values_at((e1, e2), point)
        if values is None:
            continue
        z1, z2 = _is_zero_value(values[0]) is True, _is_zero_value(values[1]) is True
        if z1 and z2:
            continue
        if z1 != z2:
            return False  # one equation holds at this point, the other does not
        points.append((point, values[0] / values[1]))
    if len(points) < 2:
        return None
    reference, ratio = points[0]
    if positive and not (ratio.is_real and ratio > 0):
        return False
    for point, other_ratio in points[1:]:
        if tol_float:
            if abs(other_ratio - ratio) > _REL_TOL_FLOAT * abs(ratio):
                return False
            continue
        subs = {here[s]: v for s, v in point.items()} | {there[s]: v for s, v in reference.items()}
        if _is_zero_value(cross.evalf(30, subs=subs)) is not True:
            return False
    return True


def _inequalities_equal(g, p) -> bool | None:
    """``a < b`` vs ``c < d`` (or ``d > c``): the same when ``a-b`` is a positive multiple of
    ``c-d``; different when the two differ by a nonzero constant (``x > 10^{-20}`` vs ``x > 0``,
    which math-verify's chopped numeric comparison calls equal). Otherwise no opinion."""
    sp = _MV["sympy"]
    flip = {sp.StrictLessThan: sp.StrictGreaterThan, sp.StrictGreaterThan: sp.StrictLessThan,
            sp.LessThan: sp.GreaterThan, sp.GreaterThan: sp.LessThan}
    e1 = g.lhs - g.rhs
    if type(g) is type(p):
        e2 = p.lhs - p.rhs
    elif flip.get(type(g)) is type(p):
        e2 = p.rhs - p.lhs
    else:
        return None
    if _proportional(e1, e2, positive=True):
        return True
    offset = e1 - e2
    if not offset.free_symbols and _numbers_equal(offset, sp.Integer(0)) is False:
        return False
    return None


def _is_assignment_lhs(lhs) -> bool:
    """``x``, ``f(x)``, ``x+y``: a left side naming what the value is, not an equation to solve."""
    sp = _MV["sympy"]
    try:
        return bool(lhs.free_symbols) and not lhs.atoms(sp.Number)
    except Exception:  # noqa: BLE001
        return False


def _percent_forms(e) -> list:
    """latex2sympy writes ``5\\%`` as ``5*UnevaluatedExpr(1/100)``; math-verify lets it equal 5 or 0.05."""
    sp = _MV["sympy"]
    if isinstance(e, sp.Mul) and len(e.args) == 2 and e.args[1] == sp.UnevaluatedExpr(sp.Rational(1, 100)):
        return [e.args[0], e.args[0] / 100]
    return [e]


def _strict_check(g, p, depth: int = 0) -> bool | None:
    """Our own verdict on a pair math-verify called equal: True, False (veto) or None (no opinion)."""
    sp = _MV["sympy"]
    if depth > 6 or isinstance(g, str) or isinstance(p, str):
        return None
    try:
        if g == p or _tree_key(g) == _tree_key(p):  # the same tree, up to the order of terms and
            return True  # factors: no evaluation needed (a reordered sum of products would cost
    except Exception:  # noqa: BLE001 - random-point evaluations of symbolic sums)
        pass
    gf, pf = _percent_forms(g), _percent_forms(p)
    if len(gf) > 1 or len(pf) > 1:
        verdicts = [_strict_check(a, b, depth + 1) for a in gf for b in pf]
        if any(v is True for v in verdicts):
            return True
        return False if all(v is False for v in verdicts) else None

    g_eq, p_eq = isinstance(g, sp.Eq), isinstance(p, sp.Eq)
    if g_eq and p_eq:
        if g.lhs == p.lhs and _is_assignment_lhs(g.lhs):
            rhs = _strict_check(g.rhs, p.rhs, depth + 1)
            if rhs is not None:
                return rhs
        return _proportional(g.lhs - g.rhs, p.lhs - p.rhs)
    if g_eq or p_eq:
        eq, other = (g, p) if g_eq else (p, g)
        if isinstance(other, (sp.Basic, sp.MatrixBase)) and not isinstance(other, (sp.Set, sp.Tuple, sp.Rel, sp.And)):
            if _is_assignment_lhs(eq.lhs):
                return _strict_check(eq.rhs, other, depth + 1) if g_eq else _strict_check(other, eq.rhs, depth + 1)
            return False  # "x^2+1=0" is not the value 0
        return None
    if isinstance(g, sp.Rel) and isinstance(p, sp.Rel):
        return _inequalities_equal(g, p)
    if isinstance(g, (sp.Rel, sp.And)) or isinstance(p, (sp.Rel, sp.And)):
        return None  # systems, chains, inequality vs set: math-verify's own logic

    if isinstance(g, sp.MatrixBase) and isinstance(p, sp.MatrixBase):
        if g.shape != p.shape:
            return False
        return _combine(_strict_check(a, b, depth + 1) for a, b in zip(g, p))
    if isinstance(g, sp.Interval) and isinstance(p, sp.Interval):
        if (g.left_open, g.right_open) != (p.left_open, p.right_open):
            return False
        return _combine([_strict_check(g.start, p.start, depth + 1), _strict_check(g.end, p.end, depth + 1)])
    if isinstance(g, sp.Tuple) and isinstance(p, sp.Tuple):
        if len(g) != len(p):
            return False
        return _combine(_strict_check(a, b, depth + 1) for a, b in zip(g.args, p.args))
    if isinstance(g, sp.FiniteSet) and isinstance(p, sp.FiniteSet):
        return _sets_equal(list(g.args), list(p.args), depth)
    if isinstance(g, (sp.Set, sp.Tuple)) or isinstance(p, (sp.Set, sp.Tuple)):
        return None

    if isinstance(g, sp.Expr) and isinstance(p, sp.Expr):
        g_free, p_free = g.free_symbols, p.free_symbols
        if not g_free and not p_free:
            return _numbers_equal(g, p)
        if not (_texty(g) or _texty(p)):
            return _functions_equal(g, p)
    return None


def _tree_key(e):
    """A key of the expression tree in which the terms of a sum and the factors of a product
    are unordered: the parser leaves them as written (``F_k F_{n-k-1}`` vs ``F_{n-k-1} F_k``).
    Nothing is evaluated (rebuilding ``Eq(n, {1,2})`` would evaluate it to False)."""
    sp = _MV["sympy"]
    args = getattr(e, "args", ())
    if not args:
        return e
    keys = [_tree_key(a) for a in args]
    if isinstance(e, (sp.Add, sp.Mul, sp.Eq, sp.Ne)):  # Eq(a, b) is Eq(b, a); not so a < b
        keys.sort(key=repr)
    return type(e).__name__, tuple(keys)


def _sets_equal(gs: list, ps: list, depth: int) -> bool | None:
    """Element-wise set comparison as a bipartite matching on our verdicts."""
    if len(gs) != len(ps):
        return False
    if len(gs) > 10:
        return None
    table = [[_strict_check(a, b, depth + 1) for b in ps] for a in gs]

    def matching(allowed) -> bool:
        owner: dict[int, int] = {}

        def augment(i: int, seen: set[int]) -> bool:
            for j in range(len(ps)):
                if allowed(table[i][j]) and j not in seen:
                    seen.add(j)
                    if j not in owner or augment(owner[j], seen):
                        owner[j] = i
                        return True
            return False

        return all(augment(i, set()) for i in range(len(gs)))

    if matching(lambda v: v is True):
        return True
    if not matching(lambda v: v is not False):
        return False
    return None


_MAX_DIGITS = 100_000  # exact values beyond this are not evaluated


def _log10_size(e) -> float:
    """Rough upper bound on the decimal digits of the integers an exact evaluation of ``e``
    builds: towers like ``9^{9^{9^9}}`` and huge factorials would take minutes and gigabytes.
    Powers with a symbol in them are not expanded exactly (evalf handles them), so they are
    only as large as their parts."""
    import math

    sp = _MV["sympy"]
    if isinstance(e, sp.Rational):
        return max(math.log10(abs(e.p) or 1), math.log10(e.q))
    if isinstance(e, (sp.Float, sp.NumberSymbol)):
        try:
            return abs(math.log10(abs(float(e)) or 1.0))
        except (OverflowError, ValueError):
            return math.inf
    args = getattr(e, "args", ())
    if not args:
        return 0.0
    sizes = [_log10_size(a) for a in args]
    if isinstance(e, sp.exp) and not e.free_symbols:  # e^x, as a power of E
        return math.inf if sizes[0] > 300 else max(sizes[0], 0.4343 * 10 ** sizes[0])
    if isinstance(e, sp.Pow) and not e.free_symbols:
        base, exponent = sizes
        return math.inf if exponent > 300 else max(base, exponent, base * 10**exponent)
    if isinstance(e, (sp.factorial, sp.factorial2, sp.gamma, sp.subfactorial)) and not e.free_symbols:
        if sizes[0] > 300:
            return math.inf
        n = 10 ** sizes[0]
        return max(sizes[0], n * math.log10(max(n, 2.0)))
    if isinstance(e, sp.binomial) and not e.free_symbols:
        return math.inf if sizes[0] > 300 else max(sizes) + 10 ** sizes[0] * 0.30103
    return max(sizes)


# A decimal this long is a program's float, not a rounded answer: a double printed in full has
# 15-17 significant digits (11.999999999999998). Shorter ones are roundings (123456789.4 is not
# 123456789, nor 123456900.0, though within the 2e-6 relative tolerance such floats get).
_MACHINE_FLOAT_DIGITS = 15
_MV_DEFAULT_PLACES = 6  # math-verify's default float_rounding
# A decimal written with this many significant digits may stand for a value it rounds; one with
# fewer is read as exact (0.1 is 1/10, 3.14 is not pi, 0.333 is not 1/3).
_MIN_ROUNDED_DIGITS = 4
# ... and then only within this relative error of that value: the tolerance of the graders most
# RL math pipelines use (Qwen2.5-Math and DeepSeek-Math evaluation/grader.py ``numeric_equal``:
# ``isclose(prediction, reference, rel_tol=1e-4)``; verl's prime_math ``math_equal`` the same).
_ROUNDED_REL_TOL = Fraction(1, 10_000)


def _decimal_rounds(decimal: Fraction, places: int, digits: int, value: Fraction, truncated: bool = True) -> bool:
    """Does a decimal written with ``places`` decimal places and ``digits`` significant digits
    stand for ``value`` (exact, or an irrational's 40-digit approximation)?

    Yes when it is ``value`` correctly rounded at its last written digit (half up or half
    even: a tie may go either way) and off by at most 1e-4 relative, with 4 significant digits
    or more: ``0.3333`` = 1/3 (error exactly 1e-4 relative; math-verify's own suite expects it),
    ``2.6667`` = 8/3, ``3.1416`` = pi, ``-3.141593`` = -pi. Not ``0.33``/``0.333`` (too coarse:
    read as exact, and 1e-3 off), ``3.14`` (too coarse), ``3.142`` for pi (1.3e-4 off),
    ``0.3334`` or ``2.6668`` (a wrong last digit: 2.6668 is within 1e-4 of 8/3 but claims
    +-0.00005 and is 0.00013 off), ``2.0001`` for 2 (an integer rounds to 2.0000).

    Or, if ``truncated``, within 2e-6 relative and one unit in the last place, when that is
    the value truncated (``0.666666`` = 2/3) or a last digit past the 6th place, where
    math-verify's default comparison (at 6 places) cannot see it either (``0.3333334`` = 1/3,
    ``12.0000001`` = 12). Never an integer's wrong last digit before that (``1234567.1`` and
    ``1234567.01`` are not 1234567, though within 2e-6)."""
    error = abs(value - decimal)
    unit = Fraction(1, 10**places) if places >= 0 else Fraction(10**-places)
    if digits >= _MIN_ROUNDED_DIGITS and error * 2 <= unit and error <= _ROUNDED_REL_TOL * abs(value):
        return True
    if not truncated or error > unit or error > Fraction(str(_REL_TOL_FLOAT)) * max(abs(value), abs(decimal)):
        return False
    toward_zero = Fraction(math.floor(abs(value) / unit)) * unit * (1 if value >= 0 else -1)
    return decimal == toward_zero or places > _MV_DEFAULT_PLACES


def _numbers_close(a: tuple, b: tuple) -> bool:
    """Two plain numbers, each (Fraction, (places, significant digits) or None when exact).

    Integers and fractions are exact. A decimal stands for what it rounds (see
    :func:`_decimal_rounds`), on either side: the gold may be the rounded one (``0.3333`` vs
    ``1/3``; Qwen's and math-verify's comparisons are symmetric too). Two decimals: the coarser
    must be the rounding of the finer (``1234567.5`` is not ``1234567.6`` nor ``1234567.44``;
    ``0.1`` is not ``0.1000004``: one digit is exact). A long decimal (15+ significant digits,
    a double printed by a program) keeps the plain relative tolerance (``11.999999999999998`` =
    12). Integers against decimals: the decimal must round the integer (``2.0001`` is not 2,
    ``1234567.5`` is not ``1234567``)."""
    (x, x_dec), (y, y_dec) = a, b
    if x == y:
        return True
    if x_dec is None and y_dec is None:
        return False
    scale = max(abs(x), abs(y))
    if any(d is not None and d[1] >= _MACHINE_FLOAT_DIGITS for d in (x_dec, y_dec)):
        return abs(x - y) <= _REL_TOL_FLOAT * scale
    # the decimal read as a rounding: the coarser one when both are decimals
    (d, (places, digits)), other = ((x, x_dec), y_dec) if y_dec is None or (x_dec is not None and x_dec[0] <= y_dec[0]) \
        else ((y, y_dec), x_dec)
    if other is not None and other[0] == places:
        return False  # the same number of places and different: neither rounds the other
    value = y if d is x else x
    # two decimals: only a correct rounding of the finer (a truncated rounding is off twice)
    return _decimal_rounds(d, places, digits, value, truncated=other is None)


def _same_symbols(gold, pred):
    """``pred`` with each symbol renamed to the gold's symbol of that name: the parser makes
    every symbol complex in an answer that contains an ``i`` (``\\sum_{i=1}^n i``), so the gold's
    ``n`` and the prediction's ``n`` may differ in their assumptions only."""
    try:
        by_name = {s.name: s for s in gold.free_symbols}
        renames = {s: by_name[s.name] for s in pred.free_symbols if s.name in by_name and by_name[s.name] != s}
        return pred.xreplace(renames) if renames else pred
    except Exception:  # noqa: BLE001 - not a sympy object with free symbols
        return pred


_ARITH_COMMAND_RE = re.compile(r"\\(?:times|cdot|div|ast)(?![A-Za-z])|[×÷·]")
_ARITH_LAYOUT_RE = re.compile(r"\\(?:left|right|[dt]?frac|!|,|;|:)(?![A-Za-z])|\s")
_BINARY_OP_RE = re.compile(r"[\d.)}][-+*/][-+]?[\d.({]")
_SCIENTIFIC_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?\*)?10\^\{?[-+]?\d+\}?")


def _unevaluated_arithmetic(text: str) -> bool:
    """Is the (last side of the) answer numbers still combined by operators: ``12 + 18``,
    ``2 \\times 15``, ``x = 3+2``? Powers (``2^{10}``), scientific notation (``1.5 \\times 10^{3}``),
    fractions, mixed and signed numbers are final forms.

    Against a plain-number gold such an answer scores 0: it equals the gold only because the
    checker evaluates it, and a policy rewarded for it learns to restate the question
    (``What is 12 + 18?`` -> ``12 + 18``) instead of answering it -- measured on the demo,
    where held-out "accuracy" went to 100% that way.
    """
    side = _EQ_SEP_RE.split(text)[-1]
    side = _ARITH_LAYOUT_RE.sub("", _ARITH_COMMAND_RE.sub("*", side))
    if not side or any(c not in "0123456789.,+-*/^(){}" for c in side):
        return False
    return _BINARY_OP_RE.search(side) is not None and not _SCIENTIFIC_RE.fullmatch(side)


def _compare(gold: _Parsed, pred: _Parsed) -> tuple[bool, str]:
    if gold.key == pred.key:
        return True, "identical after normalisation"
    if gold.number is not None and pred.number is not None:
        equal = _numbers_close(gold.number, pred.number)
        return equal, ("equal" if equal else "not equal") + " (numbers)"
    if gold.number is not None and _unevaluated_arithmetic(pred.text):
        return False, "not an answer: an unevaluated arithmetic expression for a number"
    if pred.expr is None:
        return False, f"prediction: {pred.note}"
    if _log10_size(pred.expr) > _MAX_DIGITS:
        return False, f"prediction too large to evaluate (over {_MAX_DIGITS} digits)"
    # Our exact checks first: where they have a verdict (numbers, equations, tuples, sets,
    # intervals, matrices, functions at random points) it is sound, and cheaper than
    # math-verify's simplify(). A False here is exactly where math-verify can be fooled.
    pred_expr = _same_symbols(gold.expr, pred.expr)
    own = _strict_check(gold.expr, pred_expr)
    if own is not None:
        return own, ("equal" if own else "not equal") + " (exact check)"
    if _MV["verify"](gold.expr, pred_expr, timeout_seconds=None, allow_set_relation_comp=True):
        return True, "equal (math-verify)"
    return False, "not equal (math-verify)"


# ---- one sample, in a worker ------------------------------------------------------------------

_GOLD_CACHE: dict[tuple[str, str], tuple[str | None, _Parsed | None]] = {}
_GOLD_CACHE_SIZE = 4096


def _gold_parsed(gold_text: str, mode: str) -> tuple[str | None, _Parsed | None]:
    key = (mode, gold_text)
    hit = _GOLD_CACHE.get(key)
    if hit is None:
        answer = extract_gold(gold_text, mode)
        hit = (answer, None if answer is None else _Parsed(normalize_answer(answer)))
        if len(_GOLD_CACHE) >= _GOLD_CACHE_SIZE:
            _GOLD_CACHE.clear()
        _GOLD_CACHE[key] = hit
    return hit


def check_answer(gold: str, pred: str) -> tuple[bool | None, dict[str, Any]]:
    """Compare a gold final answer with a predicted one (both LaTeX/plain strings).

    Returns (verdict, info); verdict None when the gold cannot be parsed. Runs in the
    calling process without a time limit and installs a SIGALRM handler there (main
    thread only): for scripts and debugging. The reward runs it in worker processes.
    """
    if not _MV:
        _init_worker()
    _, g = _gold_parsed(gold, "raw")
    p = _Parsed(normalize_answer(pred))
    return _verdict(g, p)


# ---- readings of an answer other than the literal one ------------------------------------------

_VALID_THOUSANDS_RE = re.compile(r"[-+]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?")
# "1,22", "1000,99", "0,111": not thousands; two digits after the comma at least ("1,2" is
# more often the list 1, 2 than the European 1.2).
_DECIMAL_COMMA_RE = re.compile(r"[-+]?\d+,\d{2,}")
_LABEL_COMMANDS_RE = re.compile(
    r"\\(?:[dt]?frac|left|right|overline|overrightarrow|vec|bar|hat|widehat|angle|triangle|mathrm|mathit|text|"
    r"operatorname|lvert|rvert|vert|mid)(?![A-Za-z])")
_SUBSCRIPT_RE = re.compile(r"_\s*(?:\{[^{}]*\}|\w)")
_LABEL_CHARS_RE = re.compile(r"[\s(){}|:,]")
_CALL_ARGS_RE = re.compile(r"(?<=[A-Za-z])\([^()]*\)")


def _is_label(s: str) -> bool:
    """``x``, ``x_1``, ``(p,q)``, ``f(x)``, ``|AB|``, ``V_1:V_2``, ``\\frac{NO}{BO}``: names, not
    expressions (no digits outside subscripts, no operators)."""
    s = _CALL_ARGS_RE.sub("", _SUBSCRIPT_RE.sub("", s))  # f(2), P(A): a function's value names
    rest = _LABEL_CHARS_RE.sub("", _LABEL_COMMANDS_RE.sub("", s))
    return bool(rest) and rest.isalpha()


def _strip_labels(text: str) -> str | None:
    """``AB=4, CD=5`` -> ``4, 5``; ``a=4, -8, -10`` -> ``4, -8, -10``; ``V_1:V_2=11:21`` ->
    ``11:21``; ``p=5,q=2; p=7,q=2`` -> ``(5, 2), (7, 2)``. None when there is no label to strip."""
    groups = _top_level(text, re.compile(";"))
    out, stripped = [], False
    for group in groups:
        items = []
        for item in _top_level(group, _ITEM_SEP_RE):  # "x = 1,000" is one item
            sides = _top_level(item, _EQ_SEP_RE)
            if len(sides) == 2 and _is_label(sides[0]) and sides[1].strip():
                items.append(sides[1].strip())
                stripped = True
            elif len(sides) == 1:
                items.append(item.strip())
            else:
                return None
        joined = ", ".join(items)
        out.append(f"({joined})" if len(groups) > 1 and len(items) > 1 else joined)
    return ", ".join(out) if stripped else None


_TIME_RE = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(?:\\text\{\s*)?([ap]\.?\s*m\.?)?\s*\}?", re.IGNORECASE)
_RATIO_SEP_RE = re.compile(r":|\\colon(?![A-Za-z])")


def _time_of_day(text: str) -> tuple | None:
    m = _TIME_RE.fullmatch(text.strip())
    if m is None:
        return None
    meridiem = (m.group(4) or "").lower().replace(".", "").replace(" ", "")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), meridiem


def _ratio_parts(text: str) -> list[str] | None:
    """``3:4`` / ``1:2:3``: parts of a ratio of numbers (no letters: ``\\{x : x>0\\}`` is not one)."""
    if ":" not in text and "\\colon" not in text:
        return None
    parts = [p.strip() for p in _top_level(text, _RATIO_SEP_RE)]
    if len(parts) < 2 or not all(parts) or any(_has_letters(p) or not re.search(r"\d", p) for p in parts):
        return None
    return parts


def _verdict(g: _Parsed | None, p: _Parsed) -> tuple[bool | None, dict[str, Any]]:
    """The literal reading first; then other readings of either side (labels stripped from
    ``x = 5`` against ``5``, ``1,5`` as a decimal comma): equal if any reading is."""
    info: dict[str, Any] = {"gold_norm": _show(g.text if g else None), "pred_norm": _show(p.text)}
    if g is None:
        return None, {**info, "why": "no gold answer"}
    result = _compare_assignments(g.text, p.text)
    alternatives = _alternatives(g, p) if result is None else ()
    result = result or _compare_readings(g, p)
    for alt_g, alt_p in alternatives:
        if result[0] is True:
            break
        other = _compare_readings(alt_g, alt_p)
        if other[0] is True or result[0] is None:
            result = other
    equal, why = result
    for side, parsed in (("gold_parsed", g), ("pred_parsed", p)):
        if parsed._expr is not None:  # only where a parse was needed
            info[side] = _show(parsed._expr)
    return equal, {**info, "why": why}


def _assignments(text: str) -> list[tuple[str, str]] | None:
    """``x=2, y=3`` (``x=2 and y=3`` once normalised) -> [(x, 2), (y, 3)]: values given to two or
    more distinct names; None for anything else (``x=2, x=3`` lists roots: a set)."""
    if ";" in text or "=" not in text:
        return None
    items = _top_level(text, _ITEM_SEP_RE)
    if len(items) < 2:
        return None
    named = []
    for item in items:
        sides = _top_level(item, _EQ_SEP_RE)
        if len(sides) != 2 or not _is_label(sides[0]) or not sides[1].strip():
            return None
        named.append((_key(sides[0]), sides[1].strip()))
    return named if len({name for name, _ in named}) == len(named) else None


_PAREN_LEFT_RE = re.compile(r"\\left\s*\(")
_PAREN_RIGHT_RE = re.compile(r"\\right\s*\)")


def _closing_bracket(s: str, start: int) -> int | None:
    """Index of the bracket (any kind, as in :func:`_top_level`) closing the one at ``start``."""
    depth, i = 0, start
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        depth += c in _OPEN
        depth -= c in _CLOSE
        if depth == 0:
            return i
        i += 1
    return None


def _bare_values(text: str) -> tuple[list[str], bool] | None:
    """(items, is a tuple) of an unnamed list ``2, 3`` or tuple ``(2, 3)``; one item for anything
    else (a set ``\\{2, 3\\}``, an interval ``[2, 3]``); None when an item is an equation."""
    t = _PAREN_RIGHT_RE.sub(")", _PAREN_LEFT_RE.sub("(", text.strip()))
    is_tuple = t.startswith("(") and t.endswith(")") and _closing_bracket(t, 0) == len(t) - 1
    if is_tuple:
        t = t[1:-1]  # one pair of parentheses around everything (not "(1, 2), (3, 4)")
    items = [item.strip() for item in _top_level(t, _ITEM_SEP_RE)]
    return None if any("=" in item for item in items) else (items, is_tuple)


def _compare_assignments(g_text: str, p_text: str) -> tuple[bool, str] | None:
    """Named values against unnamed ones (``x=2, y=3`` vs ``(2, 3)`` or ``2, 3``, either side gold):
    the values in the order the names are written -- for a tuple also in the order they sort
    (an ordered pair is (x, y) by convention), and both must agree: ``(3, 2)`` is not
    ``x=2, y=3``, nor is the set ``\\{2, 3\\}``, and ``y=3, x=2`` matches no tuple (which order would
    it mean?). A list without parentheses follows the written order (``x=-5, p=14/3`` vs
    ``-5, 14/3``: math-verify's numina case). None where this does not apply."""
    for named_text, other in ((g_text, p_text), (p_text, g_text)):
        named = _assignments(named_text)
        found = _bare_values(other) if named else None
        if found is None:
            continue
        values, is_tuple = found
        if len(values) != len(named):
            return False, "not equal (named values vs a list of another length)"
        orders = [named] + ([sorted(named)] if is_tuple and sorted(named) != named else [])
        for order in orders:
            for (_, value), item in zip(order, values):
                pair = (_Parsed(value), _Parsed(item)) if named_text is g_text else (_Parsed(item), _Parsed(value))
                if _compare_readings(*pair)[0] is not True:
                    return False, "not equal (named values in the order of their names)"
        return True, "equal (named values in the order of their names)"
    return None


def _alternatives(g: _Parsed, p: _Parsed):
    """Other readings to try, cheapest first; generated lazily."""
    for side in (g, p):
        if _DECIMAL_COMMA_RE.fullmatch(side.text) and not _VALID_THOUSANDS_RE.fullmatch(side.text):
            decimal = _Parsed(side.text.replace(",", "."))
            yield (decimal, p) if side is g else (g, decimal)
    g_eq, p_eq = "=" in g.text, "=" in p.text
    if g_eq != p_eq:
        bare = _strip_labels(g.text if g_eq else p.text)
        if bare is not None:
            yield (_Parsed(bare), p) if g_eq else (g, _Parsed(bare))


def _compare_readings(g: _Parsed, p: _Parsed) -> tuple[bool | None, str]:
    """One reading of each side: times of day and ratios by their parts, the rest by
    :func:`_compare`; None when the gold answer cannot be read."""
    if g.key == p.key:
        return True, "identical after normalisation"
    g_time, p_time = _time_of_day(g.text), _time_of_day(p.text)
    if g_time or p_time:  # never read as a ratio: 12:00 is not 12/0
        same = bool(g_time and p_time and g_time[:3] == p_time[:3] and (not g_time[3] or not p_time[3]
                                                                          or g_time[3] == p_time[3]))
        return same, ("equal" if same else "not equal") + " (times of day)"
    g_ratio, p_ratio = _ratio_parts(g.text), _ratio_parts(p.text)
    if g_ratio or p_ratio:
        return _compare_ratios(g_ratio or [g.text], p_ratio or [p.text])
    if g.number is None and g.expr is None:
        return None, f"gold answer: {g.note}"
    return _compare(g, p)


def _compare_ratios(gs: list[str], ps: list[str]) -> tuple[bool | None, str]:
    """``a:b`` equals ``c:d`` part by part, or as the quotient ``a/b`` when there are two parts
    and none is zero (``3:4`` = ``6:8`` = ``\\frac34``)."""
    if len(gs) == len(ps):
        verdicts = [_compare_readings(_Parsed(a), _Parsed(b))[0] for a, b in zip(gs, ps)]
        if all(v is True for v in verdicts):
            return True, "equal (ratios, part by part)"
    quotients = []
    for parts in (gs, ps):
        if len(parts) == 1:
            quotients.append(parts[0])
        elif len(parts) == 2 and not any(_PLAIN_ZERO_RE.fullmatch(x) for x in parts):
            quotients.append(f"\\frac{{{parts[0]}}}{{{parts[1]}}}")
        else:
            return False, "not equal (ratios)"
    equal, why = _compare_readings(_Parsed(quotients[0]), _Parsed(quotients[1]))
    return bool(equal), why + " (ratios as quotients)"


_PLAIN_ZERO_RE = re.compile(r"[-+]?0+(?:\.0*)?")


def _score_item(item: tuple) -> dict[str, Any]:
    """Worker entry point: (completion, gold, extract, gold_mode, max_chars, soft_seconds) -> dict."""
    import signal

    completion, gold_text, extract, gold_mode, max_chars, soft_seconds = item
    if not _MV:
        _init_worker()
    signal.setitimer(signal.ITIMER_REAL, soft_seconds)
    info: dict[str, Any] = {}
    try:
        pred = extract_answer(completion, extract)
        info["pred"] = None if pred is None else _show(pred, 300)
        gold, g = _gold_parsed(gold_text, gold_mode)
        info["gold"] = None if gold is None else _show(gold, 300)
        if gold is None:
            return {"value": None, "info": {**info, "why": f"no gold answer found (gold={gold_mode!r})"}}
        if pred is None:
            return {"value": 0.0, "info": {**info, "why": f"no answer found (extract={extract!r})"}}
        if len(pred) > max_chars:
            return {"value": 0.0, "info": {**info, "why": f"answer longer than {max_chars} characters"}}
        p = _Parsed(normalize_answer(pred))
        verdict, more = _verdict(g, p)
        return {"value": None if verdict is None else float(verdict), "info": {**info, **more}}
    except _SoftTimeout:
        return {"value": 0.0, "info": {**info, "why": f"checking took longer than {soft_seconds:.2f} s"}}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


# --------------------------------------------------------------------------- host side

def _pool(workers: int = 0):
    """The shared worker pool of that size (see :func:`rlvr.kit.workers.shared_pool`).

    ``workers=0``: $RLVR_MATH_WORKERS, else the CPU count clamped to 2..8.
    """
    if workers <= 0:
        size = os.environ.get("RLVR_MATH_WORKERS")
        try:
            workers = max(1, int(size)) if size else 0
        except ValueError:
            raise RlvrError(f"RLVR_MATH_WORKERS must be an integer, got {size!r}") from None
    from rlvr.kit.workers import shared_pool

    # 2 GiB of growth per worker: far more than any sane answer needs, and a cap
    # on what a pathological one can take from the trainer beside it.
    return shared_pool(workers, _init_worker, memory_limit_mb=2048)


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
    processes (0: automatic, see :func:`_pool`).
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
    soft = max(0.05, 0.85 * float(timeout) - 0.05)
    items = []
    for completion, gold_value in zip(completions, answer):
        gold_text = "" if gold_value is None else str(gold_value)
        items.append((completion_text(completion), gold_text, extract, gold, int(max_answer_chars), soft))
    from rlvr.kit.workers import PoolBroken

    try:
        results = _pool(int(workers)).map(_score_item, items, timeout=float(timeout))
    except PoolBroken as exc:
        raise RlvrError(f"math reward: checker processes unavailable: {exc}") from exc
    scores = []
    for result in results:
        if result.ok:
            scores.append(Score(result.value["value"], result.value["info"]))
        elif result.status == "timeout":
            scores.append(Score(0.0, {"why": f"checking exceeded the hard limit of {timeout:g} s"}))
        else:
            scores.append(Score(None, {"why": f"checker error: {result.error}"}))
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
