"""A Ray cluster of several nodes on this one machine, for trying ``jobs=ray`` without a second
machine (docs/cluster.md). Prints the head's address, then holds the cluster until interrupted.

    python scripts/local_cluster.py --nodes 2 --cpus 1 &
    sppo-bench run jobs=ray ray.address=<the printed address>

Run it from the repository root: Ray's workers import the code of the driver's working
directory. Each node is its own raylet and object store (``ray.cluster_utils.Cluster``), so a
warm start really travels between object stores; they share this machine's cores and disk.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=2, help="nodes, the head included (default 2)")
    p.add_argument("--cpus", type=int, default=1, help="CPUs each node offers (default 1)")
    args = p.parse_args()
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": args.cpus, "include_dashboard": False}
    )
    try:
        for _ in range(args.nodes - 1):
            cluster.add_node(num_cpus=args.cpus)
        cluster.wait_for_nodes()
        sys.stdout.write(f"{cluster.address}\n")
        sys.stdout.flush()
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        stop.wait()
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
