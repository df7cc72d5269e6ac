"""``server/`` (the operator's folder) says what the launcher does: its command lines and the
Kubernetes manifest carry exactly each profile's flags."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from langchain_qwen_fast.serving import VLLMServer

ROOT = Path(__file__).resolve().parents[3]
SERVER_DIR = ROOT / "server"


def launcher_flags(profile: str, host: str = "127.0.0.1") -> list[str]:
    """The launcher's command for Qwen/Qwen3-0.6B on port 8000, after the model argument."""
    command = VLLMServer("Qwen/Qwen3-0.6B", profile=profile, host=host, port=8000).command()  # type: ignore[arg-type]
    return command[command.index("serve") + 2 :]


def readme_commands() -> dict[str, list[str]]:
    text = (SERVER_DIR / "README.md").read_text()
    commands = {}
    for profile, block in re.findall(r"## Profile `(\w+)`.*?```bash\n(.*?)```", text, re.DOTALL):
        commands[profile] = shlex.split(block.replace("\\\n", " "))
    return commands


@pytest.mark.parametrize("profile", ["gpu", "cpu", "default"])
def test_readme_command_line_is_the_launchers(profile: str) -> None:
    words = readme_commands()[profile]
    env = [w for w in words if re.fullmatch(r"[A-Z][A-Z0-9_]*=\S*", w)]
    words = words[len(env) :]
    assert words[:3] == ["vllm", "serve", "Qwen/Qwen3-0.6B"]
    assert words[3:] == launcher_flags(profile)
    from langchain_qwen_fast.serving import PROFILES

    assert dict(e.split("=", 1) for e in env) == dict(PROFILES[profile].env)


def test_every_gpu_flag_has_its_reason() -> None:
    text = (SERVER_DIR / "README.md").read_text()
    table = text.split("| flag | why |")[1].split("\n\n")[0]
    first_columns = [row.split("|")[1] for row in table.strip().splitlines()[1:]]
    documented = {flag for column in first_columns for flag in re.findall(r"--[a-z-]+", column)}
    assert {f for f in launcher_flags("gpu") if f.startswith("--")} <= documented


def test_kubernetes_manifest_runs_the_gpu_profile() -> None:
    deployment = next(d for d in yaml.safe_load_all((SERVER_DIR / "deploy" / "kubernetes.yaml").read_text()))
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["--model", "Qwen/Qwen3-0.6B"]
    assert args[2:] == launcher_flags("gpu", host="0.0.0.0")


def test_gpu_flag_file_names_known_profiles() -> None:
    import json

    from langchain_qwen_fast.serving import PROFILES

    for name, entry in json.loads((SERVER_DIR / "gpu_flags.json").read_text()).items():
        assert entry.get("profile", "gpu") in PROFILES, name
        for flag in entry.get("drop", []):
            assert flag in PROFILES[entry.get("profile", "gpu")].args, (name, flag)


def test_latency_variants_drop_only_flags_the_gpu_profile_has() -> None:
    import json

    from langchain_qwen_fast.serving import PROFILES

    for file in ("latency_variants.json", "latency_frontends.json"):
        for name, entry in json.loads((SERVER_DIR / file).read_text()).items():
            assert set(entry) <= {"flags", "drop", "env", "frontend", "torch_profile", "startup_timeout"}, name
            assert entry.get("frontend", "python") in ("python", "rust"), name
            for flag in entry.get("drop", []):
                assert flag in PROFILES["gpu"].args, (name, flag)


# -- the GPU scripts name only options their tools take --------------------------------------
#: options of the other programs the scripts run (nvidia-smi's)
OTHER_PROGRAMS_OPTIONS = {"--query-gpu", "--format"}
#: an option word: not a value after "=" (``--server-arg=--flag`` passes a vLLM flag on), nor
#: a quoted one (a vLLM flag in a server variant's JSON)
OPTION = re.compile(r"(?<![\w=\"-])--[a-z][a-z0-9-]*")


def tool_options(tool: str) -> set[str]:
    """The option strings of a lab tool (``benchmarks.NAME``) or a ``qwen-fast`` subcommand."""
    import argparse
    import importlib

    if tool.startswith("benchmarks."):
        parser = importlib.import_module(tool).build_parser()
    else:
        from langchain_qwen_fast.cli.main import build_parser

        commands = next(a for a in build_parser([tool])._actions if isinstance(a, argparse._SubParsersAction))
        parser = commands.choices[tool]
    return set(parser._option_string_actions)


def tools_run_by(script: Path) -> set[str]:
    """What ``script`` runs: lab tools, ``qwen-fast`` subcommands, and the scale tool through
    ``gpu_scale.sh``."""
    text = script.read_text()
    tools = {f"benchmarks.{name}" for name in re.findall(r"python3? -m benchmarks\.([a-z_]+)", text)}
    tools |= set(re.findall(r'"\$\{qwen_fast\[@\]\}" ([a-z][\w-]*)', text))
    if script.name != "gpu_scale.sh" and re.search(r"bash \S*gpu_scale\.sh", text):
        tools.add("benchmarks.scale")
    return tools


@pytest.mark.parametrize("script", sorted(SERVER_DIR.glob("gpu_*.sh")), ids=lambda p: p.name)
def test_the_gpu_scripts_pass_only_options_their_tools_take(script: Path) -> None:
    tools = tools_run_by(script)
    assert tools, script.name
    known = set().union(*(tool_options(tool) for tool in tools)) | OTHER_PROGRAMS_OPTIONS
    assert set(OPTION.findall(script.read_text())) - known == set()


def test_the_readmes_scale_commands_pass_only_the_scale_tools_options() -> None:
    text = (SERVER_DIR / "README.md").read_text().split("## GPU benchmark")[1]
    block = text.split("```bash\n")[1].split("```")[0].replace("\\\n", " ")
    scale_runs = [line for line in block.splitlines() if re.search(r"gpu_(scale|frontends)\.sh", line)]
    assert scale_runs
    named = {option for line in scale_runs for option in OPTION.findall(line.split("#")[0])}
    assert named - tool_options("benchmarks.scale") == set()
