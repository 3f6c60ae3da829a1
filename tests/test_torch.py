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

import attncore  # noqa: E402
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
    "additive bias": dict(attn_mask="bias", m=7),
    "finfo.min mask": dict(attn_mask="finfo", m=7),
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
    elif kw.get("attn_mask") == "bias":  # a relative-position bias: any values, per head
        g = torch.Generator().manual_seed(3)
        kw["attn_mask"] = torch.randn(q.shape[-3], q.shape[-2], k.shape[-2], generator=g,
                                      dtype=dtype)
    elif kw.get("attn_mask") == "finfo":  # older transformers releases' float masks
        kw["attn_mask"] = torch.zeros(q.shape[-2], k.shape[-2], dtype=dtype).masked_fill(
            ~_mask(q.shape[-2], k.shape[-2]), torch.finfo(dtype).min)
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
    (dict(alibi_slopes=[0.5] * 4), "alibi_slopes must be a torch.Tensor"),
    (dict(sinks=torch.zeros(3, dtype=torch.float64)), "one value per query head"),
    (dict(attn_mask=torch.zeros(6, 6, dtype=torch.int32)), "attn_mask has dtype"),
])
def test_unsupported_arguments_are_refused_by_name(bad, match):
    q, k, v = _qkv()
    with pytest.raises((ValueError, TypeError), match=match):
        sdpa(q, k, v, **bad)


def test_unsupported_tensors_are_refused_by_name():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="query has dtype torch.int32"):
        sdpa(q.detach().int(), k, v)
    with pytest.raises(TypeError, match="value has dtype torch.complex128"):
        sdpa(q, k, v.detach().to(torch.complex128))
    with pytest.raises(TypeError, match="one dtype"):  # 16-bit, but all three of one
        sdpa(q.detach().bfloat16(), k, v)
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


def test_a_learned_bias_gets_its_gradient():
    """A float attn_mask that requires grad, broadcast over the batch: its
    gradient summed to its shape, by gradcheck and against torch's own SDPA."""
    q, k, v = _qkv(m=7)
    g = torch.Generator().manual_seed(5)
    bias = torch.randn(4, 6, 7, generator=g, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda q, k, v, b: sdpa(q, k, v, attn_mask=b), (q, k, v, bias))
    out = sdpa(q, k, v, attn_mask=bias)
    (out * out).sum().backward()
    got = [t.grad.clone() for t in (q, k, v, bias)]
    for t in (q, k, v, bias):
        t.grad = None
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    (want * want).sum().backward()
    torch.testing.assert_close(out, want)
    for a, b in zip(got, (q.grad, k.grad, v.grad, bias.grad)):
        torch.testing.assert_close(a, b)


def _written_out(q, k, v, alibi=None, softcap=None, sinks=None, is_causal=False):
    """The modifiers in torch's own ops: the definition attncore's are held to."""
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    n, m = s.shape[-2:]
    i, j = torch.arange(n)[:, None], torch.arange(m)[None, :]
    if alibi is not None:
        s = s - alibi[:, None, None] * (i - j).abs()
    if is_causal:
        s = s.masked_fill(j > i, float("-inf"))
    if sinks is not None:
        col = sinks[:, None, None].expand(s.shape[:-1] + (1,))
        return (torch.softmax(torch.cat([s, col], dim=-1), dim=-1)[..., :-1]) @ v
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("mods", [dict(alibi=True), dict(softcap=1.5), dict(sinks=True),
                                  dict(alibi=True, softcap=2.0, sinks=True, is_causal=True)])
def test_alibi_softcap_and_sinks_match_them_written_in_torch(mods):
    q, k, v = _qkv(m=9)
    kw = {"is_causal": mods.get("is_causal", False), "softcap": mods.get("softcap")}
    if mods.get("alibi"):
        kw["alibi"] = torch.tensor([0.5, 0.25, 0.125, 0.0625], dtype=torch.float64)
    if mods.get("sinks"):
        kw["sinks"] = torch.tensor([0.3, -1.0, 2.0, 0.0], dtype=torch.float64,
                                   requires_grad=True)
    ours = dict(kw)
    ours["alibi_slopes"] = ours.pop("alibi", None)
    inputs = (q, k, v) + ((kw["sinks"],) if "sinks" in kw else ())

    def f(*t):
        extra = {"sinks": t[3]} if len(t) > 3 else {}
        return sdpa(t[0], t[1], t[2], **{**ours, **extra})

    assert torch.autograd.gradcheck(f, inputs)
    out = f(*inputs)
    want = _written_out(q, k, v, **kw)
    torch.testing.assert_close(out, want)
    got = torch.autograd.grad(out.square().sum(), inputs)
    exp = torch.autograd.grad(want.square().sum(), inputs)
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", ["full", "causal", "float mask", "gqa"])
def test_16_bit_tensors_are_widened_computed_in_float32_and_rounded(dtype, case):
    """bfloat16 and float16 tensors: the output (and the gradients) are the
    float32 computation on the widened values, rounded once to the dtype."""
    h, hkv = (4, 2) if case == "gqa" else (4, 4)
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in _qkv(h=h, hkv=hkv, n=7, m=9))
    kw = {"is_causal": case == "causal", "enable_gqa": case == "gqa"}
    mask = None
    if case == "float mask":
        mask = torch.randn(7, 9, dtype=dtype)
        kw["attn_mask"] = mask
    out = sdpa(q, k, v, **kw)
    assert out.dtype == dtype
    out.float().pow(2).sum().backward()
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    kw32 = dict(kw, attn_mask=None if mask is None else mask.float())
    if case == "causal":  # torch's math kernel, top-left, as sdpa's
        kw32["is_causal"] = True
    want = sdpa(q32, k32, v32, **kw32)
    if dtype == torch.float16 or not attncore._core.bf16dot_supported():
        assert torch.equal(out, want.to(dtype))  # the float32 result, rounded once
    else:  # the bfloat16 dot products: P rounded too (docs/usage.md), then the output
        bound = 2.0**-9 * v.float().abs().max() + 2.0**-8 * want.abs()
        assert ((out.float() - want).abs() <= bound).all()
    want.pow(2).sum().backward()
    for t, w in ((q, q32), (k, k32), (v, v32)):
        assert t.grad.dtype == dtype
        # the gradient of out² went through a rounded out: within a few ulps of dtype
        assert torch.allclose(t.grad.float(), w.grad, rtol=0.05, atol=0.05)
    ref = F.scaled_dot_product_attention(q32, k32, v32, **kw32)
    assert torch.allclose(out.float(), ref, atol=1e-2 if dtype == torch.bfloat16 else 2e-3)
