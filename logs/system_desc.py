#!/usr/bin/env python3
"""Writes systems/<system>.json, the MLPerf system description of this
machine, from what the machine reports, and checks it with the official
mlperf_logging.system_desc_checker.

  python3 logs/system_desc.py --name SYSTEM --out FILE [--submitter ORG]
                              [--device cpu|cuda] [--build BUILD_DIR]

Host: lscpu and /proc (processor model, sockets, cores, threads, frequency,
caches, memory), the disk and file system holding the repository, the
network interfaces (/sys/class/net). GPUs: nvidia-smi (model, count,
memory, clocks, PCIe link) when --device is cuda. Software: the operating
system and kernel, the C compiler, CUDA, cuDNN, NCCL and the driver where
present, Open MPI, OpenBLAS, LMDB, libjpeg-turbo, libpng, mlperf-logging.
A field the machine does not report is left empty. Exit status 1 when the
checker rejects the file, 2 when the file cannot be written."""
import argparse
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cmd(*argv):
    """The command's stdout, stripped; "" when it is missing or fails."""
    if not shutil.which(argv[0]):
        return ""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def lscpu():
    fields = {}
    for line in cmd("lscpu").splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def cpuinfo_field(name):
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(name):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def mem_total_gb():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return "%.0f GB" % (int(line.split()[1]) / 1e6)
    except OSError:
        pass
    return ""


def storage():
    """(type, capacity) of the disk under the repository."""
    usage = shutil.disk_usage(ROOT)
    capacity = "%.0f GB" % (usage.total / 1e9)
    # lsblk's ROTA of the device under the mount: 1 spinning, 0 flash.
    source = cmd("findmnt", "-n", "-o", "SOURCE", "--target", ROOT)
    rota = cmd("lsblk", "-n", "-d", "-o", "ROTA", source) if source.startswith("/dev/") else ""
    kind = {"1": "HDD", "0": "SSD"}.get(rota, "")
    fstype = cmd("findmnt", "-n", "-o", "FSTYPE", "--target", ROOT)
    return ", ".join(x for x in (kind, fstype) if x), capacity


