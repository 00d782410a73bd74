#!/usr/bin/env python3
"""emucc.py: the compiler `make EMU=1` uses in place of nvcc.

Takes nvcc-style arguments (-c FILE.cu -o OBJ plus -I/-D/-O/-M flags),
rewrites the .cu file's kernel launches and shared memory into the calls of
tests/emu/emu.h, and compiles the result as C++ with the host compiler. The
rewrite keeps every line where it was (a #line directive names the original
file), so errors and debuggers point into the .cu file.

The result is compiled with ThreadSanitizer's instrumentation but without
its runtime: the hooks every load and store calls are the emulator's
shared-memory race check (emu_shared.cpp). Not with AddressSanitizer
(EMU_ASAN=1), which GCC cannot combine with it.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
IDENT = re.compile(r"[A-Za-z0-9_:]")


def callee_start(text, end):
    """Start of the kernel expression ending just before text[end]:
    an identifier (with ::), optionally followed by <template arguments>."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    if i > 0 and text[i - 1] == ">":
        depth = 0
        while i > 0:
            i -= 1
            if text[i] == ">":
                depth += 1
            elif text[i] == "<":
                depth -= 1
                if depth == 0:
                    break
        while i > 0 and text[i - 1].isspace():
            i -= 1
    while i > 0 and IDENT.match(text[i - 1]):
        i -= 1
    return i


def matching_paren(text, open_at):
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise SyntaxError("unbalanced parentheses after a kernel launch")


def rewrite_each(text, token, replace):
    """Replaces each `token` outside a // comment (in one, it stays as
    written): replace(at) gives (start, end, replacement) for text[start:end]."""
    out, pos = [], 0
    while True:
        at = text.find(token, pos)
        if at < 0:
            out.append(text[pos:])
            return "".join(out)
        line_start = text.rfind("\n", 0, at) + 1
        if "//" in text[line_start:at]:
            out.append(text[pos:at + len(token)])
            pos = at + len(token)
            continue
        start, end, replacement = replace(at)
        out.append(text[pos:start])
        out.append(replacement)
        pos = end


def rewrite_launches(text, path):
    def launch(at):
        start = callee_start(text, at)
        callee = text[start:at]
        name = re.sub(r"\s+", "", callee)
        if not name:
            raise SyntaxError(f"{path}: a launch without a kernel name")
        close = text.find(">>>", at)
        config = text[at + 3:close]
        paren = close + 3
        while text[paren].isspace():
            paren += 1
        if text[paren] != "(":
            raise SyntaxError(f"{path}: no argument list after a launch of {name}")
        end = matching_paren(text, paren)
        args = text[paren:end + 1]
        # The arguments are evaluated now, into a tuple, as a launch does;
        # the kernel runs later, from the queue. Newlines of the original
        # stay inside the replacement.
        return start, end + 1, (
            f'emu::launch("{name}", [emu_args = std::make_tuple{args}]() {{ '
            f'std::apply([](auto... emu_a) {{ {callee}(emu_a...); }}, emu_args); }}, {config})')
    return rewrite_each(text, "<<<", launch)


SHARED = re.compile(r"extern\s+__shared__\s+([A-Za-z_][\w: <>]*?)\s+(\w+)\s*\[\s*\]\s*;")
DIMS = r"((?:\[[^\[\]]*\]\s*)*)"  # [N][M]...
FIRST_DECLARATOR = re.compile(r"\s*(.+?[\w>*&])\s*\b([A-Za-z_]\w*)\s*" + DIMS, re.S)
NEXT_DECLARATOR = re.compile(r"\s*([A-Za-z_]\w*)\s*" + DIMS, re.S)


def split_declarators(decl):
    """Splits at the commas outside brackets: `T a[N], b[M]` into two."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(decl):
        if c in "<([":
            depth += 1
        elif c in ">)]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(decl[start:i])
            start = i + 1
    return parts + [decl[start:]]


def rewrite_static_shared(text, path):
    """`__shared__ T a[N], b;` becomes references into the emulator's
    shared-memory arena, placed the first time the declaration runs (still
    one copy per kernel, as a function static), so that the race check
    can tell shared memory by its address and name each variable."""
    def declaration(at):
        end = text.find(";", at)
        decl = text[at + len("__shared__"):end]
        parts = split_declarators(decl)
        first = FIRST_DECLARATOR.fullmatch(parts[0])
        if end < 0 or not first:
            raise SyntaxError(f"{path}: a __shared__ declaration emucc cannot read: "
                              f"{decl.strip()}")
        type_name = first.group(1).strip()
        names = [(first.group(2), first.group(3))]
        for part in parts[1:]:
            m = NEXT_DECLARATOR.fullmatch(part)
            if not m:
                raise SyntaxError(f"{path}: a __shared__ declarator emucc cannot read: "
                                  f"{part.strip()}")
            names.append((m.group(1), m.group(2)))
        places = [f'static auto &{name} = '
                  f'emu::shared_static<{type_name}{"".join(dims.split())}>("{name}");'
                  for name, dims in names]
        return at, end + 1, " ".join(places) + "\n" * decl.count("\n")
    return rewrite_each(text, "__shared__", declaration)


def rewrite(text, path):
    text = SHARED.sub(lambda m: f"{m.group(1)} *{m.group(2)} = ({m.group(1)} *)emu::dynamic_shared();",
                      text)
    return rewrite_launches(rewrite_static_shared(text, path), path)


def write_rewritten(path, source, text):
    """Writes atomically: a compile killed midway leaves no half file."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    part = f"{path}.{os.getpid()}"
    with open(part, "w") as f:
        f.write(f'#line 1 "{source}"\n' + text)
    os.replace(part, path)


