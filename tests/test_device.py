"""The CUDA attention guard: which models it acts on, and that it only flips torch's switch then."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from paw import device, zoo

torch = pytest.importorskip("torch")


class _OnCuda(torch.nn.Module):
    """A module whose one parameter claims to sit on CUDA, with a config of ``kv`` key/value heads."""

    def __init__(self, kv, *, text: bool = False):
        super().__init__()
        heads = SimpleNamespace(num_key_value_heads=kv)
        self.config = SimpleNamespace(text_config=heads) if text else heads

    def parameters(self, recurse: bool = True):
        yield SimpleNamespace(device=torch.device("cuda", 0))


@pytest.fixture
def switch(monkeypatch):
    """torch's global switch, stood in for: its calls, and its state as they leave it."""
    calls = []
    monkeypatch.setattr(torch.backends.cuda, "enable_mem_efficient_sdp", calls.append)
    monkeypatch.setattr(torch.backends.cuda, "mem_efficient_sdp_enabled", lambda: not calls or calls[-1])
    return calls


def test_one_key_value_head_on_cuda_turns_the_kernel_off_once(switch):
    assert device.guard_cuda_attention(_OnCuda(1)) is True
    assert device.guard_cuda_attention(_OnCuda(1, text=True)) is True   # multimodal configs: the text config's
    assert switch == [False]


def test_several_heads_or_the_cpu_leave_it_alone(switch):
    assert device.guard_cuda_attention(_OnCuda(3)) is False
    assert device.guard_cuda_attention(_OnCuda(None)) is False
    model = zoo.build_model("llama", seed=0, vocab_size=64, hidden_size=32, num_layers=1, num_key_value_heads=1)
    assert device.key_value_heads(model) == 1 and device.guard_cuda_attention(model) is False   # on the CPU
    assert switch == []
