"""recemb: the embedding tables of recommendation models, with TensorFlow TPU-embedding semantics,
on CPUs. Python API over the C++ library (recemb._recemb binds it 1:1); recemb.torch adds a
PyTorch module, recemb.torchrec TorchRec's embedding modules (neither is imported here). See
docs/python.md.

    import numpy as np, recemb
    video = recemb.TableConfig(vocabulary_size=1000, dim=16, name="video")
    features = {"watched": recemb.FeatureConfig(table=video, name="watched")}
    layer = recemb.Embedding(features, optimizer=recemb.optimizers.Adagrad(learning_rate=0.1))
    acts = layer({"watched": np.array([[1, 2], [3, 4]])})          # {"watched": [2, 16]}
    layer.apply_gradients({"watched": np.ones((2, 16), np.float32)})
    layer.save("/tmp/ckpt")                                          # /tmp/ckpt/ckpt-000000000001
    layer.export("/tmp/model.recemb", dtype="int8")
    recemb.ServingModel.open("/tmp/model.recemb").lookup({"watched": np.array([[1, 2]])})
"""

from recemb import initializers, optimizers, schedules
from recemb._recemb import (Communicator, DataLoss, FailedPrecondition, InvalidArgument,
                            ResourceExhausted,
                            in_process_communicators, local_communicator, mpi_available,
                            mpi_communicator, string_key, string_keys)
from recemb.checkpoint import inspect_checkpoint, latest_checkpoint, read_static_table_as_dynamic
from recemb.config import DynamicVocabulary, FeatureConfig, QuantizationConfig, TableConfig
from recemb.embedding import Embedding, LookupBatch, serving_embedding_lookup
from recemb.inputs import Ragged, Sparse
from recemb.placement import Placement
from recemb.server import Client, Server
from recemb.serving import ServingModel

__version__ = "0.1.0"

__all__ = ["TableConfig", "FeatureConfig", "QuantizationConfig", "DynamicVocabulary",
           "string_key", "string_keys", "Ragged", "Sparse", "Embedding",
           "LookupBatch", "serving_embedding_lookup", "ServingModel", "Server", "Client",
           "latest_checkpoint",
           "inspect_checkpoint", "read_static_table_as_dynamic", "InvalidArgument",
           "FailedPrecondition", "DataLoss", "ResourceExhausted", "Placement",
           "Communicator", "local_communicator", "in_process_communicators", "mpi_available",
           "mpi_communicator", "optimizers", "schedules", "initializers"]
