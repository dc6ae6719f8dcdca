"""Training-free LoRA transfer between base models (``paw transfer-lora``).

>>> adapter_t, report = transfer_lora(adapter, open_checkpoint(src), open_checkpoint(tgt))  # doctest: +SKIP

Methods (:data:`METHODS`): ``copy``, ``lora-x`` (Farhadzadeh et al., ICLR 2025), ``cross-lora``
(Xia et al., 2025), ``embed-map`` (LoRASuite, 2025) and ``structural`` (pruned/grown siblings);
``auto`` chooses the layer pairing, tests each module's relatedness against the other target layers
and picks among copy, structural and embed-map. See ``docs/transfer.md``.
"""

from paw.transfer.methods import METHODS
from paw.transfer.training_free import LAYER_MAPS, method_names, transfer_lora

__all__ = ["LAYER_MAPS", "METHODS", "method_names", "transfer_lora"]
