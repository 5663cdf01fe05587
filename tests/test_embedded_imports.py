"""The embedded runtime's start-up imports only what it runs: time to the first image counts it."""

import json
import subprocess
import sys


def test_a_local_client_that_submits_imports_neither_redis_nor_httpx(tmp_path):
    # Given a fresh interpreter with a local back end (no worker threads: nothing runs)
    script = (
        "import json, sys\n"
        "from genloop.sdk import Client, Graph\n"
        f"with Client.local(home={str(tmp_path / 'home')!r}, threads=0) as client:\n"
        "    g = Graph()\n"
        "    g.generate('a red circle', n=1, model='tiny')\n"
        "    client.submit(g)\n"
        "print(json.dumps(sorted(m for m in ('redis', 'dramatiq.brokers.redis', 'httpx')\n"
        "                        if m in sys.modules)))\n"
    )
    # When it starts and submits a run
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    # Then neither redis (a broker it does not use) nor httpx (the HTTP back end's) was
    # imported: 0.1 s of a cold start each
    assert json.loads(out.splitlines()[-1]) == []


def test_a_start_check_with_no_model_to_load_imports_no_torch(tmp_path):
    # Given a fresh interpreter and a models config whose only model is simulated
    config = tmp_path / "models.toml"
    config.write_text('[models.sim]\nsteps = 4\n[models.sim.simulated]\n'
                      'load_seconds = 0.1\nstep_seconds = {1 = 0.01}\nresident_bytes = 1000\n')
    script = (
        "import json, sys\n"
        "from genloop.workers.models.models_config import ModelsConfig\n"
        "from genloop.workers.models.resources import Resources\n"
        "problems = Resources(allowed=ModelsConfig.load(sys.argv[1])).config_problems()\n"
        "print(json.dumps([problems, 'torch' in sys.modules]))\n"
    )
    # When a worker's start check runs on it
    out = subprocess.run([sys.executable, "-c", script, str(config)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    # Then it finds nothing wrong without importing torch (2.7 s of a worker's start)
    assert json.loads(out.splitlines()[-1]) == [[], False]
