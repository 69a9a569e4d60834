"""OpHandle: one recorded op -- its definition, inputs and outputs per slot, attributes -- and the
conversion of the seed's ``{slot: [Variables]}`` form into the positional entries the engine uses.

The same shape as Paddle's OpDesc, so a tape converts to the IR without translation.
"""

from __future__ import annotations

from tape.errors import InputError
from tape.variable import Variable


class OpHandle:
    """One recorded op: its definition, positional inputs/outputs per slot, and attributes.

    ``args``/``results`` hold one entry per slot (a Variable, a list for duplicable slots, or None
    for an absent optional slot); ``inputs``/``outputs`` give the seed's slot -> list view.
    """

    __slots__ = ("defn", "args", "results", "attrs", "location", "index")

    def __init__(self, defn, args, results, attrs, location, index):
        # One store per statement: unpacking a tuple of six costs ~15% more (one per lazy op).
        self.defn = defn
        self.args = args
        self.results = results
        self.attrs = attrs
        self.location = location
        self.index = index

    @property
    def type(self):
        return self.defn.type

    @property
    def name(self):
        return f"{self.defn.type}_{self.index}"

    @property
    def inputs(self):
        return _slot_view(self.defn.input_slots, self.args)

    @property
    def outputs(self):
        return _slot_view(self.defn.output_slots, self.results)

    def input_vars(self):
        return _flatten(self.args)

    def output_vars(self):
        return _flatten(self.results)

    def __repr__(self):
        ins = {k: [v.name for v in vs] for k, vs in self.inputs.items()}
        outs = {k: [v.name for v in vs] for k, vs in self.outputs.items()}
        return f"OpHandle({self.type!r}, inputs={ins}, outputs={outs}, attrs={self.attrs})"


class CallHandle(OpHandle):
    """A ``tape.traced`` call: an OpHandle that also knows whether its program alone is its
    batch signature, as no argument is a shared Variable whose identity the signature would
    name, so that the autobatching pass looks it up instead of scanning the call's inputs
    (``tape.passes.autobatch``). ``watched``: None where it is not; else the positions, in
    the call's one list of inputs, of the user's own Variables: the user may yet make one a
    parameter (``persistable``, ``requires_grad``) before the call runs, and the pass checks
    those. Positions, not the Variables: a reference held here would look like the user's to
    the reference counts that free values."""

    __slots__ = ("watched",)

    def __init__(self, defn, args, results, attrs, location, index, watched):
        super().__init__(defn, args, results, attrs, location, index)
        self.watched = watched


def _slot_view(slots, entries):
    view = {}
    for slot, entry in zip(slots, entries):
        if entry is None:
            continue
        view[slot] = list(entry) if isinstance(entry, (list, tuple)) else [entry]
    return view


def _flatten(entries):
    if len(entries) == 1 and entries[0].__class__ is list:
        return list(entries[0])  # (one list slot, as a traced call or a sum reads: a copy)
    flat = []
    for entry in entries:
        if entry.__class__ is Variable:
            flat.append(entry)
        elif entry is None:
            continue
        elif isinstance(entry, (list, tuple)):
            flat.extend(entry)
        else:
            flat.append(entry)
    return flat


def slot_entries(defn, slots, given, kind, duplicable, optional):
    """The seed's {slot: [vars]} form as one entry per slot, checking every slot."""
    given = dict(given or {})
    unknown = [slot for slot in given if slot not in slots]
    if unknown:
        raise InputError(
            defn.type,
            f"unknown {kind} slot '{unknown[0]}'",
            hint=f"valid {kind} slots: {', '.join(slots) or '(none)'}",
        )
    entries = []
    for slot in slots:
        value = given.get(slot)
        if value is None:
            if kind == "input" and slot not in optional:
                raise InputError(
                    defn.type,
                    f"missing input '{slot}'",
                    hint=f"inputs are {', '.join(defn.input_slots)}",
                )
            entries.append(None)
            continue
        if isinstance(value, Variable):
            value = [value]
        value = list(value)
        for item in value:
            if not isinstance(item, Variable):
                raise InputError(
                    defn.type, f"{kind} '{slot}' must hold Variables", actual=type(item).__name__
                )
        if slot in duplicable:
            entries.append(value)
        elif len(value) != 1:
            raise InputError(
                defn.type,
                f"{kind} '{slot}' takes exactly one Variable",
                actual=f"{len(value)} Variables",
            )
        else:
            entries.append(value[0])
    return tuple(entries)
