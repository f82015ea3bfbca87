"""ptxas's notes on the Hopper kernels (GPU only; .ci/gpu runs it).

No Mosaic GPU kernel of the default configs may have its wgmmas serialized:
ptxas then makes each wgmma wait for the one before (notes C7512, for want
of registers, and C7513, an instruction other than a wgmma writing a
wgmma's input registers while it is in flight), which interpret mode cannot
see and which costs a kernel up to half its speed.  ``tools.ptxas_report
--check`` compiles each cell in a process of its own with ptxas's output on
and fails on such a note or a cell that does not compile.
"""
import subprocess
import sys

import pytest

from cases import ROOT, repo_env
from pallas_flash import _dispatch

ON_HOPPER = _dispatch.on_gpu() and _dispatch.is_hopper()

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not ON_HOPPER, reason="ptxas runs when Mosaic GPU compiles: Hopper only")]


def report(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "tools.ptxas_report",
                         "--check", "--jobs", "4", *args], cwd=ROOT,
                        env=repo_env(), capture_output=True, text=True,
                        timeout=600)


@pytest.mark.parametrize("args", [
    # every head-dim entry's forward and backward, bf16 and fp8 (forward)
    ("--head-dims", "64,128,256", "--seqlens", "4096",
     "--features", "plain,fp8"),
    # fp8 with the softmax overlap on two persistent consumers (not a
    # default; C7513 until 2026-11-29; three consumers spill with it)
    ("--head-dims", "128", "--seqlens", "4096", "--features", "fp8",
     "--variant", "fwd.overlap_softmax=True,fwd.block_kv=128,fwd.consumers=2,"
     "fwd.persistent=True"),
], ids=["defaults", "fp8-overlap"])
def test_no_kernel_serializes_its_wgmmas(args):
  run = report(*args)
  assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
