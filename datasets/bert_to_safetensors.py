#!/usr/bin/env python3
"""bert_to_safetensors: a BERT checkpoint saved by PyTorch (pytorch_model.bin,
or an NVIDIA or MLPerf .pt converted from TensorFlow) as the model folder
the BERT trainer reads (build/bin/bert --init_checkpoint=OUT): OUT/
model.safetensors, with config.json and vocab.txt copied beside it.

    python3 datasets/bert_to_safetensors.py --in=pytorch_model.bin --out=OUT
        [--config=config.json] [--vocab=vocab.txt]

--config and --vocab default to the files of those names beside --in
(config.json, else bert_config.json, whose keys are the same); without a
config the trainer cannot read OUT (a warning says so).

Input: what torch.save writes (torch_reader.py reads it without PyTorch:
the zip format and the legacy one), holding a state dict or a dict with the
state dict under "model" or "state_dict" (as NVIDIA's and MLPerf's BERT .pt
files hold it). Names as Hugging Face's, with or without "bert." (as the
trainer's loader takes them, language/bert_model.c); a "module." prefix on
every name (a model saved from DistributedDataParallel) is dropped, and a
LayerNorm's gamma and beta become its weight and bias. Every tensor is
written (pretraining heads too; the trainer reads what it needs), in the
dtype stored: F32, F16, BF16 or integers (F64 as F32).

A TensorFlow checkpoint (model.ckpt-N.index and .data-*) cannot be read
without TensorFlow: convert it to PyTorch first with transformers 4.x's
convert_bert_original_tf_checkpoint_to_pytorch, then that file here.

Security: a pickle from an untrusted source can run code when unpickled;
torch_reader.py reads through an allow-list of the globals a state dict
names, and any other stops the conversion with an error naming it.

Bad input (not a torch.save file, a global outside the allow-list, no BERT
word embeddings, names that collide, a config that does not fit the
tensors, an OUT that holds a model already) ends with one line, "error:
FILE: what", exit status 2, and nothing written.
"""
import argparse
import glob
import json
import os
import re
import shutil
import struct
import sys

import numpy as np

from torch_reader import BF16, InputError, is_state_dict, read_torch

# numpy dtype -> safetensors dtype (F64 is written as F32: the trainer reads F32, F16, BF16).
DTYPES = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", BF16: "BF16", np.dtype("<i8"): "I64",
          np.dtype("<i4"): "I32", np.dtype("<i2"): "I16", np.dtype("i1"): "I8", np.dtype("u1"): "U8",
          np.dtype("?"): "BOOL"}
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"
TF_CONVERT = ("convert it to PyTorch first with transformers 4.x (python3 -m transformers.models.bert."
              "convert_bert_original_tf_checkpoint_to_pytorch --tf_checkpoint_path=model.ckpt-N "
              "--bert_config_file=bert_config.json --pytorch_dump_path=pytorch_model.bin; needs "
              "tensorflow and torch), then convert that file here")


class FileError(Exception):
    """Bad input in a file other than --in: (path, message)."""


def check_format(path):
    """Dies (InputError) on a TensorFlow checkpoint, an HDF5 or a safetensors
    file: formats this converter does not read, each with what to do."""
    if (re.search(r"\.(index|meta)$|\.data-\d+-of-\d+$", path) or
            (not os.path.exists(path) and os.path.exists(path + ".index")) or
            (os.path.isdir(path) and glob.glob(os.path.join(path, "*.index")))):
        raise InputError("a TensorFlow checkpoint (model.ckpt-N.index and .data-*), which cannot be read "
                         "without TensorFlow: " + TF_CONVERT)
    if os.path.isdir(path):
        raise InputError("a folder; give the checkpoint file (pytorch_model.bin, a .pt or .pth)")
    try:
        with open(path, "rb") as f:
            head = f.read(9)
        size = os.path.getsize(path)
    except OSError as e:
        raise InputError("cannot read: %s" % e.strerror) from None
    if head.startswith(b"\x89HDF"):
        raise InputError("an HDF5 file (a Keras or TensorFlow 2 checkpoint such as tf_model.h5): take the "
                         "model's pytorch_model.bin or model.safetensors instead")
    if len(head) == 9 and head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] < size:
        raise InputError("already a safetensors file: the trainer reads it as it is (OUT/model.safetensors)")


