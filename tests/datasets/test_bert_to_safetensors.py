#!/usr/bin/env python3
"""datasets/bert_to_safetensors.py, run where `import torch` fails: the two
files the real torch.save wrote of gen_bert.py's tiny BertForQuestionAnswering
(tests/golden/bert_state_dict_fixture.bin: transformers' pytorch_model.bin,
the zip format; bert_state_dict_fixture_legacy.pt: NVIDIA's and MLPerf's
layout, PyTorch's legacy format, the state dict under "model", layer norms
as gamma/beta, every tensor a view of one storage) give model.safetensors
files holding every tensor with Hugging Face's names, F32, bit for bit the
param.* values of tests/golden/bert.gld (read here from the format's
description, not with the converter's code); the trainer (build/bin/bert)
loads the converted folder and fine-tunes it on a tiny data set; F16, BF16,
int64 and 0-d tensors keep their dtype and values (the ResNet fixture of
state_dict_fixture.pth); config.json and vocab.txt are copied, from flags or
from beside the input; a "module." prefix is dropped; bad input (a
TensorFlow checkpoint, a file that is not torch.save's, a truncated one, a
pickle global outside the allow-list, a state dict that is not BERT's, a
dict without one, a config that does not fit, an output folder that holds a
model, a safetensors file) ends with one line "error: FILE: ...", exit
status 2, and nothing written.

    python3 tests/datasets/test_bert_to_safetensors.py [BUILD_DIR]
"""
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden")
CONVERTER = os.path.join(ROOT, "datasets", "bert_to_safetensors.py")
FIXTURE = os.path.join(GOLDEN, "bert_state_dict_fixture.bin")
FIXTURE_LEGACY = os.path.join(GOLDEN, "bert_state_dict_fixture_legacy.pt")
sys.path.insert(0, GOLDEN)
sys.path.insert(0, os.path.join(ROOT, "datasets"))
sys.modules["torch"] = None  # this process converts without PyTorch too
import bert_to_safetensors  # noqa: E402
from convert_check import evil_pickle  # noqa: E402
import golden  # noqa: E402
import torch_reader  # noqa: E402

