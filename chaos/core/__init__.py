"""The process core every mode shares: forking and killing a worker (process), crash points and
the recorder (points), the shared clock, what a database holds for the next process to open it (content), one run's files and how a session opens on them (context), the models an adapter declares in a word (declared), the connections an engine on a pool opens itself (pool), what
one iteration of an engine's loop is (iteration), how an engine recovers a dead worker's work
(recovery), the store's failures a call can bring on (store_faults), the lines an engine declares no iteration reaches (unreachable), the ledger files every process writes, libfiu's preload (the I/O errors), the world of paid calls and deliveries (world), the faults a call can meet (call_faults), the user's line a call or an effect came from (origin), the
invariants (the catalog: invariants; what they read and report: evidence; the checks of a run: run_checks; the fix of each finding: fixes), the findings and their GitHub annotations, one scenario's vocabulary (scenario) and its
phases: a family's template and its copies (template), its setup and its recorded baseline (prepare), a worker killed at a point (kill), a worker frozen at a point (freeze), the recovery after a fault (settle), what a scenario ended with (verdict), a sample of
a run's items that keeps every fault kind (sampling), the bound on a scenario and what one that hung leaves
(hangs) and the sandbox a fault plan runs in; the
fresh process scenarios are forked from (pristine), the effects a step has outside the outbox
(effects), where the user's code raised (raises) and the files written for a user whole or not at
all (whole_file).
"""

__all__ = [
    "annotations", "call_faults", "capabilities", "clock", "content", "context", "declared", "effects", "errors", "evidence", "findings", "fixes", "freeze", "hangs", "invariants", "iteration", "kill", "ledger_file", "libfiu", "models", "origin", "points", "pool", "prepare", "pristine", "process",
    "raises", "recovery", "run_checks", "sampling", "sandbox", "scenario", "settle", "store_faults", "target", "template", "thread_connections", "unreachable", "verdict", "whole_file", "world",
]
