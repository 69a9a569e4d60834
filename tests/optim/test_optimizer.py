"""The optimizer contract: one in-place update op per parameter, lazily created state, the
learning rate as a reusable Variable, validation before any update, and clear errors."""

import numpy as np
import pytest

import optim
import tape
from tape.errors import AttrError, InputError, ShapeError


def trained_params(dtype=np.float64, seed=0):
    """Two parameters with gradients from one backward, and a third without a gradient."""
    rng = np.random.default_rng(seed)
    a, b, c = (
        tape.Variable(rng.standard_normal(s).astype(dtype), requires_grad=True)
        for s in [(2, 3), (3,), (4,)]
    )
    tape.reset_global_tape()
    tape.backward((a * a).sum() + (b * 3.0).sum())
    return a, b, c


def recording():
    """A fresh global tape that keeps every op, so the updates can be inspected."""
    recorder = tape.reset_global_tape()
    recorder.record_all = True
    return recorder


def test_records_one_in_place_update_op_per_parameter_with_a_gradient():
    a, b, c = trained_params()
    recorder = recording()
    opt = optim.Adam(lr=0.1)
    opt([a, b, c])
    assert [op.type for op in recorder.ops] == ["adam", "adam"]
    for op, param in zip(recorder.ops, [a, b], strict=True):
        assert op.outputs["ParamOut"][0] is param
        for slot in ("Moment1", "Moment2", "Beta1Pow", "Beta2Pow"):
            assert op.outputs[slot + "Out"][0] is op.inputs[slot][0]
    assert "2" not in opt.state_dict()["state"], "no state for a parameter without a gradient"


def test_state_is_persistable_never_requires_grad_and_keeps_float32():
    a, b, _ = trained_params(np.float32)
    opt = optim.Adam(lr=0.1)
    opt([a, b])
    state = opt.state_dict()["state"]["0"]
    assert state["Moment1"].dtype == np.float32 and state["Moment2"].dtype == np.float32
    assert state["Beta1Pow"].dtype == np.float64  # bias corrections in double, as PyTorch
    for var in opt._state[id(a)].vars.values():
        assert var.persistable and not var.requires_grad
    assert a.dtype == np.float32 and a.numpy().dtype == np.float32


def test_sgd_without_momentum_records_sgd_and_with_momentum_records_momentum():
    for kwargs, op_type in [({}, "sgd"), ({"momentum": 0.9}, "momentum")]:
        a, b, _ = trained_params()
        recorder = recording()
        optim.SGD(lr=0.1, **kwargs)([a, b])
        assert [op.type for op in recorder.ops] == [op_type, op_type]


def test_learning_rate_variable_is_reused_until_the_rate_changes():
    schedule = optim.lr_scheduler.StepDecay(0.1, step_size=2, gamma=0.5)
    opt = optim.SGD(lr=schedule)
    seen = []
    for _ in range(4):
        a, b, _ = trained_params()
        recorder = recording()
        opt([a])
        seen.append(recorder.ops[0].inputs["LearningRate"][0])
        schedule.step()
    assert seen[0] is seen[1] and seen[2] is seen[3] and seen[1] is not seen[2]
    assert seen[2].numpy() == pytest.approx([0.05])


def test_gradients_are_consumed_and_parameters_without_one_are_untouched():
    a, b, c = trained_params()
    before = c.numpy().copy()
    optim.RMSProp(lr=0.1)([a, b, c])
    assert a.grad() is None and b.grad() is None
    np.testing.assert_array_equal(c.numpy(), before)


def test_no_parameter_changes_when_a_later_one_fails_validation():
    a, b, _ = trained_params()
    b._grad = tape.Variable(np.zeros(4))  # a gradient that cannot belong to b
    before = a.numpy().copy()
    with pytest.raises(
        ShapeError,
        match=r"op 'adam': the gradient of parameter 1 \(unnamed\) "
        r"has the wrong shape\n  expected: \(3,\)\n"
        r"  actual:   \(4,\)",
    ):
        optim.Adam(lr=0.1)([a, b])
    np.testing.assert_array_equal(a.numpy(), before)
    assert a.grad() is not None, "a failed call must not consume gradients"