def find_state_dict(obj):
    """(state dict, where): the saved object itself, or under "model" or
    "state_dict"."""
    if is_state_dict(obj) and obj:
        return obj, "the top level"
    if isinstance(obj, dict):
        for key in ("model", "state_dict"):
            if key in obj and is_state_dict(obj[key]) and obj[key]:
                return obj[key], '"%s"' % key
        keys = ", ".join(sorted(repr(k) for k in obj)[:8])
        raise InputError("a dict of %s, with no state dict (tensor name -> tensor) at its top level or "
                         'under "model" or "state_dict"' % (keys or "nothing"))
    raise InputError("holds a %s, not a state dict (tensor name -> tensor)" % type(obj).__name__)


def hf_names(sd):
    """(name -> array with Hugging Face's names, notes): "module." dropped,
    LayerNorm gamma/beta as weight/bias."""
    names, notes = list(sd), []
    if names and all(n.startswith("module.") for n in names):
        names = [n[len("module."):] for n in names]
        notes.append('"module." dropped')
    out, source, renamed = {}, {}, 0
    for old, name in zip(sd, names):
        new = re.sub(r"(LayerNorm)\.gamma$", r"\1.weight", re.sub(r"(LayerNorm)\.beta$", r"\1.bias", name))
        renamed += new != name
        if new in out:
            raise InputError("tensors '%s' and '%s' are both '%s' (a LayerNorm's gamma/beta beside its "
                             "weight/bias)" % (source[new], old, new))
        out[new], source[new] = sd[old], old
    if renamed:
        notes.append("%d LayerNorm gamma/beta as weight/bias" % renamed)
    return out, notes


def check_bert(sd, config, config_path):
    """Dies unless sd holds BERT's word embeddings (and, with a config, of
    its vocab_size x hidden_size, with its num_hidden_layers layers)."""
    prefix = next((p for p in ("", "bert.") if p + WORD_EMBEDDINGS in sd), None)
    if prefix is None:
        listed = ", ".join(list(sd)[:4]) + (", ..." if len(sd) > 4 else "")
        raise InputError("no tensor %s (with or without 'bert.'): not a BERT state dict (it holds %s)"
                         % (WORD_EMBEDDINGS, listed))
    if config is None:
        return
    shape = tuple(sd[prefix + WORD_EMBEDDINGS].shape)
    want = (config.get("vocab_size"), config.get("hidden_size"))
    if shape != want:
        raise FileError(config_path, "vocab_size %s and hidden_size %s, but the checkpoint's %s%s is %s"
                        % (want[0], want[1], prefix, WORD_EMBEDDINGS, shape))
    layers = {int(m.group(1)) for n in sd for m in [re.match(re.escape(prefix) + r"encoder\.layer\.(\d+)\.", n)]
              if m}
    if len(layers) != config.get("num_hidden_layers"):
        raise FileError(config_path, "num_hidden_layers %s, but the checkpoint has %d layers"
                        % (config.get("num_hidden_layers"), len(layers)))


