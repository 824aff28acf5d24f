"""Finding the answer in a completion (``extract_answer``) and in a gold solution (``extract_gold``).

The marks a completion may put on its answer -- ``<answer>..</answer>``, ``\\boxed{}`` (boxes
joined by "and" or commas make one list), ``#### N`` -- and, for ``extract="auto"``, "the
answer is ..." and the last complete expression (a math environment, or plain text such as
``3+2``; never the 3 of ``$10^3$``). Pure string work, no math imports: usable and testable in
the host process. Every finder is linear in the text (completions of megabytes must not stall
the host).
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from rlvr.kit.boxed import BOX_RE, box_at

__all__ = ["extract_answer", "extract_gold", "boxed_answer", "ExtractMode", "GoldMode", "EXTRACT_MODES", "GOLD_MODES"]

# The options' allowed values, as annotations (the option checker reads them) and as tuples.
ExtractMode = Literal["answer", "boxed", "hash", "tag", "last_number", "auto"]
GoldMode = Literal["auto", "hash", "boxed", "raw"]
EXTRACT_MODES = get_args(ExtractMode)
GOLD_MODES = get_args(GoldMode)

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
    starts = [m.start() for m in BOX_RE.finditer(text)]
    if not starts:
        return None
    last = box_at(text, starts[-1])
    if last is None:
        return None
    parts, first_start, end = [last[0]], starts[-1], last[1]
    for start in reversed(starts[-20:-1]):
        box = box_at(text, start)
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
    if before in _MARKUP or after in _MARKUP or depth_at(text[lo : m.start()], m.start() - lo) > 0:
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
        inside = any(s < m.start() < e for s, e, _ in envs) or depth_at(text[i:m.start()], m.start() - i) > 0
        if not inside and m.start() > start:
            return m.start()
    return stop


def depth_at(s: str, index: int) -> int:
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
    if BOX_RE.match(text, start):
        return box_at(text, start)
    envs = _math_envs(text[: start + 2000], start)
    if envs and envs[0][0] == start:
        parts, end = [envs[0][2]], envs[0][1]
        for env_start, env_end, content in envs[1:]:  # "$12$ and $13$": one answer
            if not _joins(text[end:env_start]):
                break
            parts.append(content)
            end = env_end
        joined = ", ".join(parts)
        return (boxed_answer(joined) or joined) if BOX_RE.search(joined) else joined, end
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
    if mode in ("auto", "boxed") and BOX_RE.search(text):
        return boxed_answer(text)
    if mode == "boxed":
        return None
    if mode == "auto" and _ANSWER_WORD_RE.search(text):
        found = _phrase_span(text)
        if found is not None:
            return found[0]
    return text or None
