"""tests/engine/loss_scale_oracle.py: torch's GradScaler on a given sequence
of overflows, the oracle of test_loss_scale.

torch 1.13 (Debian's python3-torch) runs GradScaler only on CUDA tensors:
its two kernels, _amp_update_scale_ and
_amp_foreach_non_finite_check_and_unscale_, have no CPU implementation, and
the class asserts CUDA in three places. So this script drives the real
torch.cuda.amp.GradScaler class (its defaults, its scale/unscale_/step/
update sequence, its skip decision in step(), the combination of the
found-inf flags) on the CPU with only these stand-ins, each marked below:
  - CPU kernels for the two ops, registered with torch.library, written
    from the CUDA kernels of aten/src/ATen/native/cuda/AmpKernels.cu
    (amp_update_scale_cuda_kernel: backoff on a found inf, else count the
    step and grow at growth_interval unless the grown scale is not finite;
    the products in double, stored to the fp32 scale; and the unscale:
    flag any non-finite element, multiply by inv_scale);
  - the CUDA assertions lifted (amp_definitely_not_available,
    _MultiDeviceReplicator's device check), and scale()'s two lines
    (lazy init, multiply) run as written since its first line asserts CUDA.
Nothing here reads ferry's code or numbers: the C test compares ferry's
scaler with what this prints.

usage: loss_scale_oracle.py INPUT OUTPUT    (exit 77 when torch is missing)
INPUT, text: line 1 "defaults", or "INIT GROWTH BACKOFF INTERVAL" (decimal or
float hex); line 2 the
overflow flags of the steps, one character each (1: the step's gradients
hold an inf).
OUTPUT, text: one line per step "SCALE SKIPPED" (the scale the step's loss
was multiplied by, as a float hex; 1 if the step was skipped), then
"final SCALE TRACKER".
"""
import sys
import warnings

try:
    import torch
except ImportError:
    sys.exit(77)

warnings.simplefilter("ignore")
from torch.cuda.amp import grad_scaler  # noqa: E402

# ---- stand-ins: the CUDA kernels' rules, on the CPU ----


def amp_update_scale_(scale, tracker, found_inf, growth, backoff, interval):
    """amp_update_scale_cuda_kernel, element 0 of each one-element tensor."""
    if found_inf.item() != 0:
        scale.copy_((scale.double() * backoff).float())
        tracker.zero_()
    else:
        successful = tracker.item() + 1
        if successful == interval:
            grown = (scale.double() * growth).float()
            if torch.isfinite(grown).all():
                scale.copy_(grown)
            tracker.zero_()
        else:
            tracker.fill_(successful)
    return scale


def amp_non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    """Flags any non-finite element, then multiplies by inv_scale (1: as is)."""
    for g in grads:
        if not torch.isfinite(g).all():
            found_inf.fill_(1.0)
        if inv_scale.item() != 1.0:
            g.mul_(inv_scale)


lib = torch.library.Library("aten", "IMPL")
lib.impl("_amp_update_scale_", amp_update_scale_, "CPU")
lib.impl("_amp_foreach_non_finite_check_and_unscale_", amp_non_finite_check_and_unscale_, "CPU")

# ---- stand-ins: the CUDA assertions ----
grad_scaler.amp_definitely_not_available = lambda: False


class CpuReplicator(grad_scaler._MultiDeviceReplicator):
    def __init__(self, master_tensor):  # the original asserts is_cuda
        self.master = master_tensor
        self._per_device_tensors = {}


grad_scaler._MultiDeviceReplicator = CpuReplicator


def scale_loss(scaler, loss):
    """GradScaler.scale() for one tensor, less its assert outputs.is_cuda."""
    if scaler._scale is None:
        scaler._lazy_init_scale_growth_tracker(loss.device)
    return loss * scaler._scale.to(device=loss.device, non_blocking=True)


def number(text):
    return float.fromhex(text) if text.lstrip("-").startswith("0x") else float(text)


def main():
    with open(sys.argv[1]) as f:
        head = f.readline().split()
        flags = f.readline().strip()
    if head == ["defaults"]:
        scaler = grad_scaler.GradScaler()
    else:
        scaler = grad_scaler.GradScaler(init_scale=number(head[0]), growth_factor=number(head[1]),
                                        backoff_factor=number(head[2]), growth_interval=int(head[3]))
    p = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 8))
    opt = torch.optim.SGD([p], lr=0.01)
    w = torch.linspace(0.03125, 0.125, 8)  # small: a scale near fp32's top keeps finite gradients
    lines = []
    for flag in flags:
        opt.zero_grad()
        used = scaler.get_scale()
        scale_loss(scaler, (p * w).sum()).backward()
        if flag == "1":
            p.grad[3] = float("inf")  # what an fp16 gradient past 65504 becomes
        before = p.detach().clone()
        scaler.step(opt)
        skipped = int(torch.equal(before, p.detach()))
        scaler.update()
        lines.append("%s %d" % (float(used).hex(), skipped))
    lines.append("final %s %d" % (float(scaler.get_scale()).hex(), int(scaler._growth_tracker.item())))
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(lines) + "\n")


main()
