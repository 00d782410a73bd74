// kill_at.so, preloaded into a program (LD_PRELOAD), kills it by SIGKILL at a
// fixed point of its work, as `kill -9` or a crashed machine does, nothing of
// it running after. A fixed point, so that the fault lands in the same place
// every time however fast the program runs (a signal sent from outside at a
// line of the log arrives late on a loaded machine, once after a tiny model
// had finished the epoch it was meant to cut). The bad-input table compiles
// it (tests/bad_input/test_bad_input.py, fixture kill_at).
//   KILL_AT_PUT=N            the N-th record a converter stores (mdb_put) is
//                            never stored: the process dies there, mid-set
//   KILL_AFTER_RENAME_TO=P   the process dies the moment a rename onto P has
//                            landed: a trainer's first checkpoint is complete
//                            on disk and nothing of the next epoch is
#define _GNU_SOURCE
#include <dlfcn.h>
#include <lmdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*PutFn)(MDB_txn *, MDB_dbi, MDB_val *, MDB_val *, unsigned int);
typedef int (*RenameFn)(const char *, const char *);

int mdb_put(MDB_txn *txn, MDB_dbi dbi, MDB_val *key, MDB_val *data, unsigned int flags) {
  static long count;
  const char *at = getenv("KILL_AT_PUT");
  if (at && ++count == atol(at)) raise(SIGKILL);
  PutFn real = (PutFn)dlsym(RTLD_NEXT, "mdb_put");
  return real(txn, dbi, key, data, flags);
}

int rename(const char *from, const char *to) {
  RenameFn real = (RenameFn)dlsym(RTLD_NEXT, "rename");
  int status = real(from, to);
  const char *onto = getenv("KILL_AFTER_RENAME_TO");
  if (status == 0 && onto && strcmp(onto, to) == 0) raise(SIGKILL);
  return status;
}
