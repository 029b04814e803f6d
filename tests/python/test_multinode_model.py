"""test_multinode_model.py — bench/multinode_model.py's arithmetic on CPU: one node puts nothing on
the network; the network rows per GPU are the expected (token, remote node) pairs, checked against
a count over random routings, never more than the k (N - 1) / N remote pairs (deduplication) and
growing with N; its one-node prediction is the measured compute plus NVLink only."""
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import multinode_model as mm  # noqa: E402


def test_network_rows_match_random_routings():
    rng = random.Random(11)
    T, k, E = 4000, 8, 256
    for nodes in (2, 4, 8):
        epn = E // nodes
        got = 0
        for _ in range(T):
            ex = rng.sample(range(E), k)
            home = rng.randrange(nodes)
            got += len({e // epn for e in ex} - {home})
        want = mm.network_rows(T, k, nodes)
        # experts drawn without replacement hit slightly more nodes than the model's independent
        # draws: within 3% at 256 experts
        assert abs(got - want) / want < 0.03, (nodes, got, want)
        assert want <= T * k * (nodes - 1) / nodes
    assert mm.network_rows(T, k, 1) == 0.0
    assert mm.network_rows(T, k, 2) < mm.network_rows(T, k, 4) < mm.network_rows(T, k, 8)


def test_one_node_is_compute_plus_nvlink():
    shape = mm.SHAPES["deepseek-v3"]
    c = mm.predict(10.0, shape, 7168, 1, 8, 50.0, 10.0, 1024)
    assert c["rdma"] == 0.0 and c["network_rows"] == 0.0
    assert abs(c["serial"] - (c["compute"] + c["nvlink"])) < 1e-9
    assert c["overlapped"] <= c["serial"]
    slow = mm.predict(10.0, shape, 7168, 8, 8, 5.0, 10.0, 1024)
    assert slow["bound"] == "rdma" and slow["rdma"] > c["compute"]
