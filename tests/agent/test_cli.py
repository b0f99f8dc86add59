"""``icefab agent run --once`` against a real controller, with the dry-run actuator."""

import json

from typer.testing import CliRunner

from icefabric.cli.app import app
from icefabric.controller.settings import Settings
from icefabric.pipeline.plans import scenario_workload
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load
from icefabric.twin.run import host_reports, register_jobs, upload_fabric
from icefabric.twin.serve import ThreadedController


def test_agent_once_dry_run_and_hccl_cfg(tmp_path):
    ls = load("hetero-default")
    fabric = build_fabric(ls)
    sw = scenario_workload(ls, fabric, 1 << 20)
    reports = host_reports(fabric, sw.jobs, sw.workload)
    s = Settings(database_url=f"sqlite:///{tmp_path}/a.db", admin_token="adm", policy="ice",
                 admin_token_file=str(tmp_path / "t"), plan_debounce_s=0.0)
    (tmp_path / "enrol").write_text("adm\n")
    with ThreadedController(s) as url:
        import httpx

        with httpx.Client(base_url=url, trust_env=False,
                          headers={"Authorization": "Bearer adm"}) as admin:
            upload_fabric(admin, fabric, 7)
            register_jobs(admin, reports)
        runner = CliRunner()
        for host, reps in reports.items():
            f = tmp_path / f"{host}.json"
            f.write_text(json.dumps([r.model_dump(mode="json") for r in reps]))
            actuator = ["--actuator", "hccl-cfg", "--hccl-dir", str(tmp_path / host)] \
                if host.startswith("ascend") else ["--actuator", "dry-run"]
            r = runner.invoke(app, ["agent", "run", "--controller", url, "--host", host,
                                    "--enrol-token-file", str(tmp_path / "enrol"),
                                    "--reports", str(f), "--poll-wait-s", "0", "--once",
                                    *actuator])
            assert r.exit_code == 0, r.output
        # The last host completed every job: a long-poll now returns the full plan.
        r = runner.invoke(app, ["agent", "run", "--controller", url, "--host", "h100-0",
                                "--enrol-token-file", str(tmp_path / "enrol"), "--reports",
                                str(tmp_path / "h100-0.json"), "--poll-wait-s", "10",
                                "--once"])
        assert r.exit_code == 0, r.output
        assert "mlx5dv_modify_qp_udp_sport(qp=0x" in r.output
        r = runner.invoke(app, ["agent", "run", "--controller", url, "--host", "ascend-0",
                                "--enrol-token-file", str(tmp_path / "enrol"), "--reports",
                                str(tmp_path / "ascend-0.json"), "--poll-wait-s", "10",
                                "--once", "--actuator", "hccl-cfg", "--hccl-dir",
                                str(tmp_path / "ascend-0")])
        assert r.exit_code == 0, r.output
    from icefabric.agent.actuators.hccl_cfg import parse_cfg

    cfg = parse_cfg((tmp_path / "ascend-0" / "MultiQpSrcPort.cfg").read_text())
    n_qps = sum(len(rep.qps) for rep in reports["ascend-0"])
    assert sum(len(v) for v in cfg.values()) == n_qps
    assert all(0xC000 <= p <= 0xFFFF for v in cfg.values() for p in v)
    r = CliRunner().invoke(app, ["agent", "run", "--controller", "http://127.0.0.1:1",
                                 "--host", "h", "--actuator", "bogus", "--enrol-token-file",
                                 str(tmp_path / "enrol"), "--once"])
    assert r.exit_code != 0 and "unknown actuator" in r.output


def test_agent_once_verbs(tmp_path, agent_sock):
    """--actuator verbs serves the shim socket while it runs and removes it on exit."""
    s = Settings(database_url=f"sqlite:///{tmp_path}/a.db", admin_token="adm", policy="ice",
                 admin_token_file=str(tmp_path / "t"), plan_debounce_s=0.0)
    (tmp_path / "enrol").write_text("adm\n")
    with ThreadedController(s) as url:
        r = CliRunner().invoke(app, ["agent", "run", "--controller", url, "--host", "h100-0",
                                     "--enrol-token-file", str(tmp_path / "enrol"),
                                     "--actuator", "verbs", "--shim-socket", str(agent_sock),
                                     "--poll-wait-s", "0", "--once"])
    assert r.exit_code == 0, r.output
    assert f"verbs actuator serving {agent_sock}" in r.output and "plan version 0" in r.output
    assert not agent_sock.exists()
    r = CliRunner().invoke(app, ["agent", "run", "--controller", "http://127.0.0.1:1",
                                 "--host", "h", "--enrol-token-file", str(tmp_path / "enrol"),
                                 "--actuator", "verbs", "--shim-socket",
                                 "/proc/no/such/dir/v.sock", "--once"])
    assert r.exit_code != 0 and "--shim-socket /proc/no/such/dir/v.sock" in r.output
