// kill_at.so, preloaded into a converter (LD_PRELOAD): the KILL_AT_PUT-th
// record it stores (mdb_put) is never stored; the process dies there by
// SIGKILL, as a converter killed with `kill -9` midway does, nothing of it
// running after. A fixed record, so that the fault lands in the middle of a
// data set every time however fast the converter is. The bad-input table
// compiles it (tests/bad_input/test_bad_input.py, fixture kill_at).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <lmdb.h>
#include <signal.h>
#include <stdlib.h>

typedef int (*PutFn)(MDB_txn *, MDB_dbi, MDB_val *, MDB_val *, unsigned int);

int mdb_put(MDB_txn *txn, MDB_dbi dbi, MDB_val *key, MDB_val *data, unsigned int flags) {
  static long count;
  const char *at = getenv("KILL_AT_PUT");
  if (at && ++count == atol(at)) raise(SIGKILL);
  PutFn real = (PutFn)dlsym(RTLD_NEXT, "mdb_put");
  return real(txn, dbi, key, data, flags);
}
