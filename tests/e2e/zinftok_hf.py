"""Helper of tests/e2e/zinftok_hf.sh and tests/bench/bench_tokenize.sh:
builds a several-MB corpus from files every Debian machine has plus
generated text, trains small but real tokenizers with the `tokenizers`
library in the three styles zinftok supports, and compares zinftok's
token files and decodings with the library's.

  python zinftok_hf.py corpus DIR [MB]        -> DIR/doc-NNN.txt, one document each
  python zinftok_hf.py train DIR DOC...       -> DIR/{gpt2,llama3,llama2,metaspace}.json
  python zinftok_hf.py verify TOK BIN DECODED [--bos T] [--eos T] [--no-bos] [--roundtrip exact|space] DOC...
        the library's ids of each document (its post-processor, or the
        tokens given) against zinftok's token file BIN; zinftok's decoding
        DECODED of BIN against the library's; with --roundtrip, DECODED
        against the documents themselves
  python zinftok_hf.py decode-ids TOK IDS OUT
        what `zinftok --decode` should print for the ids in IDS: the runs
        between special tokens through the library's decode
  python zinftok_hf.py speed TOK DOC...       the library's single-threaded encode speed
"""
import json
import os
import random
import re
import struct
import sys
import time
import unicodedata

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402

LLAMA3_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
SPECIALS_IN_TEXT = ["<|endoftext|>", "[MASK]", " [MASK] ", "<s>", "</s>", "<|begin_of_text|>", "<|eot_id|>",
                    "<sw>", "a<sw>b", " <sw> ", "zinfword", "xzinfwordy", "hello world", "Hello world"]


def read_doc(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


# ---- corpus ----

def gen_words(rng):
    scripts = [
        "àéîõüçñßøåæœ ÀÉÎÕÜÇÑ", "αβγδεζηθικλμνξοπρστυφχψω ΑΒΓΔ", "абвгдеёжзийклмнопрстуфхцчшщъыьэюя АБВ",
        "אבגדהוזחטיכלמנסעפצקרשת", "ابتثجحخدذرزسشصضطظعغفقكلمنهوي", "अआइईउऊऋएऐओऔकखगघचछजझ", "กขคฆงจฉชซญฎฏฐ",
        "的一是不了人我在有他这为之大来以个中上们", "가나다라마바사아자차카타파하", "あいうえおかきくけこアイウエオ",
        "ÿþ€£¥©®°±µ¶·¿×÷", "ﬁﬂǅǈǋ", "ᴀʙᴄᴅ", "ŉĸſ",
    ]
    marks = "\u0301\u0308\u0327\u0331\u20dd"
    words = []
    for _ in range(300):
        s = rng.choice(scripts).replace(" ", "")
        w = "".join(rng.choice(s) for _ in range(rng.randint(1, 9)))
        if rng.random() < 0.15:
            w = w[:1] + rng.choice(marks) + w[1:]
        words.append(w)
    words += ["don't", "DON'T", "it'S", "we'Ve", "they'LL", "I'M", "you'D", "'ſ", "x'ſtop", "l'amour", "''s", "'re'", "'LL'",
              "O'Neil's", "rock'n'roll", "’s", "can’t", "🙂", "👍🏽", "👨‍👩‍👧", "🇩🇪", "❤️", "Ⅻ", "①②③", "½¾", "١٢٣٤٥",
              "１２３", "٣.١٤", "x²", "H₂O", "ⓐⓑ", "Ⓐ", "_under_score_", "snake_case", "CamelCase", "e.g.", "i.e.",
              "http://example.org/a?b=c&d=e", "foo@bar.baz", "$100", "50%", "#1", "C++", "--option", "...", "!!!", "?!",
              "—", "–", "«quote»", "„Zitat“", "「括弧」", "(paren)", "[bracket]", "{brace}", "<angle>", "a/b\\c",
              "\u200b", "\u200d", "\ufeff", "\u00ad", "\u2060", "\x7f", "\x01", "\x1c", "\x1f", "\u0085"]
    return words


WS = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ", " \n ", "\t\n",
      "\u00a0", "\u3000", "\u2028", "\u2029", "\x0b", "\x0c", "\x85", "\u1680", "\u2003", "\u202f", "\u205f",
      "\u180e", "\x1c", "    ", "        ", " \u00a0 ", "\n\u3000"]


def gen_mixed(rng, size):
    words = gen_words(rng)
    out, n = [], 0
    while n < size:
        r = rng.random()
        if r < 0.55:
            piece = rng.choice(words)
        elif r < 0.75:
            piece = rng.choice(WS)
        elif r < 0.85:
            piece = str(rng.randint(0, 10 ** rng.randint(1, 30)))
        elif r < 0.9:
            piece = rng.choice(SPECIALS_IN_TEXT)
        else:
            piece = rng.choice(["the", "of", "and", "to", "in", "is", "The", "software", "License", "GNU"])
        out.append(piece)
        if rng.random() < 0.7:
            out.append(" ")
        n += len(piece) + 1
    return "".join(out)


