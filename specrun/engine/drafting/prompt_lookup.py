"""Prompt lookup: draft by copying what followed the latest earlier occurrence of the history's end.

Answers that quote the prompt (code edits, summaries, reformatting) repeat long stretches of it, and
finding them costs microseconds instead of a draft model's decode per token.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..llama import common_prefix
from .copy_cursor import CopyCursor
from .lookup_pool import PoolIndex
from .ngram_index import NgramIndex
from .protocol import Draft


class PromptLookup:
    """One history's prompt lookup. Proposes the continuation of the copy the answer is making of
    earlier text, else of the longest, then most recent, n-gram match of the history's end.

    The copy is followed through edits by a `CopyCursor` (off with `follow_copies=False`): it knows
    where in the prompt the answer is, resumes there after a changed token, and repeats the changes
    it has seen. A copy found again after a change (an edit of the source) may draft up to
    `k_max` tokens. A match of n tokens, or a copy found by chance that has run n tokens, may
    draft up to `draft_length(n)` = 2^(n-1) tokens (capped by `k_max` and k): one matching token
    is weak evidence, a long match usually means the text is being copied. Matches up to 8 tokens
    are looked for because code repeats short runs (indentation, `self.`, closing brackets) in many
    places, and only a longer match finds the place actually being copied. Copying runs on through
    its own draft, so a repeating pattern continues past the history's end.

    Confidence is the chance that each drafted token is accepted, estimated from recent outcomes
    per kind of evidence: the match length n of an n-gram match, or the tokens an edit copy has run
    since it was last found, in buckets of run length (priors in `_prior`). Every outcome decays
    the others by `decay`, so about the last ten carry the estimates: one lookup serves answer
    after answer (a session keeps it), and whether copies hold changes with the answer (an edit of
    the source copies on; a JSON conversion repeats a row's first tokens and breaks), so the
    answer under way must outweigh the last one within a few outcomes. Outcomes come
    from `feedback`, or, when the draft got none (a hybrid or the auto controller chose another
    option, or cut the draft to nothing), from comparing it with the tokens the history gained
    since: the target's own tokens are what a verifier would have checked it against, so the
    estimate stays calibrated while the lookup sits unused. A plain step adds one token, which
    judges only a proposal's first; one unused proposal at a time whose tokens keep coming true is
    followed over later steps, so the tokens after the first are judged too (otherwise a copy
    never drafted is never trusted beyond its priors, and never drafted for that).
    """

    name = "ngram"

    def __init__(
        self,
        ngram_min: int = 1,
        ngram_max: int = 8,
        k_max: int = 16,
        *,
        decay: float = 0.9,
        prior_weight: float = 4.0,
        follow_copies: bool = True,
    ):
        self.index = NgramIndex(ngram_min, ngram_max)
        self.pool: PoolIndex | None = None  # earlier requests' texts, consulted after the history's own
        self.cursor = CopyCursor(self.index) if follow_copies else None
        self.k_max = k_max
        self.decay = decay
        self.prior_weight = prior_weight
        # Per kind of evidence: the first drafted token, and the tokens after an accepted one, apart:
        # matches either fail at once or copy a long run, which one rate per token misjudges.
        self._first: dict[tuple[str, int], list[float]] = {}  # [successes, trials]
        self._rest: dict[tuple[str, int], list[float]] = {}
        self._pending: tuple[int, tuple[str, int], list[int]] | None = None  # (history length, evidence, tokens)
        # An unused proposal whose tokens so far all came true, followed until it breaks or is used
        # up: (history length, evidence, tokens, positions already learned).
        self._watched: tuple[int, tuple[str, int], list[int], int] | None = None
        # Per table and kind: [accepted, what the priors expected] over all its lengths, so a length
        # with few outcomes of its own starts from its prior moved the way its kind has gone.
        self._calibration: dict[tuple[str, str], list[float]] = {}

    def draft_length(self, n: int) -> int:
        """Most tokens a match of length n may draft."""
        return min(self.k_max, 2 ** (n - 1))

    def confidence(self, n: int, position: int = 2, kind: str = "match") -> float:
        """Estimated acceptance of the drafted token at `position`, given that the tokens before it
        were accepted, for a match of length n (kind "match") or a copy that has run n tokens
        ("copy"). The first token is estimated apart from the rest; a later token of a copy is
        judged as a copy that has run that much further."""
        first = position == 1
        key = self._first_key(kind, n) if first else self._rest_key(kind, n, position)
        successes, trials = (self._first if first else self._rest).get(key, (0.0, 0.0))
        w = self.prior_weight
        return (successes + w * self._calibrated_prior(key, first)) / (trials + w)

    def _calibrated_prior(self, key: tuple[str, int], first: bool) -> float:
        """The prior of `key`, lowered by how far its kind's outcomes fell short of their priors:
        evidence is spread over many match lengths, and an answer whose matches keep failing at
        some lengths is no different at the next one. Never raised: a length's own outcomes raise
        its estimate soon enough, while trust lent from other lengths buys long drafts that fail."""
        prior = _prior(key[0], key[1], first=first)
        accepted, expected = self._calibration.get(("first" if first else "rest", key[0]), (0.0, 0.0))
        return prior * min(1.0, (accepted + CALIBRATION_WEIGHT) / (expected + CALIBRATION_WEIGHT))

    def confidences(self, n: int, length: int, kind: str = "match") -> list[float]:
        return [self.confidence(n, j, kind) for j in range(1, length + 1)]

    @staticmethod
    def _first_key(kind: str, n: int) -> tuple[str, int]:
        """The estimate a first token uses. Resuming after an edit is one question however far the
        copy has run again (does this answer edit its source, and did it resume at the right
        place?), so all such resumptions share one estimate, and a few misses correct it."""
        return (kind, 0) if kind == "edit" else (kind, n)

    @staticmethod
    def _rest_key(kind: str, n: int, position: int) -> tuple[str, int]:
        """The estimate a token after the first uses: its match's own, or, in a copy, that of a
        copy which has run the tokens before it."""
        if kind in MATCH_KINDS:
            return kind, n
        return kind, _run_bucket(n + position - 1)

    def propose(self, history: Sequence[int], k: int) -> Draft:
        self.observe(history)
        return self.draft(k)

    def observe(self, history: Sequence[int]) -> None:
        """Take in the history's new tokens: the index, the copy cursor and the outcomes of
        proposals that got no feedback."""
        keep = self.index.sync(history)
        if self.cursor is not None:
            self.cursor.follow(keep)
        self._follow_watched(keep)
        self._check_unused(keep)

    def draft(self, k: int) -> Draft:
        """Up to k tokens from the history observed last."""
        if k <= 0:
            return Draft()
        out, evidence = self._copy(k) or self._match(k) or ([], None)
        if not out:
            return Draft()
        self._pending = (len(self.index.tokens), evidence, out)
        return Draft(out, None, self.confidences(evidence[1], len(out), evidence[0]))

    def _copy(self, k: int) -> tuple[list[int], tuple[str, int]] | None:
        """The cursor's draft. A copy found anywhere by its last few tokens is judged and sized as
        a match of as many tokens as it has run (code and prose repeat short stretches by chance);
        one found again right after a change is an edit of the source and may draft as far as
        allowed, judged by the estimates of such copies."""
        cursor = self.cursor
        if cursor is None:
            return None
        if cursor.synced and (cursor.found_near or cursor.run >= EDIT_SHARE_RUN) and cursor.copy_share >= EDIT_SHARE:
            evidence, limit = ("edit", _run_bucket(cursor.run)), self.k_max
        elif cursor.synced:
            n = min(cursor.run, self.index.n_max)
            evidence, limit = (self._match_kind(), n), self.draft_length(n)
        else:
            return None
        out = cursor.draft(min(k, limit))
        return (out, evidence) if out else None

    def _match(self, k: int) -> tuple[list[int], tuple[str, int]] | None:
        """The longest match of the history's end: in the history itself, or, only when longer, in
        the pool of earlier requests' texts."""
        match = self.index.longest_match()
        pooled = self.pool.match(self.index.tokens) if self.pool is not None else None
        if pooled is not None and (match is None or pooled[0] > match[0]):
            n, end = pooled
            out = self.pool.continuation(end, min(k, self.draft_length(n)))
            if out:
                return out, ("pool", n)
        if match is None:
            return None
        n, end = match
        tokens = self.index.tokens
        size = len(tokens)
        out: list[int] = []
        for i in range(min(k, self.draft_length(n))):
            src = end + i
            out.append(tokens[src] if src < size else out[src - size])
        return out, (self._match_kind(), n)

    def _match_kind(self) -> str:
        """A match in an answer that has been copying most of its recent tokens (an edit of its
        source) is another kind of evidence than one in text written from scratch, where a match
        of several tokens is often a stretch repeated by chance: they are estimated apart."""
        copying = self.cursor is not None and self.cursor.copy_share >= EDIT_SHARE
        return "match+" if copying else "match"

    def state(self) -> dict:
        """What it has learned of its evidence's acceptance, to be kept between runs."""
        state = {
            name: [[kind, n, round(s, 4), round(t, 4)] for (kind, n), (s, t) in table.items()]
            for name, table in (("first", self._first), ("rest", self._rest))
        }
        state["calibration"] = [
            [table, kind, round(a, 4), round(e, 4)] for (table, kind), (a, e) in self._calibration.items()
        ]
        return state

    def restore(self, state: dict, cap: float) -> None:
        """Take up what an earlier run learned, each estimate weighed as at most `cap` trials."""
        for name, table in (("first", self._first), ("rest", self._rest)):
            for row in state.get(name, []):
                try:
                    kind, n, successes, trials = str(row[0]), int(row[1]), float(row[2]), float(row[3])
                except (IndexError, TypeError, ValueError):
                    continue
                scale = min(1.0, cap / trials) if trials > 0 else 1.0
                table[(kind, n)] = [min(successes, trials) * scale, trials * scale]
        for row in state.get("calibration", []):
            try:
                table_name, kind, accepted, expected = str(row[0]), str(row[1]), float(row[2]), float(row[3])
            except (IndexError, TypeError, ValueError):
                continue
            if accepted >= 0 and expected > 0:
                scale = min(1.0, cap / expected)
                self._calibration[(table_name, kind)] = [accepted * scale, expected * scale]

    def feedback(self, drafted: int, accepted: int) -> None:
        """Learn from the verified outcome of the last proposal."""
        self._follow_watched(len(self.index.tokens), now=True)
        if self._pending is not None:
            _, evidence, _ = self._pending
            self._pending = None
            self._learn(evidence, accepted, failed=accepted < drafted)

    def _check_unused(self, keep: int) -> None:
        """Score a proposal that got no feedback against the tokens that followed it."""
        if self._pending is None:
            return
        start, evidence, draft = self._pending
        self._pending = None
        if keep < start:
            return  # the history was rewritten: the outcome is unknown
        actual = self.index.tokens[start : start + len(draft)]
        matched = common_prefix(draft, actual)
        if actual:
            self._learn(evidence, matched, failed=matched < len(actual))
            if matched == len(actual) < len(draft) and self._watched is None:
                self._watched = (start, evidence, draft, matched)

    def _follow_watched(self, keep: int, *, now: bool = False) -> None:
        """Judge the watched proposal's further tokens once it breaks or is used up, or `now` on the
        tokens seen so far (a verified draft is about to be learned from, and it covers what the
        watched proposal would go on to show)."""
        if self._watched is None:
            return
        start, evidence, draft, learned = self._watched
        if keep < start + learned:
            self._watched = None  # the history was rewritten: the outcome is unknown
            return
        actual = self.index.tokens[start : start + len(draft)]
        matched = common_prefix(draft, actual)
        if now or matched < len(actual) or len(actual) == len(draft):
            self._watched = None
            self._learn(evidence, matched, failed=matched < len(actual), learned=learned)

    def _learn(self, evidence: tuple[str, int], successes: int, failed: bool, learned: int = 0) -> None:
        """Learn one outcome: the first `successes` tokens right, and the next one wrong if `failed`.
        The first `learned` positions were learned from already (a proposal followed over steps):
        only those after them are counted, and the estimates are not decayed again for it."""
        kind, n = evidence
        if not learned:
            for table in (self._first, self._rest, self._calibration):
                for row in table.values():
                    row[0] *= self.decay
                    row[1] *= self.decay
            key = self._first_key(kind, n)
            first = self._first.setdefault(key, [0.0, 0.0])
            first[1] += 1
            self._calibrate("first", key, first=True, accepted=bool(successes))
            if not successes:
                return
            first[0] += 1
        for position in range(max(2, learned + 1), successes + 2 if failed else successes + 1):
            key = self._rest_key(kind, n, position)
            row = self._rest.setdefault(key, [0.0, 0.0])
            row[1] += 1
            row[0] += position <= successes
            self._calibrate("rest", key, first=False, accepted=position <= successes)

    def _calibrate(self, table: str, key: tuple[str, int], *, first: bool, accepted: bool) -> None:
        row = self._calibration.setdefault((table, key[0]), [0.0, 0.0])
        row[0] += accepted
        row[1] += _prior(key[0], key[1], first=first)


RUN_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # copy runs are estimated by these lower bounds


def _run_bucket(run: int) -> int:
    """The largest bucket bound not above `run`."""
    bucket = 0
    for bound in RUN_BUCKETS:
        if run >= bound:
            bucket = bound
    return bucket


EDIT_SHARE_RUN = 4
EDIT_SHARE = 0.5  # an answer edits its source when at least this share of its recent tokens were copied
MATCH_KINDS = ("match", "match+", "pool")  # evidence judged by its match length alone
EDIT_FIRST_PRIOR = 0.7  # a copy resumed right after an edit, before any outcome
EDIT_RUN = 4  # its later tokens are trusted as a copy that has run this much further
REST_PRIOR_MAX = 0.93  # no later token is trusted more than this before outcomes say so: copies break
CALIBRATION_WEIGHT = 2.0  # expected acceptances a kind's calibration starts from (at factor 1)


def _prior(kind: str, n: int, first: bool) -> float:
    """Acceptance before any outcome: n/(n+2) for the first token of a match of n tokens, or of a
    copy found by chance that has run n tokens, and n/(n+1) after it. A copy is a match grown
    long: it is trusted only as far as it has run, since copies found by chance (in code written
    from scratch, in prose) are many and short. A copy resumed near where a long copy broke off
    (`edit`: the answer edits its source) starts at EDIT_FIRST_PRIOR for its first token and as
    one that has run EDIT_RUN tokens more after it: edits change a few tokens and copy on."""
    if kind == "edit":
        if first:
            return EDIT_FIRST_PRIOR
        n += EDIT_RUN
    if first or kind in ("match", "pool"):
        return n / (n + 2)
    return min(n / (n + 1), REST_PRIOR_MAX)
