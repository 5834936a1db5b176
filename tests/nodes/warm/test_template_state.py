"""
Tests for :mod:`vmservice.nodes.warm.template_state`: one template key's state as
an automat machine; every (state, input) moves, stays or is refused.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable

from automat import NoTransition
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.diagrams import drawn_transitions, machine_transitions
from vmservice.nodes.warm.spare import SPARE_PREFIX
from vmservice.nodes.warm.template_files import Template
from vmservice.nodes.warm.template_key import TemplateKey
from vmservice.nodes.warm.template_records import RETRY_AFTER, BuildUnderWay, Held, TemplateUnavailable
from vmservice.nodes.warm.template_state import TEMPLATE_STATE, TemplateRecord, TemplateState
from vmservice.observer import OneShotObserver

MiB = 1024 * 1024
KEY = TemplateKey(image="default", build="/img/default-1", qemu="qemu 7.2", ram_bytes=256 * MiB, vcpus=1,
                  network=False, storage_size=1 << 30)

#: The inputs that move between states; every other one leaves the state as it is (or is refused).
MOVES = {
    ("Absent", "started"): "Building",
    ("Failed", "started"): "Building",
    ("Building", "built"): "Ready",
    ("Building", "failed"): "Failed",
    ("Building", "no_room"): "Absent",
    ("Ready", "drop"): "Absent",
}
#: The inputs each state refuses (the store never sends them there).
REFUSED = {
    "Absent": {"built", "failed", "no_room", "drop"},
    "Building": {"started", "drop"},
    "Ready": {"started", "built", "failed", "no_room", "join"},
    "Failed": {"built", "failed", "no_room", "drop"},
}
STATES = ("Absent", "Building", "Ready", "Failed")
INPUTS = ("template", "join", "started", "built", "failed", "no_room", "stopping", "drop", "ram", "files",
          "add_spare", "take_spare", "spare_ram")


def _template(root: str) -> Template:
    """A template's files, made under ``root``."""
    directory = os.path.join(root, "templates", "t." + os.urandom(3).hex())
    os.makedirs(directory)
    template = Template(KEY, directory, os.path.join(directory, "disk.qcow2"), os.path.join(directory, "dev.bin"),
                        os.path.join(root, "ram-" + os.path.basename(directory)), "/k", "/i")
    for path in (template.disk, template.device_state, template.ram_file, template.empty_overlay):
        open(path, "w").close()
    return template


def _refusal(state: TemplateState, now: float) -> object:
    """Send ``join``: its answer, or the refusal of a remembered failure."""
    try:
        return state.join(now)
    except TemplateUnavailable as refused:
        return refused


def _short_root(case: SynchronousTestCase) -> str:
    """A directory whose paths are short enough for a spare's sockets, removed after the test."""
    root = tempfile.mkdtemp(prefix="tmpl")
    case.addCleanup(shutil.rmtree, root, True)
    return root


class _Key:
    """One key's record and the template of its build, driven as the store drives it."""

    def __init__(self, root: str) -> None:
        self.record = TemplateRecord.new(KEY)
        self.state: TemplateState = self.record.state
        self.template = _template(root)
        self.run: Deferred[None] = Deferred()

    def send(self, name: str, now: float = 0.0) -> object:
        """Send input ``name`` with the arguments the store would give it; its answer."""
        state, template = self.state, self.template
        calls: dict[str, Callable[[], object]] = {
            "join": lambda: _refusal(state, now),
            "started": lambda: state.started(BuildUnderWay(template, OneShotObserver(), self.run)),
            "built": lambda: state.built(template),
            "failed": lambda: state.failed(now, "the guest did not answer"),
            "add_spare": lambda: state.add_spare(template),
            "take_spare": lambda: state.take_spare(template),
        }
        return calls.get(name, getattr(state, name))()

    def into(self, name: str) -> _Key:
        """Bring it to state ``name`` from Absent, as the store does."""
        steps = {"Absent": [], "Building": ["started"], "Ready": ["started", "built"],
                 "Failed": ["started", "failed"]}[name]
        for step in steps:
            self.send(step)
        return self

    def which(self, now: float = 0.0) -> str:
        """Which state it is in, told from its answers alone (what a test may ask, the store never does)."""
        if self.state.template() is not None:
            return "Ready"
        if self.state.ram():
            return "Building"
        try:
            self.state.join(now)
        except TemplateUnavailable:
            return "Failed"
        return "Absent"


