"""recemb: the embedding tables of recommendation models, with TensorFlow TPU-embedding semantics,
on CPUs. Python API over the C++ library (recemb._recemb binds it 1:1); recemb.torch adds a
PyTorch module. See docs/python.md.

    import numpy as np, recemb
    video = recemb.TableConfig(vocabulary_size=1000, dim=16, name="video")
    features = {"watched": recemb.FeatureConfig(table=video, name="watched")}
    layer = recemb.Embedding(features, optimizer=recemb.optimizers.Adagrad(learning_rate=0.1))
    acts = layer({"watched": np.array([[1, 2], [3, 4]])})          # {"watched": [2, 16]}
    layer.apply_gradients({"watched": np.ones((2, 16), np.float32)})
"""

from recemb import initializers, optimizers, schedules
from recemb._recemb import FailedPrecondition, InvalidArgument
from recemb.config import FeatureConfig, QuantizationConfig, TableConfig
from recemb.embedding import Embedding, LookupBatch, serving_embedding_lookup
from recemb.inputs import Ragged, Sparse

__version__ = "0.1.0"

__all__ = ["TableConfig", "FeatureConfig", "QuantizationConfig", "Ragged", "Sparse", "Embedding",
           "LookupBatch", "serving_embedding_lookup", "InvalidArgument", "FailedPrecondition",
           "optimizers", "schedules", "initializers"]
