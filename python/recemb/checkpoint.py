"""Checkpoint directories (docs/formats.md, "Checkpoint format") as Embedding.save writes them:
finding the latest and checking one without restoring it. Saving and restoring are methods of the
layers (recemb.Embedding.save / restore, and the same on recemb.torch.Embedding)."""

from __future__ import annotations

import os
import pathlib
from typing import Any, Optional, Union

import numpy as np

from recemb import _recemb
from recemb._tables import dynamic_contents


def latest_checkpoint(directory: Union[str, "os.PathLike[str]"]) -> Optional[pathlib.Path]:
    """The complete checkpoint under `directory` with the largest step (a pathlib.Path), or None
    if there is none (or no such directory). Interrupted saves are ignored; nothing is verified."""
    return _recemb.latest_checkpoint(directory)


def inspect_checkpoint(checkpoint: Union[str, "os.PathLike[str]"], verify: bool = True) -> Any:
    """Describes a checkpoint (a ckpt-* directory, or a directory given to save: its latest):
    format_version, step, manifest_json (the manifest's text), files (path, bytes, checksum, ok,
    error; the manifest first) and ok. verify=True reads every data file and checks its
    checksums; False only checks that each file is present with its size. Damage to data files is
    reported in the result; a damaged manifest raises recemb.DataLoss, a missing one OSError."""
    return _recemb.inspect_checkpoint(checkpoint, _recemb.InspectOptions(verify=bool(verify)))


def read_static_table_as_dynamic(checkpoint: Union[str, "os.PathLike[str]"], table: str
                                 ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """A static table of a checkpoint (a ckpt-* directory, or a directory given to save: its
    latest) as a dynamic table's contents, (keys, rows, slots) in the layout read_dynamic_table
    returns: row r becomes key r, for r in [0, vocabulary_size), with its slots. Give them to
    write_dynamic_table of a dynamic table with the same dim and optimizer (the explicit
    conversion: restore refuses to restore a static table into a dynamic one). Its files are
    verified first. Raises ValueError (recemb.InvalidArgument) when the checkpoint has no such
    table or it is dynamic; recemb.DataLoss for damaged files."""
    keys, parameters, slots = _recemb.read_static_table_as_dynamic(checkpoint, table)
    return dynamic_contents(keys, parameters, slots, dim=parameters.size // max(keys.size, 1))
