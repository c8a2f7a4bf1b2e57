"""A child that makes ns-3 abort (NS_FATAL_ERROR) after writing a file: for the runner's tests."""

from pathlib import Path

from bridge.runner import child_main


def run(payload, progress):
    from bridge.ns3.loader import load

    (Path(payload["out"]) / "flows.csv").write_text("partial\n")
    progress({"sim_ns": 0, "flows_done": 0, "flows": 1})
    h = load()
    h.ns.Config.SetDefault("ns3::NoSuchModel::NoSuchAttribute", h.ns.UintegerValue(1))
    return {"unreachable": True}


if __name__ == "__main__":
    child_main(run)
