"""The README is a manual that stays true: its command table and docs/cli.md match the CLI, it
stays short, the GPU guide comes early, CI runs its test command, and its links lead somewhere."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import typer
from typer.testing import CliRunner

from tuner.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GPU_HEADING = "## Tune your model on your GPU"
MAX_LINES = 300
GPU_BY_LINE = 100
# [text](target): the target up to whitespace or the closing parenthesis.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "cli_reference", ROOT / "tools" / "cli_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_command_table_and_the_cli_reference_match_the_cli() -> None:
    generator = _generator()
    stale = generator.drifted(generator.tuner_group())
    assert not stale, (
        f"{', '.join(str(p.relative_to(ROOT)) for p in stale)} differ from tuner/cli.py: "
        f"run {generator.WRITE_COMMAND}"
    )


def test_every_command_of_tuner_help_is_in_the_table_and_the_reference() -> None:
    listing = CliRunner().invoke(app, ["--help"], terminal_width=200).output
    section = listing.split("Commands")[1]
    commands = re.findall(r"^\W*([a-z][a-z-]*)\s{2,}", section, flags=re.MULTILINE)
    assert "optimize" in commands and "init" in commands, listing
    readme = README.read_text()
    reference = (ROOT / "docs" / "cli.md").read_text()
    for command in commands:
        assert f"| `tuner {command}` |" in readme, f"tuner {command} is missing from README.md"
        assert f"## `tuner {command}`" in reference, f"tuner {command} is missing from docs/cli.md"


def test_a_command_added_to_the_app_is_rendered_with_no_edit_to_the_generator() -> None:
    generator = _generator()

    def doctor(
        deep: bool = typer.Option(False, "--deep/--shallow", help="Check | everything."),
        port: int = typer.Option(8080, "--port", help="Port to probe."),
    ) -> None:
        """Say what this host lacks to run a study."""
        del deep, port

    def explain(trial: int = typer.Option(..., "--trial", help="Trial number.")) -> None:
        """Say why a trial was launched."""

    toy = typer.Typer()
    toy.command("doctor")(doctor)
    toy.command("explain")(explain)
    group = typer.main.get_command(toy)
    table = generator.readme_table(group)
    assert (
        "| `tuner doctor` | Say what this host lacks to run a study. | `--deep`, `--port` |"
        in table
    )
    reference = generator.reference(group)
    assert "| `--deep` / `--shallow` | flag | `--shallow` | Check \\| everything. |" in reference
    assert "| `--port` | INT | `8080` | Port to probe. |" in reference
    assert "| `--trial` | INT | required | Trial number. |" in reference


def test_the_readme_is_a_manual_of_at_most_300_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; at most {MAX_LINES}"


def test_the_gpu_guide_is_the_second_section_and_starts_within_100_lines() -> None:
    lines = README.read_text().splitlines()
    sections = [(number, line) for number, line in enumerate(lines, 1) if line.startswith("## ")]
    assert len(sections) >= 2 and sections[1][1] == GPU_HEADING, sections[:3]
    assert sections[1][0] <= GPU_BY_LINE, f"{GPU_HEADING!r} starts at line {sections[1][0]}"


def test_ci_runs_the_readme_s_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    command = ci[-1]
    assert command.startswith("python3 -m venv .venv") and "pytest" in command, command
    assert f"\n{command}\n" in README.read_text(), "README.md lost .ci/run's test command"


def _documents() -> list[Path]:
    return [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _prose(text: str) -> str:
    """The text outside fenced code blocks, where `#` starts a comment, not a heading."""
    return "".join(re.split(r"^```.*?^```", text, flags=re.MULTILINE | re.DOTALL))


def _anchors(document: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces
    as hyphens, a repeated one numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _prose(document.read_text()), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(f"{slug}-{count}" if count else slug)
    return anchors


def _broken_links(documents: list[Path]) -> list[str]:
    """`document: target` for each relative link to a missing file or heading."""
    broken = []
    for document in documents:
        for target in LINK.findall(_prose(document.read_text())):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            file, _, anchor = target.partition("#")
            path = document.parent / file if file else document
            if not path.exists() or (
                anchor and path.suffix == ".md" and anchor not in _anchors(path)
            ):
                broken.append(f"{document.name}: {target}")
    return broken


def test_every_relative_link_of_the_docs_leads_to_a_file() -> None:
    broken = _broken_links(_documents())
    assert not broken, "links to missing files:\n" + "\n".join(broken)


def test_the_link_check_finds_links_to_a_missing_file_or_heading(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# There\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n[gone](missing.md) [ok](there.md#there) [web](https://example.org) [same](#top)\n"
        "[no heading](there.md#elsewhere) [not here](#a-comment)\n```\n# a comment\n```\n"
        "[after the code](gone.md) [a heading after it](#end)\n# End\n"
    )
    assert _broken_links([page]) == [
        "page.md: missing.md",
        "page.md: there.md#elsewhere",
        "page.md: #a-comment",
        "page.md: gone.md",
    ]
