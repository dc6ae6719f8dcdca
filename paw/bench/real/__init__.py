"""``paw bench real``: PAW on two real pretrained models, SmolLM2-135M-Instruct and Gemma-3-270M.

- :mod:`~paw.bench.real.options`: its knobs, the source of its flags (read at start-up: this package
  imports nothing else when it is imported);
- :mod:`~paw.bench.real.run`: :func:`~paw.bench.real.run.run_real` and the parts eval, tokenizers,
  transfer and merge;
- :mod:`~paw.bench.real.tasks`: the part ``tasks`` (task LoRAs moved across families), on the tasks of
  :mod:`~paw.bench.real.task_sets` and the cache of :mod:`~paw.bench.real.cache`;
- :mod:`~paw.bench.real.report`: ``results.json``, ``results.md`` and the figures.
"""