def safetensors_header(tensors):
    """The header (its length and JSON, padded to 8 bytes) of tensors, a list
    of (name, safetensors dtype, contiguous array)."""
    header, at = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, value in tensors:
        header[name] = {"dtype": dtype, "shape": list(value.shape), "data_offsets": [at, at + value.nbytes]}
        at += value.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def write_safetensors(path, tensors):
    """Writes tensors ((name, dtype, array) as safetensors_header takes them)
    to path, through a temporary name."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(safetensors_header(tensors))
        for _, _, value in tensors:
            f.write(value.tobytes())
    os.replace(tmp, path)


def as_written(sd):
    """(name, safetensors dtype, contiguous little-endian array) of each tensor."""
    out = []
    for name, value in sd.items():
        if value.dtype == np.float64:
            value = value.astype("<f4")
        dtype = DTYPES.get(value.dtype)
        if dtype is None:
            raise InputError("tensor '%s' of dtype %s, which safetensors has no name for" % (name, value.dtype))
        out.append((name, dtype, value if value.flags.c_contiguous else np.array(value, order="C")))
    return out


def beside(src, given, names):
    """The file given, or the first of names beside src that exists (or None)."""
    if given:
        return given
    for n in names:
        p = os.path.join(os.path.dirname(os.path.abspath(src)), n)
        if os.path.isfile(p):
            return p
    return None


def read_config(path):
    try:
        with open(path, "rb") as f:
            config = json.loads(f.read().decode("utf-8"))
    except OSError as e:
        raise FileError(path, "cannot read: %s" % e.strerror) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise FileError(path, "not JSON (%s)" % e) from None
    if not isinstance(config, dict):
        raise FileError(path, "not a JSON object (a BERT config.json)")
    return config


def convert(src, out, config_path=None, vocab_path=None):
    """Writes out/model.safetensors (and copies the config and vocabulary);
    returns the summary line. Raises InputError (about src) or FileError."""
    check_format(src)
    config_path = beside(src, config_path, ("config.json", "bert_config.json"))
    vocab_path = beside(src, vocab_path, ("vocab.txt",))
    if vocab_path and not os.path.isfile(vocab_path):
        raise FileError(vocab_path, "no such file")
    config = read_config(config_path) if config_path else None
    if os.path.exists(out) and not os.path.isdir(out):
        raise FileError(out, "not a folder (--out names the model folder to write)")
    for name in ("model.safetensors", "config.json", "vocab.txt"):
        if os.path.exists(os.path.join(out, name)):
            raise FileError(os.path.join(out, name), "already exists; remove it first")
    sd, where = find_state_dict(read_torch(src, keep_bf16=True))
    sd, notes = hf_names(sd)
    check_bert(sd, config, config_path)
    tensors = as_written(sd)
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    copied = []
    for path, name, reader in ((config_path, "config.json", "the trainer"),
                               (vocab_path, "vocab.txt", "squad_to_lmdb")):
        if path:
            shutil.copyfile(path, os.path.join(out, name))
            copied.append("%s (from %s)" % (name, path))
        else:
            print("warning: %s: no %s given or beside it: copy the model's into %s (%s reads it)"
                  % (src, name, out, reader), file=sys.stderr)
    counts = {}
    for _, dtype, _ in tensors:
        counts[dtype] = counts.get(dtype, 0) + 1
    if not any(n.endswith("qa_outputs.weight") for n in sd):
        notes.append("no span head (qa_outputs: the trainer starts one)")
    return ("wrote %s/model.safetensors: %d tensors (%s; %d values) from the state dict at %s%s; copied %s"
            % (out, len(tensors), ", ".join("%d %s" % (n, d) for d, n in counts.items()),
               sum(v.size for _, _, v in tensors), where, "".join("; " + n for n in notes),
               ", ".join(copied) or "nothing"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--in", dest="src", required=True, help="the torch.save file (pytorch_model.bin, .pt, .pth)")
    ap.add_argument("--out", required=True, help="the model folder to write (model.safetensors, ...)")
    ap.add_argument("--config", help="the model's config.json (default: beside --in)")
    ap.add_argument("--vocab", help="the model's vocab.txt (default: beside --in)")
    args = ap.parse_args(argv)
    try:
        print(convert(args.src, args.out, args.config, args.vocab))
    except InputError as e:
        print("error: %s: %s" % (args.src, e), file=sys.stderr)
        return 2
    except FileError as e:
        print("error: %s: %s" % e.args, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
