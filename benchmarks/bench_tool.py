"""Throughput of the ``python`` tool (environment ``python``) next to the same programs graded
as plain sandbox jobs.

    .venv/bin/python benchmarks/bench_tool.py [--episodes 300] [--workers N]

Ours: N episodes of the ``python`` environment, each one policy turn with one cell
(``print(sum(range(10)))``), stepped from as many threads as the pool has workers (the way
the episode runner steps environments in parallel). Anchor: the same program as N
``Sandbox.run_many`` jobs in mode "io" (run as ``__main__``, its output checked against
``45``), one batch. Between them, "in a rollout": the same episodes played by rlvr's episode
runner (``rlvr.sampling.episodes``) with a scripted policy (no model: a code turn per cell, then a boxed
answer), so the figure includes the runner's rounds, tokenizing the replies and the threads.
A second row gives episodes of three cells, where the tool replays the earlier cells before
each new one (calls per second counted over all three). The pool is started and warmed
before timing; one shared pool serves all sides.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

from rlvr_plugins import python_env as pe
from rlvr_plugins import sandbox as sb
from rlvr_plugins.sandbox import pool as sb_pool

CELL = "print(sum(range(10)))\n"


def turn(code: str) -> str:
    return f"Let me compute.\n```python\n{code}```\n"


def run_tool(episodes: int, cells: int, threads: int) -> tuple[float, int]:
    """Seconds for ``episodes`` episodes of ``cells`` calls each; the calls that printed 45."""

    def episode(_: int) -> int:
        env = pe.make_python_env({})
        good = 0
        for i in range(cells):
            reply = env.step(turn(f"x{i} = {i}\n" + CELL))
            good += reply.text == "```output\n45\n```\n"
        return good

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        good = sum(pool.map(episode, range(episodes)))
    return time.perf_counter() - start, good


class ScriptedPolicy:
    """A sampler without a model: turn 1 of every episode is a code cell, turn 2 the answer."""

    def __init__(self, tokenizer, cells: int):
        self.turns = [tokenizer.encode(turn(f"x{i} = {i}\n" + CELL), add_special_tokens=False) for i in range(cells)]
        self.answer = tokenizer.encode("So it is \\boxed{45}.", add_special_tokens=False) + [tokenizer.eos_token_id]
        self.lengths: list[int] = []

    def generate(self, prompt_ids, *, n, max_tokens, stop=(), **_):
        from rlvr.sampling.samplers import Completion

        out = []
        for ids in prompt_ids:  # every episode is the same: its turn t is the t-th distinct length asked
            if len(ids) not in self.lengths:
                self.lengths.append(len(ids))
            done = self.lengths.index(len(ids))
            out.append([Completion("", self.turns[done] if done < len(self.turns) else self.answer, False)])
        return out


def run_rollout(episodes: int, cells: int, tokenizer) -> tuple[float, int]:
    """Seconds for one rollout of ``episodes`` episodes through rlvr's episode runner (all live
    episodes' turns in one call, the environments stepped in parallel threads); tool calls made."""
    from rlvr.sampling.episodes import EpisodeRunner

    policy = ScriptedPolicy(tokenizer, cells)
    prompt = tokenizer.encode("What is 0+1+...+9?", add_special_tokens=False)
    runner = EpisodeRunner(pe.make_python_env, {}, tokenizer=tokenizer, max_turns=cells + 1, max_tokens=4096,
                           eos_ids=[tokenizer.eos_token_id])
    start = time.perf_counter()
    _, _, sums = runner.run(policy, [{}] * episodes, [prompt] * episodes, n=1, temperature=1.0, top_p=1.0,
                            max_tokens=512)
    return time.perf_counter() - start, int(sums["env/tool_calls"] - sums["env/tool_errors"])


def run_jobs(box: sb.Sandbox, jobs: int) -> tuple[float, int]:
    start = time.perf_counter()
    results = box.run_many([sb.Job(program=CELL, mode="io", cases=[("", "45")], timeout=5.0) for _ in range(jobs)])
    return time.perf_counter() - start, sum(r.ok for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=300, help="episodes (and io jobs) per row")
    parser.add_argument("--workers", type=int, default=None, help="sandbox workers (default: CPU count)")
    args = parser.parse_args()

    box = sb.Sandbox("bwrap", workers=args.workers)
    sb_pool._SHARED["bwrap"] = box  # the environment uses this pool
    start = time.perf_counter()
    box.start()
    threads = len(box.workers)
    print(f"cpus={os.cpu_count()} workers={threads} limits={box.limits} load={os.getloadavg()[0]:.2f} "
          f"pool start {time.perf_counter() - start:.2f}s", flush=True)
    run_tool(threads, 1, threads)  # warm-up
    run_jobs(box, threads)

    from transformers import AutoTokenizer

    from rlvr.models.hub import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
    n = args.episodes
    for cells in (1, 3):
        tool_s, tool_ok = run_tool(n, cells, threads)
        roll_s, roll_ok = run_rollout(n, cells, tokenizer)
        jobs_s, jobs_ok = run_jobs(box, n * cells)
        tool_rate, roll_rate, jobs_rate = n * cells / tool_s, n * cells / roll_s, n * cells / jobs_s
        print(f"{n} episodes x {cells} cell{'s' if cells > 1 else ' '} | python tool {tool_rate:7.1f} calls/s "
              f"({tool_ok}/{n * cells} ok) | in a rollout {roll_rate:7.1f} calls/s ({roll_ok}/{n * cells} ok) "
              f"| io jobs {jobs_rate:7.1f} jobs/s ({jobs_ok}/{n * cells} ok) "
              f"| ratios {tool_rate / jobs_rate:4.2f}x {roll_rate / jobs_rate:4.2f}x", flush=True)
    print(f"load={os.getloadavg()[0]:.2f}")
    box.close()


if __name__ == "__main__":
    main()