class TransitionTests(SynchronousTestCase):
    def key(self, state: str) -> _Key:
        return _Key(self.mktemp()).into(state)

    def test_every_pair(self) -> None:
        """Each (state, input): it moves as MOVES says, is refused as REFUSED says, or stays."""
        for state in STATES:
            for name in INPUTS:
                key = self.key(state)
                if name in REFUSED[state]:
                    self.assertRaises(NoTransition, key.send, name)
                    self.assertEqual(key.which(), state, (state, name))
                    continue
                key.send(name)
                self.assertEqual(key.which(), MOVES.get((state, name), state), (state, name))

    def test_answers(self) -> None:
        """What each state answers: its template, its RAM, what of its files is kept, the run to cancel."""
        for state in STATES:
            key = self.key(state)
            holds = state in ("Building", "Ready")
            self.assertEqual(key.state.template(), key.template if state == "Ready" else None, state)
            self.assertEqual(key.state.ram(), 256 * MiB if holds else 0, state)
            self.assertIs(key.state.stopping(), key.run if state == "Building" else None, state)
            self.assertEqual((key.state.spare_ram(), key.state.take_spare(key.template)), ((), None), state)
        building = self.key("Building")
        self.assertEqual(building.state.files(), Held(building=os.path.basename(building.template.directory)))
        ready = self.key("Ready")
        ram_name = os.path.basename(ready.template.ram_file)
        self.assertEqual(ready.state.files(), Held(ready.template.directory, ram_name))
        self.assertEqual((self.key("Absent").state.files(), self.key("Failed").state.files()), (Held(), Held()))

    def test_join(self) -> None:
        """An ask joins the build under way; a failure refuses asks for RETRY_AFTER, then one builds again."""
        self.assertIsNone(self.key("Absent").state.join(0.0))
        building = self.key("Building")
        waiting = building.state.join(0.0)
        assert waiting is not None
        self.assertNoResult(waiting)
        failed = self.key("Failed")
        error = self.assertRaises(TemplateUnavailable, failed.state.join, RETRY_AFTER - 1)
        self.assertEqual(error.kind, "build_failed")
        self.assertIn("the guest did not answer", str(error))
        self.assertIsNone(failed.state.join(RETRY_AFTER))
        self.assertEqual(failed.which(RETRY_AFTER - 1), "Failed")  # until a build starts

    def test_failed_builds_leave_no_files(self) -> None:
        """A build that failed (remembered or for lack of room) leaves nothing of its directory."""
        for end in ("failed", "no_room"):
            key = self.key("Building")
            key.send(end)
            self.assertFalse(os.path.exists(key.template.directory), end)

    def test_drop(self) -> None:
        """A dropped template's RAM file, device state and empty overlay go; its frozen disk and directory stay."""
        key = self.key("Ready")
        key.send("drop")
        template = key.template
        self.assertEqual([os.path.exists(path) for path in (template.ram_file, template.device_state,
                                                             template.empty_overlay, template.disk)],
                         [False, False, False, True])


class SpareTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.key = _Key(_short_root(self)).into("Ready")
        self.core, self.state, self.template = self.key.record.core, self.key.state, self.key.template

    def test_pool(self) -> None:
        """Spares are added up to the wanted count, one starting at a time, none while a clone is being made."""
        self.assertIsNone(self.state.add_spare(self.template))  # none wanted
        self.core.wanted = 2
        first = self.state.add_spare(self.template)
        assert first is not None
        self.assertTrue(os.path.basename(first.directory).startswith(SPARE_PREFIX))
        self.assertIsNone(self.state.add_spare(self.template))  # the first is starting
        first.phase.ready()
        self.core.cloning = 1
        self.assertIsNone(self.state.add_spare(self.template))
        self.core.cloning = 0
        other = _template(self.mktemp())
        self.assertIsNone(self.state.add_spare(other))  # not the ready template
        second = self.state.add_spare(self.template)
        assert second is not None
        second.phase.ready()
        self.assertIsNone(self.state.add_spare(self.template))  # full
        self.assertEqual(self.state.spare_ram(), (256 * MiB, 256 * MiB))
        self.assertEqual(set(self.state.files().spares), {first.directory, second.directory})

    def test_take(self) -> None:
        """A ready spare is taken once; a starting one never."""
        self.core.wanted = 2
        spare = self.state.add_spare(self.template)
        assert spare is not None
        self.assertIsNone(self.state.take_spare(self.template))
        spare.phase.ready()
        self.assertIsNone(self.state.take_spare(_template(self.mktemp())))
        self.assertIs(self.state.take_spare(self.template), spare)
        self.assertIsNone(self.state.take_spare(self.template))
        self.assertEqual(self.state.spare_ram(), ())

    def test_drop_kills_spares(self) -> None:
        """Dropping the template kills its spares."""
        self.core.wanted = 1
        spare = self.state.add_spare(self.template)
        assert spare is not None
        self.state.drop()
        self.assertFalse(spare.phase.holds())
        self.assertIsNone(self.state.take_spare(self.template))


class SequenceTests(SynchronousTestCase):
    @given(st.lists(st.sampled_from(INPUTS), max_size=25))
    def test_every_sequence(self, steps: list[str]) -> None:
        """Every sequence of inputs moves, stays or is refused as the tables say."""
        key, model = _Key(self.mktemp()), "Absent"
        for step in steps:
            if step in REFUSED[model]:
                self.assertRaises(NoTransition, key.send, step)
            else:
                key.send(step)
                model = MOVES.get((model, step), model)
            self.assertEqual(key.which(), model, steps)


class DiagramTests(SynchronousTestCase):
    def test_every_transition(self) -> None:
        """docs/state-machines/template.dot has an edge for exactly the machine's transitions, loops included."""
        self.assertEqual(drawn_transitions("template.dot"), machine_transitions(TEMPLATE_STATE))