def gen_codepoints(rng):
    """Every assigned code point below U+3000 and a sample above, in
    contexts that exercise the letter/number/space classes of the regexes."""
    parts = []
    for cp in range(0x20, 0x30000):
        if 0xD800 <= cp < 0xE000:
            continue
        cat = unicodedata.category(chr(cp))
        if cat in ("Cn", "Co", "Cs"):
            continue
        if cp >= 0x3000 and cp % 7:
            continue
        c = chr(cp)
        form = rng.randrange(6)
        parts.append([f"x{c}y ", f" {c}{c}1", f"'{c}{c} ", f"1{c}2 ", f"{c} \n", f" {c}a "][form])
    return "".join(parts)


def gen_digits_ws(rng, size):
    out, n = [], 0
    while n < size:
        r = rng.random()
        if r < 0.3:
            s = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 30)))
        elif r < 0.45:
            s = rng.choice(["12ab34", "a1b2c3", "3.14159", "1,000,000", "2024-05-20", "0x1F", "v1.2.3", "٣٤٥6", "१२३"])
        elif r < 0.8:
            s = "".join(rng.choice(WS) for _ in range(rng.randint(1, 6)))
        else:
            s = rng.choice(["word", "Wort", "mot", "!", "?", ".", ",", ";", "'s", "'", "-", "\n", "x"])
        out.append(s)
        n += len(s)
    return "".join(out)


def gen_bad_utf8(rng, text):
    bad = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf0\x9f", b"\xf5", b"\xff",
           b"\xf4\x90\x80\x80", b"\xe0\x80\xaf", b"\xc3\x28", b"\xf0\x9f\x99"]
    data = text.encode("utf-8")
    out = bytearray()
    for i in range(0, len(data), 97):
        out += data[i:i + 97]
        if rng.random() < 0.5:
            out += rng.choice(bad)
    return bytes(out)


def cmd_corpus(outdir, mb=4.0):
    os.makedirs(outdir, exist_ok=True)
    rng = random.Random(20240520)
    docs = []
    seen = set()
    lic = "/usr/share/common-licenses"
    if os.path.isdir(lic):
        for name in sorted(os.listdir(lic)):
            p = os.path.realpath(os.path.join(lic, name))
            if p in seen or not os.path.isfile(p):
                continue
            seen.add(p)
            docs.append(open(p, "rb").read())
    budget = int(mb * 1e6)
    # /usr/share/doc/*/copyright, concatenated into documents of ~200 kB
    cur = bytearray()
    total = sum(len(d) for d in docs)
    root = "/usr/share/doc"
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    for name in names:
        p = os.path.join(root, name, "copyright")
        if not os.path.isfile(p) or total > budget * 0.6:
            continue
        rp = os.path.realpath(p)
        if rp in seen:
            continue
        seen.add(rp)
        data = open(p, "rb").read()
        cur += data
        total += len(data)
        if len(cur) > 200_000:
            docs.append(bytes(cur))
            cur = bytearray()
    if cur:
        docs.append(bytes(cur))
    # generated text
    for k in range(4):
        docs.append(gen_mixed(rng, 150_000).encode("utf-8"))
    docs.append(gen_codepoints(rng).encode("utf-8"))
    docs.append(gen_digits_ws(rng, 200_000).encode("utf-8"))
    docs.append(gen_bad_utf8(rng, gen_mixed(rng, 50_000)))
    if docs:
        docs.append(docs[0].replace(b"\n", b"\r\n"))  # CRLF line endings
    docs += [b"", b"<|endoftext|>", b" starts with a space", b"\r\n", b"<s>", b"[MASK]", b"   ", b"'s", b"x"]
    while sum(len(d) for d in docs) < budget:
        docs.append(gen_mixed(rng, 200_000).encode("utf-8"))
    for i, d in enumerate(docs):
        with open(os.path.join(outdir, "doc-%03d.txt" % i), "wb") as f:
            f.write(d)
    print("corpus: %d documents, %.1f MB in %s" % (len(docs), sum(len(d) for d in docs) / 1e6, outdir))


# ---- tokenizers ----

def train_text(docs):
    for p in docs:
        yield read_doc(p)


def train_gpt2(docs, out):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tr = trainers.BpeTrainer(vocab_size=4000, special_tokens=["<|endoftext|>"], show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_text(docs), tr)
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("<sw>", single_word=True, normalized=False), AddedToken("zinfword", normalized=True)])
    tok.save(out)