def test_state_loaded_for_an_unseen_parameter_is_checked_before_any_update():
    a, b, _ = trained_params()
    source = optim.Momentum(lr=0.1)
    source([a, b])
    state = source.state_dict()
    state["state"]["1"]["Velocity"] = np.zeros(5)  # wrong shape for parameter 1
    opt = optim.Momentum(lr=0.1)
    opt.load_state_dict(state)  # not yet bound: positions are known at the first call
    a, b, _ = trained_params()
    before = a.numpy().copy()
    with pytest.raises(
        tape.checkpoint.CheckpointError,
        match=r"optimizer state 'Velocity' of parameter '1' does not match",
    ):
        opt([a, b])
    np.testing.assert_array_equal(a.numpy(), before)


def test_a_parameter_listed_twice_is_an_error():
    a, b, _ = trained_params()
    a.name = "w"
    with pytest.raises(InputError, match="op 'sgd': parameter 'w' appears twice"):
        optim.SGD(lr=0.1)([a, b, a])


def test_updates_never_name_unnamed_parameters():
    """Reading Variable.name would give a generated name for good (checkpoints key on names)."""
    a, b, _ = trained_params()
    optim.Adam(lr=0.1)([a, b])
    assert a._name is None and b._name is None


def test_non_variables_are_rejected():
    with pytest.raises(InputError, match="SGD: the parameters must be a list of Variables"):
        optim.SGD(lr=0.1)([np.zeros(3)])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: optim.SGD(lr=-0.1), r"SGD: invalid hyper-parameter 'lr'\n  expected: lr >= 0"),
        (lambda: optim.SGD(lr="fast"), "SGD: hyper-parameter 'lr' must be a number"),
        (lambda: optim.SGD(lr=0.1, nesterov=True), "Nesterov momentum needs momentum > 0"),
        (lambda: optim.Adam(betas=(1.0, 0.999)), r"invalid hyper-parameter 'betas\[0\]'"),
        (lambda: optim.RMSProp(alpha=1.5), "RMSProp: invalid hyper-parameter 'alpha'"),
        (lambda: optim.Adagrad(eps=-1.0), "Adagrad: invalid hyper-parameter 'eps'"),
        (lambda: optim.AdamW(weight_decay=-0.1), "AdamW: invalid hyper-parameter 'weight_decay'"),
        (lambda: optim.ClipGradByNorm(0.0), "ClipGradByNorm: invalid 'max_norm'"),
        (lambda: optim.ClipGradByValue(1.0, -1.0), "ClipGradByValue: min is greater than max"),
    ],
)
def test_invalid_hyper_parameters_are_named(make, message):
    with pytest.raises(AttrError, match=message):
        make()


def test_invalid_decay_coefficient():
    with pytest.raises(AttrError, match="L2Decay: invalid 'coeff'"):
        optim.L2Decay(-1.0)


def test_lr_reads_and_sets_the_current_rate():
    opt = optim.Adam(lr=0.1)
    opt.lr = 0.01
    assert opt.lr == 0.01 and opt.scheduler is None
    assert repr(opt) == "Adam(lr=0.01, betas=(0.9, 0.999), eps=1e-08)"


def test_clipping_operates_on_gradients_only():
    a, b, _ = trained_params()
    grad_a = a.grad().numpy().copy()
    pairs = optim.ClipGradByGlobalNorm(0.1)([(a, a.grad()), (b, b.grad())])
    np.testing.assert_array_equal(a.grad().numpy(), grad_a)  # the stored gradient is kept
    total = np.sqrt(sum(np.sum(g.numpy() ** 2) for _, g in pairs))
    assert total == pytest.approx(0.1, rel=1e-5)


