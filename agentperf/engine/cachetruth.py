"""Cache truth: how much of each prompt a prefix cache could have reused, how much the
server says it reused, and whether the two add up (docs/metrics.md "Cache truth").

Pure functions of one trial's records, the dataset's trajectories and, where they were
scraped, the server's counters at the window's edges:

- **theoretical**: per request, the leading messages it shares with an earlier request of
  its own session (the namespace line makes every session's prefix its own), in the
  server's tokens: the earlier request's own ``prompt_tokens`` when that whole prompt is a
  prefix of this one, else this request's ``prompt_tokens`` scaled by the local counts of
  the shared messages;
- **observed**: the server's ``usage.prompt_tokens_details.cached_tokens``, else llama.cpp's
  ``timings.cache_n``; over the window, and the counters' deltas beside them;
- **verdict**: observed above theoretical (plus the stated slack) fails, far below it is
  flagged, and the counters must agree with the requests' own reports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from agentperf.engine.trajectory import Message, Trajectory

if TYPE_CHECKING:  # metrics.TrialSummary carries a CacheTruth: no import cycle at run time
    from agentperf.engine.metrics import RequestRecord

# RequestRecord.extra key on a primed session's first request: the turn whose prompt the
# replay put in the cache before the trial (agentperf.engine.replay, ReplayConfig.prime_cache).
PRIMED_TURN = "primed_turn"

# The tolerance (docs/metrics.md "Cache truth"). Per request, tokens an honest server may
# find cached beyond the shared messages: chat-template tokens ahead of the namespace line
# (BOS, a role header, a default system prompt) and a cache block completed by a chance
# match of the live answer with the recorded one.
SLACK_TOKENS_PER_REQUEST = 64
# Of the theoretical total: the local-count scaling of partly shared prompts.
SLACK_FRACTION = 0.02
# Observed below this share of theoretical is flagged (cache too small, or evicted).
FLAG_RATIO = 0.5
# The requests' hit share and the counters' (Δhits / Δqueries) agree within this many
# points of share.
CONSERVATION_TOLERANCE = 0.05

PASS = "pass"
FLAGGED = "flagged"
FAIL = "fail"
NOT_CHECKED = "not_checked"
VERDICTS = (PASS, FLAGGED, FAIL, NOT_CHECKED)
AGREES = "agrees"
DISAGREES = "disagrees"

SOURCE_USAGE = "usage"  # usage.prompt_tokens_details.cached_tokens
SOURCE_TIMINGS = "timings"  # llama.cpp's final timings.cache_n

# Counter names as agentperf.verification.speculative.parse_metrics keeps them (`_total`
# stripped, summed over label sets). vLLM counts queried and hit tokens; llama.cpp counts
# the prompt tokens it processed and those it took from its cache.
VLLM_HITS = "vllm:prefix_cache_hits"
VLLM_QUERIES = "vllm:prefix_cache_queries"
LLAMACPP_CACHED = "llamacpp:prompt_tokens_cached"
LLAMACPP_PROCESSED = "llamacpp:prompt_tokens"
_CREATED = "_created"  # a counter's creation time: a changed one is a reset

_RANK = {PASS: 0, NOT_CHECKED: 0, FLAGGED: 1, FAIL: 2}


class CacheCounters(BaseModel):
    """The server's prefix-cache counters over the window, against the requests' reports."""

    model_config = ConfigDict(extra="forbid")

    status: str  # agrees | disagrees | not_checked
    reason: str = ""
    source: str | None = None  # "vllm" | "llamacpp"
    hits: float | None = None  # Δ hit tokens
    queries: float | None = None  # Δ queried tokens
    hit_share: float | None = None  # Δhits / Δqueries
    # the requests' share (observed / prompt tokens) minus the counters' share
    difference: float | None = None
    # the difference allowed: CONSERVATION_TOLERANCE + the window's edge share
    # (CacheTruth.edge_tokens / prompt tokens)
    tolerance: float | None = None


class CacheTruth(BaseModel):
    """One trial's cache truth over its window (docs/metrics.md "Cache truth"); token
    figures are the server's tokens."""

    model_config = ConfigDict(extra="forbid")

    verdict: str  # pass | flagged | fail | not_checked
    reasons: list[str]
    requests: int  # successful window requests with a prompt_tokens count
    reporting: int  # of which reported a cached count
    source: str | None  # where the observed counts came from (usage | timings)
    prompt_tokens: int
    theoretical_tokens: int
    observed_tokens: int | None  # None: the server reported no cached count
    slack_tokens: int
    ratio: float | None  # observed / theoretical
    theoretical_share: float | None  # theoretical / prompt tokens
    observed_share: float | None  # observed / prompt tokens
    requests_over_bound: int  # requests whose own report exceeds their bound and slack
    examples: list[dict[str, Any]]  # a few of those (request, turn, prompt, reported, bound)
    counters: CacheCounters | None = None  # None: no scrape of the server's counters
    # prompt tokens of requests whose prompt was in flight at a window edge (sent before it,
    # first token after it): the scrape at that edge may count them on either side
    edge_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass(slots=True, frozen=True)
