"""`specrun chat` driven as a person and as a script would: through a pseudo-terminal (live status,
slash commands, Ctrl-C, /save) and through pipes; and in-process, that a turn prefills only what is
new and that the context policy drops the oldest turns instead of failing."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time

import pytest
from cli_helpers import env as cli_env
from paths import ROOT

LAUNCH = "from specrun.cli import app; app.main()"
CHECKOUT = ROOT
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[78DMc=>]|\x1b\][^\x07]*\x07|[\x01\x02\r]")
GREEDY = ["--temp", "0", "--ignore-eos"]


def chat_args(tiny_target, tiny_draft, *extra, spec: str | None = "draft") -> list[str]:
    """One llama.cpp thread: spinning threads on a busy 2-core machine make tiny models crawl."""
    mode = ["--spec", spec] if spec else []
    return [
        "-c",
        LAUNCH,
        "chat",
        "--target",
        str(tiny_target),
        "--draft",
        str(tiny_draft),
        "-t",
        "1",
        *mode,
        *map(str, extra),
    ]


class Terminal:
    """A child process on a pseudo-terminal (its controlling terminal, so ^C is a real SIGINT)."""

    def __init__(self, args: list[str], cwd, timeout: float = 60):
        import pty

        # The child starts in `cwd`, not in the checkout: point it at this checkout's package.
        pythonpath = os.pathsep.join(p for p in (str(CHECKOUT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**cli_env(), "TERM": "xterm-256color", "COLUMNS": "200", "LINES": "50", "PYTHONPATH": pythonpath}
        env.pop("NO_COLOR", None)
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child
            os.chdir(cwd)
            os.execve(sys.executable, [sys.executable, *args], env)
        self.timeout = timeout
        self.raw = b""
        self._done = ""  # complete lines of output, escape codes removed
        self._decoded = 0
        self.pos = 0
        self.status: int | None = None

    @property
    def text(self) -> str:
        """The output so far with escape codes removed."""
        return self._done + ANSI.sub("", self.raw[self._decoded :].decode("utf-8", "replace"))

    def _read(self, wait: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], wait)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:
            return False
        self.raw += data
        cut = self.raw.rfind(b"\n") + 1  # decode whole lines, so no escape code is split
        if cut > self._decoded:
            self._done += ANSI.sub("", self.raw[self._decoded : cut].decode("utf-8", "replace"))
            self._decoded = cut
        return bool(data)

    def expect(self, pattern: str, timeout: float | None = None) -> re.Match:
        """Wait for `pattern` (a regex) in the output after the previous match, escape codes removed."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            match = re.compile(pattern).search(self.text, self.pos)
            if match:
                self.pos = match.end()
                return match
            if time.monotonic() > deadline or not self._read(0.2):
                raise AssertionError(
                    f"{pattern!r} not seen; output after the last match:\n{self.text[self.pos :][-3000:]}"
                )

    def send(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\r")

    def keys(self, data: bytes) -> None:
        os.write(self.fd, data)

    def interrupt(self) -> None:
        """Ctrl-C. At a prompt, after a pause: a signal that lands while readline is busy with the
        previous key is only noticed at the next key (CPython's readline loop), as a person never sees."""
        time.sleep(0.3)
        os.write(self.fd, b"\x03")

    def wait(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._read(0.1)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                while self._read(0):
                    pass
                return self.status
        raise AssertionError(f"still running; output:\n{self.text[-3000:]}")

    def close(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
        os.close(self.fd)


@pytest.fixture
def terminal(tmp_path):
    opened = []

    def start(*args) -> Terminal:
        term = Terminal(list(args), tmp_path)
        opened.append(term)
        return term

    yield start
    for term in opened:
        term.close()


SUMMARY = (
    r"(\d+) tok · [\d.]+ tok/s · first token [\d.]+ s · total [\d.]+ s · accept \d+% \(\d+/\d+ drafted\) · "
    r"[\d.]+ tok/step · prompt (\d+) tok, (\d+) new"
)


def test_two_turns_with_live_status_and_summaries(terminal, tiny_target, tiny_draft):
    term = terminal(*chat_args(tiny_target, tiny_draft, "-n", "24", *GREEDY))
    term.expect(r"specrun chat · target target\.gguf · draft draft\.gguf · draft K=4")
    term.expect(r"> ")
    term.send("hello there")
    first = term.expect(SUMMARY)
    assert first.group(1) == "24" and first.group(2) == first.group(3)  # first turn: all of it is new
    screen = term.text
    assert re.search(r"reading \d+ new prompt tokens… · draft K=4", screen)
    assert re.search(
        r"[\d.]+ tok/s · accept (\d+%|—) \(\d+/\d+ drafted\) · ([\d.]+|—) tok/step · draft K=4 · \d+ tok", screen
    )
    term.expect(r"> ")
    term.send("and again")
    second = term.expect(SUMMARY)
    prompt, new = int(second.group(2)), int(second.group(3))
    assert prompt > int(first.group(2)) + 24 and new < 40  # the earlier turn came from the cache
    term.expect(r"> ")
    term.interrupt()  # Ctrl-C at an empty prompt leaves
    assert term.wait() == 0
    assert "session: 2 answers" in term.text and "Traceback" not in term.text


def test_slash_commands(terminal, tiny_target, tiny_draft, tmp_path):
    (tmp_path / "notes.md").write_text("the user's own notes\n")
    term = terminal(*chat_args(tiny_target, tiny_draft, "-n", "12", *GREEDY))
    term.expect(r"> ")
    for command, reply in [
        ("/help", r"/stats +totals for this session"),
        ("/stats", r"no answers yet"),
        ("/stat", r"unknown command /stat \(did you mean /stats\?"),
        ("/k 2", r"K=2"),
        ("/k two", r"/k needs a whole number"),
        ("/temp 0.5", r"temperature 0\.5"),
        ("/temp -1", r"/temp needs a number"),
        ("/temp 0", r"temperature 0 \(greedy\)"),
        ("/system Be brief.", r"system prompt set"),
        ("/system", r"system prompt: 'Be brief\.'"),
        ("/spec bogus", r"unknown speculation mode 'bogus'"),
        ("/save notes.txt", r"cannot tell the format of notes\.txt"),
    ]:
        term.send(command)
        term.expect(reply)
        term.expect(r"> ")
    term.send("first question")
    term.expect(r"12 tok · .* draft K=2")
    term.send('"""')
    term.send("a message")
    term.send('on two lines"""')
    term.expect(r"12 tok · ")
    term.send("/stats")
    term.expect(r"answers +2 \(0 interrupted\)")
    term.expect(r"drafts +\d+/\d+ accepted")
    term.send("/spec off")
    term.expect(r"speculation mode: off")
    term.send("third")
    term.expect(r"12 tok · .*spec off")
    term.send("/save chat.md")
    term.expect(r"saved chat\.md")
    term.send("/save chat.json")
    term.expect(r"saved")
    term.send("/save notes.md")
    term.expect(r"notes\.md already exists \(/save! notes\.md overwrites it\)")
    term.send("/save chat.md")
    term.expect(r"chat\.md already exists \(/save! chat\.md overwrites it\)")
    term.send("/save! chat.md")
    term.expect(r"saved chat\.md")
    term.send("/reset")
    term.expect(r"conversation cleared \(system prompt kept\); the transcript keeps the earlier turns for /save")
    term.send("/save after-reset.json")
    term.expect(r"saved")
    term.send("/exit")
    assert term.wait() == 0, term.text

    document = json.loads((tmp_path / "chat.json").read_text())
    roles = [m["role"] for m in document["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert document["messages"][3]["content"] == "a message\non two lines"
    assert document["messages"][-1]["stats"]["mode"] == "off"
    assert document["totals"]["turns"] == 3
    markdown = (tmp_path / "chat.md").read_text()
    assert markdown.count("## You") == 3 and markdown.count("## Assistant") == 3 and "Be brief." in markdown
    after = json.loads((tmp_path / "after-reset.json").read_text())
    assert [m["role"] for m in after["messages"]] == roles + ["reset"]  # /reset forgets, the transcript keeps
    assert (tmp_path / "notes.md").read_text() == "the user's own notes\n"
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_ctrl_c_stops_the_answer_and_keeps_it(terminal, tiny_target, tiny_draft, tmp_path):
    term = terminal(*chat_args(tiny_target, tiny_draft, "-n", "100000", "-c", "8192", *GREEDY))
    term.expect(r"> ")
    term.send("tell me everything")
    term.expect(r"tok/s · accept")  # the status line: the answer is streaming
    term.keys(b"\x03")  # mid-answer: no pause, the answer must still be running
    term.expect(r"\[interrupted")
    summary = term.expect(r"(\d+) tok · .* · interrupted")
    assert 0 < int(summary.group(1)) < 8000
    term.expect(r"> ")
    term.keys(b"typed but not sent")
    term.expect("typed but not sent")  # echoed: readline has it
    term.interrupt()  # clears the line, does not leave
    term.expect(r"> ")
    term.send("/save partial.json")
    term.expect(r"saved")
    term.send("/stats")
    term.expect(r"answers +1 \(1 interrupted\)")
    term.expect(r"> ")
    term.keys(b"\x04")  # Ctrl-D at an empty prompt leaves
    assert term.wait() == 0
    messages = json.loads((tmp_path / "partial.json").read_text())["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["interrupted"] is True and messages[1]["content"]
    assert "Traceback" not in term.text


def run_piped(args: list[str], stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, env=cli_env(), timeout=120
    )


def test_piped_lines_are_turns(tiny_target, tiny_draft):
    stdin = "hello\n/spec ngram\nsecond turn\n/spec off\nthird\n"
    result = run_piped(chat_args(tiny_target, tiny_draft, "-n", "8", *GREEDY, spec=None), stdin)
    assert result.returncode == 0, result.stderr
    summaries = [line for line in result.stderr.splitlines() if re.match(r"8 tok · ", line)]
    assert len(summaries) == 3, result.stderr
    assert (
        re.search(r"auto: \w+ \d+ steps", summaries[0]) and "ngram K=4" in summaries[1] and "spec off" in summaries[2]
    )
    assert "speculation mode: off" in result.stderr and "session: 3 answers" in result.stderr
    assert "\x1b" not in result.stdout + result.stderr and result.stdout.endswith("\n")


def test_piped_jsonl_messages(tiny_target, tiny_draft):
    lines = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "an earlier answer"},
        {"role": "user", "content": "more"},
    ]
    stdin = "\n".join(json.dumps(line) for line in lines) + "\n"
    result = run_piped(chat_args(tiny_target, tiny_draft, "-n", "6", *GREEDY, "--jsonl"), stdin)
    assert result.returncode == 0, result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(answers) == 2 and all(a["role"] == "assistant" and a["content"] for a in answers)


def test_bad_jsonl_is_one_line_and_exit_2(tiny_target, tiny_draft):
    result = run_piped(chat_args(tiny_target, tiny_draft, "-n", "4", "--jsonl"), '{"role": "user"}\n')
    assert result.returncode == 2
    assert "--jsonl line 1 is not a message" in result.stderr and "Traceback" not in result.stderr


def test_a_model_without_a_template_chats_in_chatml_said_once(tmp_path):
    from tiny_models import write_tiny_gguf

    bare = write_tiny_gguf(tmp_path / "bare.gguf", seed=0, chat_template=None)
    result = run_piped(["-c", LAUNCH, "chat", "--target", str(bare), "--draft", "none", "-n", "4"], "hi\nagain\n")
    assert result.returncode == 0, result.stderr
    assert (
        result.stderr.count("bare.gguf has no chat template in its metadata; formatting the conversation as ChatML")
        == 1
    )


def test_startup_problems_are_one_line(tiny_target, tiny_draft):
    result = run_piped(chat_args(tiny_target, tiny_draft, spec="sideways"), "hi\n")
    assert result.returncode == 2 and "unknown speculation mode 'sideways'" in result.stderr
    assert "Traceback" not in result.stderr


# -- in-process: the KV cache between turns and the context policy ---------------------------------


@pytest.fixture(scope="module")
def pair(tiny_target, tiny_draft):
    from specrun.runtime.pair import Pair, PairConfig

    loaded = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=512, threads=1), warn=lambda line: None)
    yield loaded
    loaded.close()


def session(pair, **settings):
    from specrun.chat.session import ChatSession
    from specrun.engine.sampling import SamplingParams
    from specrun.engine.sequence import GenerationSettings

    options = {"max_tokens": 20, "ignore_eos": True, **settings}
    return ChatSession(pair, GenerationSettings(sampling=SamplingParams(temperature=0), **options), seed=1)


def run_turn(chat, text, stop_after: int | None = None):
    turn = chat.prepare(text)
    for i, _ in enumerate(turn.steps()):
        if stop_after is not None and i + 1 >= stop_after:
            return turn, turn.finish(interrupted=True)
    return turn, turn.finish()


@pytest.mark.parametrize("interrupt_first", [False, True])
def test_second_turn_prefills_only_the_new_tokens(pair, monkeypatch, interrupt_first):
    chat = session(pair)
    first, answer = run_turn(chat, "Hello there, how are you?", stop_after=3 if interrupt_first else None)
    fed = first.prompt + list(first.generation.generated)
    assert answer.interrupted is interrupt_first and answer.text
    second = chat.prepare("And a second question")
    assert second.prompt[: len(fed)] == fed  # the new prompt extends exactly what was fed
    new = len(second.prompt) - len(fed)
    assert second.prefilled <= new + 1  # + the last generated token, never in the cache yet
    decoded = []
    target = pair.session.target_ctx
    original = target.decode
    monkeypatch.setattr(
        target,
        "decode",
        lambda segments, **kw: decoded.append(sum(len(s.tokens) for s in segments)) or original(segments, **kw),
    )
    steps = second.steps()
    next(steps)
    assert decoded[0] == second.prefilled
    steps.close()
    second.finish()


def test_context_policy_drops_oldest_turns_and_refuses_what_cannot_fit(pair):
    chat = session(pair, max_tokens=64)
    long_message = "word " * 60
    notices = []
    for _ in range(8):
        turn = chat.prepare(long_message)
        notices += turn.notices
        for _ in turn.steps():
            pass
        turn.finish()
        assert len(turn.prompt) + 64 <= chat.n_ctx
    assert any("dropped the oldest turn" in n for n in notices)
    assert len(chat.transcript) == 16  # the transcript keeps every turn
    assert len(chat.messages) < 16

    from specrun.errors import InputError

    with pytest.raises(InputError, match="context holds 512"):
        chat.prepare("word " * 600)
    assert len(chat.transcript) == 16


def test_reset_and_system_reuse_the_cache_prefix(pair):
    chat = session(pair)
    chat.set_system("You are terse.")
    run_turn(chat, "first")
    chat.reset()
    turn = chat.prepare("again")
    assert chat.messages == [] and turn.prefilled < len(turn.prompt)  # the system prompt stays cached
    for _ in turn.steps():
        pass
    turn.finish()


def test_save_refuses_an_existing_file_unless_asked_to_replace_it(pair, tmp_path):
    from specrun.chat.slash import run_command

    chat = session(pair)
    run_turn(chat, "hello")
    mine = tmp_path / "README.md"
    mine.write_text("precious\n")
    reply = run_command(chat, f"/save {mine}")
    assert reply.error and reply.text == f"{mine} already exists (/save! {mine} overwrites it)"
    assert mine.read_text() == "precious\n"
    link = tmp_path / "link.md"
    link.symlink_to(tmp_path / "elsewhere.md")  # dangling: still a name that is taken
    assert run_command(chat, f"/save {link}").error and not (tmp_path / "elsewhere.md").exists()
    reply = run_command(chat, f"/save! {mine}")
    assert not reply.error and reply.text == f"saved {mine}"
    assert "## Assistant" in mine.read_text()
    assert run_command(chat, "/save!").text == "/save! needs a file name ending in .md or .json"
    fresh = tmp_path / "fresh.json"
    assert run_command(chat, f"/save {fresh}").text == f"saved {fresh}"
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_reset_keeps_the_earlier_turns_in_the_transcript(pair, tmp_path):
    from specrun.chat.slash import run_command

    chat = session(pair)
    run_turn(chat, "before the reset")
    assert run_command(chat, "/reset").text == "conversation cleared; the transcript keeps the earlier turns for /save"
    run_command(chat, "/reset")  # nothing said since: no second marker
    assert chat.messages == []
    turn, _ = run_turn(chat, "after the reset")
    assert "before the reset" not in turn.rendered  # the model forgot
    run_command(chat, f"/save {tmp_path / 'all.json'}")
    run_command(chat, f"/save {tmp_path / 'all.md'}")
    messages = json.loads((tmp_path / "all.json").read_text())["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "reset", "user", "assistant"]
    assert messages[0]["content"] == "before the reset" and messages[3]["content"] == "after the reset"
    markdown = (tmp_path / "all.md").read_text()
    assert (
        markdown.index("before the reset")
        < markdown.index("/reset: the conversation started afresh")
        < markdown.index("after the reset")
    )


class StopAt:
    """A display that interrupts the answer from inside, as a second Ctrl-C would."""

    def __init__(self, after: int):
        self.after, self.seen, self.answers = after, 0, []

    def begin_answer(self, turn):
        pass

    def step(self, step, turn):
        self.seen += 1
        if self.seen == self.after:
            raise KeyboardInterrupt

    def end_answer(self, answer):
        self.answers.append(answer)

    info = warn = error = farewell = lambda self, *args: None


@pytest.fixture
def sigint_restored():
    """Interrupts leaves its handler installed for the next prompt; give pytest its own back."""
    previous = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_hard_interrupt_clears_the_caches_and_the_chat_goes_on(pair, sigint_restored):
    from specrun.chat.interrupts import Interrupts
    from specrun.chat.repl import answer

    chat = session(pair)
    display = StopAt(after=3)
    assert answer(chat, "hello", display, Interrupts()) is None
    assert display.answers[0].interrupted and len(chat.messages) == 2
    assert pair.session.target_ctx.tokens[0] == []  # torn down mid-step: nothing cached is trusted
    display.after = -1
    result = answer(chat, "still there?", display, Interrupts())
    assert result is not None and not result.interrupted and result.stats.generated_tokens == 20
    assert result.prefilled == result.stats.prompt_tokens


def test_show_drafts_colours_exactly_the_accepted_draft_tokens(pair):
    from specrun.chat.display import DraftColours
    from specrun.engine.generation import Step

    model = pair.target_model
    tokens = model.tokenize("the cat sat on the mat", add_special=False, parse_special=False)
    pieces = [model.piece(t).decode() for t in tokens]
    colours = DraftColours(model)
    first = colours.split(Step(tokens[:3], "".join(pieces[:3]), drafted=2, accepted=2))
    rest = colours.split(Step(tokens[3:], "".join(pieces[3:]), drafted=len(tokens) - 4, accepted=len(tokens) - 4))
    assert first == [("".join(pieces[:2]), True), (pieces[2], False)]
    assert rest == [("".join(pieces[3:-1]), True), (pieces[-1], False)]


def test_the_sigint_handler_is_restored_after_every_answer(pair):
    from specrun.chat.interrupts import Interrupts
    from specrun.chat.repl import answer

    previous = signal.getsignal(signal.SIGINT)
    chat = session(pair)
    display = StopAt(after=-1)
    result = answer(chat, "hello", display, Interrupts())
    assert display.answers == [result] and not result.interrupted and result.error is None
    assert result.stats.generated_tokens > 0
    assert signal.getsignal(signal.SIGINT) is previous


@pytest.fixture(scope="module")
def im_end_pair(tiny_dir):
    """ChatML models whose answers end with `<|im_end|>` (conftest.family_pair)."""
    from conftest import family_pair

    from specrun.runtime.pair import Pair, PairConfig

    found = family_pair(tiny_dir, "gpt2", "<|im_end|>")
    loaded = Pair(PairConfig(found.target, found.draft, ctx_size=512, threads=1), warn=lambda line: None)
    yield loaded
    loaded.close()


@pytest.mark.parametrize("mode", ["off", "draft"])
def test_an_answer_ends_at_the_end_of_turn_token_and_the_next_turn_reuses_the_cache(im_end_pair, mode):
    from conftest import FAMILY_MESSAGE

    from specrun.chat.session import ChatSession
    from specrun.engine.sampling import SamplingParams
    from specrun.engine.sequence import GenerationSettings

    chat = ChatSession(
        im_end_pair, GenerationSettings(max_tokens=40, sampling=SamplingParams(temperature=0)), mode=mode, seed=1
    )
    turn, answer = run_turn(chat, FAMILY_MESSAGE)
    im_end = im_end_pair.target_model.tokenize("<|im_end|>", add_special=False, parse_special=True)[0]
    assert answer.stats.stop_reason == "eog" and turn.generation.generated[-1] == im_end
    assert answer.stats.generated_tokens < 40 and "<|im_end|>" not in answer.text
    second = chat.prepare("and then?")
    assert second.prompt.count(im_end) == 3  # both user turns and the answer: the generated one is not doubled
    assert second.prefilled <= len(second.prompt) - len(turn.prompt) - len(turn.generation.generated) + 1


def test_k_caps_drafts_under_auto_too(pair):
    from specrun import defaults

    chat = session(pair, draft_max=None)
    assert chat.mode == "auto" and chat.k == defaults.AUTO_K_MAX
    chat.set_k(3)
    turn = chat.prepare("hello")
    assert turn.k == 3 and turn.generation.policy.controller.k_max == 3
    chat.set_mode("draft")
    assert chat.k == 3  # K set by /k holds in every mode
    fresh = session(pair, draft_max=None)
    fresh.set_mode("draft")
    assert fresh.k == defaults.DRAFT_MAX
