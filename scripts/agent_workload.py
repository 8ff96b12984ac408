"""A coding agent's chat workload against an OpenAI-compatible server, timed as its user feels it.

Coding agents and editors' chat panels resend the whole conversation with every request: the system
prompt, every earlier message and the answers the server gave. And the answers they ask for copy
earlier text: "reply with the complete file" after a small edit. A server that keeps the cache of a
conversation's prompt computes only the new tail of it, and speculative decoding by prompt lookup
drafts the copied text from the prompt: this workload is where both pay off, and it measures what a
user waits for, the first token of each answer, and how long the whole session takes.

Three fixed conversations (scripts/data/agent_workload.json, so the benchmark never drifts):
follow-up edits of a small module, a refactor of a larger one across turns, and a failing test fixed
from pasted tool output (pytest's log, a traceback, grep). They are played interleaved turn by turn
(A1, B1, C1, A2, B2, ...), one request at a time, as a user switching between three chats does: a
server that keeps only its last prompt's cache computes each conversation's whole history again on
every turn; one that keeps several prompts' prefixes computes only what is new.

Each request streams (`stream_options.include_usage`); the client measures the time to the first
token and to the last, and keeps what the server reports of its cache and drafts: `cache_n`,
`prompt_n`, `draft_n` and `draft_n_accepted`, from llama-server's `timings` object or from `usage`.
The same client serves specrun's server and llama.cpp's llama-server; give each one slot:

    specrun serve --parallel 1 --port 8080
    python scripts/agent_workload.py --url http://127.0.0.1:8080 --label "specrun auto" --out specrun.json

    llama-server -m TARGET.gguf --parallel 1 --port 8081 --spec-type ngram-mod
    python scripts/agent_workload.py --url http://127.0.0.1:8081 --label "llama-server ngram-mod" --out llama.json

(llama-server's speculative-decoding flags change between versions: see its `--help`.) The table goes
to stdout, a progress line per request to stderr; `--out` writes the records and summary as JSON.

Standard library only; run it with the Python of specrun's venv or any Python 3.10+.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

DATA = Path(__file__).resolve().parent / "data" / "agent_workload.json"
SCHEMA = "specrun.agent-workload/1"
SERVER_FIELDS = ("cache_n", "prompt_n", "draft_n", "draft_n_accepted")  # what servers report, where they do
PROG = "agent_workload"


class WorkloadError(Exception):
    """A failure worth one line on stderr (an unreachable server, an error answer, a bad data file)."""


@dataclass(frozen=True)
class Conversation:
    """One fixed conversation: its name, the system message and the user turns, files filled in."""

    name: str
    system: str
    turns: tuple[str, ...]


@dataclass
class Answer:
    """One streamed answer as the client saw it; times in seconds from the request's start."""

    text: str
    started: float  # time.perf_counter() when the request was sent
    ttft_s: float | None  # None: no content came at all
    total_s: float
    completion_tokens: int
    completion_tokens_from: str  # "usage", or "chunks" where the server sent no usage
    prompt_tokens: int | None
    finish_reason: str | None
    server: dict[str, int] = field(default_factory=dict)  # SERVER_FIELDS the server sent


def load_conversations(path: str | Path = DATA) -> list[Conversation]:
    """The conversations of a data file; `{file:NAME}` in a turn stands for the text of that file, kept
    once in the file so that every turn quoting it quotes the same text."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise WorkloadError(f"cannot read the conversations in {path}: {error}") from None
    try:
        system = data["system"]
        conversations = []
        for entry in data["conversations"]:
            turns = []
            for text in entry["turns"]:
                for name, body in entry.get("files", {}).items():
                    text = text.replace("{file:" + name + "}", body)
                if "{file:" in text:
                    raise WorkloadError(f"{path}: a turn of {entry['name']!r} names a file the conversation lacks")
                turns.append(text)
            conversations.append(Conversation(entry["name"], system, tuple(turns)))
    except (KeyError, TypeError, AttributeError) as error:
        raise WorkloadError(f"{path}: not a conversations file ({type(error).__name__}: {error})") from None
    names = [c.name for c in conversations]
    if len(set(names)) != len(names):
        raise WorkloadError(f"{path}: two conversations share a name ({', '.join(names)})")
    return conversations


def interleaved(conversations: Sequence[Conversation], turns: int | None = None) -> Iterator[tuple[Conversation, int]]:
    """(conversation, turn index from 0) in the order a user switching between chats sends them: every
    conversation's first turn, then every second turn, and so on; a conversation out of turns drops out.
    `turns` limits the turns per conversation."""
    limit = max((len(c.turns) for c in conversations), default=0)
    if turns is not None:
        limit = min(limit, turns)
    for index in range(limit):
        for conversation in conversations:
            if index < len(conversation.turns):
                yield conversation, index


def _describe(error: BaseException) -> str:
    """An exception in a few words, without the errno prefix where there is a message."""
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


def error_message(body: bytes) -> str:
    """The message of an error answer: OpenAI's envelope (`{"error": {"message": ...}}`, as both servers
    send it), a bare `message` or `detail`, or else the body's start, on one line."""
    text = body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        inner = data.get("error", data)
        if isinstance(inner, dict):
            inner = inner.get("message") or inner.get("detail") or json.dumps(inner)
        text = str(inner)
    return " ".join(text.split())[:300] or "(empty body)"