class RequestBound:
    """One request's theoretical reusable prefix (server tokens) and its slack."""

    theoretical: float
    slack: float
    shared_messages: int


class _Prompts:
    """One trajectory's prompts, local counts and tools sizes, computed once and shared by
    every session that replays it."""

    __slots__ = ("trajectory", "prompts", "counts", "keeps", "_cum", "_tools", "_count_tools")

    def __init__(self, trajectory: Trajectory, count_tools: Callable[[Any], int]) -> None:
        self.trajectory = trajectory
        self.prompts: list[list[Message]] = list(trajectory.iter_prompts())
        self.counts = list(trajectory.iter_prompt_message_tokens())
        self.keeps = [t.keep_messages for t in trajectory.turns]
        self._cum: dict[int, list[int]] = {}
        self._tools: dict[int, int] = {}
        self._count_tools = count_tools

    def cum(self, k: int) -> list[int] | None:
        """cum[m] = local tokens of turn k's first m messages (None: no local counts)."""
        counts = self.counts[k]
        if counts is None:
            return None
        found = self._cum.get(k)
        if found is None:
            found = [0]
            for n in counts:
                found.append(found[-1] + n)
            self._cum[k] = found
        return found

    def tools(self, k: int) -> int:
        """Local tokens of turn k's tools, counted once per tools block (turns without
        their own share the trajectory's)."""
        tools = self.trajectory.tools_for(k)
        if not tools:
            return 0
        found = self._tools.get(id(tools))
        if found is None:
            found = self._tools[id(tools)] = self._count_tools(tools)
        return found

    def shared(self, j: int, k: int, kept: int) -> int:
        """Leading messages turn j's and turn k's prompts have equal, knowing the first
        ``kept`` are (every turn between them kept at least that many)."""
        a, b = self.prompts[j], self.prompts[k]
        end = len(a) if len(a) < len(b) else len(b)
        m = kept if kept < end else end
        while m < end and (a[m] is b[m] or a[m] == b[m]):
            m += 1
        return m


def _tools_counter() -> Callable[[Any], int]:
    from agentperf.engine.tokens import shared_counter

    counter = shared_counter()
    return lambda tools: counter.count_tools(tools)


def request_bounds(
    records: Sequence[RequestRecord],
    trajectories: Mapping[str, Trajectory],
    *,
    count_tools: Callable[[Any], int] | None = None,
    window: tuple[int, int] | None = None,
) -> dict[str, RequestBound]:
    """The theoretical reusable prefix of every successful request with a prompt_tokens
    count (sent inside ``window`` [W0, W1) when given), by request id (docs/metrics.md
    "Cache truth").

    A request can reuse the leading messages it shares with a request its own session sent
    before it (sessions: agent, session and trajectory; a session's namespace line is its
    own). In server tokens: the earlier request's ``prompt_tokens`` when its whole prompt is
    a prefix of this one (the server itself counted that prefix and its template's
    assistant header), else this request's ``prompt_tokens`` × the local tokens of the
    shared messages (tools included) ÷ its local total, unless they lie within such a whole
    earlier prompt (whose count bounds them). A session's first request is given the tools
    block, which a template may render ahead of the namespace line. A primed session's
    first request (virtual time: ``extra["primed_turn"]``) also finds the primed turn.
    ``records`` are one trial's: the search salts each trial's namespaces.
    """
    count = count_tools or _tools_counter()
    indexes: dict[str, _Prompts] = {}
    earlier_of: dict[tuple[int, str, str], list[_Earlier]] = {}
    out: dict[str, RequestBound] = {}
    for r in sorted(records, key=lambda r: r.t_send_ns):
        trajectory = trajectories.get(r.trajectory_id)
        if trajectory is None or not 0 <= r.turn_index < len(trajectory.turns):
            continue
        index = indexes.get(trajectory.id)
        if index is None:
            index = indexes[trajectory.id] = _Prompts(trajectory, count)
        earlier = earlier_of.setdefault((r.agent_id, r.session_id, r.trajectory_id), [])
        primed = (r.extra or {}).get(PRIMED_TURN)
        if not earlier and isinstance(primed, int) and 0 <= primed < len(trajectory.turns):
            _sent(earlier, index, primed, None)  # the replay put that turn's prompt in the cache
        if r.ok and r.n_in and (window is None or window[0] <= r.t_send_ns < window[1]):
            out[r.request_id] = _bound(index, r, earlier)
        _sent(earlier, index, r.turn_index, r.n_in)
    return out