# gen_bert.py's tiny model, as its config.json.
CONFIG = {"architectures": ["BertForQuestionAnswering"], "vocab_size": 40, "hidden_size": 16,
          "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 24,
          "max_position_embeddings": 10, "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
          "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "pad_token_id": 0}
failures = 0


def report(name, problem):
    global failures
    print("PASS %s" % name if not problem else "FAIL %s: %s" % (name, problem), flush=True)
    failures += bool(problem)


def convert(*args):
    """The converter as a user runs it, in a Python where import torch fails."""
    code = ("import os, runpy, sys; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; "
            "sys.path.insert(0, os.path.dirname(sys.argv[0])); runpy.run_path(sys.argv[0], run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code, CONVERTER, *args], capture_output=True, text=True)


def read_safetensors(path):
    """name -> (dtype, array) from the format's description: an 8-byte
    little-endian header length, the JSON header, the tensors' bytes."""
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    header.pop("__metadata__", None)
    kinds = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4"}
    out, spans = {}, []
    for name, e in header.items():
        begin, end = e["data_offsets"]
        value = np.frombuffer(body[begin:end], kinds[e["dtype"]]).reshape(e["shape"])
        if e["dtype"] == "BF16":
            value = (value.astype(np.uint32) << 16).view(np.float32)
        out[name] = (e["dtype"], value)
        spans.append((begin, end))
    spans.sort()
    if spans[0][0] != 0 or spans[-1][1] != len(body) or any(a[1] != b[0] for a, b in zip(spans, spans[1:])):
        raise ValueError("the tensors' bytes do not tile the data: %s" % spans[:4])
    return out


def tiny_params():
    _, g = golden.read(os.path.join(GOLDEN, "bert.gld"))
    return {k[len("param."):]: v for k, v in g.items() if k.startswith("param.")}


def matches_golden(path):
    """None when path holds exactly the tiny model's parameters, F32."""
    got, want = read_safetensors(path), tiny_params()
    if sorted(got) != sorted(want):
        return "names %s, want %s" % (sorted(set(got) ^ set(want))[:6], "bert.gld's param.*")
    for name, (dtype, value) in got.items():
        if dtype != "F32" or value.shape != want[name].shape:
            return "%s: %s %s, want F32 %s" % (name, dtype, value.shape, want[name].shape)
        if not np.array_equal(value, want[name]):
            return "%s: values differ from transformers' (max %.3g)" % (
                name, np.abs(value - want[name]).max())
    return None


def converted(src, tmp, name, *flags):
    out = os.path.join(tmp, name)
    p = convert("--in=" + src, "--out=" + out, *flags)
    if p.returncode:
        return None, "status %d: %s" % (p.returncode, p.stderr.strip())
    return out, p


def fixture_exact(src, tmp, name, summary):
    out, p = converted(src, tmp, name)
    if out is None:
        return p
    if summary not in p.stdout:
        return "summary %r lacks %r" % (p.stdout.strip(), summary)
    return matches_golden(os.path.join(out, "model.safetensors"))


def config_and_vocab(tmp):
    cfg, vocab = os.path.join(tmp, "cfg.json"), os.path.join(tmp, "v.txt")
    open(cfg, "w").write(json.dumps(CONFIG))
    open(vocab, "w").write("[PAD]\n[UNK]\n")
    out, p = converted(FIXTURE, tmp, "flags", "--config=" + cfg, "--vocab=" + vocab)
    if out is None:
        return p
    for src, name in ((cfg, "config.json"), (vocab, "vocab.txt")):
        if open(os.path.join(out, name), "rb").read() != open(src, "rb").read():
            return "%s is not a copy of %s" % (name, src)
    # Beside the input: bert_config.json (Google's name) and vocab.txt.
    folder = os.path.join(tmp, "nvidia")
    os.makedirs(folder)
    shutil.copy(FIXTURE_LEGACY, os.path.join(folder, "bert_large_qa.pt"))
    shutil.copy(cfg, os.path.join(folder, "bert_config.json"))
    shutil.copy(vocab, os.path.join(folder, "vocab.txt"))
    out, p = converted(os.path.join(folder, "bert_large_qa.pt"), tmp, "beside")
    if out is None:
        return p
    if sorted(os.listdir(out)) != ["config.json", "model.safetensors", "vocab.txt"] or p.stderr:
        return "beside the input: wrote %s, stderr %r" % (os.listdir(out), p.stderr)
    return None


def keeps_dtypes(tmp):
    """The ResNet fixture (fp16, bf16, int64 0-d, strided views) through the
    converter's writing, against resnet34.gld's fixture.* values."""
    sd = torch_reader.read_torch(os.path.join(GOLDEN, "state_dict_fixture.pth"), keep_bf16=True)
    path = os.path.join(tmp, "dtypes.safetensors")
    bert_to_safetensors.write_safetensors(path, bert_to_safetensors.as_written(sd))
    got = read_safetensors(path)
    _, want = golden.read(os.path.join(GOLDEN, "resnet34.gld"))
    dtypes = {"layer1.0.conv1.weight": "F16", "layer1.0.bn1.weight": "BF16", "bn1.num_batches_tracked": "I64"}
    for name in sd:
        dtype, value = got[name]
        ref = want["fixture." + name]
        if dtype != dtypes.get(name, "F32"):
            return "%s written as %s" % (name, dtype)
        if value.shape != ref.shape and not (value.shape == () and ref.shape == (1,)):
            return "%s: shape %s, want %s" % (name, value.shape, ref.shape)
        if not np.array_equal(value.astype(np.float32).ravel(), ref.ravel()):
            return "%s: values differ" % name
    return None


def names_mapped():
    a = np.zeros(2, np.float32)
    sd, notes = bert_to_safetensors.hf_names({"module.bert.embeddings.LayerNorm.gamma": a,
                                              "module.bert.embeddings.LayerNorm.beta": a,
                                              "module.cls.predictions.gamma": a})
    if list(sd) != ["bert.embeddings.LayerNorm.weight", "bert.embeddings.LayerNorm.bias",
                    "cls.predictions.gamma"] or len(notes) != 2:
        return "got %s, %s" % (list(sd), notes)
    try:
        bert_to_safetensors.hf_names({"x.LayerNorm.gamma": a, "x.LayerNorm.weight": a})
    except torch_reader.InputError as e:
        want = "tensors 'x.LayerNorm.gamma' and 'x.LayerNorm.weight' are both 'x.LayerNorm.weight'"
        return None if str(e).startswith(want) else "collision: %s" % e
    return "gamma beside weight accepted"


def trainer_loads(tmp, build):
    """The converted folder as the trainer's --init_checkpoint: a tiny SQuAD
    set in the model's 10 positions (squad_to_lmdb), one epoch."""
    for tool in ("bert", "squad_to_lmdb"):
        if not os.access(os.path.join(build, "bin", tool), os.X_OK):
            return "%s/bin/%s is not built" % (build, tool)
    cfg = os.path.join(tmp, "config.json")
    open(cfg, "w").write(json.dumps(CONFIG))
    out, p = converted(FIXTURE_LEGACY, tmp, "model", "--config=" + cfg)
    if out is None:
        return p
    words = "[PAD] [UNK] [CLS] [SEP] [MASK] the cat sat on mat who where ? .".split()
    open(os.path.join(tmp, "vocab.txt"), "w").write("\n".join(words) + "\n")
    squad = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{
        "context": "The cat sat on the mat.", "qas": [
            {"id": "q1", "question": "Who sat?", "answers": [{"text": "The cat", "answer_start": 0}]},
            {"id": "q2", "question": "Where?", "answers": [{"text": "the mat", "answer_start": 15}]}]}]}]}
    open(os.path.join(tmp, "squad.json"), "w").write(json.dumps(squad))
    steps = [
        [os.path.join(build, "bin", "squad_to_lmdb"), "--train=%s/squad.json" % tmp, "--dev=%s/squad.json" % tmp,
         "--vocab=%s/vocab.txt" % tmp, "--out=%s/data/lmdb" % tmp, "--max_seq_length=10", "--max_query_length=3",
         "--doc_stride=2"],
        [os.path.join(build, "bin", "bert"), "--data_dir=%s/data" % tmp, "--init_checkpoint=" + out,
         "--device=cpu", "--max_seq_length=10", "--batch_size=2", "--eval_batch=2", "--max_epochs=1",
         "--log_file=%s/run.log" % tmp]]
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            errors = [line for line in p.stderr.splitlines() if line.startswith("error")] or [p.stderr[-400:]]
            return "%s: status %d: %s" % (os.path.basename(cmd[0]), p.returncode, errors[0])
    if "2 layers, width 16, 2 heads; 4818 parameters (span head from the checkpoint)" not in p.stdout:
        return "the trainer printed %r" % p.stdout[-600:]
    return None


