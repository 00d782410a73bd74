"""Bad input of the SQuAD/BERT tools: the converter squad_to_lmdb
(language/squad_features.c), the trainer bert and the generator
squad_generate.

The good set: a tiny vocab.txt (the special tokens and the words used), and
train.json / dev.json of one paragraph with two questions; a row's setup
writes them with change(data) applied to the parsed train set, or one file
as raw bytes. The tiny model: config.json (vocabulary 24, width 8, 2 heads,
1 layer, 32 positions) and model.safetensors with Hugging Face's names,
written here (datasets/bert_to_safetensors.py's writer). Every converter
error comes before anything is written."""
import copy
import json
import os
import re
import sys

import numpy as np

from case import Case, left_nothing, printed, warned

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "datasets"))
from bert_to_safetensors import write_safetensors  # noqa: E402

VOCAB = ("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\nwho\nwhere\ndid\n?\n.\n"
         "a\nred\nbig\ndog\nran\n")
DATA = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{
    "context": "The cat sat on the mat.",
    "qas": [{"id": "q1", "question": "Who sat?", "answers": [{"text": "The cat", "answer_start": 0}]},
            {"id": "q2", "question": "Where did the cat sit?",
             "answers": [{"text": "the mat", "answer_start": 15}]}]}]}]}
CONVERT = ("{build}/bin/squad_to_lmdb --train={tmp}/train.json --dev={tmp}/dev.json --vocab={tmp}/vocab.txt "
           "--out={tmp}/out")
SMALL = " --max_seq_length=16 --max_query_length=8 --doc_stride=4"
TRAIN = "{tmp}/train.json"


def squad(change=None, train=None, vocab=VOCAB, dev=None):
    """A setup: the good set, change(data) applied to the training file;
    bytes given replace a file whole."""
    def setup(t):
        data = copy.deepcopy(DATA)
        if change:
            change(data)
        t.write("train.json", train if train is not None else json.dumps(data, ensure_ascii=False))
        t.write("dev.json", dev if dev is not None else json.dumps(DATA))
        if vocab is not None:
            t.write("vocab.txt", vocab)
    return setup


def replaced(old, new):
    """The good training file's bytes with old (text) replaced by new (bytes:
    invalid UTF-8 too)."""
    return json.dumps(DATA).encode().replace(old.encode(), new)


def qa(d, i=0):
    return d["data"][0]["paragraphs"][0]["qas"][i]


def answer(d, i=0):
    return qa(d, i)["answers"][0]


no_output = left_nothing("out/train", "out/dev", "out/dev.json", "out/vocab.txt")


# ------------------------------------------------------------ the tiny model

CONFIG = {"vocab_size": 24, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
          "intermediate_size": 16, "max_position_embeddings": 32, "type_vocab_size": 2, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "layer_norm_eps": 1e-12}


def model_tensors(config):
    """Hugging Face's BertForQuestionAnswering tensors of config, drawn small."""
    v, d, f = config["vocab_size"], config["hidden_size"], config["intermediate_size"]
    shapes = {"bert.embeddings.word_embeddings.weight": (v, d),
              "bert.embeddings.position_embeddings.weight": (config["max_position_embeddings"], d),
              "bert.embeddings.token_type_embeddings.weight": (config["type_vocab_size"], d),
              "bert.embeddings.LayerNorm.weight": (d,), "bert.embeddings.LayerNorm.bias": (d,)}
    for layer in range(config["num_hidden_layers"]):
        p = "bert.encoder.layer.%d." % layer
        for proj in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"):
            shapes[p + proj + ".weight"], shapes[p + proj + ".bias"] = (d, d), (d,)
        shapes.update({p + "intermediate.dense.weight": (f, d), p + "intermediate.dense.bias": (f,),
                       p + "output.dense.weight": (d, f), p + "output.dense.bias": (d,)})
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[p + ln + ".weight"], shapes[p + ln + ".bias"] = (d,), (d,)
    shapes.update({"qa_outputs.weight": (2, d), "qa_outputs.bias": (2,)})
    rng = np.random.default_rng(5)
    return {n: (0.02 * rng.standard_normal(s)).astype(np.float32) for n, s in shapes.items()}