def _server_fields(timings: dict, usage: dict) -> dict[str, int]:
    """SERVER_FIELDS from `timings` (llama-server's place for them), else from `usage`; cache_n falls back
    on OpenAI's `usage.prompt_tokens_details.cached_tokens`."""
    out = {}
    for key in SERVER_FIELDS:
        value = timings.get(key, usage.get(key))
        if isinstance(value, int) and not isinstance(value, bool):
            out[key] = value
    details = usage.get("prompt_tokens_details")
    if "cache_n" not in out and isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        out["cache_n"] = details["cached_tokens"]
    return out


def read_events(lines: Iterable[bytes], started: float, timeout: float | None = None) -> Answer:
    """Read a chat completion's server-sent events up to `data: [DONE]` (or the stream's end). The first
    token is the first chunk with content or reasoning_content; the text kept is the content alone, as a
    chat client keeps it for the history. An answer still streaming `timeout` seconds after `started` is
    given up."""
    pieces: list[str] = []
    ttft = None
    chunks = 0
    usage: dict = {}
    timings: dict = {}
    finish = None
    for raw in lines:
        if timeout is not None and time.perf_counter() - started > timeout:
            raise WorkloadError(f"the answer took more than {timeout:g} s (--timeout)")
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line.startswith("data:"):
            continue  # comments, event names, the blank lines between events
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            break
        try:
            event = json.loads(data)
        except ValueError:
            raise WorkloadError(f"the server sent an event that is not JSON: {data[:80]!r}") from None
        if not isinstance(event, dict):
            continue
        if "error" in event:
            raise WorkloadError(f"the server reported an error in the stream: {error_message(data.encode())}")
        choices = event.get("choices") or []
        if choices and isinstance(choices[0], dict):
            choice = choices[0]
            delta = choice.get("delta") or {}
            content = delta.get("content") or ""
            if content or delta.get("reasoning_content"):
                chunks += 1
                if ttft is None:
                    ttft = time.perf_counter() - started
            if content:
                pieces.append(content)
            finish = choice.get("finish_reason") or finish
        if isinstance(event.get("usage"), dict):
            usage = event["usage"]
        if isinstance(event.get("timings"), dict):
            timings = event["timings"]
    total = time.perf_counter() - started
    counted = usage.get("completion_tokens")
    prompt = usage.get("prompt_tokens")
    return Answer(
        text="".join(pieces),
        started=started,
        ttft_s=ttft,
        total_s=total,
        completion_tokens=counted if isinstance(counted, int) else chunks,
        completion_tokens_from="usage" if isinstance(counted, int) else "chunks",
        prompt_tokens=prompt if isinstance(prompt, int) else None,
        finish_reason=finish,
        server=_server_fields(timings, usage),
    )