def test_state_follows_hyper_parameter_changes():
    """Turning momentum on later creates the velocity then (PyTorch creates buffers lazily)."""

    def slots(opt):
        return sorted(set(opt.state_dict()["state"]["0"]) - {"step", "name"})

    a, b, _ = trained_params()
    opt = optim.RMSProp(lr=0.01)
    opt([a, b])
    assert slots(opt) == ["MeanSquare"]
    opt.momentum, opt.centered = 0.9, True
    tape.reset_global_tape()
    tape.backward((a * a).sum() + (b * 3.0).sum())
    opt([a, b])
    assert slots(opt) == ["MeanGrad", "MeanSquare", "Moment"]


UPDATES = [
    lambda: optim.SGD(lr=0.1),
    lambda: optim.SGD(lr=0.1, momentum=0.9, nesterov=True),
    lambda: optim.Adam(lr=0.1),
    lambda: optim.AdamW(lr=0.1),
    lambda: optim.Adagrad(lr=0.1),
    lambda: optim.RMSProp(lr=0.1, momentum=0.5, centered=True),
]


def _three_steps(make, through_record, monkeypatch):
    """The parameters after three eager steps, the updates run by ``tape.run_update`` or, with
    ``through_record``, by ``record``'s general path."""
    import optim.optimizer as optimizer_module
    from tape.tape import record

    if through_record:
        monkeypatch.setattr(
            optimizer_module, "run_update", lambda t, d, a, at, g: record(t, d, a, at, g)
        )
    a, b, _ = trained_params(np.float32, seed=3)
    opt = make()
    for _ in range(3):
        tape.reset_global_tape()
        tape.backward((a * a * a).sum() + (b * b).sum())
        opt([a, b])
    monkeypatch.undo()
    return a.numpy(), b.numpy(), opt.state_dict()


@pytest.mark.parametrize("make", UPDATES)
def test_an_eager_update_runs_as_recording_it_would(make, monkeypatch):
    """The eager direct path (``tape.run_update``) changes parameters and state exactly as
    ``record``'s general path does."""
    *params, state = _three_steps(make, False, monkeypatch)
    *expected_params, expected_state = _three_steps(make, True, monkeypatch)
    for got, want in zip(params, expected_params, strict=True):
        np.testing.assert_array_equal(got, want)
    for key, entry in expected_state["state"].items():
        for slot, value in entry.items():
            np.testing.assert_array_equal(state["state"][key][slot], value)


def test_an_update_under_a_profile_is_observed_and_under_record_all_kept():
    a, b, _ = trained_params()
    with tape.profile() as prof:
        optim.Adam(lr=0.1)([a, b])
    assert [row.key for row in prof.table().rows] == ["adam"]
    a, b, _ = trained_params()
    recorder = recording()
    optim.SGD(lr=0.1)([a, b])
    assert [op.type for op in recorder.ops] == ["sgd", "sgd"]


def test_a_kernel_failing_in_a_later_update_names_the_op_and_changes_nothing(monkeypatch):
    from ops.registry import REGISTRY
    from tape.errors import ExecutionError

    a, b, _ = trained_params()
    before = a.numpy().copy(), b.numpy().copy()
    defn = REGISTRY["sgd"]
    real = defn.kernel

    def kernel(xp, attrs, param, grad, lr):
        if param.shape == (3,):
            raise RuntimeError("the device fell over")
        return real(xp, attrs, param, grad, lr)

    monkeypatch.setattr(defn, "kernel", kernel)
    with pytest.raises(ExecutionError, match="sgd.*the device fell over") as err:
        optim.SGD(lr=0.1)([a, b])
    assert err.value.location and "test_optimizer.py" in err.value.location
    for param, value in zip((a, b), before, strict=True):
        np.testing.assert_array_equal(param.numpy(), value)
