"""Bad input of build/bin/squad_score (language/squad_eval.c): missing and
broken files, missing or mistyped fields, and what it accepts as the
official SQuAD v1.1 evaluation does (unanswered questions score 0 with a
warning, predictions for unknown ids are ignored, another version is a
warning).

The good pair: one paragraph, questions q1 (gold "the cat") and q2 (golds
"sat", "sat down"); predictions q1 "Cat", q2 "sat". A row's setup writes
the pair with change(data, preds) applied to the parsed JSON, or one side
as raw text."""
import copy
import json

from case import Case

SCORE = "{build}/bin/squad_score --data={tmp}/dev.json --predictions={tmp}/pred.json"
DATA = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{
    "context": "The cat sat down.",
    "qas": [{"id": "q1", "question": "Who?", "answers": [{"text": "the cat", "answer_start": 0}]},
            {"id": "q2", "question": "What?", "answers": [{"text": "sat", "answer_start": 8},
                                                         {"text": "sat down", "answer_start": 8}]}]}]}]}
PREDS = {"q1": "Cat", "q2": "sat"}


def pair(change=None, data_text=None, preds_text=None):
    """A setup: the good pair, change(data, preds) applied first; a text
    given replaces that side whole."""
    def setup(t):
        data, preds = copy.deepcopy(DATA), copy.deepcopy(PREDS)
        if change:
            change(data, preds)
        t.write("dev.json", data_text if data_text is not None else json.dumps(data))
        t.write("pred.json", preds_text if preds_text is not None else json.dumps(preds))
    return setup


def printed(want):
    def check(t, proc):
        return None if proc.stdout.strip() == want else f"printed {proc.stdout.strip()!r}, want {want!r}"
    return check


def qa(data, i):
    return data["data"][0]["paragraphs"][0]["qas"][i]


CASES = [
    Case("squad_score_good_pair", SCORE, None, 0, "both questions right",
         setup=pair(), check=printed('{"exact_match": 100.0, "f1": 100.0}')),
    Case("squad_score_no_data_flag", "{build}/bin/squad_score --predictions={tmp}/pred.json",
         "error: --data: missing: the SQuAD v1.1 JSON file", 2, "--data left out", setup=pair()),
    Case("squad_score_missing_predictions", "{build}/bin/squad_score --data={tmp}/dev.json "
         "--predictions={tmp}/none.json", "error: {tmp}/none.json: cannot open: No such file or directory", 2,
         "a predictions file that is not there", setup=pair()),
    Case("squad_score_data_not_json", SCORE, "error: {tmp}/dev.json: not valid JSON (at byte 9)", 2,
         "a truncated data set", setup=pair(data_text='{"data": [')),
    Case("squad_score_predictions_trailing_text", SCORE,
         "error: {tmp}/pred.json: not valid JSON (at byte 14)", 2, "two JSON values in one file",
         setup=pair(preds_text='{"q1": "Cat"} {}')),
    Case("squad_score_predictions_not_object", SCORE,
         "error: {tmp}/pred.json: not a JSON object of question id -> answer text", 2,
         "a list of answers instead of an id -> answer object", setup=pair(preds_text='["Cat", "sat"]')),
    Case("squad_score_prediction_not_string", SCORE,
         'error: {tmp}/pred.json: the prediction for "q2" is not a string', 2,
         "an answer given as a list (n-best output) instead of its text",
         setup=pair(lambda d, p: p.update(q2=["sat", "sat down"]))),
    Case("squad_score_no_data_array", SCORE,
         'error: {tmp}/dev.json: the top level: "data" missing or not an array', 2,
         "a predictions file given as the data set", setup=pair(data_text='{"q1": "Cat"}')),
    Case("squad_score_no_qas", SCORE,
         'error: {tmp}/dev.json: data[0].paragraphs[0]: "qas" missing or not an array', 2,
         "a paragraph without questions",
         setup=pair(lambda d, p: d["data"][0]["paragraphs"][0].pop("qas"))),
    Case("squad_score_id_not_string", SCORE,
         'error: {tmp}/dev.json: data[0].paragraphs[0].qas[1]: "id" missing or not a string', 2,
         "a numeric question id", setup=pair(lambda d, p: qa(d, 1).update(id=2))),
    Case("squad_score_answer_without_text", SCORE,
         'error: {tmp}/dev.json: data[0].paragraphs[0].qas[1].answers[1]: "text" missing or not a string', 2,
         "a gold answer without its text", setup=pair(lambda d, p: qa(d, 1)["answers"][1].pop("text"))),
    Case("squad_score_no_gold_answer", SCORE,
         "error: {tmp}/dev.json: data[0].paragraphs[0].qas[0] (id q1): no gold answer", 2,
         "a SQuAD 2.0 unanswerable question (the v1.1 script fails on it)",
         setup=pair(lambda d, p: qa(d, 0).update(answers=[]))),
    Case("squad_score_unanswered_scores_zero", SCORE, None, 0,
         "a question without a prediction counts, with 0 (a warning names it)",
         setup=pair(lambda d, p: p.pop("q2")),
         check=lambda t, proc: printed('{"exact_match": 50.0, "f1": 50.0}')(t, proc) or (
             None if "warning: unanswered question q2 will receive score 0" in proc.stderr
             else f"no warning in {proc.stderr!r}")),
    Case("squad_score_unknown_id_ignored", SCORE, None, 0,
         "a prediction for a question the data set lacks is ignored",
         setup=pair(lambda d, p: p.update(q9="anything")), check=printed('{"exact_match": 100.0, "f1": 100.0}')),
    Case("squad_score_other_version_warns", SCORE, None, 0,
         "a data set of another version is scored, with a warning",
         setup=pair(lambda d, p: d.update(version="2.0")),
         check=lambda t, proc: None if "expects version 1.1, the file says 2.0" in proc.stderr
         else f"no warning in {proc.stderr!r}"),
]
