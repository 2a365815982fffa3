"""Keep a ThreadLoader a ThreadLoader inside the training frameworks that rebuild loaders.

One module per framework, each imported on its own (``import torch_threadloader`` imports
none of them, and none of the frameworks):

* :mod:`torch_threadloader.integrations.accelerate`: ``prepare_threadloader(accelerator,
  loader)``, accelerate's sharding, device placement and checkpointing on a ThreadLoader;
* :mod:`torch_threadloader.integrations.transformers`: ``ThreadLoaderTrainerMixin``, a
  Hugging Face ``Trainer`` whose train and eval loaders are ThreadLoaders, resumed exactly;
* :mod:`torch_threadloader.integrations.ray_train`: ``prepare_data_loader`` for Ray Train
  workers;
* :mod:`torch_threadloader.integrations.ray_data`: ``RayDataSource``, a ``datapipes`` source
  node over a Ray Dataset or ``DataIterator`` (a Ray Train worker's shard).

Lightning needs no adapter: it rebuilds the loader's own class (``docs/frameworks.md``).
"""

from __future__ import annotations

__all__: list[str] = []