# An earlier request of a session: (turn, its prompt_tokens, and over it and every request
# the session sent before it: the most prompt_tokens and the longest prompt in messages)
_Earlier = tuple[int, int | None, int, int]


def _sent(earlier: list[_Earlier], index: _Prompts, turn: int, n_in: int | None) -> None:
    most_in, longest = (earlier[-1][2], earlier[-1][3]) if earlier else (0, 0)
    length = len(index.prompts[turn])
    earlier.append((turn, n_in, max(most_in, n_in or 0), max(longest, length)))


class _Scale:
    """Server tokens of a request's leading messages: its prompt_tokens × their local
    tokens (tools and the namespace line included: they come first) ÷ its local total.
    Read lazily: most requests never need it."""

    __slots__ = ("_index", "_r", "cum", "head", "total", "n_in", "tools", "_ready")

    def __init__(self, index: _Prompts, r: RequestRecord) -> None:
        self._index, self._r = index, r
        self.n_in = float(r.n_in or 0)
        self._ready = False
        self.cum: list[int] | None = None
        self.head = self.total = self.tools = 0

    def _load(self) -> None:
        index, r = self._index, self._r
        self.cum = index.cum(r.turn_index)
        if self.cum is not None:
            self.tools = index.tools(r.turn_index)
            namespace = 0
            if r.local_prompt_tokens is not None:
                namespace = max(0, r.local_prompt_tokens - self.cum[-1])
            self.head = self.tools + namespace
            self.total = self.cum[-1] + self.head
        self._ready = True

    def of(self, m: int) -> float:
        """The first m messages (the whole prompt without local counts)."""
        if not self._ready:
            self._load()
        if self.cum is None or self.total <= 0:
            return self.n_in
        return self.n_in * (self.cum[m] + self.head) / self.total

    def of_tools(self) -> float:
        if not self._ready:
            self._load()
        return self.n_in * self.tools / self.total if self.tools and self.total > 0 else 0.0


def _bound(index: _Prompts, r: RequestRecord, earlier: list[_Earlier]) -> RequestBound:
    k, n_in = r.turn_index, r.n_in or 0
    scale = _Scale(index, r)
    prompts, keeps = index.prompts, index.keeps
    length = len(prompts[k])
    # best: the most any earlier request allows so far; covered: the most messages of this
    # prompt inside a whole earlier prompt counted in best (the server's count of that
    # prompt bounds any prefix of it, so fewer shared messages cannot beat best)
    best, best_m, covered = 0.0, 0, 0
    # Turn j's and turn k's prompts share at least the fewest messages any turn between
    # them kept; folded in from k down. Any lower start is still exact (``shared``
    # compares on from it).
    running, cursor = length, k + 1
    for j, j_in, most_in, longest in reversed(earlier):
        # nothing sent before j, nor j, can beat the best: done (exact, not a heuristic)
        reach = longest if longest < length else length
        if most_in <= best and (reach <= covered or scale.of(reach) <= best):
            break
        if j < k:
            while cursor > j + 1:
                cursor -= 1
                if keeps[cursor] < running:
                    running = keeps[cursor]
            kept = running
        else:
            kept = min(keeps[k + 1 : j + 1], default=length)
        m = index.shared(j, k, kept)
        if m == 0:
            continue
        if m > best_m:
            best_m = m
        if m == len(prompts[j]) and j_in:
            best = max(best, float(j_in))
            covered = max(covered, m)
        elif m > covered:
            best = max(best, scale.of(m))
    if best_m == 0:
        # nothing of the session's own before: a template may still render the tools ahead
        # of the namespace line, where every session shares them (the simulator does)
        best = scale.of_tools()
    return RequestBound(
        theoretical=min(best, float(n_in)),
        slack=float(SLACK_TOKENS_PER_REQUEST),
        shared_messages=best_m,
    )


def observed_cached(record: RequestRecord) -> tuple[int, str] | None:
    """(cached tokens the server reported for ``record``, where): usage's cached_tokens,
    else llama.cpp's timings.cache_n; None when it reported neither."""
    if record.n_cached is not None:
        return record.n_cached, SOURCE_USAGE
    timings = (record.extra or {}).get("server_timings")
    if isinstance(timings, dict):
        value = timings.get("cache_n")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value), SOURCE_TIMINGS
    return None


