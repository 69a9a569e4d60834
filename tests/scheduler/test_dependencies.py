"""Dependencies: RAW/WAR/WAW edges, happens-before, transitive reduction, implicit ordering."""

from tape.ir import Program
from tape.passes.dependencies import analyse
from tests.scheduler.programs import seed_training


def _block(*ops, variables=("a",)):
    """A block declaring ``variables`` (2x2, "lr" 1 element; names starting with "p" are
    persistable) and holding ``ops`` as (type, inputs, outputs, attrs)."""
    program = Program()
    block = program.global_block()
    for name in variables:
        block.create_var(
            name, (1,) if name == "lr" else (2, 2), "float32", persistable=name.startswith("p")
        )
    for op_type, inputs, outputs, attrs in ops:
        block.append_op(op_type, inputs, outputs, attrs)
    return block


def test_read_after_write_chain_and_its_reduction():
    block = _block(
        ("tanh", {"X": ["a"]}, {"Out": ["b"]}, {}),
        ("exp", {"X": ["b"]}, {"Out": ["c"]}, {}),
        ("elementwise_add", {"X": ["b"], "Y": ["c"]}, {"Out": ["d"]}, {}),
    )
    deps = analyse(block)
    assert deps.edges == ((1, 2), (2,), ())
    assert deps.successors == ((1,), (2,), ())  # 0 -> 2 is implied by 0 -> 1 -> 2
    assert deps.dependency_count == (0, 1, 1)
    assert deps.happens_before(0, 2) and not deps.happens_before(2, 0)
    assert not deps.happens_before(1, 1)
    assert deps.edge_count(reduced=False) == 3 and deps.edge_count() == 2


def test_write_after_read_orders_an_in_place_update_after_the_readers():
    block = _block(
        ("tanh", {"X": ["p"]}, {"Out": ["t"]}, {}),
        ("exp", {"X": ["p"]}, {"Out": ["u"]}, {}),
        ("sgd", {"Param": ["p"], "Grad": ["g"], "LearningRate": ["lr"]}, {"ParamOut": ["p"]}, {}),
        ("neg", {"X": ["p"]}, {"Out": ["v"]}, {}),
        variables=("p", "g", "lr"),
    )
    deps = analyse(block)
    assert deps.edges == ((2,), (2,), (3,), ())
    assert deps.successors == ((2,), (2,), (3,), ())
    assert deps.dependency_count == (0, 0, 2, 1)
    assert not deps.happens_before(0, 1) and not deps.happens_before(1, 0)


def test_write_after_write_orders_two_writers():
    block = _block(
        ("tanh", {"X": ["a"]}, {"Out": ["v"]}, {}),
        ("exp", {"X": ["a"]}, {"Out": ["v"]}, {}),
        ("neg", {"X": ["v"]}, {"Out": ["w"]}, {}),
    )
    deps = analyse(block)
    assert deps.edges == ((1,), (2,), ())


def test_random_ops_keep_program_order():
    block = _block(
        ("uniform_random", {}, {"Out": ["r1"]}, {"shape": [2, 2]}),
        ("tanh", {"X": ["a"]}, {"Out": ["t"]}, {}),
        ("gaussian_random", {}, {"Out": ["r2"]}, {"shape": [2, 2]}),
        ("dropout", {"X": ["t"]}, {"Out": ["d"], "Mask": ["m"]}, {}),
    )
    deps = analyse(block)
    assert deps.edges == ((2,), (3,), (3,), ())
    assert deps.happens_before(0, 3)


def test_side_effects_keep_program_order():
    block = _block(
        ("save", {"X": ["a"]}, {}, {"path": "/dev/null/a"}),
        ("tanh", {"X": ["a"]}, {"Out": ["t"]}, {}),
        ("save", {"X": ["t"]}, {}, {"path": "/dev/null/b"}),
    )
    deps = analyse(block)
    assert deps.edges == ((2,), (2,), ())


def test_seed_training_program_reduced_dag():
    deps = analyse(seed_training().global_block())
    # matmul_2 -> adam_14 (write after read on w) is implied by the path through the backward.
    assert 14 in deps.edges[2] and deps.successors[2] == (3,)
    # elementwise_sub_0 feeds square_5 and elementwise_mul_10: two independent branches.
    assert deps.successors[4] == (5, 10)
    # the two Adam updates keep their order; the fetch waits only for the loss.
    assert deps.successors[14] == (15,)
    assert deps.successors[6] == (16,)
    assert sum(count == 0 for count in deps.dependency_count) == 3  # two feeds, fill_constant


def test_a_wide_op_keeps_its_edges_unreduced_instead_of_a_search_per_pair(monkeypatch):
    from tape.passes import dependencies

    wide = dependencies.FAN_IN + 1
    names = [f"t{i}" for i in range(wide)]
    chain = [("tanh", {"X": ["a"]}, {"Out": ["t0"]}, {})] + [
        ("tanh", {"X": [names[i - 1]]}, {"Out": [names[i]]}, {}) for i in range(1, wide)
    ]
    block = _block(*chain, ("sum", {"X": names}, {"Out": ["s"]}, {}), variables=["a", *names])
    searches = []
    happens_before = dependencies.Dependencies.happens_before

    def counted(self, a, b, horizon=None):
        searches.append((a, b))
        return happens_before(self, a, b, horizon)

    monkeypatch.setattr(dependencies.Dependencies, "happens_before", counted)
    deps = analyse(block)
    assert deps.dependency_count[-1] == wide  # every edge into the sum kept (a valid schedule)
    assert all(b != len(chain) for _, b in searches)  # no search for the sum's predecessor pairs
    assert len(searches) <= 2 * len(chain)  # the chain's own edges: one check each
    narrow = _block(*chain[:4], ("sum", {"X": names[:4]}, {"Out": ["s"]}, {}))
    assert analyse(narrow).dependency_count[-1] == 1  # below the cap: reduced to t3 -> s