def main(argv):
    args, source, out = [], None, None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-o":
            out = argv[i + 1]
            i += 2
            continue
        if a.endswith(".cu"):
            source = a
        elif a.startswith("-gencode") or a.startswith("-arch"):
            i += 2 if a in ("-gencode", "-arch") else 1
            continue
        elif a == "-Xcompiler":
            args += argv[i + 1].split(",")
            i += 2
            continue
        else:
            args.append(a)
        i += 1
    if not source or not out:
        sys.exit("emucc.py: needs -c FILE.cu -o OBJ")
    with open(source) as f:
        text = f.read()
    try:
        rewritten = rewrite(text, source)
    except SyntaxError as e:
        sys.exit(f"emucc.py: {source}: {e}")
    # Under the source's own name, in a folder beside the object: the few
    # line-table entries GCC gives the compiled file's name rather than the
    # #line one then still name the .cu (the race check's reports print
    # basenames). The folder is this object's alone: `make -j` compiles the
    # folder's other .cu files at the same time, and a shared folder had
    # one compile replace the headers another was reading (GCC then saw
    # one header under two timestamps, and #pragma once let it in twice).
    rewritten_dir = os.path.join(os.path.dirname(out), "emucc",
                                 os.path.splitext(os.path.basename(source))[0])
    os.makedirs(rewritten_dir, exist_ok=True)
    tmp = os.path.join(rewritten_dir, os.path.basename(source))
    write_rewritten(tmp, source, rewritten)
    # The .cuh headers may launch kernels too: rewritten copies go beside
    # the rewritten source, where #include "x.cuh" (a header beside the
    # source) looks first, and under their path in common/ below that
    # folder, which -iquote puts before common/ (#include "ops/cuda.cuh").
    src_dir = os.path.dirname(source) or "."
    headers = [(name, os.path.join(src_dir, name)) for name in sorted(os.listdir(src_dir))
               if name.endswith(".cuh")]
    common = os.path.join(os.path.dirname(os.path.dirname(HERE)), "common")
    for folder, _, names in sorted(os.walk(common)):
        headers += [(os.path.relpath(os.path.join(folder, name), common), os.path.join(folder, name))
                    for name in sorted(names) if name.endswith(".cuh")]
    originals = {os.path.normpath(tmp): source}
    for name, header in headers:
        with open(header) as f:
            write_rewritten(os.path.join(rewritten_dir, name), header, rewrite(f.read(), header))
        originals[os.path.normpath(os.path.join(rewritten_dir, name))] = header
    cxx = os.environ.get("CXX", "g++")
    asan = any(a.startswith("-fsanitize=") and "address" in a for a in args)
    racecheck = [] if asan else ["-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0"]
    cmd = [cxx, "-x", "c++", "-include", os.path.join(HERE, "emu.h"), "-I", HERE,
           "-iquote", rewritten_dir, "-iquote", os.path.dirname(source) or ".", "-ffp-contract=off", "-Wno-unknown-pragmas",
           "-Wno-subobject-linkage"] + racecheck + args + ["-c", tmp, "-o", out]
    depfile = out[:-2] + ".d" if "-MMD" in args else None
    if depfile:
        cmd += ["-MT", out, "-MF", depfile]
    status = subprocess.call(cmd)
    if status == 0 and depfile:
        depend_on_originals(depfile, originals)
    sys.exit(status)


def depend_on_originals(depfile, originals):
    """GCC's dependency file names the rewritten copies, which every compile
    writes anew: make would then neither rebuild the object when a .cuh
    changes nor find the copy of a source whose folder was removed. Each
    copy's name becomes its original's."""
    with open(depfile) as f:
        lines = f.read().split("\n")
    def original(word):  # a prerequisite, or the target of a -MP line
        colon = ":" if word.endswith(":") else ""
        path = word[:len(word) - len(colon)]
        return originals.get(os.path.normpath(path), path) + colon if path else word
    lines = [" ".join(original(word) for word in line.split(" ")) for line in lines]
    with open(depfile, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
