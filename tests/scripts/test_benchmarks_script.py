"""scripts/benchmarks.py: its commands parse, and it renders tables from saved bench documents
(tiny hand-made ones: no model runs here) into the marked section of a page, leaving the rest."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from doc_pages import command_problems, specrun_commands
from paths import SCRIPTS
from script_module import script_module

SCRIPT = SCRIPTS / "benchmarks.py"


@pytest.fixture(scope="module")
def bench_script():
    with script_module("benchmarks.py", "benchmarks_script") as module:
        yield module


def row(category, config, mode, label, **fields):
    base = {
        "level": "category",
        "category": category,
        "config": config,
        "mode": mode,
        "label": label,
        "prompts": 2,
        "decode_tokens_per_s": None,
        "speedup": None,
        "acceptance_rate": None,
        "mean_tokens_per_step": None,
        "host_ms_per_step": None,
        "identical": None,
        "diverged_prompts": None,
        "violations": None,
    }
    return {**base, **fields}


def single_document():
    rows = []
    for category, plain, auto in (("code-editing", 30.0, 1.25), ("question-answering", 28.0, 0.98), ("all", 29.0, 1.1)):
        rows.append(row(category, "off-t0", "off", "plain", decode_tokens_per_s=plain, violations=0))
        rows.append(
            row(
                category,
                "auto-k31-t0",
                "auto",
                "auto K=31",
                decode_tokens_per_s=round(plain * auto, 2),
                speedup=auto,
                acceptance_rate=0.8125,
                mean_tokens_per_step=1.42,
                host_ms_per_step=0.51,
                identical=False,
                diverged_prompts=1,
                violations=0,
            )
        )
    return {
        "schema": "specrun.bench/1",
        "created": "2026-12-07T10:11:12+00:00",
        "settings": {"runs": 2, "max_tokens": 128, "temperatures": [0.0], "spec": ["off", "auto"], "fresh": False},
        "environment": {
            "machine": {"cpu": "Test CPU 9000", "cpu_count": 6, "platform": "Linux-test"},
            "gpu_offload": False,
        },
        "prompt_set": [{"id": "a"}, {"id": "b"}, {"id": "c"}, {"id": "d"}],
        "categories": rows,
        "correctness": {"divergences": [{"config": "auto-k31-t0", "near_tie": True}]},
        "warnings": ["the load average was 3.0 on 6 CPUs when the bench started: the machine was busy"],
    }


def serve_document():
    def run(mode, tps, accept=None, identical=None, ties=0):
        return {
            "mode": mode,
            "schedule": "srpt",
            "concurrency": 4,
            "repetition": 0,
            "temperature": 0.0,
            "answered": 30,
            "throughput_tokens_per_s": tps,
            "completion_mean_s": 41.234,
            "completion_p95_s": 94.9,
            "acceptance_rate": accept,
            "identical": identical,
            "near_ties": ties,
            "violations": 0,
        }

    return {
        "schema": "specrun.bench-serve/1",
        "created": "2026-12-08T01:02:03+00:00",
        "settings": {
            "requests": 30,
            "max_tokens": 128,
            "short_max_tokens": 32,
            "temperatures": [0.0],
            "concurrency": [1, 2, 4],
            "schedules": ["srpt"],
            "modes": ["off", "auto"],
        },
        "environment": {"machine": {"cpu": "Test CPU 9000", "cpu_count": 6}},
        "runs": [run("off", 22.2), run("auto", 23.5, accept=0.76, identical=22, ties=8)],
    }


def saved(folder: Path, meta: bool = True) -> Path:
    folder.mkdir()
    (folder / "auto.json").write_text(json.dumps(single_document()))
    (folder / "serve.json").write_text(json.dumps(serve_document()))
    (folder / "unrelated.json").write_text(json.dumps({"schema": "something-else"}))
    if meta:
        (folder / "meta.json").write_text(
            json.dumps(
                {
                    "machine": {"cpu": "Test CPU 9000", "cpu_count": 6, "platform": "Linux-test", "gpus": ["Test GPU"]},
                    "benches": {
                        "auto": {
                            "command": "specrun bench --spec off,auto --runs 2 --json auto.json",
                            "started": "2026-12-07T09:00:00+00:00",
                            "finished": "2026-12-07T10:11:12+00:00",
                        }
                    },
                }
            )
        )
    return folder


def test_dry_run_prints_the_fixed_commands_and_they_parse(bench_script, capsys):
    assert bench_script.main(["--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "specrun bench --spec off,draft,hybrid,ngram,auto --temp 0 --runs 2 --json fixed.json" in lines
    assert "specrun bench --spec off,auto --runs 2 --json auto.json" in lines
    assert "specrun bench --spec off,auto --runs 2 --fresh --json auto-fresh.json" in lines
    for line in lines:
        (args,) = specrun_commands(line)
        assert command_problems(line, args) == [], line
    assert bench_script.main(["--dry-run", "--only", "auto", "--runs", "5", "--extra=--mlock"]) == 0
    assert capsys.readouterr().out.splitlines() == ["specrun bench --spec off,auto --runs 5 --mlock --json auto.json"]


def test_renders_tables_with_machine_command_and_date(bench_script, tmp_path):
    out = tmp_path / "benchmarks.md"
    assert bench_script.main(["--from", str(saved(tmp_path / "results")), "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# Benchmarks\n")
    assert bench_script.BEGIN in text and bench_script.END in text
    assert "- Machine: Test CPU 9000, 6 cores, GPU: Test GPU (Linux-test)" in text
    assert "- Command: `specrun bench --spec off,auto --runs 2 --json auto.json`" in text
    assert "- Date: 2026-12-07 (UTC)" in text
    assert "| configuration | code-editing | question-answering | all |" in text
    assert "| plain | 30.0 tok/s | 28.0 tok/s | 29.0 tok/s |" in text
    assert "| auto K=31 | 1.25× (37.5) | 0.98× (27.4) | 1.10× (31.9) |" in text
    assert "| auto K=31 | 81% | 1.42 | 0.51 | 1/2 prompts | 1 | 0 |" in text
    assert "- the load average was 3.0 on 6 CPUs" in text
    # the server document: its command comes from the fixed list, its date from the document
    assert "- Command: `specrun bench --serve --concurrency 1,2,4 --json serve.json`" in text
    assert "- Date: 2026-12-08 (UTC)" in text
    assert "| 4 | srpt | auto | 23.5 | 1.06× | 41.2 | 94.9 | 76% | 22/30 (8 near-ties) |" in text
    assert "| 4 | srpt | plain | 22.2 | 1.00× |" in text
    assert text.index("### auto against plain") < text.index("### The server")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["benchmarks.md", "results"]  # no temporary file left


def test_without_meta_the_machine_comes_from_the_document(bench_script, tmp_path):
    out = tmp_path / "benchmarks.md"
    bench_script.main(["--from", str(saved(tmp_path / "results", meta=False)), "--out", str(out)])
    text = out.read_text()
    assert "- Machine: Test CPU 9000, 6 cores, no GPU (Linux-test)" in text
    assert "- Command: `specrun bench --spec off,auto --runs 2 --json auto.json`" in text


def test_a_document_of_another_command_says_its_settings(bench_script, tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    doc = single_document()
    doc["settings"].update(spec=["off", "draft"], draft_max=[2, 4], temperatures=[0.0, 0.8])
    (folder / "auto.json").write_text(json.dumps(doc))
    out = tmp_path / "benchmarks.md"
    bench_script.main(["--from", str(folder), "--out", str(out)])
    command = "specrun bench --spec off,draft --draft-max 2,4 --temp 0,0.8 --runs 2 -n 128 --json auto.json"
    assert f"- Command: not recorded; the document's settings: `{command}`" in out.read_text()
    (args,) = specrun_commands(command)
    assert command_problems(command, args) == []


def test_only_the_marked_section_is_replaced(bench_script, tmp_path):
    out = tmp_path / "benchmarks.md"
    out.write_text(
        f"# Benchmarks\n\nKept above.\n\n{bench_script.BEGIN}\n\n## Old tables\n\n| old |\n\n"
        f"{bench_script.END}\n\n## Other measurements\n\nKept below.\n"
    )
    bench_script.main(["--from", str(saved(tmp_path / "results")), "--out", str(out)])
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nKept above.\n\n" + bench_script.BEGIN)
    assert text.endswith(bench_script.END + "\n\n## Other measurements\n\nKept below.\n")
    assert "Old tables" not in text and "| old |" not in text
    assert text.count(bench_script.BEGIN) == 1 and text.count(bench_script.END) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["benchmarks.md", "results"]  # no temporary file left


def test_a_folder_without_documents_is_refused(bench_script, tmp_path):
    out = tmp_path / "benchmarks.md"
    out.write_text("unchanged\n")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no `specrun bench --json` documents"):
        bench_script.main(["--from", str(tmp_path / "empty"), "--out", str(out)])
    assert out.read_text() == "unchanged\n"


def test_the_page_in_the_repository_has_the_markers(bench_script):
    text = bench_script.DEFAULT_OUT.read_text()
    assert text.count(bench_script.BEGIN) == 1 and text.count(bench_script.END) == 1
    assert text.index(bench_script.BEGIN) < text.index(bench_script.END)


def test_runs_the_commands_and_records_them(bench_script, tmp_path):
    """A stand-in for specrun writes a document wherever --json points: the run path without a model."""
    documents = tmp_path / "documents"
    documents.mkdir()
    (documents / "single.json").write_text(json.dumps(single_document()))
    (documents / "serve.json").write_text(json.dumps(serve_document()))
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "specrun"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import shutil, sys\n"
        "args = sys.argv[1:]\n"
        f"open({str(calls)!r}, 'a').write(' '.join(args) + '\\n')\n"
        f"source = {str(documents)!r} + ('/serve.json' if '--serve' in args else '/single.json')\n"
        "shutil.copy(source, args[args.index('--json') + 1])\n"
    )
    fake.chmod(0o755)
    out, save = tmp_path / "benchmarks.md", tmp_path / "results"
    argv = ["--specrun", str(fake), "--save", str(save), "--out", str(out), "--only", "auto", "--only", "serve"]
    assert bench_script.main([*argv, "--runs", "3"]) == 0
    ran = calls.read_text().splitlines()
    assert ran == [
        f"bench --spec off,auto --runs 3 --json {save / 'auto.json'}",
        f"bench --serve --concurrency 1,2,4 --json {save / 'serve.json'}",
    ]
    meta = json.loads((save / "meta.json").read_text())
    assert meta["benches"]["auto"]["command"] == "specrun bench --spec off,auto --runs 3 --json auto.json"
    assert isinstance(meta["machine"]["gpus"], list)
    text = out.read_text()
    assert "Test CPU 9000, 6 cores" in text  # the machine as the document records it
    assert "- Command: `specrun bench --spec off,auto --runs 3 --json auto.json`" in text
    assert "- Command: `specrun bench --serve --concurrency 1,2,4 --json serve.json`" in text


def test_a_failing_command_writes_nothing(bench_script, tmp_path):
    fake = tmp_path / "specrun"
    fake.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(3)\n")
    fake.chmod(0o755)
    out = tmp_path / "benchmarks.md"
    out.write_text("unchanged\n")
    with pytest.raises(SystemExit, match="failed with exit code 3; nothing written"):
        bench_script.main(["--specrun", str(fake), "--save", str(tmp_path / "r"), "--out", str(out), "--only", "auto"])
    assert out.read_text() == "unchanged\n"
