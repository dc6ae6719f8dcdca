"""Training-free LoRA transfer between base models (``paw transfer-lora``).

>>> adapter_t, report = transfer_lora(adapter, open_checkpoint(src), open_checkpoint(tgt))  # doctest: +SKIP

Methods (:data:`METHODS`): ``copy``, ``lora-x`` (Farhadzadeh et al., ICLR 2025), ``frobenius``
(Cross-LoRA, 2025), ``embed-map`` (LoRASuite, 2025) and ``structural`` (pruned/grown siblings);
``auto`` measures relatedness module by module and picks among them.
"""

from paw.transfer.methods import METHODS
from paw.transfer.pipeline import LAYER_MAPS, method_names, transfer_lora

__all__ = ["LAYER_MAPS", "METHODS", "method_names", "transfer_lora"]
