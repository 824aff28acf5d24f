"""A scripted sampler for episodes (rlvr.sampling.episodes): shared by tests/unit/test_sampling_episodes.py
and tests/unit/test_plugins_tools_env.py."""

from rlvr.sampling.samplers import Completion


class ScriptedPolicy:
    """A sampler whose turn ``t`` of the episode started from prompt ``p`` is ``script[p][t]`` (token
    ids), cut at the call's max_tokens. Records every request as it was sent."""

    def __init__(self, script: dict[tuple[int, ...], list[list[int]]]):
        self.script, self.requests = script, []

    def generate(self, prompt_ids, *, n, temperature, top_p, max_tokens, seed=None, logprobs=False, stop=()):
        assert n == 1
        limits = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(prompt_ids)
        out = []
        for ids, limit in zip(prompt_ids, limits):
            self.requests.append((list(ids), limit, tuple(stop)))
            prompt = next(p for p in self.script if tuple(ids[: len(p)]) == p)
            # the K episodes of a prompt follow one script: its turn t is the t-th distinct length sent
            turn = sorted({len(r) for r, _, _ in self.requests if tuple(r[: len(prompt)]) == prompt}).index(len(ids))
            tokens = self.script[prompt][turn]
            cut = tokens[:limit]
            out.append([Completion("", cut, truncated=len(tokens) > limit,
                                   logprobs=[-0.5] * len(cut) if logprobs else None)])
        return out