def write_model(t, folder, config=None, config_text=None, change=None, tensors_of_config=False):
    """The tiny model into {tmp}/<folder>: config.json (config_text as is when
    given) and model.safetensors (of CONFIG's shapes, or with
    tensors_of_config of config's; change(tensors) applied first)."""
    config = dict(CONFIG, **(config or {}))
    tensors = model_tensors(config if tensors_of_config else CONFIG)
    if change:
        change(tensors)
    t.write(folder + "/config.json", config_text if config_text is not None else json.dumps(config))
    write_safetensors(str(t.path / folder / "model.safetensors"), [(n, "F32", a) for n, a in tensors.items()])


def bert(config=None, config_text=None, change=None, data=True, model="model", flags=SMALL,
         tensors_of_config=False):
    """A setup: the tiny data set in {tmp}/d/lmdb (squad_to_lmdb with flags)
    and the tiny model in {tmp}/<model>."""
    def setup(t):
        squad()(t)
        if data:
            t.run("{build}/bin/squad_to_lmdb --train={tmp}/train.json --dev={tmp}/dev.json "
                  "--vocab={tmp}/vocab.txt --out={tmp}/d/lmdb" + flags)
        if model:
            write_model(t, model, config, config_text, change, tensors_of_config)
    return setup


BERT = ("{build}/bin/bert --data_dir={tmp}/d --init_checkpoint={tmp}/model --device=cpu "
        "--log_file={tmp}/run.log --max_seq_length=16 --batch_size=2 --eval_batch=2 --max_epochs=1")
BENCH = ("{build}/bin/bert --device=cpu --log_file={tmp}/run.log --max_seq_length=16 --batch_size=2 "
         "--eval_batch=2")
MPIRUN = "mpirun --allow-run-as-root --oversubscribe -np 2 "
GENERATE = "{build}/bin/squad_generate --out={tmp}/gen --train_questions=10 --dev_questions=5"


def drop(name):
    return lambda tensors: tensors.pop(name)


def raw_model(header, data_bytes=4):
    """A setup: bert(), then {tmp}/model/model.safetensors replaced by a file
    of this header (JSON text as is) and data_bytes zero bytes of data."""
    def setup(t):
        bert()(t)
        text = header.encode()
        t.write("model/model.safetensors", len(text).to_bytes(8, "little") + text + bytes(data_bytes))
    return setup


