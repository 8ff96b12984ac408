"""Following a copy through edits: where in the history the answer is being copied from.

An answer that edits its prompt (a rename, added annotations, reformatting) copies long stretches
and changes a few tokens in between. A lookup of the history's last n-gram loses the place at
every change, and right after one the last tokens often recur in many places (` =`, `(`, a line's
indentation), so the most recent occurrence is often the wrong one. The cursor keeps the place:
after a change it looks for the answer's latest tokens near where the copy broke off, nearest ahead
first, and it learns each replacement it sees (source ` d` became ` inventory`) to make the same
replacement in its drafts the next time those source tokens come up.
"""

from __future__ import annotations

from bisect import bisect_left

from .ngram_index import NgramIndex

SHARE_WINDOW = 32  # tokens over which the share of copied tokens is averaged


class CopyCursor:
    """The source position being copied from, kept in step with the history token by token.

    While synchronised, the cursor expects the source's next token (or, where a learned replacement
    applies, the replacement's tokens). When the history departs from that, the cursor is lost:
    each later token, for up to `resync_within` tokens, it looks for a suffix of the history that
    also occurs in the source between `back` tokens before and `ahead` tokens after the point where
    the copy broke off, preferring near occurrences and long suffixes (see `_search`), and resumes
    after it. The source tokens skipped and the history tokens written instead become a
    replacement rule, unless either is longer than `rule_max`. A suffix of at least `global_min`
    tokens found anywhere (the most recent occurrence) also resumes a copy, without a rule: the
    answer moved to another part. A rule the history then contradicts is dropped.

    A copy found again near its break counts as an edit of the source (`found_near`) only if the
    copy that broke had run `trust_run` tokens or was itself such an edit: code and prose written
    from scratch repeat short stretches of earlier text by chance, and those copies break at once.
    """

    def __init__(
        self,
        index: NgramIndex,
        *,
        back: int = 32,
        ahead: int = 256,
        resync_within: int = 32,
        rule_max: int = 8,
        global_min: int = 3,
        trust_run: int = 8,
        reach: float = 16.0,
    ):
        self.index = index
        self.back = back
        self.ahead = ahead
        self.resync_within = resync_within
        self.rule_max = rule_max
        self.trust_run = trust_run
        self.reach = reach
        self.global_min = max(global_min, index.n_min)
        self.rules: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._rules_by_first: dict[int, set[tuple[int, ...]]] = {}
        self.copy_share = 0.0  # share of recent tokens the copy predicted: all so far, then the last SHARE_WINDOW or so
        self.followed = 0
        self.source_end = 0  # tokens before this index are a source whose copied tokens are counted in `kept`
        self.kept = 0  # history tokens copied from there (not a learned replacement's)
        self.reset(0)

    # -- state -------------------------------------------------------------------------------

    def reset(self, seen: int) -> None:
        """Forget the position (learned rules stay); follow the history from token `seen` on."""
        self.pos: int | None = None  # source index of the next token to copy, when synchronised
        self.pending: tuple[int, ...] = ()  # a rule's replacement tokens still expected, before pos
        self.rule: tuple[int, ...] | None = None  # the rule those come from
        self.rule_start = 0  # where that rule's source tokens begin
        self.run = 0  # tokens followed since the copy was last (re)found
        self.found_near = False  # (re)found near where it broke off, rather than anywhere
        self.lost_src: int | None = None  # where the copy broke off, while a local resync is tried
        self.lost_hist = 0  # history index of the first token that departed from the copy
        self.lost_run, self.lost_near = 0, False  # how far that copy had run, whether it was an edit
        self.seen = seen

    @property
    def synced(self) -> bool:
        return self.pos is not None

    def follow(self, keep: int) -> None:
        """Bring the cursor up to date with the index's tokens; `keep` is how many leading tokens
        the index had before its last sync (fewer than followed: the history was rewritten)."""
        size = len(self.index.tokens)
        if keep < self.seen:
            self.forget_rules()  # learned from text that is gone (a new prompt, a regenerated answer)
        if keep < self.seen or self.seen == 0:
            self.reset(max(size - 1, 0))
        for h in range(self.seen, size):
            self._follow(h)
        self.seen = size

    # -- following ---------------------------------------------------------------------------

    def _follow(self, h: int) -> None:
        token = self.index.tokens[h]
        copied = False
        if self.pos is not None:
            expected = self._expected(h)
            copied = expected == token
        self.followed += 1
        self.copy_share += (copied - self.copy_share) / min(self.followed, SHARE_WINDOW)
        if copied:
            if not self.pending and self.pos < self.source_end:
                self.kept += 1
            self._advance()
            self.run += 1
            return
        if self.pos is not None:
            self._lose(h)
        self._resync(h)

    def _expected(self, h: int) -> int | None:
        """The token the copy predicts at history index h (None: the source has run out)."""
        if not self.pending:
            self._apply_rule(h)
        if self.pending:
            return self.pending[0]
        return self.index.tokens[self.pos] if self.pos < h else None

    def _apply_rule(self, limit: int) -> None:
        """At the cursor, take the longest learned rule whose source tokens (before `limit`) come next."""
        source, pos = self.index.tokens, self.pos
        for deleted in sorted(self._rules_by_first.get(source[pos], ()) if pos < limit else (), key=len, reverse=True):
            end = pos + len(deleted)
            if end <= limit and tuple(source[pos:end]) == deleted:
                self.rule, self.rule_start = deleted, pos
                self.pending, self.pos = self.rules[deleted], end
                return

    def _advance(self) -> None:
        if self.pending:
            self.pending = self.pending[1:]
        else:
            self.pos += 1
            self.rule = None

    def _lose(self, h: int) -> None:
        """The history departed from the copy at h. At a rule's replacement (or right after a rule
        that deletes), the break counts from the rule's source tokens, and the rule is dropped if
        the history contradicts it: it kept those source tokens, or broke off inside the
        replacement. Departing before the replacement begins is an insertion, not a contradiction."""
        rule = self.rule
        inserted = self.rules.get(rule, ()) if rule is not None else ()
        if rule is not None and (self.pending or not inserted):
            done = len(inserted) - len(self.pending)
            if done > 0 or self.index.tokens[h] == rule[0]:
                self._forget_rule(rule)
            self.lost_src, self.lost_hist = self.rule_start, h - done
        else:
            self.lost_src, self.lost_hist = self.pos, h
        self.lost_run, self.lost_near = self.run, self.found_near
        self.pos, self.pending, self.rule, self.run = None, (), None, 0

    def _resync(self, h: int) -> None:
        """Find the copy again from the history's suffix ending at h: near the break, else anywhere."""
        if self.lost_src is not None and h - self.lost_hist >= self.resync_within:
            self.lost_src = None
        found = self._search(h, local=True) if self.lost_src is not None else None
        found_near = found is not None
        if found is None:
            found = self._search(h, local=False)
            if found is None:
                return
        else:
            self._learn(h, *found)
        n, end = found
        # Trusted as an edit of the source: a copy found again near its break, if that copy was
        # itself an edit or had run `trust_run` tokens (short copies are mostly chance repeats).
        self.found_near = found_near and (self.lost_near or self.lost_run >= self.trust_run)
        self.pos, self.run, self.lost_src = end, n, None
        self.pending, self.rule = (), None

    def _search(self, h: int, *, local: bool) -> tuple[int, int] | None:
        """(n, end) of a suffix of n tokens ending at h that occurred before it (`end`: the position
        after the occurrence). Local: near the break, where a longer match may be farther away, each
        extra matching token halving the distance it is judged by (ahead of the break counts, behind
        it counts double), up to `reach`: one matching token is evidence only close by. Otherwise:
        the longest suffix of at least `global_min` tokens, at its most recent occurrence."""
        index, tokens = self.index, self.index.tokens
        low = index.n_min if local else self.global_min
        best, best_score = None, float("inf")
        for n in range(min(index.n_max, h + 1), low - 1, -1):
            ends = index.ends(tokens[h - n + 1 : h + 1])
            stop = bisect_left(ends, h + 1) if ends else 0  # an occurrence must end before the suffix does
            if stop == 0:
                continue
            if not local:
                return n, ends[stop - 1]
            start = self.lost_src
            i = bisect_left(ends, start, 0, stop)
            scale = 2.0 ** (n - 1)
            if i < stop and ends[i] - start <= self.ahead:
                score = (ends[i] - start) / scale
                if score <= self.reach and score < best_score:
                    best, best_score = (n, ends[i]), score
            if i > 0 and start - ends[i - 1] <= self.back:
                score = 2 * (start - ends[i - 1]) / scale
                if score <= self.reach and score < best_score:
                    best, best_score = (n, ends[i - 1]), score
        return best

    # -- rules -------------------------------------------------------------------------------

    def _learn(self, h: int, n: int, end: int) -> None:
        """The source between the break and the match was replaced by the history's tokens between
        the departure and the match."""
        tokens = self.index.tokens
        src_end, hist_end = end - n, h + 1 - n
        if src_end <= self.lost_src or hist_end < self.lost_hist:
            return  # an insertion (no source tokens skipped), or a match that reaches back
        deleted = tuple(tokens[self.lost_src : src_end])
        inserted = tuple(tokens[self.lost_hist : hist_end])
        if len(deleted) > self.rule_max or len(inserted) > self.rule_max or deleted == inserted:
            return
        known = self.rules.get(deleted)
        if known is not None and len(inserted) > len(known) and inserted[len(inserted) - len(known) :] == known:
            return  # tokens inserted before a known replacement: the rule stands
        self._add_rule(deleted, inserted)

    def _add_rule(self, deleted: tuple[int, ...], inserted: tuple[int, ...]) -> None:
        self.rules[deleted] = inserted
        self._rules_by_first.setdefault(deleted[0], set()).add(deleted)

    def forget_rules(self) -> None:
        self.rules.clear()
        self._rules_by_first.clear()

    def _forget_rule(self, deleted: tuple[int, ...]) -> None:
        self.rules.pop(deleted, None)
        group = self._rules_by_first.get(deleted[0])
        if group is not None:
            group.discard(deleted)

    # -- drafting ----------------------------------------------------------------------------

    def draft(self, k: int) -> list[int]:
        """Up to k tokens continuing the copy with the learned rules applied (none while lost); a
        copy that reaches the history's end runs on through its own draft (a repeating pattern)."""
        if self.pos is None or k <= 0:
            return []
        tokens = self.index.tokens
        size = len(tokens)
        saved = (self.pos, self.pending, self.rule, self.rule_start)  # drafting walks the cursor ahead
        out: list[int] = []
        try:
            while len(out) < k:
                if not self.pending and self.pos < size:
                    self._apply_rule(size)
                if self.pending:
                    out.append(self.pending[0])
                    self.pending = self.pending[1:]
                    continue
                src = self.pos
                if src >= size + len(out):
                    break
                out.append(tokens[src] if src < size else out[src - size])
                self.pos += 1
        finally:
            self.pos, self.pending, self.rule, self.rule_start = saved
        return out
