"""mini-swe-agent (PyPI ``mini-swe-agent``, in its own venv): ``mini`` in yolo mode, through
litellm's ``openai/`` provider with ``api_base`` at the proxy: the chat completions route,
not streamed. Cost tracking is off (litellm has no price for the scripted model) and litellm
reads its bundled price table instead of downloading one.
"""

from __future__ import annotations

from pathlib import Path

from tests.agents_e2e.drivers.base import DUMMY_KEY, VENV_BIN, Driver, Launch


def launch(proxy: str, home: Path, task: str) -> Launch:
    argv = [str(VENV_BIN / "mini"), "--yolo", "--exit-immediately", "-m", "openai/e2e-model"]
    argv += ["-t", task, "-o", str(home / "trajectory.json"), "-c", "mini.yaml"]
    argv += [
        "-c",
        f"model.model_kwargs.api_base={proxy}/v1",
        "-c",
        "model.cost_tracking=ignore_errors",
    ]
    env = {
        "OPENAI_API_KEY": DUMMY_KEY,
        "MSWEA_CONFIGURED": "true",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
    }
    return Launch(argv, env)


MINI = Driver(
    name="mini-swe-agent",
    dialect="/v1/chat/completions",
    executable=VENV_BIN / "mini",
    version_argv=(str(VENV_BIN / "python"), "-c", "import minisweagent as m; print(m.__version__)"),
    launch=launch,
    trigger_tokens=12000,
    keep_tokens=4000,
)
