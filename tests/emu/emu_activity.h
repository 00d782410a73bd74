// emu_activity.h: what one host thread asked of the emulated device, for the
// tests that check that a training step never waits for the device. C and
// C++; defined by emu_runtime.cpp, so present only in an EMU=1 build (the
// tests reach it through tests/harness/test.h, which finds it missing elsewhere).
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef struct EmuActivity {
  // Calls that block the host until device work is done (stream, event and
  // device synchronisations, synchronous copies and sets, frees, cuDNN
  // Find, NCCL communicator teardown) or until other ranks reach them
  // (blocking host MPI calls).
  long host_waits;
  long allocations;    // cudaMalloc, cudaMallocHost
  long other_streams;  // work queued on a stream other than the watched one
  char first_wait[64]; // the call of the first host wait ("" if none)
} EmuActivity;

// Starts counting this thread's calls afresh; `stream` is the one its work
// should go to (a cudaStream_t).
void emu_activity_begin(void *stream);
// Stops counting and returns the counts.
EmuActivity emu_activity_end(void);

#ifdef __cplusplus
}
#endif
