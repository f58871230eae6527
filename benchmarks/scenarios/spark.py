"""Spark's ``offer_dataframe`` beside one process's ``offer_many``: benchmarks/spark_offer.py.

That script (owned with the Spark integration) starts its own Spark session, so it runs in a
child process and reports one JSON object, which becomes our figures here. Spark's start-up
takes longer than the rest of a tiny run, so this scenario runs only when named:
``--scenario spark_offer``.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

from ..harness import OURS, Bench

SCRIPT = Path(__file__).resolve().parents[1] / "spark_offer.py"
RATE = "rows/s"


def spark_offer(bench: Bench) -> None:
    rows = bench.sizes.messages * 5
    params = {"rows": rows}
    problem = (None if SCRIPT.is_file() else f"{SCRIPT.name} is not in this checkout") or \
        (None if importlib.util.find_spec("pyspark") else "pyspark is not installed "
         "(pip install -e '.[spark]')") or \
        (None if shutil.which("java") else "no Java runtime for Spark")
    if problem:
        bench.add("spark_offer", "spark", RATE, None, params=params, note=problem)
        return
    done = subprocess.run([sys.executable, str(SCRIPT), "--url", bench.url, "--rows", str(rows)],
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{SCRIPT.name} failed:\n{done.stdout}\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    params = {k: result[k] for k in ("rows", "chunk_size", "partitions", "master")}
    bench.add("spark_offer", OURS, RATE, result["single_process_rows_per_s"],
              params={**params, "how": "one process, offer_many"})
    bench.add("spark_offer", "spark", RATE, result["spark_rows_per_s"],
              params={**params, "how": "offer_dataframe"})
