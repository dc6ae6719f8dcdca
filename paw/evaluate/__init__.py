"""Multiple-choice evaluation, small LoRA training and run tracking."""