CASES = [
    # ---------------------------------------------------------------- squad_to_lmdb
    Case("squad_to_lmdb_good_set", CONVERT, None, 0, "the good set converts",
         setup=squad(), check=printed("train: 2 questions, 2 windows; dev: 2 questions, 2 windows")),
    Case("squad_answer_start_off_its_text", CONVERT,
         'error: {tmp}/train.json: data[0].paragraphs[0].qas[0].answers[0] (id q1): answer_start 1 does not '
         'point at the answer "The cat" (the context there reads "he cat ")', 2,
         "answer_start one character off (a byte offset, or a data set edited by hand)",
         setup=squad(lambda d: answer(d).update(answer_start=1)), check=no_output),
    Case("squad_answer_start_past_context", CONVERT,
         "error: {tmp}/train.json: data[0].paragraphs[0].qas[1].answers[0] (id q2): answer_start 99 is past "
         "the end of the context (23 characters)", 2, "answer_start beyond the context's last character",
         setup=squad(lambda d: answer(d, 1).update(answer_start=99)), check=no_output),
    Case("squad_answer_start_not_whole", CONVERT,
         "error: {tmp}/train.json: data[0].paragraphs[0].qas[0].answers[0] (id q1): answer_start 0.5 is not "
         "a character index (a whole number from 0)", 2,
         "a fractional answer_start (once truncated to 0 and accepted)",
         setup=squad(lambda d: answer(d).update(answer_start=0.5)), check=no_output),
    Case("squad_answer_start_negative", CONVERT,
         "error: {tmp}/train.json: data[0].paragraphs[0].qas[0].answers[0] (id q1): answer_start -1 is not "
         "a character index (a whole number from 0)", 2, "a negative answer_start (SQuAD 2.0 style)",
         setup=squad(lambda d: answer(d).update(answer_start=-1)), check=no_output),
    Case("squad_answer_start_huge", CONVERT,
         "error: {tmp}/train.json: data[0].paragraphs[0].qas[0].answers[0] (id q1): answer_start 1e+300 is "
         "past the end of the context (23 characters)", 2,
         "answer_start 1e300 (once printed as 301 digits, and cast to int64 out of range)",
         setup=squad(lambda d: answer(d).update(answer_start=1e300)), check=no_output),
    Case("squad_answer_start_a_string", CONVERT,
         'error: {tmp}/train.json: data[0].paragraphs[0].qas[0].answers[0]: "answer_start" missing or not a '
         'number', 2, 'answer_start as a string ("0")',
         setup=squad(lambda d: answer(d).update(answer_start="0")), check=no_output),
    Case("squad_missing_data", CONVERT,
         'error: {tmp}/train.json: the top level: "data" missing or not an array', 2,
         "a JSON file without SQuAD's data array", setup=squad(lambda d: d.pop("data")), check=no_output),
    Case("squad_data_an_object", CONVERT,
         'error: {tmp}/train.json: the top level: "data" missing or not an array', 2,
         '"data" an object instead of a list', setup=squad(lambda d: d.update(data={"t": 1}))),
    Case("squad_top_level_a_list", CONVERT,
         'error: {tmp}/train.json: the top level: "data" missing or not an array', 2,
         "a JSON list at the top level (a predictions list?)", setup=squad(train="[1, 2]")),
    Case("squad_missing_paragraphs", CONVERT,
         'error: {tmp}/train.json: data[0]: "paragraphs" missing or not an array', 2, "an article without paragraphs",
         setup=squad(lambda d: d["data"][0].pop("paragraphs")), check=no_output),
    Case("squad_article_not_an_object", CONVERT,
         'error: {tmp}/train.json: data[1]: "paragraphs" missing or not an array', 2,
         "an article that is a string", setup=squad(lambda d: d["data"].append("t2"))),
    Case("squad_missing_context", CONVERT,
         'error: {tmp}/train.json: data[0].paragraphs[0]: "context" missing or not a string', 2,
         "a paragraph without its context",
         setup=squad(lambda d: d["data"][0]["paragraphs"][0].pop("context")), check=no_output),
    Case("squad_context_a_list", CONVERT,
         'error: {tmp}/train.json: data[0].paragraphs[0]: "context" missing or not a string', 2,
         "a context given as a list of sentences",
         setup=squad(lambda d: d["data"][0]["paragraphs"][0].update(context=["The cat sat."]))),
    Case("squad_missing_qas", CONVERT,
         'error: {tmp}/train.json: data[0].paragraphs[0]: "qas" missing or not an array', 2,
         "a paragraph without questions", setup=squad(lambda d: d["data"][0]["paragraphs"][0].pop("qas"))),
    Case("squad_missing_id", CONVERT,
         'error: {tmp}/train.json: data[0].paragraphs[0].qas[1]: "id" missing or not a string', 2,
         "a question without an id", setup=squad(lambda d: qa(d, 1).pop("id")), check=no_output),
    Case("squad_id_a_number", CONVERT,
         'error: {tmp}/train.json: data[0].paragraphs[0].qas[0]: "id" missing or not a string', 2,
         "a numeric question id", setup=squad(lambda d: qa(d).update(id=1))),
    Case("squad_missing_question", CONVERT,
         'error: {tmp}/train.json: data[0].paragraphs[0].qas[1]: "question" missing or not a string', 2,
         "a question without its text", setup=squad(lambda d: qa(d, 1).pop("question")), check=no_output),
    Case("squad_missing_answers", CONVERT,
         'error: {tmp}/train.json: data[0].paragraphs[0].qas[1]: "answers" missing or not an array', 2,
         "a question without answers", setup=squad(lambda d: qa(d, 1).pop("answers")), check=no_output),
    Case("squad_no_answer", CONVERT,
         "error: {tmp}/train.json: data[0].paragraphs[0].qas[0] (id q1): no answers", 2,
         "an empty answers list (a SQuAD 2.0 unanswerable question)",
         setup=squad(lambda d: qa(d).update(answers=[])), check=no_output),
    Case("squad_missing_answer_text", CONVERT,
         'error: {tmp}/train.json: data[0].paragraphs[0].qas[0].answers[0]: "text" missing or not a string', 2,
         "an answer without its text", setup=squad(lambda d: answer(d).pop("text")), check=no_output),
    Case("squad_answer_a_string", CONVERT,
         'error: {tmp}/train.json: data[0].paragraphs[0].qas[0].answers[0]: "text" missing or not a string', 2,
         "answers given as strings, not objects", setup=squad(lambda d: qa(d).update(answers=["The cat"]))),
    Case("squad_missing_answer_start", CONVERT,
         'error: {tmp}/train.json: data[0].paragraphs[0].qas[0].answers[0]: "answer_start" missing or not a '
         'number', 2, "an answer without its offset", setup=squad(lambda d: answer(d).pop("answer_start")),
         check=no_output),
    Case("squad_context_not_utf8", CONVERT,
         "error: {tmp}/train.json: data[0].paragraphs[0]: the context is not UTF-8 (invalid byte at offset 9)",
         2, "a Latin-1 byte in a context (once the answer offsets were counted wrong: a misleading error)",
         setup=squad(train=replaced("The cat sat", b"The cat s\xe9at")), check=no_output),
    Case("squad_question_not_utf8", CONVERT,
         "error: {tmp}/train.json: data[0].paragraphs[0].qas[0] (id q1): the question is not UTF-8 (invalid "
         "byte at offset 5)", 2, "a Latin-1 byte in a question (once tokenised as U+FFFD and accepted)",
         setup=squad(train=replaced("Who sat?", b"Who s\xe9at?")), check=no_output),
    Case("squad_answer_not_utf8", CONVERT,
         "error: {tmp}/train.json: data[0].paragraphs[0].qas[0].answers[0] (id q1): the answer text is not "
         "UTF-8 (invalid byte at offset 5)", 2, "a Latin-1 byte in an answer",
         setup=squad(train=replaced('"The cat"', b'"The c\xe9at"')), check=no_output),
    Case("squad_empty_context", CONVERT,
         "error: {tmp}/train.json: data[0].paragraphs[0]: an empty context, but 2 questions", 2,
         "an empty context with questions (once: answer_start does not point at the answer)",
         setup=squad(lambda d: d["data"][0]["paragraphs"][0].update(context="")), check=no_output),
    Case("squad_no_questions", CONVERT,
         "error: {tmp}/train.json: no questions (every paragraph's \"qas\" is empty)", 2,
         "a training file without a question (once converted, then the trainer's \"no records\")",
         setup=squad(lambda d: d["data"][0]["paragraphs"][0].update(qas=[])), check=no_output),
    Case("squad_empty_context_without_questions", CONVERT, None, 0,
         "an empty context without questions: nothing to convert, accepted",
         setup=squad(lambda d: d["data"][0]["paragraphs"].append({"context": "", "qas": []})),
         check=printed("train: 2 questions, 2 windows")),
    Case("squad_empty_answer_text", CONVERT,
         'error: {tmp}/train.json: data[0].paragraphs[0].qas[0].answers[0] (id q1): no token covers the '
         'answer "" (empty, or only characters the tokeniser drops)', 2, "an empty answer text",
         setup=squad(lambda d: answer(d).update(text="")), check=no_output),
    Case("squad_empty_question_kept", CONVERT, None, 0,
         "an empty question: kept as the reference recipes keep it ([CLS] [SEP] context [SEP]), with a warning",
         setup=squad(lambda d: qa(d).update(question="")),
         check=lambda t, proc: warned("warning: {tmp}/train.json: data[0].paragraphs[0].qas[0] (id q1): the "
                                      "question has no tokens; kept")(t, proc)
         or printed("train: 2 questions, 2 windows")(t, proc)),
    Case("squad_answer_in_no_window", CONVERT + " --max_seq_length=8 --max_query_length=3 --doc_stride=1", None, 0,
         "a training answer longer than a window: each of its windows targets [CLS], as the reference "
         "recipes train it, and the summary counts it",
         setup=squad(lambda d: answer(d, 1).update(text="the mat.")),
         check=printed("train: 2 questions (1 whose answer no window holds whole: trained toward [CLS])")),
    Case("squad_not_json", CONVERT, "error: {tmp}/train.json: not valid JSON (at byte 0)", 2,
         "a file that is not JSON (an HTML error page saved as the download)",
         setup=squad(train="<html>Not Found</html>"), check=no_output),
    Case("squad_truncated_json", CONVERT, "error: {tmp}/dev.json: not valid JSON (at byte 9)", 2,
         "a truncated download of the dev set", setup=squad(dev='{"data": ['), check=no_output),
    Case("squad_duplicate_id", CONVERT,
         "error: {tmp}/train.json: data[0].paragraphs[0].qas[1]: id q1 repeats data[0].paragraphs[0].qas[0] "
         "(each question needs its own id: predictions are keyed by it)", 2,
         "two questions of one id (once accepted: predictions.json keeps one answer for both)",
         setup=squad(lambda d: qa(d, 1).update(id="q1")), check=no_output),
    Case("squad_missing_train_file", CONVERT.replace("train.json", "none.json"),
         "error: --train: '{tmp}/none.json': No such file or directory", 2, "--train names no file",
         setup=squad()),
    Case("squad_no_dev_flag", "{build}/bin/squad_to_lmdb --train={tmp}/train.json --vocab={tmp}/vocab.txt "
         "--out={tmp}/out", "error: --dev: missing: SQuAD v1.1 evaluation JSON", 2, "--dev left out",
         setup=squad()),
    Case("squad_missing_vocab", CONVERT, "error: --vocab: '{tmp}/vocab.txt': No such file or directory", 2,
         "--vocab names no file", setup=squad(vocab=None)),
    Case("squad_vocab_a_folder", CONVERT.replace("{tmp}/vocab.txt", "{tmp}"), "error: --vocab: '{tmp}' is not a file",
         2, "--vocab names the model folder, not its vocab.txt", setup=squad()),
    Case("squad_vocab_not_bert", CONVERT,
         "error: {tmp}/vocab.txt: no [UNK] token (a BERT vocabulary holds [PAD], [UNK], [CLS] and [SEP])", 2,
         "a vocabulary that is not BERT's (the translation model's subwords)",
         setup=squad(vocab="the_\ncat_\n<pad>\n"), check=no_output),
    Case("squad_vocab_not_utf8", CONVERT, "error: {tmp}/vocab.txt:6: invalid UTF-8 at byte 4 of the line", 2,
         "a binary file as the vocabulary", setup=squad(vocab=VOCAB.encode().replace(b"the\n", b"the\xff\n"))),
    Case("squad_doc_stride_zero", CONVERT + " --doc_stride=0", "error: --doc_stride: 0 is outside [1, 4096]", 2,
         "a stride of 0 (windows that never advance)", setup=squad()),
    Case("squad_max_seq_length_below_minimum", CONVERT + " --max_seq_length=4",
         "error: --max_seq_length: 4 is outside [8, 4096]", 2, "windows too short for anything", setup=squad()),
    Case("squad_max_seq_length_too_small_for_question", CONVERT + " --max_seq_length=32",
         "error: --max_query_length: 64 leaves no room for the context in windows of --max_seq_length=32 tokens "
         "(it may be at most max_seq_length - 4)", 2,
         "windows shorter than the longest question kept (run_squad.py refuses it too; once accepted while "
         "every question fitted, and an error only at one that did not)", setup=squad(), check=no_output),
    Case("squad_unknown_flag", CONVERT + " --max_seq_len=128", "error: --max_seq_len: unknown key (--help lists the keys)",
         2, "a misspelt flag", setup=squad()),
    Case("squad_out_holds_a_set", CONVERT, "error: {tmp}/out/train: already exists; remove it first", 2,
         "--out holds a converted set already", setup=lambda t: [squad()(t), t.write("out/train/data.mdb", b"")]
         and None),
    Case("squad_out_a_file", CONVERT.replace("--out={tmp}/out", "--out={tmp}/vocab.txt"),
         "error: --out: '{tmp}/vocab.txt' is not a folder", 2, "--out names a file", setup=squad()),

    # ---------------------------------------------------------------- bert (the trainer)
    Case("bert_tiny_run", BERT, None, 0, "the tiny model fine-tunes one epoch on the tiny set (the rows' baseline)",
         setup=bert(), check=printed("span head from the checkpoint")),
    Case("bert_predictions_out_unwritable", BERT + " --predictions_out=/nonexistent/dir/p.json",
         "error: --predictions_out: cannot write /nonexistent/dir/p.json.tmp: No such file or directory",
         2, "a predictions file in a missing folder (once found after a whole epoch, as an internal "
         "error naming no flag)", setup=bert()),
    Case("bert_no_data_dir", BERT.replace("--data_dir={tmp}/d ", ""),
         "error: --data_dir: no data set given (--data_dir=DIR)", 2, "no data set named", setup=bert(data=False)),
    Case("bert_data_dir_without_lmdb", BERT, "error: {tmp}/d/lmdb: missing: --data_dir holds no converted data "
         "set (language/prepare_data.sh, or datasets/squad_to_lmdb --out=DATA_DIR/lmdb, writes it)", 2, "--data_dir names a folder of raw SQuAD JSON, not converted",
         setup=lambda t: [bert(data=False)(t), t.write("d/train-v1.1.json", json.dumps(DATA))] and None),
    Case("bert_model_without_config", BERT, "error: {tmp}/model/config.json: cannot open: No such file or directory",
         2, "a model folder without config.json",
         setup=lambda t: [bert()(t), (t.path / "model" / "config.json").unlink()] and None),
    Case("bert_config_not_json", BERT, "error: {tmp}/model/config.json: not valid JSON (at byte 2)", 2,
         "a config.json that is not JSON", setup=bert(config_text="{vocab_size: 24}")),
    Case("bert_config_without_vocab_size", BERT, 'error: {tmp}/model/config.json: no "vocab_size"', 2,
         "a config.json without vocab_size (a tokenizer_config.json?)",
         setup=bert(config_text=json.dumps({k: v for k, v in CONFIG.items() if k != "vocab_size"}))),
    Case("bert_config_relu", BERT,
         'error: {tmp}/model/config.json: hidden_act "relu": the model implements "gelu" (the erf form)', 2,
         "an encoder with ReLU (the model computes GELU only)", setup=bert(config={"hidden_act": "relu"})),
    Case("bert_config_heads_not_dividing", BERT,
         "error: {tmp}/model/config.json: not a BERT configuration this model takes (vocab 24, hidden 8, heads 3, "
         "layers 1 of at most 24)", 2, "3 heads on a width of 8", setup=bert(config={"num_attention_heads": 3})),
    Case("bert_checkpoint_missing_tensor", BERT,
         "error: {tmp}/model/model.safetensors: the checkpoint has no tensor "
         "encoder.layer.0.attention.self.key.bias", 2, "a checkpoint without one of the encoder's tensors",
         setup=bert(change=drop("bert.encoder.layer.0.attention.self.key.bias"))),
    Case("bert_checkpoint_misshaped_tensor", BERT,
         "error: {tmp}/model/model.safetensors: tensor bert.encoder.layer.0.intermediate.dense.weight has shape "
         "(8, 16), the model needs (16, 8)", 2, "a tensor stored transposed (a TensorFlow kernel)",
         setup=bert(change=lambda ts: ts.update({"bert.encoder.layer.0.intermediate.dense.weight": np.zeros(
             (8, 16), np.float32)}))),
    Case("bert_checkpoint_shape_overflows", BERT,
         "error: {tmp}/model/model.safetensors: tensor a: shape (4294967296, 4294967296) has more elements than "
         "any file holds", 2,
         "a shape whose element count overflows 64 bits (once wrapped to 0, so that 0 bytes passed as its data; "
         "found by tests/fuzz's safetensors target)",
         setup=raw_model('{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}')),
    Case("bert_checkpoint_offset_past_2_64", BERT,
         "error: {tmp}/model/model.safetensors: tensor a: data_offsets are not a byte range", 2,
         "a data offset of 1e30 (once converted to uint64 outside its range: undefined behaviour; found by "
         "tests/fuzz's safetensors target)",
         setup=raw_model('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,1e30]}}')),
    Case("bert_checkpoint_fractional_dimension", BERT,
         "error: {tmp}/model/model.safetensors: tensor a: dimension 0 is not a size", 2,
         "a dimension of 1.5 (once read as 1)",
         setup=raw_model('{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}')),
    Case("bert_checkpoint_tensor_twice", BERT,
         "error: {tmp}/model/model.safetensors: tensor a is in the header twice", 2,
         "a tensor name twice in the header (JSON allows it; which one was meant is unknown)",
         setup=raw_model('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                         '"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}')),
    Case("bert_checkpoint_config_mismatch", BERT,
         "error: {tmp}/model/model.safetensors: tensor bert.embeddings.word_embeddings.weight has shape (24, 8), "
         "the model needs (30, 8)", 2, "a config.json of another model than the weights",
         setup=bert(config={"vocab_size": 30})),
    Case("bert_vocab_beyond_model", BERT,
         "error: {tmp}/d/lmdb/vocab.txt: 20 tokens, but the model ({tmp}/model) has vocab_size 10: the data set "
         "was converted with another model's vocabulary", 2,
         "a data set converted with a larger vocabulary than the model's (once an internal error at the first "
         "batch, after run_start)", setup=bert(config={"vocab_size": 10}, tensors_of_config=True)),
    Case("bert_max_seq_length_beyond_positions", BERT + " --max_seq_length=64",
         "error: --max_seq_length: 64 is more than the model's 32 positions", 2,
         "windows longer than the model's position embeddings", setup=bert()),
    Case("bert_max_seq_length_below_windows", BERT.replace("--max_seq_length=16", "--max_seq_length=12"),
         "error: --max_seq_length: 12, but the data set holds windows of 16 tokens", 2,
         "a trainer's max_seq_length below the converter's", setup=bert()),
    Case("bert_init_checkpoint_default", BERT.replace("--init_checkpoint={tmp}/model ", ""), None, 0,
         "--init_checkpoint left out: the model in DATA_DIR/model", setup=bert(model="d/model"),
         check=printed("/d/model: 1 layers")),
    Case("bert_init_checkpoint_default_missing", BERT.replace("--init_checkpoint={tmp}/model ", ""),
         "error: --init_checkpoint: not given, and {tmp}/d/model holds no config.json (language/prepare_data.sh "
         "puts the pretrained model there)", 2, "--init_checkpoint left out, and no model in DATA_DIR/model",
         setup=bert()),
    Case("bert_profile_without_bench", BENCH + " --init_checkpoint={tmp}/model --profile_steps=2",
         "error: --profile_steps: profiles the steps after a bench run: give --bench_steps=N too", 2,
         "--profile_steps alone", setup=bert(data=False)),
    Case("bert_bench_without_init_checkpoint", BENCH + " --bench_steps=2",
         "error: --init_checkpoint: missing: a bench run takes the model's shape from FOLDER/config.json "
         "(or DATA_DIR/model with --data_dir)", 2, "--bench_steps without a model to take the shape from"),
    Case("bert_bench_init_checkpoint_default", BENCH + " --data_dir={tmp}/d --bench_steps=2", None, 0,
         "--bench_steps with --data_dir and no --init_checkpoint: the model in DATA_DIR/model",
         setup=bert(model="d/model", data=False), check=printed("/d/model: 1 layers")),
    Case("bert_batch_not_divisible_by_ranks", MPIRUN + BERT.replace("--batch_size=2", "--batch_size=3"),
         re.compile(r"error: --batch_size: 3 windows do not split evenly over 2 ranks( \[rank [01]\])?"), 2,
         "a global batch of 3 on 2 ranks", setup=bert(), needs=("mpirun",), timeout_s=90),

    # ---------------------------------------------------------------- squad_generate
    Case("squad_generate_no_out", "{build}/bin/squad_generate", "error: --out: missing: the output folder", 2,
         "no output folder"),
    Case("squad_generate_no_wordnet", GENERATE + " --wordnet={tmp}/none",
         "error: {tmp}/none/data.noun: cannot open: No such file or directory", 2,
         "--wordnet names no folder (Debian wordnet-base not installed)"),
    Case("squad_generate_empty_wordnet", GENERATE + " --wordnet={tmp}/wn",
         "error: {tmp}/wn/data.noun: no usable synsets (want WordNet 3 data lines "
         "`offset lex type count words .. | gloss`)", 2, "a WordNet folder of empty files",
         setup=lambda t: [t.write("wn/data.noun", ""), t.write("wn/data.verb", "")] and None),
    Case("squad_generate_zero_questions", GENERATE + " --train_questions=0",
         "error: --train_questions: 0 is outside [1, 10000000]", 2, "no training questions"),
    Case("squad_generate_too_many_questions", GENERATE.replace("=10 ", "=100000 "),
         re.compile(r"error: --train_questions: 100000, but WordNet's synsets ran out after \d+ questions \(fewer "
                    r"--train_questions and --dev_questions, or fewer --entries\)"), 2,
         "more questions than WordNet has (about 71,000; the count depends on the WordNet version)"),
    Case("squad_generate_entries_out_of_range", GENERATE + " --entries=1",
         "error: --entries: 1 is outside [2, 8]", 2, "one synset a paragraph (no distractors)"),
    Case("squad_generate_out_exists", GENERATE, "error: {tmp}/gen/train-v1.1.json: already exists; remove it first",
         2, "--out holds a generated set already", setup=lambda t: t.write("gen/train-v1.1.json", "{}") and None),
]
