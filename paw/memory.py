"""Memory of LoRA training and distillation: the student's set-up and the peak PAW predicts before a run.

Set-up (:func:`prepare_student`): the LoRA factors, their gradients and AdamW's two moments stay
in float32 whatever the base's dtype (bf16 factors lose small updates), and gradient checkpointing
on the base recomputes each layer's activations in the backward pass instead of keeping them.

Prediction (:func:`predict`): from a model's ``config.json`` alone (no weights read), the peak
bytes per device and the time of a run, summed from parts that each have a reason::

    weights      parameters x bytes of the dtype (teacher and student; the teacher is gone during
                 training with --offload-teacher)
    lora         16 bytes per LoRA parameter: float32 value, gradient and AdamW's two moments
    activations  what the backward pass keeps per token and layer (inputs of the norms,
                 projections and MLP, attention outputs), or one layer's worth plus a hidden state
                 per layer with gradient checkpointing
    logits       float32 logits and their log-softmax for the continuation positions, with the
                 teacher's when its distributions are matched (the head reads a contiguous input,
                 :func:`paw.evaluate.mc.forward_logits`; on CPU a strided one made torch copy the head
                 weight once per row, 2 GiB at the 1B shape, docs/scale.md)
    runtime      the framework itself (torch, transformers and their libraries, CUDA context)

The coefficients are counted from the Llama forward pass and checked against a measured peak RSS
(docs/scale.md; tests/test_memory.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from paw import arch

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
ADAM_BYTES = 16            # float32 value + gradient + exp_avg + exp_avg_sq per LoRA parameter
RUNTIME_BYTES = {"cpu": 0.55e9, "cuda": 1.0e9}   # torch + transformers resident / CUDA context + allocator slack
ACT_PER_HIDDEN = 18        # bytes-units kept per token and layer, per hidden unit (see _activation_bytes)
ACT_PER_INTER = 5          # ... per MLP unit
RATES = {"cpu": 5e10, "cuda": 2e14}   # effective FLOP/s: a laptop-class CPU in float32, one H100 in bf16
BANDWIDTH = {"cpu": 2e10, "cuda": 2e12}   # effective bytes/s of weight reads: DDR, ~60% of an H100's HBM3
GENERATION_BATCH = 16      # inputs per generation batch (paw.transfer.distill.scale.CHUNK)


def prepare_student(peft_model, *, gradient_checkpointing: bool = False) -> None:
    """LoRA factors in float32 (PEFT keeps them in the base's dtype when told to), and optionally
    gradient checkpointing on the base (non-reentrant, so the frozen inputs need no gradient)."""
    import torch

    for p in peft_model.parameters():
        if p.requires_grad and p.dtype != torch.float32:  # only the LoRA factors are trainable
            p.data = p.data.float()
    if gradient_checkpointing:
        peft_model.base_model.model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
        peft_model.base_model.model.config.use_cache = False


# ------------------------------------------------------------------------------ prediction

@dataclass(frozen=True)
class Shape:
    """What memory and time depend on, read from a ``config.json`` (Llama-like decoders)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool

    @classmethod
    def of(cls, config: dict) -> Shape:
        cfg = config.get("text_config") or config
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        return cls(hidden=hidden, layers=int(cfg["num_hidden_layers"]), heads=heads,
                   kv_heads=int(cfg.get("num_key_value_heads") or heads),
                   head_dim=int(arch.head_dim(cfg) or hidden // heads), intermediate=int(cfg["intermediate_size"]),
                   vocab=int(cfg["vocab_size"]), tied=arch.tied(cfg))

    def projections(self) -> dict[str, tuple[int, int]]:
        """``{role: (out, in)}`` of one layer's seven linear maps."""
        q, kv, h, i = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.hidden, self.intermediate
        return {"q": (q, h), "k": (kv, h), "v": (kv, h), "o": (h, q), "gate": (i, h), "up": (i, h), "down": (h, i)}

    @property
    def layer_parameters(self) -> int:
        """One decoder layer's weights: its seven projections and two norms."""
        return sum(o * i for o, i in self.projections().values()) + 2 * self.hidden

    @property
    def parameters(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.layers * self.layer_parameters + self.hidden

    def lora_parameters(self, rank: int, roles: tuple[str, ...] | None = None) -> int:
        """LoRA factors on ``roles`` (all seven when None): ``r (out + in)`` per module and layer."""
        shapes = self.projections()
        return self.layers * sum(rank * (o + i) for role, (o, i) in shapes.items() if roles is None or role in roles)


def dtype_bytes(dtype: str, device_type: str, config: dict | None = None) -> int:
    """Bytes per weight: ``auto`` is float32 on CPU and the checkpoint's dtype (bf16 by default) on GPU."""
    if dtype != "auto":
        return DTYPE_BYTES[dtype]
    if device_type != "cuda":
        return 4
    return DTYPE_BYTES.get(str((config or {}).get("torch_dtype") or (config or {}).get("dtype") or "bfloat16"), 2)


def predict(student: Shape, *, teacher: Shape | None = None, lora_rank: int = 16, lora_roles=None,
            batch_size: int = 8, seq_tokens: int = 80, kept_tokens: int = 16, world: int = 1,
            student_bytes: int = 4, teacher_bytes: int = 4, device_type: str = "cpu",
            teacher_per_step: bool = False, offload_teacher: bool = False,
            gradient_checkpointing: bool = False, fsdp: bool = False) -> dict:
    """Predicted peak bytes on one device during training, by part, for ``batch_size`` inputs split over ``world``.

    ``fsdp`` (``--fsdp``, :mod:`paw.fsdp`): the student's weights and its LoRA with AdamW's state are
    split over ``world``, plus the units FSDP gathers whole at once (``fsdp_gathered``: the root's
    embeddings and head, and two decoder layers, the one running and the one prefetched); the
    teacher stays whole on every device.

    ``seq_tokens``: tokens of one input (prompt + continuation); ``kept_tokens``: positions that go
    through the LM head (the continuation); ``teacher_per_step``: the teacher's logits are read at
    every step (token KL). On GPU the forward runs under bf16 autocast (activations of 2 bytes) and
    PEFT casts each adapted layer's input to float32 for the LoRA factors.
    """
    rows = -(-batch_size // world)
    tokens = rows * seq_tokens
    act_bytes = 2 if device_type == "cuda" else student_bytes
    per_token_layer = (ACT_PER_HIDDEN * student.hidden + ACT_PER_INTER * student.intermediate) * act_bytes
    if device_type == "cuda" or student_bytes < 4:   # PEFT's float32 copy of each adapted layer's input
        per_token_layer += (6 * student.hidden + student.intermediate) * 4
    if gradient_checkpointing:
        activations = tokens * (student.layers * student.hidden * act_bytes + per_token_layer)
    else:
        activations = tokens * student.layers * per_token_layer
    logit_bytes = rows * kept_tokens * student.vocab * 4
    teacher_weights = 0 if teacher is None else teacher.parameters * teacher_bytes
    split = world if fsdp else 1
    parts = {
        "student_weights": student.parameters * student_bytes // split,
        "teacher_weights": 0 if offload_teacher else teacher_weights,
        "lora_and_adam": student.lora_parameters(lora_rank, lora_roles) * ADAM_BYTES // split,
        "activations": activations,
        "logits": logit_bytes * (4 + (3 if teacher_per_step and teacher is not None else 0)),
        "runtime": RUNTIME_BYTES["cuda" if device_type == "cuda" else "cpu"],
    }
    if fsdp and world > 1:
        parts["fsdp_gathered"] = (student.vocab * student.hidden * (1 if student.tied else 2)
                                  + 2 * student.layer_parameters) * student_bytes
    training = sum(parts.values())
    # before training both models are loaded while the teacher generates (with its KV cache)
    kv = 0 if teacher is None else (GENERATION_BATCH * seq_tokens * teacher.layers * 2 * teacher.kv_heads
                                    * teacher.head_dim * teacher_bytes)
    loaded = {"student_weights": parts["student_weights"], "teacher_weights": teacher_weights, "kv_cache": kv,
              "runtime": parts["runtime"], **{k: v for k, v in parts.items() if k == "fsdp_gathered"}}
    generation = sum(loaded.values())
    if generation > training:   # with --offload-teacher the generation phase can be the peak
        parts = loaded
    return {"peak_bytes": int(max(training, generation)), "parts": {k: int(v) for k, v in parts.items()},
            "phase": "generation" if generation > training else "training", "per_device_rows": rows,
            "tokens_per_device_step": tokens}


def predict_time(student: Shape, *, teacher: Shape | None, steps: int, batch_size: int, seq_tokens: int,
                 n_inputs: int, max_new_tokens: int, world: int = 1, device_type: str = "cpu",
                 teacher_per_step: bool = False, gradient_checkpointing: bool = False, teacher_bytes: int = 2) -> dict:
    """Seconds: training from FLOPs (2N per token forward, 4N forward and backward through a frozen
    base, +2N recomputed with gradient checkpointing) over an effective rate per device
    (:data:`RATES`); generation by the larger of its FLOPs and its weight reads (decoding is bound
    by memory bandwidth, :data:`BANDWIDTH`). Both split over ``world`` devices."""
    ns, nt = student.parameters, teacher.parameters if teacher is not None else 0
    kind = "cuda" if device_type == "cuda" else "cpu"
    per_token = (4 + 2 * gradient_checkpointing) * ns + (2 * nt if teacher_per_step else 0)
    train = steps * batch_size * seq_tokens * per_token
    generate = n_inputs * seq_tokens * 2 * nt
    # greedy decoding reads every teacher weight once per new token of a batch of GENERATION_BATCH inputs
    decode_steps = -(-n_inputs // GENERATION_BATCH) * max_new_tokens
    read = decode_steps * nt * teacher_bytes / BANDWIDTH[kind]
    seconds = train / (RATES[kind] * world) + max(generate / RATES[kind], read) / world
    return {"flop": float(train + generate), "seconds": seconds, "rate_flop_per_s_per_device": RATES[kind],
            "generation_read_seconds": read / world}


def gib(n: float) -> str:
    """``gib(3 * 2**30)`` -> ``'3.0 GiB'``."""
    return f"{n / 2**30:.1f} GiB"


def measured_peak(device) -> dict:
    """The peak so far: CUDA's allocator peak on a GPU, the process's peak resident set on CPU."""
    import resource

    import torch

    out = {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if getattr(device, "type", str(device)) == "cuda":
        out["cuda_max_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
        out["cuda_max_reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))
    return out


PROMPT_TOKENS = 64   # assumed tokens of one input before its continuation, when not counted


def roles_of(target_modules) -> tuple[str, ...] | None:
    """LoRA module names (``q_proj`` ...) as projection roles; None (all seven) for ``all-linear`` or unknown."""
    if not target_modules or isinstance(target_modules, str):
        return None
    names = {arch.GENERIC.proj(r).name: r for r in ("q", "k", "v", "o", "gate", "up", "down")}
    roles = tuple(names[m] for m in target_modules if m in names)
    return roles or None


def plan(student_config: dict, *, teacher_config: dict | None = None, lora_rank: int, target_modules=None,
         batch_size: int, steps: int, max_new_tokens: int, n_inputs: int, device_type: str, world: int = 1,
         kept_tokens: int | None = None,
         dtype: str = "auto", prompt_tokens: int = PROMPT_TOKENS, teacher_per_step: bool = False,
         offload_teacher: bool = False, gradient_checkpointing: bool = False, fsdp: bool = False,
         timed: bool = True) -> dict | None:
    """The prediction printed before a run and kept in its report; None for a config this model cannot read.

    ``kept_tokens``: positions per input that go through the LM head (the continuation; the answer
    for ``paw train-lora``). ``timed=False``: memory alone; a distillation predicts its time once its
    models are loaded, at a rate measured on them (:mod:`paw.transfer.distill.cost`).
    """
    try:
        student = Shape.of(student_config)
        teacher = Shape.of(teacher_config) if teacher_config is not None else None
    except (KeyError, TypeError, ValueError):
        return None
    seq = prompt_tokens + max_new_tokens
    common = dict(teacher=teacher, teacher_per_step=teacher_per_step and not offload_teacher,
                  gradient_checkpointing=gradient_checkpointing, world=world, device_type=device_type)
    memory = predict(student, lora_rank=lora_rank, lora_roles=roles_of(target_modules), batch_size=batch_size,
                     seq_tokens=seq, kept_tokens=kept_tokens or max_new_tokens, offload_teacher=offload_teacher,
                     student_bytes=dtype_bytes(dtype, device_type, student_config),
                     teacher_bytes=dtype_bytes(dtype, device_type, teacher_config), fsdp=fsdp, **common)
    out = {"predicted_peak_bytes": memory["peak_bytes"], "parts": memory["parts"], "phase": memory["phase"],
           "assumptions": {"device": device_type, "world": world, "fsdp": fsdp, "prompt_tokens": prompt_tokens,
                           "student_parameters": student.parameters,
                           "teacher_parameters": teacher.parameters if teacher else 0}}
    if timed:
        time = predict_time(student, steps=steps, batch_size=batch_size, seq_tokens=seq, n_inputs=n_inputs,
                            max_new_tokens=max_new_tokens if teacher is not None else 0,
                            teacher_bytes=dtype_bytes(dtype, device_type, teacher_config), **common)
        out.update(predicted_seconds=round(time["seconds"], 1), flop=time["flop"])
        out["assumptions"]["rate_flop_per_s_per_device"] = time["rate_flop_per_s_per_device"]
    return out


SAY_FROM_PARAMETERS = 100_000_000   # the prediction is printed from this size on (always recorded in the report)


def worth_saying(p: dict | None) -> bool:
    """Whether a prediction is printed before a run: for models of 100M parameters and more, where memory
    and time matter; a tiny model's run is over before the line is read.

    >>> worth_saying({"assumptions": {"student_parameters": 135_000_000, "teacher_parameters": 0}})
    True
    >>> worth_saying({"assumptions": {"student_parameters": 300_000, "teacher_parameters": 300_000}}), worth_saying(None)
    (False, False)
    """
    if p is None:
        return False
    a = p["assumptions"]
    return max(a["student_parameters"], a["teacher_parameters"]) >= SAY_FROM_PARAMETERS


def plan_line(p: dict) -> str:
    """``expected peak 9.8 GiB per device (weights 4.6, ...), about 2 min 5 s``: the line printed before a run
    (without the time for a prediction of memory alone)."""
    from paw.progress import format_duration

    parts = ", ".join(f"{k.replace('_', ' ')} {v / 2**30:.1f}" for k, v in p["parts"].items() if v >= 0.05 * 2**30)
    memory = f"expected peak {gib(p['predicted_peak_bytes'])} per device in {p['phase']} ({parts} GiB)"
    if "predicted_seconds" not in p:
        return memory
    return (f"{memory}, about {format_duration(p['predicted_seconds'])} at "
            f"{p['assumptions']['rate_flop_per_s_per_device']:.0e} FLOP/s per device")


def with_measured(p: dict | None, device) -> dict:
    """The report's ``memory`` section: the prediction (if any) beside the measured peak."""
    out = {"measured": measured_peak(device)}
    if p is not None:
        out["predicted"] = p
        peak = out["measured"].get("cuda_max_allocated_bytes") or out["measured"]["peak_rss_bytes"]
        out["measured_over_predicted"] = round(peak / p["predicted_peak_bytes"], 3)
    return out
