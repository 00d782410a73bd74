"""tests/emu/emucc.py: the rewrite of kernel launches and dynamic shared
memory that lets the .cu files compile against the CPU emulation of CUDA.
Each form the project uses (template kernels, launches over several lines,
dim3 configurations, arguments with nested calls) becomes one emu::launch
call with the lines kept; launches in comments and other code stay as
written."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
try:
    rewrite("k<<<g, b>>>;")
    case("launch_without_arguments_refused", "accepted", "SyntaxError")
except SyntaxError as e:
    case("launch_without_arguments_refused", "kernel" in str(e) or "argument" in str(e), True)
sys.exit(1 if failures else 0)