def bad_input(tmp):
    tf = os.path.join(tmp, "tf")
    os.makedirs(tf)
    for f in ("model.ckpt-28252.index", "model.ckpt-28252.data-00000-of-00001", "checkpoint"):
        open(os.path.join(tf, f), "wb").write(b"\0" * 16)
    cut = os.path.join(tmp, "cut.bin")
    whole = open(FIXTURE, "rb").read()
    open(cut, "wb").write(whole[:len(whole) // 2])
    text = os.path.join(tmp, "notes.bin")
    open(text, "w").write("not a checkpoint\n")
    evil, marker = evil_pickle(tmp)
    no_sd = os.path.join(tmp, "trainer_state.pt")
    with zipfile.ZipFile(no_sd, "w") as z:
        z.writestr("trainer_state/data.pkl", pickle.dumps({"epoch": 3, "step": 100}, protocol=2))
    bad_cfg = os.path.join(tmp, "base_config.json")
    open(bad_cfg, "w").write(json.dumps(dict(CONFIG, hidden_size=768)))
    not_json = os.path.join(tmp, "not.json")
    open(not_json, "w").write("vocab_size = 40\n")
    st = os.path.join(tmp, "st")
    converted(FIXTURE, tmp, "st")
    taken = os.path.join(tmp, "taken")
    os.makedirs(taken)
    open(os.path.join(taken, "model.safetensors"), "w").write("x")
    tf_hint = ("a TensorFlow checkpoint (model.ckpt-N.index and .data-*), which cannot be read without "
               "TensorFlow: convert it to PyTorch first with transformers 4.x")
    cases = {
        "tf_prefix": (os.path.join(tf, "model.ckpt-28252"), [], tf_hint),
        "tf_index": (os.path.join(tf, "model.ckpt-28252.index"), [], tf_hint),
        "tf_data": (os.path.join(tf, "model.ckpt-28252.data-00000-of-00001"), [], tf_hint),
        "tf_folder": (tf, [], tf_hint),
        "missing": (os.path.join(tmp, "none.bin"), [], "cannot read: No such file or directory"),
        "not_torch_save": (text, [], "not what torch.save writes (a zip archive or a pickle stream)"),
        "truncated": (cut, [], "not what torch.save writes"),
        "disallowed_global": (evil, [], "the pickle names the global '%s.system'" % os.system.__module__),
        "no_state_dict": (no_sd, [], "a dict of 'epoch', 'step', with no state dict (tensor name -> tensor) "
                          'at its top level or under "model" or "state_dict"'),
        "not_bert": (os.path.join(GOLDEN, "state_dict_fixture.pth"), [],
                     "no tensor embeddings.word_embeddings.weight (with or without 'bert.'): not a BERT state "
                     "dict (it holds conv1.weight, bn1.weight, bn1.bias, bn1.running_mean, ...)"),
        "safetensors_input": (os.path.join(st, "model.safetensors"), [], "already a safetensors file"),
        "config_mismatch": (FIXTURE, ["--config=" + bad_cfg], "vocab_size 40 and hidden_size 768, but the "
                            "checkpoint's bert.embeddings.word_embeddings.weight is (40, 16)"),
        "config_not_json": (FIXTURE, ["--config=" + not_json], "not JSON"),
        "out_holds_a_model": (FIXTURE, [], "already exists; remove it first"),
    }
    for name, (src, flags, want) in cases.items():
        dest = taken if name == "out_holds_a_model" else os.path.join(tmp, "out_" + name)
        p = convert("--in=" + src, "--out=" + dest, *flags)
        err = p.stderr
        named = {"config_mismatch": bad_cfg, "config_not_json": not_json,
                 "out_holds_a_model": os.path.join(taken, "model.safetensors")}.get(name, src)
        problem = None
        if p.returncode != 2 or not err.startswith("error: %s: " % named) or want not in err:
            problem = "status %d, stderr %r; want 'error: %s: ...%s'" % (p.returncode, err, named, want)
        elif err.count("\n") != 1:
            problem = "not one line: %r" % err
        elif name != "out_holds_a_model" and os.path.exists(dest):
            problem = "wrote %s: %s" % (dest, os.listdir(dest))
        elif name == "out_holds_a_model" and os.listdir(taken) != ["model.safetensors"]:
            problem = "wrote into %s: %s" % (taken, os.listdir(taken))
        elif name == "disallowed_global" and os.path.exists(marker):
            problem = "the pickle's code ran"
        report("bert_to_safetensors_refuses_" + name, problem)


def check(name, fn, *args):
    """report(name, fn(*args)), an exception a failure of the case."""
    try:
        problem = fn(*args)
    except Exception as e:  # a converter fault may leave a file the reader chokes on
        problem = "%s: %s" % (type(e).__name__, e)
    report(name, problem)


def main():
    build = os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build")
    with tempfile.TemporaryDirectory() as tmp:
        check("bert_to_safetensors_pytorch_model_bin_exact", fixture_exact, FIXTURE, tmp, "zip",
              "39 tensors (39 F32; 4818 values) from the state dict at the top level")
        check("bert_to_safetensors_nvidia_legacy_pt_exact", fixture_exact, FIXTURE_LEGACY, tmp, "legacy",
              'from the state dict at "model"; 10 LayerNorm gamma/beta as weight/bias')
        check("bert_to_safetensors_copies_config_and_vocab", config_and_vocab, tmp)
        check("bert_to_safetensors_keeps_f16_bf16_int", keeps_dtypes, tmp)
        check("bert_to_safetensors_maps_names", names_mapped)
        check("bert_to_safetensors_trainer_loads_it", trainer_loads, tmp, build)
        bad_input(tmp)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
