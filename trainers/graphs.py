"""performance.cuda_graphs: the whole training step (forward, backward, clipping, the optimizer's update)
captured once in a CUDA graph and replayed every step after, so a small model's step costs one launch instead
of one per kernel. The kernels and their order are the eager step's, so the loss curve is eager's.

A graph replays fixed kernels on fixed memory. So the batch is copied into buffers the graph reads, the
optimizer's lr is a device tensor the graph reads (filled before each replay, so schedules still apply), the
gradients live in the graph's own memory, and autocast keeps no cache of cast weights across the capture.
Capture follows eager steps on the capture stream (torch's recipe: lazily made state such as optimizer
moments and cuDNN's autotuned plans must exist first). Under ddp the gradients' all-reduce is captured
too: DDP was built on the capture stream (trainers/components.py) and needs more eager steps first (see
DDP_WARMUP_STEPS). A step whose batch has another shape (a ragged last batch) runs eagerly on the same
parameters and optimizer state.

Under `auto`, the eager warm-up steps and the first replays are timed with CUDA events, read once, and the
graph is kept only if replaying beats the eager step; either way a warning event says what was decided. Under
ddp the ranks decide on their timings' mean, so all of them replay or none does: a rank replaying its
captured all-reduce while another runs DDP's eager one would pair collectives that do not match.
The planner refuses `on` where capture cannot work (jobspec/combinations.py graph_blockers).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from jobspec.combinations import graph_blockers
from jobspec.plan import Plan
from jobspec.spec import CudaGraphs, JobSpec
from trainers.data.batches import Batch, map_tensors, tensors
from trainers.objectives import LossValues

Done = list[tuple[LossValues, int]]  # each micro-batch's loss values and sample count
FullStep = Callable[[list[Batch]], Done]  # forward, backward and update over one step's micro-batches
Note = Callable[[int, str], None]  # (step, message)
Agree = Callable[[list[float]], list[float]]  # these values' mean over every rank: a collective

WARMUP_STEPS = 3
# DDP times its first ten iterations with CUDA events and reads them in the next iteration's forward, which a
# capture cannot hold; torch's CUDA graphs notes ask for 11 eager DDP iterations before capture.
DDP_WARMUP_STEPS = 11
TIMED_STEPS = 5  # replays timed under auto, against the last eager warm-up steps


def captures_step(spec: JobSpec, plan: Plan) -> bool:
    """Whether this job's step is captured: asked for, and nothing in the job stands in the way (the planner
    refused `on` in such jobs; under `auto` the plan's warnings said why)."""
    wanted = spec.performance.cuda_graphs is not CudaGraphs.OFF
    return wanted and not graph_blockers(spec, plan.strategy, plan.device)


def _same_shapes(static: list[Batch], batches: list[Batch]) -> bool:
    if len(static) != len(batches):
        return False
    ours = [t for batch in static for t in tensors(batch)]
    theirs = [t for batch in batches for t in tensors(batch)]
    return len(ours) == len(theirs) and all(
        a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
        for a, b in zip(ours, theirs, strict=True)
    )


@dataclass
class _Timing:
    """CUDA events around steps, read once when auto decides: no host sync per step."""

    eager: list[tuple[torch.cuda.Event, torch.cuda.Event]] = field(default_factory=list)
    replayed: list[tuple[torch.cuda.Event, torch.cuda.Event]] = field(default_factory=list)

    @staticmethod
    def start() -> tuple[torch.cuda.Event, torch.cuda.Event]:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        return begin, end

    @staticmethod
    def median_ms(pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]]) -> float:
        return statistics.median(begin.elapsed_time(end) for begin, end in pairs)