def networking():
    nics = []
    for path in sorted(glob.glob("/sys/class/net/*")):
        name = os.path.basename(path)
        if name == "lo" or not os.path.exists(os.path.join(path, "device")):
            continue
        try:
            with open(os.path.join(path, "speed")) as f:
                speed = int(f.read().strip())
        except (OSError, ValueError):
            speed = -1
        nics.append("%s %s" % (name, "%d Gb/s" % (speed // 1000) if speed >= 1000 else
                               "%d Mb/s" % speed if speed > 0 else "(speed not reported)"))
    ib = sorted(os.path.basename(p) for p in glob.glob("/sys/class/infiniband/*"))
    return ", ".join(nics + ["InfiniBand %s" % d for d in ib])


def gpus():
    out = cmd("nvidia-smi", "--query-gpu=name,memory.total,clocks.max.sm,pcie.link.gen.max,"
              "pcie.link.width.max,driver_version", "--format=csv,noheader,nounits")
    return [[x.strip() for x in line.split(",")] for line in out.splitlines() if line.strip()]


def header_version(paths, names):
    for path in paths:
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        parts = [re.search(r"#define %s\s+(\d+)" % n, text) for n in names]
        if all(parts):
            return ".".join(p.group(1) for p in parts)
    return ""


def software(device, gpu_rows):
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    inc = [os.path.join(cuda_home, "include"), "/usr/include"]
    items = [("C compiler", cmd("cc", "--version").split("\n")[0]),
             ("Open MPI", (re.findall(r"[\d.]+", cmd("mpirun", "--version").split("\n")[0]) or [""])[-1])]
    for label, pkg in (("OpenBLAS", "openblas"), ("LMDB", "lmdb"), ("libjpeg-turbo", "libturbojpeg"),
                       ("libpng", "libpng")):
        items.append((label, cmd("pkg-config", "--modversion", pkg)))
    if device == "cuda":
        nvcc = cmd(os.path.join(cuda_home, "bin", "nvcc"), "--version") or cmd("nvcc", "--version")
        m = re.search(r"release ([\d.]+)", nvcc)
        items += [("CUDA", m.group(1) if m else ""),
                  ("cuDNN", header_version([os.path.join(d, "cudnn_version.h") for d in inc],
                                           ["CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"])),
                  ("NCCL", header_version([os.path.join(d, "nccl.h") for d in inc],
                                          ["NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH"])),
                  ("NVIDIA driver", gpu_rows[0][5] if gpu_rows else "")]
    try:
        from importlib.metadata import version
        items.append(("mlperf-logging", version("mlperf-logging")))
    except Exception:  # not installed: the field says nothing of it
        pass
    return ", ".join("%s %s" % (k, v) for k, v in items if v)


def os_name():
    try:
        with open("/etc/os-release") as f:
            m = re.search(r'^PRETTY_NAME="?([^"\n]*)', f.read(), re.M)
            name = m.group(1) if m else ""
    except OSError:
        name = ""
    return "%s, Linux %s" % (name or platform.system(), platform.release())


def describe(name, submitter, device):
    cpu = lscpu()
    sockets = cpu.get("Socket(s)", "1")
    mhz = cpu.get("CPU max MHz") or cpuinfo_field("cpu MHz")
    caches = ", ".join("%s %s" % (k.replace(" cache", ""), cpu[k]) for k in
                       ("L1d cache", "L1i cache", "L2 cache", "L3 cache") if cpu.get(k))
    storage_type, storage_capacity = storage()
    gpu_rows = gpus() if device == "cuda" else []
    g = gpu_rows[0] if gpu_rows else [""] * 6
    commit = cmd("git", "-C", ROOT, "rev-parse", "--short", "HEAD")
    return {
        "submitter": submitter,
        "division": "closed",
        "status": "Research, Development, or Internal (RDI)",
        "system_name": name,
        "number_of_nodes": "1",
        "host_processors_per_node": sockets,
        "host_processor_model_name": cpu.get("Model name") or cpuinfo_field("model name"),
        "host_processor_core_count": cpu.get("Core(s) per socket", ""),
        "host_processor_vcpu_count": str(os.cpu_count() or ""),
        "host_processor_frequency": "%.0f MHz" % float(mhz) if mhz else "",
        "host_processor_caches": caches,
        "host_processor_interconnect": "",
        "host_memory_capacity": mem_total_gb(),
        "host_storage_type": storage_type,
        "host_storage_capacity": storage_capacity,
        "host_networking": networking(),
        "host_networking_topology": "",
        "host_memory_configuration": "",
        "accelerators_per_node": str(len(gpu_rows)),
        "accelerator_model_name": g[0],
        "accelerator_host_interconnect": "PCIe Gen%s x%s" % (g[3], g[4]) if g[3] else "",
        "accelerator_frequency": "%s MHz" % g[2] if g[2] else "",
        "accelerator_on-chip_memories": "",
        "accelerator_memory_configuration": "",
        "accelerator_memory_capacity": "%.0f GB" % (float(g[1]) / 1024) if g[1] else "",
        "accelerator_interconnect": "",
        "accelerator_interconnect_topology": "",
        "cooling": "",
        "hw_notes": "filled in by logs/system_desc.py from what the machine reports; "
                    "an empty field was not reported",
        "framework": "mlsuite %s" % commit if commit else "mlsuite",
        "other_software_stack": software(device, gpu_rows),
        "operating_system": os_name(),
        "sw_notes": "",
    }


def newest_ruleset():
    from mlperf_logging.compliance_checker.mlp_compliance import rule_choices
    return max(rule_choices(), key=lambda v: tuple(int(x) for x in v.split(".")))


def check(path):
    """The official checker's verdict on the file (training usage, the
    newest ruleset the installed package knows)."""
    import logging
    from mlperf_logging.system_desc_checker.system_desc_checker import check_system_desc
    logging.disable(logging.CRITICAL)  # its log lines; the verdict is returned
    valid = check_system_desc(path, "training", newest_ruleset())[0]
    logging.disable(logging.NOTSET)
    return valid


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True, help="system_name (the file's name without .json)")
    ap.add_argument("--out", required=True, help="the .json file to write")
    ap.add_argument("--submitter", default="mlsuite")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = ap.parse_args()
    desc = describe(args.name, args.submitter, args.device)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(desc, f, indent=2)
            f.write("\n")
    except OSError as e:
        print("error: %s: cannot write: %s" % (args.out, e.strerror), file=sys.stderr)
        return 2
    if not check(args.out):
        print("error: %s: mlperf_logging.system_desc_checker rejects it" % args.out, file=sys.stderr)
        return 1
    print("system_desc: wrote %s (%s, %s x %s%s); the official checker accepts it" % (
        args.out, args.name, desc["host_processors_per_node"], desc["host_processor_model_name"],
        ", %s x %s" % (desc["accelerators_per_node"], desc["accelerator_model_name"])
        if desc["accelerator_model_name"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