def counter_delta(
    start: Mapping[str, float] | None, end: Mapping[str, float] | None
) -> tuple[str, float, float] | str:
    """(source, Δhits, Δqueries) of the server's prefix-cache counters over the window,
    or why they cannot be trusted: not scraped, not exported, or reset (a counter that went
    backwards or was created again is never read as a delta)."""
    if start is None or end is None:
        return "the server's counters were not scraped at both window edges"
    s = {k.removesuffix("_total"): v for k, v in start.items()}
    e = {k.removesuffix("_total"): v for k, v in end.items()}
    if VLLM_QUERIES in s and VLLM_QUERIES in e:
        source, names = "vllm", (VLLM_HITS, VLLM_QUERIES)
    elif LLAMACPP_CACHED in s and LLAMACPP_CACHED in e:
        source, names = "llamacpp", (LLAMACPP_CACHED, LLAMACPP_PROCESSED)
    else:
        return "the server exports no prefix-cache counters"
    for name in names:
        if name not in s or name not in e:
            return f"{name} missing at a window edge"
        if e[name] < s[name]:
            return f"{name} went backwards over the window (a reset): not trusted"
        created = name + _CREATED
        if created in s and created in e and s[created] != e[created]:
            return f"{name} was created again over the window (a reset): not trusted"
    first, second = (e[n] - s[n] for n in names)
    if source == "vllm":
        hits, queries = first, second
    else:  # llama.cpp: cached and processed prompt tokens
        hits, queries = first, first + second
    if queries <= 0:
        return "no prompt tokens counted over the window"
    return source, hits, queries


def summarize_cache_truth(
    records: Sequence[RequestRecord],
    trajectories: Mapping[str, Trajectory] | Sequence[Trajectory],
    *,
    window_start_ns: int,
    window_end_ns: int,
    counters_start: Mapping[str, float] | None = None,
    counters_end: Mapping[str, float] | None = None,
    count_tools: Callable[[Any], int] | None = None,
) -> CacheTruth:
    """One trial's cache truth over [W0, W1) (docs/metrics.md "Cache truth"). The
    counters, where given, are the server's /metrics at the window's edges as
    ``parse_metrics`` keeps them; without them the counters are not judged."""
    by_id = trajectories if isinstance(trajectories, Mapping) else {t.id: t for t in trajectories}
    bounds = request_bounds(
        records, by_id, count_tools=count_tools, window=(window_start_ns, window_end_ns)
    )
    judged = [r for r in records if r.request_id in bounds]
    seen = {r.request_id: observed_cached(r) for r in judged}
    sources = sorted({found[1] for found in seen.values() if found is not None})
    reporting = sum(1 for found in seen.values() if found is not None)
    theoretical = slack = 0.0
    observed = 0
    over: list[dict[str, Any]] = []
    for r in judged:
        bound = bounds[r.request_id]
        theoretical += bound.theoretical
        slack += bound.slack
        found = seen[r.request_id]
        # a server that reports some requests omits the field on a miss (SGLang): 0
        cached = found[0] if found is not None else 0
        observed += cached
        if reporting and cached > bound.theoretical * (1 + SLACK_FRACTION) + bound.slack:
            over.append(
                {
                    "request_id": r.request_id,
                    "turn": r.turn_index,
                    "prompt_tokens": r.n_in,
                    "reported": cached,
                    "theoretical": round(bound.theoretical),
                }
            )
    prompt = sum(r.n_in or 0 for r in judged)
    truth = CacheTruth(
        edge_tokens=edge_tokens(records, window_start_ns, window_end_ns),
        verdict=NOT_CHECKED,
        reasons=[],
        requests=len(judged),
        reporting=reporting,
        source="+".join(sources) or None,
        prompt_tokens=prompt,
        theoretical_tokens=round(theoretical),
        observed_tokens=observed if reporting else None,
        slack_tokens=round(slack + SLACK_FRACTION * theoretical),
        ratio=observed / theoretical if reporting and theoretical > 0 else None,
        theoretical_share=theoretical / prompt if prompt else None,
        observed_share=observed / prompt if reporting and prompt else None,
        requests_over_bound=len(over),
        examples=sorted(over, key=lambda x: x["theoretical"] - x["reported"])[:5],
    )
    if counters_start is not None or counters_end is not None:
        return with_counters(truth, counters_start, counters_end)
    return judge(truth)


