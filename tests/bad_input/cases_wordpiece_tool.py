"""Bad input of build/bin/wordpiece_tool (language/wordpiece.c): a missing
flag or file, vocabulary files that are not a BERT vocab.txt, and what it
accepts by design (bytes that are not UTF-8 in the text, "[SEP]" as text)."""
from case import Case

SPECIAL = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n"
TOOL = "{build}/bin/wordpiece_tool --vocab={tmp}/vocab.txt --input={tmp}/text.txt --offsets"


def files(vocab, text="caf\u00e9\n"):
    """A setup writing {tmp}/vocab.txt and {tmp}/text.txt (text or bytes)."""
    def setup(t):
        for name, content in (("vocab.txt", vocab), ("text.txt", text)):
            t.write(name, content)
    return setup


def printed(want):
    """A check: stdout is exactly want."""
    return lambda t, proc: None if proc.stdout == want else f"printed {proc.stdout!r}, want {want!r}"


CASES = [
    Case("wordpiece_tool_no_vocab_flag", "{build}/bin/wordpiece_tool --input={tmp}/text.txt",
         "error: --vocab: required (the vocabulary, vocab.txt)", 2,
         "the vocabulary left out", setup=files(SPECIAL)),
    Case("wordpiece_tool_missing_vocab", "{build}/bin/wordpiece_tool --vocab={tmp}/none.txt",
         "error: {tmp}/none.txt: cannot open: No such file or directory", 2,
         "a vocabulary path that names no file"),
    Case("wordpiece_tool_missing_text", "{build}/bin/wordpiece_tool --vocab={tmp}/vocab.txt --input={tmp}/none.txt",
         "error: {tmp}/none.txt: cannot open: No such file or directory", 2,
         "a text path that names no file", setup=files(SPECIAL)),
    Case("wordpiece_tool_empty_vocab", TOOL,
         "error: {tmp}/vocab.txt: empty file (a vocabulary has one token per line)", 2,
         "an empty vocabulary file (a failed download)", setup=files("")),
    Case("wordpiece_tool_vocab_token_twice", TOOL,
         "error: {tmp}/vocab.txt:6: token 'cafe' repeats line 5", 2,
         "a token on two lines: two ids for one token", setup=files(SPECIAL + "cafe\ncafe\n")),
    Case("wordpiece_tool_vocab_not_utf8", TOOL,
         "error: {tmp}/vocab.txt:5: invalid UTF-8 at byte 4 of the line", 2,
         "a Latin-1 vocabulary", setup=files(SPECIAL.encode() + b"caf\xe9\n")),
    Case("wordpiece_tool_vocab_nul_byte", TOOL,
         "error: {tmp}/vocab.txt:5: a NUL byte at byte 4 of the line (not a text file?)", 2,
         "a NUL inside a token (once kept, so that the token's text read back cut short at the NUL; found by "
         "tests/fuzz's wordpiece target)", setup=files(SPECIAL.encode() + b"caf\0e\n")),
    Case("wordpiece_tool_vocab_empty_line", TOOL,
         "error: {tmp}/vocab.txt:5: empty line (each line of a vocabulary is one token)", 2,
         "a blank line inside the vocabulary would shift every id after it",
         setup=files(SPECIAL + "\ncafe\n")),
    Case("wordpiece_tool_vocab_without_unk", TOOL,
         "error: {tmp}/vocab.txt: no [UNK] token (a BERT vocabulary holds [PAD], [UNK], [CLS] and [SEP])", 2,
         "a vocabulary that is not BERT's (a subword or BPE vocabulary)",
         setup=files("[PAD]\n[CLS]\n[SEP]\ncafe\n")),
    Case("wordpiece_tool_text_not_utf8", TOOL, None, 0,
         "a byte that is not UTF-8 in the text reads as U+FFFD, which the tokeniser drops",
         setup=files(SPECIAL + "cafe\n", b"caf\xc3\xa9\xff cafe\n"), check=printed("4:0:5 4:7:11\n")),
    Case("wordpiece_tool_special_token_in_text", TOOL, None, 0,
         "\"[SEP]\" in the text is text (\"[\", \"sep\", \"]\"), never a separator",
         setup=files(SPECIAL + "sep\n", "[SEP]\n"), check=printed("1:0:1 4:1:4 1:4:5\n")),
]
