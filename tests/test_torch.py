"""attncore.torch: torch's scaled_dot_product_attention, computed by attncore,
with autograd through torch.library custom ops.  Gradients are checked by
gradcheck (float64) and against torch's own SDPA; torch.compile(fullgraph=True)
runs a module that uses it; the tiny GPT example trains for a few steps."""

import importlib.util
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="attncore.torch needs the torch extra")
F = torch.nn.functional

from attncore.torch import scaled_dot_product_attention as sdpa  # noqa: E402
from helpers import not_emulated  # noqa: E402

pytestmark = not_emulated("torch is not installed for the emulated run")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _qkv(h=4, hkv=4, n=6, m=6, d=5, dv=3, batch=(2,), dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g, dtype=dtype).requires_grad_()  # noqa: E731
    return mk(*batch, h, n, d), mk(*batch, hkv, m, d), mk(*batch, hkv, m, dv)


def _mask(n, m, seed=1):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(n, m, generator=g) > 0.4
    mask[:, 0] = True  # every row sees a key (torch gives NaN for a row that sees none)
    return mask


CASES = {
    "full": dict(),
    "causal": dict(is_causal=True),
    "causal n<m (top-left)": dict(is_causal=True, m=9),
    "causal n>m (top-left)": dict(is_causal=True, n=8, m=5),
    "bool mask": dict(attn_mask="bool", m=7),
    "float mask": dict(attn_mask="float", m=7),
    "gqa": dict(h=4, hkv=2, enable_gqa=True),
    "gqa causal n != m": dict(h=6, hkv=2, enable_gqa=True, is_causal=True, n=4, m=7),
    "scale": dict(scale=0.37),
    "one head, 2-d": dict(batch=(), h=None),
}


def _case(name, dtype=torch.float64):
    kw = dict(CASES[name])
    shape = {k: kw.pop(k) for k in ("h", "hkv", "n", "m", "batch") if k in kw}
    h = shape.pop("h", 4)
    if h is None:  # (L, E) tensors: one head
        g = torch.Generator().manual_seed(0)
        n, m = shape.get("n", 6), shape.get("m", 6)
        q, k, v = (torch.randn(r, c, generator=g, dtype=dtype).requires_grad_()
                   for r, c in ((n, 5), (m, 5), (m, 3)))
    else:
        q, k, v = _qkv(h=h, hkv=shape.pop("hkv", h), dtype=dtype, **shape)
    if kw.get("attn_mask") == "bool":
        kw["attn_mask"] = _mask(q.shape[-2], k.shape[-2])
    elif kw.get("attn_mask") == "float":
        kw["attn_mask"] = torch.zeros(q.shape[-2], k.shape[-2], dtype=dtype).masked_fill(
            ~_mask(q.shape[-2], k.shape[-2]), float("-inf"))
    return q, k, v, kw


@pytest.mark.parametrize("name", CASES)
def test_gradcheck_in_float64(name):
    q, k, v, kw = _case(name)
    assert torch.autograd.gradcheck(lambda q, k, v: sdpa(q, k, v, **kw), (q, k, v))


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_forward_and_gradients_match_torchs_own_sdpa(name, dtype):
    q, k, v, kw = _case(name, dtype)
    out = sdpa(q, k, v, **kw)
    want = F.scaled_dot_product_attention(q, k, v, **kw)
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, want, **tol)
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), dout)
    exp = torch.autograd.grad(want, (q, k, v), dout)
    for g, e, what in zip(got, exp, ("dq", "dk", "dv")):
        torch.testing.assert_close(g, e, **tol, msg=what)


def test_inputs_are_not_changed_and_layouts_do_not_matter():
    q, k, v = _qkv(n=7, m=7)
    qt = q.detach().transpose(-1, -2).contiguous().transpose(-1, -2)  # a column-major view
    before = [t.detach().clone() for t in (qt, k, v)]
    out = sdpa(qt, k.detach(), v.detach(), is_causal=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    for a, b in zip((qt, k, v), before):
        assert torch.equal(a.detach(), b)


# torch's own compiler stack imports a deprecated torch.jit helper; not this module's doing
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_torch_compile_fullgraph_runs_and_agrees():
    class Attend(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(5, 5, dtype=torch.float64)

        def forward(self, q, k, v):
            return sdpa(self.proj(q), k, v, is_causal=True, enable_gqa=True).sum(-1)

    torch.manual_seed(0)
    mod = Attend()
    q, k, v = _qkv(h=4, hkv=2, n=6, m=9)
    compiled = torch.compile(mod, fullgraph=True)
    got = compiled(q, k, v)
    want = mod(q, k, v)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    dq = q.grad.clone()
    q.grad = None
    want.sum().backward()
    torch.testing.assert_close(dq, q.grad)


@pytest.mark.parametrize("bad, match", [
    (dict(dropout_p=0.1), "dropout_p=0.1"),
    (dict(attn_mask=torch.ones(6, 6, dtype=torch.bool), is_causal=True), "attn_mask and is_causal"),
    (dict(scale=-1.0), "scale must be a positive"),
    (dict(attn_mask=torch.full((6, 6), 0.5, dtype=torch.float64)), "only hold 0"),
    (dict(attn_mask=torch.zeros(6, 6, dtype=torch.float64, requires_grad=True)), "requires grad"),
    (dict(attn_mask=torch.zeros(6, 6, dtype=torch.int32)), "attn_mask has dtype"),
])
def test_unsupported_arguments_are_refused_by_name(bad, match):
    q, k, v = _qkv()
    with pytest.raises((ValueError, TypeError), match=match):
        sdpa(q, k, v, **bad)


def test_unsupported_tensors_are_refused_by_name():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="query has dtype torch.bfloat16"):
        sdpa(q.detach().bfloat16(), k, v)
    with pytest.raises(TypeError, match="value has dtype torch.float16"):
        sdpa(q, k, v.detach().half())
    with pytest.raises(TypeError, match="one dtype"):
        sdpa(q, k.detach().float(), v)
    with pytest.raises(ValueError, match="key is on meta"):
        sdpa(q, torch.empty(2, 4, 6, 5, device="meta", dtype=torch.float64), v)
    q6, k2, v2 = _qkv(h=6, hkv=2)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        sdpa(q6, k2, v2)
    with pytest.raises(TypeError, match="query must be a torch.Tensor"):
        sdpa(np.zeros((2, 3)), k, v)


def test_the_tiny_gpt_example_trains_for_a_few_steps(tmp_path):
    path = os.path.join(ROOT, "examples", "tiny_gpt.py")
    if not os.path.exists(path):
        pytest.skip("the examples/ folder is not here (an installed package without its checkout)")
    spec = importlib.util.spec_from_file_location("tiny_gpt", path)
    tiny_gpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny_gpt)
    s = tiny_gpt.main(["--steps", "4", "--batch", "4", "--context", "32", "--dim", "32",
                       "--layers", "1", "--out", str(tmp_path), "--no-figure"])
    torch_losses, ours = s["losses"]["torch"], s["losses"]["attncore"]
    assert len(torch_losses) == len(ours) == 4
    assert ours[-1] < ours[0]  # it learns
    assert s["max_abs_loss_difference"] < 1e-4
    assert (tmp_path / "losses.json").exists()
