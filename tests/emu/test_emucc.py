"""tests/emu/emucc.py: the rewrite of kernel launches and shared memory
that lets the .cu files compile against the CPU emulation of CUDA.
Each form the project uses (template kernels, launches over several lines,
dim3 configurations, arguments with nested calls) becomes one emu::launch
call with the lines kept; launches in comments and other code stay as
written. Each form of __shared__ declaration the project uses becomes a
place in the emulator's shared-memory arena."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "emu"))
import emucc  # noqa: E402

failures = 0


def case(name, got, want):
    global failures
    if got == want:
        print("PASS %s" % name)
    else:
        print("FAIL %s: got %r, want %r" % (name, got, want))
        failures += 1


def rewrite(text):
    return emucc.rewrite(text, "t.cu")


def launch(name, callee, args, config):
    """What a launch becomes: the arguments evaluated into a tuple at once,
    the kernel called with them when the queue runs it."""
    return (f'emu::launch("{name}", [emu_args = std::make_tuple({args})]() {{ '
            f'std::apply([](auto... emu_a) {{ {callee}(emu_a...); }}, emu_args); }}, {config})')


case("plain_launch",
     rewrite("k<<<grid, 256, 0, s>>>(a, n);"),
     launch("k", "k", "a, n", "grid, 256, 0, s") + ";")
case("template_kernel_with_commas",
     rewrite("  kern<T, 4><<<b, t>>>(x);"),
     "  " + launch("kern<T,4>", "kern<T, 4>", "x", "b, t") + ";")
case("dim3_config_and_nested_call_arguments",
     rewrite("k<<<dim3(a, b), block, shmem, dev->stream>>>(f(x, y), (int)n);"),
     launch("k", "k", "f(x, y), (int)n", "dim3(a, b), block, shmem, dev->stream") + ";")
multi = "k<T>\n    <<<g, b, 0, s>>>(\n        a,\n        b);"
got = rewrite(multi)
case("multi_line_keeps_line_count", got.count("\n"), multi.count("\n"))
case("multi_line_launch", "".join(got.split()),
     "".join((launch("k<T>", "k<T>", "a, b", "g, b, 0, s") + ";").split()))
case("launch_after_case_label",
     rewrite("case 1: k<<<g, 256, 0, s>>>(p, n); break;"),
     "case 1: " + launch("k", "k", "p, n", "g, 256, 0, s") + "; break;")
case("launch_in_comment_untouched",
     rewrite("// k<<<g, b>>>(x) launches k\nint y;"),
     "// k<<<g, b>>>(x) launches k\nint y;")
case("shift_operators_untouched", rewrite("x = a << 3 >> 1;"), "x = a << 3 >> 1;")
case("extern_shared_becomes_pointer",
     rewrite("  extern __shared__ float acc[];  // (2, cols)"),
     "  float *acc = (float *)emu::dynamic_shared();  // (2, cols)")
case("static_shared_becomes_arena_reference",
     rewrite("  __shared__ float shared[32];"),
     '  static auto &shared = emu::shared_static<float[32]>("shared");')
case("static_shared_several_declarators",
     rewrite("  __shared__ T sa[32], lanes[V][256];"),
     '  static auto &sa = emu::shared_static<T[32]>("sa"); '
     'static auto &lanes = emu::shared_static<T[V][256]>("lanes");')
case("static_shared_scalar_of_several_words",
     rewrite("__shared__ unsigned long long pick;"),
     'static auto &pick = emu::shared_static<unsigned long long>("pick");')
case("static_shared_template_type_keeps_lines",
     rewrite("__shared__ Pair<int, float> p[4],\n    q;"),
     'static auto &p = emu::shared_static<Pair<int, float>[4]>("p"); '
     'static auto &q = emu::shared_static<Pair<int, float>>("q");\n')
case("static_shared_in_comment_untouched",
     rewrite("// __shared__ float s[4];\nint y;"), "// __shared__ float s[4];\nint y;")
try:
    rewrite("__shared__ float *p[4], (*q)[4];")
    case("unreadable_shared_declarator_refused", "accepted", "SyntaxError")
except SyntaxError as e:
    case("unreadable_shared_declarator_refused", "__shared__" in str(e), True)
try:
    rewrite("k<<<g, b>>>;")
    case("launch_without_arguments_refused", "accepted", "SyntaxError")
except SyntaxError as e:
    case("launch_without_arguments_refused", "kernel" in str(e) or "argument" in str(e), True)
sys.exit(1 if failures else 0)