class Client:
    """Streams chat completions from one server, a new connection per request, so that neither server's
    handling of kept-alive connections enters the timings."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 600.0):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http:// or https:// URL: {url!r}")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port  # ValueError where it is not a number
        base = parts.path.rstrip("/")
        base = base.removesuffix("/v1")  # accept the API's base URL as clients write it
        self.path = f"{base}/v1/chat/completions"
        self.target = f"{parts.scheme}://{parts.netloc}{self.path}"
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def chat(self, body: dict) -> Answer:
        """POST one request and read its stream; WorkloadError with the URL and the reason if it fails."""
        kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        connection = kind(self.host, self.port, timeout=self.timeout)
        payload = json.dumps(body).encode()
        try:
            started = time.perf_counter()
            try:
                connection.request("POST", self.path, payload, self.headers)
            except OSError as error:
                raise WorkloadError(f"cannot reach {self.target}: {_describe(error)}") from None
            try:
                response = connection.getresponse()
                if response.status != 200:
                    message = error_message(response.read())
                    raise WorkloadError(f"{self.target} answered {response.status} {response.reason}: {message}")
                return read_events(response, started, self.timeout)
            except TimeoutError:
                raise WorkloadError(f"{self.target} did not answer within {self.timeout:g} s (--timeout)") from None
            except (OSError, http.client.HTTPException) as error:
                raise WorkloadError(f"{self.target}: the answer broke off ({_describe(error)})") from None
            except WorkloadError as error:
                if str(error).startswith(self.target):
                    raise
                raise WorkloadError(f"{self.target}: {error}") from None
        finally:
            connection.close()


def run(
    client: Client,
    conversations: Sequence[Conversation],
    *,
    model: str = "default",
    max_tokens: int = 96,
    temperature: float = 0.0,
    seed: int | None = None,
    turns: int | None = None,
    progress: TextIO | None = None,
) -> list[dict]:
    """Play the conversations interleaved, one request at a time, each resending its conversation's whole
    history with the answers the server gave. A record per request; start_s and end_s count from the
    first request sent."""
    histories = {c.name: [{"role": "system", "content": c.system}] for c in conversations}
    order = list(interleaved(conversations, turns))
    records: list[dict] = []
    origin = None
    for number, (conversation, index) in enumerate(order, 1):
        messages = histories[conversation.name]
        messages.append({"role": "user", "content": conversation.turns[index]})
        body = {
            "model": model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if seed is not None:
            body["seed"] = seed
        answer = client.chat(body)
        messages.append({"role": "assistant", "content": answer.text})
        origin = answer.started if origin is None else origin
        start = answer.started - origin
        record = {
            "conversation": conversation.name,
            "turn": index + 1,
            "prompt_tokens": answer.prompt_tokens,
            **{key: answer.server.get(key) for key in SERVER_FIELDS},
            "ttft_s": None if answer.ttft_s is None else round(answer.ttft_s, 6),
            "total_s": round(answer.total_s, 6),
            "completion_tokens": answer.completion_tokens,
            "completion_tokens_from": answer.completion_tokens_from,
            "finish_reason": answer.finish_reason,
            "start_s": round(start, 6),
            "end_s": round(start + answer.total_s, 6),
            "answer": answer.text,
        }
        records.append(record)
        if progress is not None:
            print(f"[{number}/{len(order)}] {progress_line(record)}", file=progress, flush=True)
    return records


def _number(value: float | int | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.{digits}f}"


def progress_line(record: dict) -> str:
    """One request in a line, for stderr while the run goes on."""
    cache = "" if record["cache_n"] is None else f", cache_n {record['cache_n']}"
    return (
        f"{record['conversation']} turn {record['turn']}: prompt {_number(record['prompt_tokens'])} tokens{cache}, "
        f"TTFT {_number(record['ttft_s'])} s, total {_number(record['total_s'])} s, "
        f"{record['completion_tokens']} tokens"
    )


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _known_sum(records: Sequence[dict], key: str) -> int | None:
    """The sum of a field over the records that have it; None where none has."""
    values = [r[key] for r in records if r.get(key) is not None]
    return sum(values) if values else None


def summarize(records: Sequence[dict]) -> dict:
    """What a user feels over the run: the mean time to the first token on first turns (nothing cached
    but the system prompt) and on later turns (the history resent), and the makespan, from the first
    request sent to the last answer; with the token counts and the server's cache and draft totals."""
    first = [r["ttft_s"] for r in records if r["turn"] == 1 and r["ttft_s"] is not None]
    later = [r["ttft_s"] for r in records if r["turn"] >= 2 and r["ttft_s"] is not None]
    later_known = [r for r in records if r["turn"] >= 2 and r["cache_n"] is not None and r["prompt_tokens"]]
    cached_later = sum(r["cache_n"] for r in later_known)
    prompt_later = sum(r["prompt_tokens"] for r in later_known)
    drafted, accepted = _known_sum(records, "draft_n"), _known_sum(records, "draft_n_accepted")
    return {
        "requests": len(records),
        "first_turns": len(first),
        "first_turn_ttft_mean_s": _mean(first),
        "later_turns": len(later),
        "later_turn_ttft_mean_s": _mean(later),
        "makespan_s": max(r["end_s"] for r in records) - min(r["start_s"] for r in records) if records else 0.0,
        "completion_tokens": sum(r["completion_tokens"] for r in records),
        "prompt_tokens": _known_sum(records, "prompt_tokens"),
        "cache_n": _known_sum(records, "cache_n"),
        "later_turn_cache_share": cached_later / prompt_later if prompt_later else None,
        "draft_n": drafted,
        "draft_n_accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted and accepted is not None else None,
    }


