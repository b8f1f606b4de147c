"""pytest-xdist's loadgroup scheduling, without running again the test a worker crashed on, and without the hang
after it.

pytest-xdist 3.8 puts the test a worker died in back in the queue with the rest of its group, so each replacement
worker runs it again until --max-worker-restart is spent (8 restarts with 2 workers): a test that ends its worker at
the timeout (timeout_method = "thread") would hold the suite nine timeouts long. xdist has already reported it failed
("worker 'gw0' crashed while running ..."); here only the tests of its group not yet run go back to the queue.
And a worker starts a test only once it holds the next one or is told to stop: the replacement worker, given a group
of one test, waited for ever; here a worker is given more work or told to stop whenever it holds fewer than two.
A plugin (pyproject.toml's addopts: -p tests.scheduling)."""

from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling


class LoadGroupWithoutRerun(LoadGroupScheduling):
    def remove_node(self, node) -> str | None:
        workload = self.assigned_work.pop(node)
        pending = [nodeid for unit in workload.values() for nodeid, done in unit.items() if not done]
        if not pending:
            return None
        crashitem = pending[0]  # the worker runs its work in the order it was sent, as xdist's own choice assumes
        for unit in workload.values():
            if crashitem in unit:
                unit[crashitem] = True
        self.workqueue.update({scope: unit for scope, unit in workload.items() if not all(unit.values())})
        for other in self.assigned_work:
            self._reschedule(other)
        return crashitem

    def _reschedule(self, node) -> None:
        super()._reschedule(node)
        while not node.shutting_down and self._pending_of(self.assigned_work[node]) < 2:
            if not self.workqueue:
                node.shutdown()  # the worker runs what it holds, then ends
                break
            self._assign_work_unit(node)


def pytest_xdist_make_scheduler(config, log):
    """--dist loadgroup (pyproject.toml's addopts), without the rerun."""
    return LoadGroupWithoutRerun(config, log) if config.getvalue("dist") == "loadgroup" else None
