// fuzz_util.h: what the libFuzzer harnesses share (tests/fuzz/README.md).
//
// The suite's parsers stop on bad input through check.h (die_input,
// check_fail, DIE), which exits the process. fuzz_call runs a parser with a
// per-thread error hook (check_set_error_hook) that jumps back instead, so an
// orderly refusal is an ordinary outcome of one input. What the fuzzer
// reports is everything else: a crash, a sanitizer report, a hang, running
// out of memory, or an internal error (status 3: a broken invariant), which
// fuzz_call turns into abort().
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "data/record.h"
#include "object_detection/coco_eval.h"

// What fuzz_call does with what a parser still holds when it stops on an
// error. A process that exits frees everything; a fuzzer that goes on to the
// next input would run out of file descriptors and mappings instead.
typedef enum {
  // The parser keeps nothing between calls: memory, FILEs, descriptors and
  // mappings it obtained during the call and still holds at the error are
  // released. Its outputs, on success, belong to the caller.
  FUZZ_RELEASE_LEFTOVERS,
  // The parser owns state that outlives a call (a decoder, scratch buffers
  // it grows): nothing is tracked or released; the harness frees what it
  // handed the parser.
  FUZZ_KEEP_LEFTOVERS,
} FuzzLeftovers;

// Runs body(ctx). Returns 0 when body returned, else the status of the
// orderly error it stopped with: 1 (a failed check) or 2 (bad input).
// Status 3 prints the message and aborts. Calls do not nest: each installs
// and then removes the thread's hook.
int fuzz_call(void (*body)(void *ctx), void *ctx, FuzzLeftovers leftovers);

// The message of the last error fuzz_call caught.
const char *fuzz_last_error(void);

// An oracle of a harness failed: prints the message and aborts, which the
// fuzzer reports with the input.
_Noreturn void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// name inside this process's scratch folder (under $FUZZ_TMPDIR, else
// /dev/shm, else /tmp; removed at exit). The result stays valid for the
// process's life (at most 32 names).
const char *fuzz_temp_path(const char *name);
// Writes bytes to path, replacing it.
void fuzz_write_file(const char *path, const uint8_t *bytes, size_t n_bytes);
// Writes lines[0..n), each followed by a newline, to path, replacing it.
void fuzz_write_lines(const char *path, const char *const *lines, int n);
// Removes every file in the scratch folder (not the folder).
void fuzz_temp_clear(void);

// Calls read(data, size), then (for size >= 4) read of a copy whose last
// four bytes are the CRC-32 of the rest, as a checkpoint's trailer is, so
// that mutated files also get past the checksum to the checks after it.
void fuzz_as_is_and_crc_fixed(const uint8_t *data, size_t size,
                              void (*read)(const uint8_t *bytes, size_t n_bytes));

// An input of two files: the bytes before the first NUL are the first (its
// size returned), those after it the second (*second, *second_bytes; empty
// when there is no NUL).
size_t fuzz_split(const uint8_t *data, size_t size, const uint8_t **second, size_t *second_bytes);

// COCO's stats are each -1 (nothing defines it) or in [0, 1]; else fuzz_fail.
void fuzz_check_coco_stats(const double stats[COCO_N_STATS]);
// dets written as a results file at path (coco_dets_write_json) must read
// back (coco_dets_load_json against gt) as the same numbers; else fuzz_fail.
void fuzz_check_results_round_trip(const CocoDetections *dets, const CocoGt *gt, const char *path);

// Reads every box (and its label) and every token sequence of a decoded
// record through record.h's accessors, as the trainers of those kinds do.
void fuzz_read_record_fields(const Record *r);
// A record's checksum (record.h) over a mutated input: half the inputs (bit
// 0 of the checksum's first byte set) are resealed, so that the fuzzer gets
// past the checksum to the fields; the other half test the checksum itself.
// A copy of data (malloc'd, at an odd address inside *block: LMDB values are
// unaligned), to free with free(*block).
uint8_t *fuzz_record_value(const uint8_t *data, size_t size, void **block);
