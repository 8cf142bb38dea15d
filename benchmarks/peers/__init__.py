"""Benchmarks of the peers users would pick instead of jobboard (TaskFlow's ZooKeeper jobboard, kazoo's
LockingQueue) and of the raw-aiozk ceiling, on the same ZooKeeper server and workload as
``benchmarks.cycle``."""