class StepGraph:
    def __init__(
        self,
        full_step: FullStep,
        optimizer: torch.optim.Optimizer,
        stream: torch.cuda.Stream,
        *,
        warmup_steps: int,
        decide_by_timing: bool,
        note: Note,
        agree: Agree,
    ) -> None:
        self.full_step = full_step
        self.optimizer = optimizer
        self.agree = agree
        # Under auto the warm-up also gives the eager steps timed against the replays.
        self.warmup_steps = max(warmup_steps, TIMED_STEPS + 1) if decide_by_timing else warmup_steps
        self.note = note
        self.timing = _Timing() if decide_by_timing else None
        self.stream = stream
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_batches: list[Batch] = []
        self.static_done: Done = []
        self.lrs: list[torch.Tensor] = []
        self.eager_steps = 0
        self.step = 0
        self.off = False

    def run(self, micro_batches: list[Batch], step: int) -> Done | None:
        """Step `step` taken (update included) and its values; None when the caller should take it eagerly."""
        self.step = step
        if self.off:
            return None
        if self.graph is None:
            if self.eager_steps < self.warmup_steps:
                return self._warm_up(micro_batches)
            self._capture(micro_batches)
        elif not _same_shapes(self.static_batches, micro_batches):
            return None
        else:
            for static, batch in zip(self.static_batches, micro_batches, strict=True):
                for mine, theirs in zip(tensors(static), tensors(batch), strict=True):
                    mine.copy_(theirs, non_blocking=True)
        return self._replay()

    def release(self) -> None:
        """Free the graph and its memory. Under ddp it holds NCCL's captured all-reduce, and leaving the
        process group waits, without end, for the graphs that hold its work to be destroyed."""
        if self.graph is not None:
            self.graph.reset()
        self.graph = None
        self.static_batches, self.static_done, self.lrs = [], [], []

    def _on_capture_stream(self, micro_batches: list[Batch]) -> Done:
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            done = self.full_step(micro_batches)
        torch.cuda.current_stream().wait_stream(self.stream)
        return done

    def _warm_up(self, micro_batches: list[Batch]) -> Done:
        self.eager_steps += 1
        timed = self.timing is not None and self.eager_steps > 1  # the first step autotunes and allocates
        pair = _Timing.start() if timed else None
        done = self._on_capture_stream(micro_batches)
        if pair is not None and self.timing is not None:
            pair[1].record()
            self.timing.eager.append(pair)
        return done

    def _capture(self, micro_batches: list[Batch]) -> None:
        # The graph's buffers are made outside its memory pool, so copies into them are plain eager copies.
        self.static_batches = [map_tensors(batch, torch.Tensor.clone) for batch in micro_batches]
        groups = self.optimizer.param_groups
        device = groups[0]["params"][0].device
        self.lrs = [torch.tensor(float(group["lr"]), device=device) for group in groups]
        floats = [group["lr"] for group in groups]
        # Gradients made inside the capture live in the graph's pool and are refilled by every replay.
        self.optimizer.zero_grad(set_to_none=True)
        for group, lr in zip(groups, self.lrs, strict=True):
            group["lr"] = lr
            if "capturable" in group:  # Adam's step refuses a capture otherwise; its fused kernel is the same
                group["capturable"] = True
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: the data loader's pinning thread may allocate meanwhile, which is no part of it.
            with torch.cuda.graph(graph, stream=self.stream, capture_error_mode="thread_local"):
                self.static_done = self.full_step(self.static_batches)
        finally:
            # Checkpoints and eager steps see the optimizer as it was built.
            for group, lr in zip(groups, floats, strict=True):
                group["lr"] = lr
                if "capturable" in group:
                    group["capturable"] = False
        self.graph = graph

    def _replay(self) -> Done:
        assert self.graph is not None
        for group, lr in zip(self.optimizer.param_groups, self.lrs, strict=True):
            lr.fill_(float(group["lr"]))
        timing = self.timing
        pair = _Timing.start() if timing is not None else None
        self.graph.replay()
        if pair is not None and timing is not None:
            pair[1].record()
            timing.replayed.append(pair)
            if len(timing.replayed) == TIMED_STEPS:
                self._decide(timing)
        return self.static_done

    def _decide(self, timing: _Timing) -> None:
        self.timing = None
        timing.replayed[-1][1].synchronize()  # the one wait for the device that auto costs
        eager, replayed = self.agree([_Timing.median_ms(timing.eager), _Timing.median_ms(timing.replayed)])
        speedup = f"{eager / replayed:.2f}x the eager step ({eager:.2f} ms eager, {replayed:.2f} ms replayed)"
        if replayed < eager:
            self.note(self.step, f"performance.cuda_graphs=auto: replaying the captured step, {speedup}")
            return
        self.note(self.step, f"performance.cuda_graphs=auto: training eagerly, as replaying ran at {speedup}")
        self.off = True
        self.release()