def train_llama3(docs, out):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_RE), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=4000, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_text(docs), tr)
    j = json.loads(tok.to_str())
    # More than 65536 ids, as real Llama-3 has (128256): reserved tokens no
    # merge reaches, then the special tokens above them.
    vocab = j["model"]["vocab"]
    for i in range(len(vocab), 70000):
        vocab["<|reserved_%d|>" % i] = i
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    j["added_tokens"] = [{"id": 70000 + k, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for k, s in enumerate(specials)]
    j["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [70000], "tokens": ["<|begin_of_text|>"]}}}]}
    with open(out, "w") as f:
        json.dump(j, f, ensure_ascii=False)


def train_llama2(docs, out, out_metaspace):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tr = trainers.BpeTrainer(vocab_size=4000, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=200,
                             show_progress=False)
    tok.train_from_iterator(train_text(docs), tr)
    j = json.loads(tok.to_str())
    old = j["model"]["vocab"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = 3 + b
    for t, _ in sorted(old.items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    j["model"]["vocab"] = vocab
    # merges as [a, b] pairs here, "a b" strings in the GPT-2 file
    j["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in j["model"]["merges"]]

    def special(i, s):
        return {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                "special": True}
    j["added_tokens"] = [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>"),
                         {"id": len(vocab), "content": "hello world", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": True, "special": False}]
    j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                           {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    j["pre_tokenizer"] = None
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    j["post_processor"] = {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    with open(out, "w") as f:
        json.dump(j, f, ensure_ascii=False)
    # The same vocabulary as the Metaspace pre-tokenizer of newer conversions.
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    j["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    j["added_tokens"] = j["added_tokens"][:3]
    with open(out_metaspace, "w") as f:
        json.dump(j, f, ensure_ascii=False)


def cmd_train(outdir, docs):
    t0 = time.time()
    train_gpt2(docs, os.path.join(outdir, "gpt2.json"))
    train_llama3(docs, os.path.join(outdir, "llama3.json"))
    train_llama2(docs, os.path.join(outdir, "llama2.json"), os.path.join(outdir, "metaspace.json"))
    print("trained 4 tokenizers in %.1f s" % (time.time() - t0))


# ---- comparisons ----

def read_bin(path):
    with open(path, "rb") as f:
        data = f.read()
    h = struct.unpack("<256i", data[:1024])
    assert h[0] == 20240520, "bad magic"
    width = {1: 2, 2: 4}[h[1]]
    n = h[2]
    assert len(data) == 1024 + width * n, "size"
    ids = struct.unpack("<%d%s" % (n, "H" if width == 2 else "I"), data[1024:])
    return h, list(ids)


def reference_ids(tok, docs, bos, eos, no_bos):
    ids, spans = [], []
    for p in docs:
        text = read_doc(p)
        if bos is None and eos is None and not no_bos:
            doc = tok.encode(text).ids
        else:
            doc = tok.encode(text, add_special_tokens=False).ids
            pre = [] if no_bos else ([tok.token_to_id(bos)] if bos else None)
            if pre is None:  # keep the template's prefix
                full = tok.encode(text).ids
                pre = full[:len(full) - len(doc)] if len(full) > len(doc) else []
            doc = pre + doc + ([tok.token_to_id(eos)] if eos else [])
        spans.append((p, len(ids), len(doc)))
        ids += doc
    return ids, spans


def parse_flags(args):
    f = {"bos": None, "eos": None, "no_bos": False, "roundtrip": None, "docs": []}
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--bos", "--eos", "--roundtrip"):
            f[a[2:]] = args[i + 1]
            i += 2
        elif a == "--no-bos":
            f["no_bos"] = True
            i += 1
        else:
            f["docs"].append(a)
            i += 1
    return f


def runs_decode(tok, ids):
    """What `zinftok --decode` prints: the runs of ids between special
    tokens through the library's decode, the special tokens as their text."""
    special = {i for i, t in tok.get_added_tokens_decoder().items() if t.special}
    parts, run = [], []
    for x in list(ids) + [None]:
        if x is None or x in special:
            if run:
                parts.append(tok.decode(run, skip_special_tokens=False))
                run = []
            if x is not None:
                parts.append(tok.id_to_token(x))
        else:
            run.append(x)
    return "".join(parts)


def cmd_verify(tokpath, binpath, decpath, args):
    """zinftok's ids against the library's, its decoding against the
    library's decoding of the same ids, and (--roundtrip exact|space) the
    decoding against the documents themselves."""
    f = parse_flags(args)
    docs = f["docs"]
    tok = Tokenizer.from_file(tokpath)
    name = os.path.basename(tokpath)
    t0 = time.time()
    want, spans = reference_ids(tok, docs, f["bos"], f["eos"], f["no_bos"])
    secs = time.time() - t0
    h, got = read_bin(binpath)
    vocab = tok.get_vocab_size()
    if h[3] != vocab:
        print("FAIL %s: header vocabulary %d, the library says %d" % (name, h[3], vocab))
        return 1
    if (h[1] == 2) != (vocab > 65536):
        print("FAIL %s: version %d for a vocabulary of %d" % (name, h[1], vocab))
        return 1
    mism = sum(1 for a, b in zip(want, got) if a != b) + abs(len(want) - len(got))
    if mism:
        k = next((j for j, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
        doc = next((s for s in spans if s[1] <= k < s[1] + s[2]), spans[-1])
        print("FAIL %s: %d ids from zinftok, %d from tokenizers, %d mismatches; first at %d (%s, token %d of the document)"
              % (name, len(got), len(want), mism, k, doc[0], k - doc[1]))
        lo = max(0, k - 5)
        print("  tokenizers: %s" % [tok.id_to_token(x) for x in want[lo:k + 6]])
        print("  zinftok:    %s" % [tok.id_to_token(x) if x < vocab else x for x in got[lo:k + 6]])
        return 1
    nbytes = sum(os.path.getsize(p) for p in docs)
    print("ok %s: %d tokens of %d documents (%.1f MB, %d-bit ids) compared with tokenizers %s: 0 mismatches "
          "(the library took %.2f s)" % (name, len(want), len(docs), nbytes / 1e6, 16 if h[1] == 1 else 32,
                                          __import__("tokenizers").__version__, secs))
    dec = open(decpath, "rb").read().decode("utf-8")
    lib = runs_decode(tok, got)
    if dec != lib:
        k = next((j for j, (a, b) in enumerate(zip(dec, lib)) if a != b), min(len(dec), len(lib)))
        print("FAIL %s: zinftok --decode differs from the library's decoding at character %d: %r vs %r"
              % (name, k, dec[max(0, k - 20):k + 20], lib[max(0, k - 20):k + 20]))
        return 1
    print("ok %s: zinftok --decode equals the library's decoding (%d characters)" % (name, len(dec)))
    if f["roundtrip"]:
        # added tokens with lstrip/rstrip take the White_Space beside them
        ws = "[\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*"
        strip = [(re.compile((ws if t.lstrip else "") + re.escape(t.content) + (ws if t.rstrip else "")), t.content)
                 for t in tok.get_added_tokens_decoder().values() if t.lstrip or t.rstrip]
        parts = []
        for p, start, n in spans:
            text = read_doc(p)
            for r, c in strip:
                text = r.sub(c, text)
            if f["roundtrip"] == "space":
                text = text.replace("\u2581", " ")
            ids = got[start:start + n]
            enc = tok.encode(read_doc(p), add_special_tokens=False).ids
            # the framing tokens: what precedes and follows the document's own ids
            k = next((j for j in range(len(ids) - len(enc) + 1) if ids[j:j + len(enc)] == enc), 0)
            frame = lambda xs: "".join(tok.id_to_token(x) for x in xs)
            parts.append(frame(ids[:k]) + text + frame(ids[k + len(enc):]))
        want_text = "".join(parts)
        if dec != want_text:
            k = next((j for j, (a, b) in enumerate(zip(dec, want_text)) if a != b), min(len(dec), len(want_text)))
            print("FAIL %s: the round trip differs from the documents at character %d: %r vs %r"
                  % (name, k, dec[max(0, k - 20):k + 20], want_text[max(0, k - 20):k + 20]))
            return 1
        print("ok %s: decode(encode(documents)) gives the documents back%s" %
              (name, " (U+2581 as a space)" if f["roundtrip"] == "space" else ""))
    return 0


def cmd_decode_ids(tokpath, idsfile, out):
    tok = Tokenizer.from_file(tokpath)
    ids = [int(x) for x in open(idsfile).read().split()]
    with open(out, "wb") as f:
        f.write(runs_decode(tok, ids).encode("utf-8"))
    return 0


def cmd_speed(tokpath, docs):
    tok = Tokenizer.from_file(tokpath)
    texts = [read_doc(p) for p in docs]
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    best = None
    for _ in range(2):
        t0 = time.perf_counter()
        n = 0
        for t in texts:
            n += len(tok.encode(t).ids)
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best
    print("%.3f %d %d" % (best, nbytes, n))
    return 0


def main(argv):
    cmd = argv[1]
    if cmd == "corpus":
        cmd_corpus(argv[2], float(argv[3]) if len(argv) > 3 else 4.0)
        return 0
    if cmd == "train":
        cmd_train(argv[2], argv[3:])
        return 0
    if cmd == "verify":
        return cmd_verify(argv[2], argv[3], argv[4], argv[5:])
    if cmd == "decode-ids":
        return cmd_decode_ids(argv[2], argv[3], argv[4])
    if cmd == "speed":
        return cmd_speed(argv[2], argv[3:])
    print("unknown command", cmd)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