def format_table(records: Sequence[dict], summary: dict, title: str | None = None) -> str:
    """The per-turn table in markdown, then the summary lines."""
    lines = [f"**{title}**", ""] if title else []
    lines += [
        "| conversation | turn | prompt tokens | cache_n | TTFT s | total s | completion tokens |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        cells = (r["prompt_tokens"], r["cache_n"], r["ttft_s"], r["total_s"], r["completion_tokens"])
        lines.append(f"| {r['conversation']} | {r['turn']} | " + " | ".join(_number(c) for c in cells) + " |")
    lines += [
        "",
        f"- mean TTFT, first turns: {_number(summary['first_turn_ttft_mean_s'])} s ({summary['first_turns']} turns)",
        f"- mean TTFT, later turns: {_number(summary['later_turn_ttft_mean_s'])} s ({summary['later_turns']} turns)",
        f"- makespan: {summary['makespan_s']:.3f} s ({summary['requests']} requests)",
        f"- completion tokens: {summary['completion_tokens']}",
    ]
    if summary["later_turn_cache_share"] is not None:
        lines.append(f"- prompt tokens from the cache, later turns: {summary['later_turn_cache_share']:.0%}")
    if summary["draft_n"] is not None:
        rate = "" if summary["acceptance_rate"] is None else f" ({summary['acceptance_rate']:.0%})"
        accepted = _number(summary["draft_n_accepted"])
        lines.append(f"- drafted tokens: {summary['draft_n']}, accepted: {accepted}{rate}")
    return "\n".join(lines)


def write_json(path: str | Path, document: dict) -> None:
    """Write the document atomically (a temporary file beside it, then renamed over it), so that a reader
    never sees half a file."""
    path = Path(path)
    handle = tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", delete=False)
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(handle.name, 0o666 & ~mask)  # as a plain open() would have made it, not the temporary file's 0600
        with handle:
            json.dump(document, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


def _url(text: str) -> str:
    try:
        Client(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _number_type(convert, test, wanted: str):
    """An argparse type: `convert` the text, then check it, with argparse's usage line on a failure."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not test(value):
            raise argparse.ArgumentTypeError(f"must be {wanted}, not {text}")
        return value

    return parse


_positive_int = _number_type(int, lambda v: v >= 1, "at least 1")
_non_negative_float = _number_type(float, lambda v: 0 <= v < float("inf"), "0 or more")
_positive_float = _number_type(float, lambda v: 0 < v < float("inf"), "more than 0")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Play three coding conversations, interleaved turn by turn, against an OpenAI-compatible "
        "chat server (specrun serve, llama-server) and time what a user feels: the first token of each answer "
        "and the whole session.",
    )
    p.add_argument("--url", required=True, type=_url, help="the server's base URL, e.g. http://127.0.0.1:8080")
    p.add_argument(
        "--model", metavar="NAME", default="default", help="the request's model field (default: %(default)s)"
    )
    p.add_argument(
        "--max-tokens",
        metavar="N",
        type=_positive_int,
        default=96,
        help="max_tokens of each answer (default: %(default)s)",
    )
    p.add_argument(
        "--temperature",
        metavar="T",
        type=_non_negative_float,
        default=0.0,
        help="sampling temperature (default: %(default)s)",
    )
    p.add_argument("--seed", metavar="N", type=int, default=None, help="the request's seed field (default: none sent)")
    p.add_argument("--api-key", metavar="KEY", default=None, help="sent as 'Authorization: Bearer KEY' (default: none)")
    p.add_argument(
        "--label", metavar="NAME", default=None, help="a name for the run, e.g. 'specrun auto' (in the table and JSON)"
    )
    p.add_argument("--out", metavar="FILE.json", default=None, help="write the records and summary as JSON")
    p.add_argument(
        "--turns",
        metavar="N",
        type=_positive_int,
        default=None,
        help="play at most N turns of each conversation (default: all)",
    )
    p.add_argument(
        "--timeout",
        metavar="S",
        type=_positive_float,
        default=600.0,
        help="seconds one request may take before the run stops (default: %(default)g)",
    )
    p.add_argument(
        "--data",
        metavar="FILE",
        default=str(DATA),
        help="the conversations file (default: scripts/data/agent_workload.json)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        client = Client(args.url, api_key=args.api_key, timeout=args.timeout)
        conversations = load_conversations(args.data)
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        records = run(
            client,
            conversations,
            model=args.model,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            seed=args.seed,
            turns=args.turns,
            progress=sys.stderr,
        )
        summary = summarize(records)
        print(format_table(records, summary, title=f"{args.label or 'run'}: {args.url}"))
        if args.out:
            document = {
                "schema": SCHEMA,
                "label": args.label,
                "url": args.url,
                "started_at": started_at,
                "settings": {
                    "model": args.model,
                    "max_tokens": args.max_tokens,
                    "temperature": args.temperature,
                    "seed": args.seed,
                    "turns": args.turns,
                    "timeout_s": args.timeout,
                    "data": str(args.data),
                    "conversations": [c.name for c in conversations],
                },
                "records": records,
                "summary": summary,
            }
            try:
                write_json(args.out, document)
            except OSError as error:
                raise WorkloadError(f"cannot write {args.out}: {_describe(error)}") from None
    except WorkloadError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
