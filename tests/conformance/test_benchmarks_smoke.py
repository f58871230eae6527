"""Every benchmark scenario runs, tiny, on every backend: the suite cannot rot unnoticed.

Nothing here is timed: speed is measured by ``python -m benchmarks``, not asserted in tests.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import sqlalchemy as sa

from benchmarks import mysqlslap, pgbench
from benchmarks.runner import main
from benchmarks.scenarios import OPTIONAL, SCENARIOS
from sqldelay import create_schema
from sqldelay.errors import InvalidArgumentError


def test_every_scenario_runs_tiny_and_reports_each_figure(backend_url, engine, tmp_path, capsys):
    with engine.connect():  # the dialect learns whether the server is MariaDB
        pass
    if engine.dialect.name == "mysql" and engine.dialect.is_mariadb:
        pytest.skip("a MariaDB server: the mariadb backend runs the scenarios against it already")
    assert main(["--url", backend_url, "--size", "tiny", "--out", str(tmp_path)]) == 0

    dialect = sa.make_url(backend_url).get_dialect().name
    result = json.loads((tmp_path / f"results-{dialect}.json").read_text())
    figures = result["figures"]
    ours = {f["scenario"] for f in figures if f["subject"].startswith("sqldelay")}
    assert ours >= set(SCENARIOS) - OPTIONAL - {"peers", "async_peers", "async_overhead"}
    assert any(f["scenario"] == "async_overhead" and f["value"] for f in figures)
    assert {"peers_enqueue", "peers_process"} <= ours
    # mysql_offer measures only MariaDB/MySQL; elsewhere it says so
    mysql_only = set() if dialect in ("mysql", "mariadb") else {"mysql_offer"}
    assert all(f["value"] is not None for f in figures
               if f["subject"].startswith("sqldelay") and f["scenario"] not in mysql_only)
    assert all(f["note"] for f in figures if f["scenario"] in mysql_only)
    # the asyncio front end beside the blocking one, through every async driver
    async_subjects = {f["subject"] for f in figures if f["scenario"] == "peers_process"
                      and f["subject"].startswith("sqldelay async")}
    assert len(async_subjects) == (2 if dialect == "postgresql" else 1)
    assert result["environment"]["cores"] and result["load_before"]["loadavg"]
    assert "offer_many" in capsys.readouterr().out  # the printed table
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / f"{dialect}-throughput.png").stat().st_size > 0
    plan = next(f for f in figures if f["metric"] == "cost largest/smallest backlog")
    if dialect in ("sqlite", "postgresql", "mysql", "mariadb"):
        assert plan["params"]["uses_index_at_every_size"] is True
    if dialect == "postgresql" and pgbench.executable():
        ceilings = [f for f in figures if f["subject"] == "pgbench"]
        # flow_drain and history_* run the plain statements' ceilings beside their variants
        assert {f["scenario"] for f in ceilings} == {
            "offer", "offer_many", "poll_ack", "poll_many_ack_many", "flow_drain",
            "history_offer", "history_drain"}
        # the C client moved every message it was given: the compiled statements work
        assert all(f["value"] and f["params"]["messages"] > 0 for f in ceilings)
        assert any(r["reference"] == "pgbench" for r in result["ratios"])
        # and the grouped claim's two statements, the groups the first locked handed to the
        # second through pgbench's variables, claimed what the acks then deleted
        grouped = [f for f in figures if f["subject"] == "pgbench groups"]
        assert [f["scenario"] for f in grouped] == ["flow_drain"] and grouped[0]["value"] > 0
    if dialect in ("mysql", "mariadb") and mysqlslap.executable():
        # both drivers, PyMySQL alone and both ceilings moved the messages they were given
        offers = {f["subject"]: f["value"] for f in figures if f["scenario"] == "mysql_offer"}
        assert offers.keys() == {"sqldelay PyMySQL", "sqldelay mysqlclient", "PyMySQL alone",
                                 "mysqlslap", "mysqlslap client-side"}
        assert all(offers.values())


def test_the_memory_and_process_scenarios_run_tiny(backend_url, engine, tmp_path):
    # optional (long at full size), so not in the run above
    with engine.connect():
        pass
    if engine.dialect.name == "mysql" and engine.dialect.is_mariadb:
        pytest.skip("a MariaDB server: the mariadb backend runs the scenarios against it already")
    names = ["worker_rss", "offer_many_rss", "worker_processes"]
    assert main(["--url", backend_url, "--size", "tiny", "--out", str(tmp_path),
                 *(arg for name in names for arg in ("--scenario", name))]) == 0

    dialect = sa.make_url(backend_url).get_dialect().name
    figures = json.loads((tmp_path / f"results-{dialect}.json").read_text())["figures"]
    assert {f["scenario"] for f in figures} == set(names)
    assert all(f["value"] is not None for f in figures)
    curve = next(f for f in figures if f["scenario"] == "worker_rss" and f["series"])
    assert curve["series"][-1][0] == curve["params"]["messages"]  # every message handled
    sizes = [n for n, _ in next(f["series"] for f in figures
                                if f["scenario"] == "offer_many_rss" and f["series"])]
    assert sizes == sorted(sizes) and len(sizes) >= 2
    workers = [f for f in figures if f["scenario"] == "worker_processes"]
    assert len(workers) == 3 and all("client_cpu_us_per_message" in f["params"]
                                     for f in workers)


def test_bad_arguments_are_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--scenario", "nope", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="at least 1"):
        main(["--batch", "0", "--out", str(tmp_path)])
    assert not list(tmp_path.glob("*.json"))


def test_unknown_tuning_preset_is_refused_before_the_table_is_made(engine):
    name = f"bench_bad_tuning_{engine.dialect.name}"
    with pytest.raises(InvalidArgumentError, match="high-churn"):
        create_schema(engine, table_name=name, tuning="fast")
    assert not sa.inspect(engine).has_table(name)