def edge_tokens(records: Sequence[RequestRecord], window_start_ns: int, window_end_ns: int) -> int:
    """Prompt tokens of the requests in flight at either window edge before their first
    token (sent before the edge, first token or end after it): the counters scraped at that
    edge may have counted their prompt before or after it, while the window counts only the
    requests sent in it. Their share of the window's prompt tokens is how far the two hit
    shares can differ by timing alone (docs/metrics.md "Cache truth")."""
    total = 0
    for r in records:
        prompt_done = next(
            (t for t in (r.t_first_ns, r.t_end_ns) if t is not None), window_end_ns + 1
        )
        if any(r.t_send_ns < edge < prompt_done for edge in (window_start_ns, window_end_ns)):
            total += r.n_in or 0
    return total


def conservation_tolerance(truth: CacheTruth) -> float:
    """CONSERVATION_TOLERANCE plus the window's edge share (`edge_tokens`)."""
    edge = truth.edge_tokens / truth.prompt_tokens if truth.prompt_tokens else 0.0
    return CONSERVATION_TOLERANCE + edge


def with_counters(
    truth: CacheTruth,
    start: Mapping[str, float] | None,
    end: Mapping[str, float] | None,
) -> CacheTruth:
    """``truth`` judged again with the server's counters at the window's edges."""
    found = counter_delta(start, end)
    if isinstance(found, str):
        counters = CacheCounters(status=NOT_CHECKED, reason=found)
    else:
        source, hits, queries = found
        share = hits / queries
        difference = truth.observed_share - share if truth.observed_share is not None else None
        tolerance = conservation_tolerance(truth)
        agrees = difference is None or abs(difference) <= tolerance
        counters = CacheCounters(
            status=AGREES if agrees else DISAGREES,
            source=source,
            hits=hits,
            queries=queries,
            hit_share=share,
            difference=difference,
            tolerance=tolerance,
        )
    return judge(truth.model_copy(update={"counters": counters}))


def judge(truth: CacheTruth) -> CacheTruth:
    """The verdict of ``truth`` from its figures (docs/metrics.md "Cache truth")."""
    verdict, reasons = NOT_CHECKED, []
    bound = truth.theoretical_tokens + truth.slack_tokens
    observed = truth.observed_tokens
    if observed is not None:
        verdict = PASS
        if observed > bound:
            verdict = FAIL
            reasons.append(
                f"observed {observed:,} cached tokens > theoretical "
                f"{truth.theoretical_tokens:,} + slack {truth.slack_tokens:,}: more than the "
                "sessions' own prefixes (cache shared across sessions, or hits over-reported)"
            )
        elif truth.ratio is not None and truth.ratio < FLAG_RATIO:
            verdict = FLAGGED
            reasons.append(
                f"observed is {truth.ratio:.0%} of theoretical (< {FLAG_RATIO:.0%}): the "
                "cache is too small, or evicted the sessions' prefixes"
            )
    c = truth.counters
    if c is not None and c.status != NOT_CHECKED and c.hit_share is not None:
        limit = (
            bound / truth.prompt_tokens + conservation_tolerance(truth)
            if truth.prompt_tokens
            else 1
        )
        if observed is None:
            verdict = PASS  # the counters are the only observed figure
        if c.hit_share > limit:
            verdict = FAIL
            reasons.append(
                f"the counters' hit share {c.hit_share:.1%} > the theoretical share "
                f"{bound / max(truth.prompt_tokens, 1):.1%} (with slack): more hits than the "
                "sessions' own prefixes allow"
            )
        tolerance = c.tolerance if c.tolerance is not None else conservation_tolerance(truth)
        if c.difference is not None and c.difference > tolerance:
            verdict = FAIL
            reasons.append(
                f"the requests report a hit share {truth.observed_share:.1%}, the counters "
                f"{c.hit_share:.1%} (allowed {tolerance:.1%} apart): more cached tokens "
                "reported than the cache counted"
            )
        elif c.difference is not None and c.difference < -tolerance:
            if _RANK[verdict] < _RANK[FLAGGED]:
                verdict = FLAGGED
            reasons.append(
                f"the counters' hit share {c.hit_share:.1%} is above the requests' "
                f"{truth.observed_share:.1%}: hits the requests did not report (other "
                "traffic, preemption)"
            )
    if verdict == NOT_CHECKED:
        reasons.append(
            "not checked: the server reported no cached tokens (usage "
            "prompt_tokens_details.cached_tokens, timings.cache_n) and no counters"
        )
    return truth.model_copy(update={"verdict": verdict, "reasons": reasons})


def worst_verdict(verdicts: Sequence[str]) -> str:
    """fail > flagged > pass; not_checked only when nothing was checked."""
    checked = [v for v in verdicts if v != NOT_CHECKED]
    if not checked:
        return NOT_CHECKED
    return max(checked, key=lambda v: _RANK[v])
