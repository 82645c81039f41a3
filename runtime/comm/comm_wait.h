/* comm_wait: the executor's collectives (the comm queue's all-gather,
 * reduce-scatter and all-reduce, the gradient norm's all-reduce), each
 * measured as two parts: waiting until every rank has arrived, and the
 * transfer after that.
 *
 * A rank that reaches a collective first waits for its peers; that time is
 * not the collective's cost, and a cost model that prices transfers cannot
 * predict it. So each collective here first completes a non-blocking
 * barrier (MPI_Ibarrier): its end is the moment the last rank arrived. The
 * collective proper follows, and its time is the transfer.
 *
 * How the wait is done matters on a machine where the queue threads of
 * several ranks share few cores: Open MPI progresses a non-blocking
 * collective only inside MPI_Test, and a spinning test loop takes the core
 * from the rank's compute thread. While peers are still missing the loop
 * sleeps 50 us between tests; once all have arrived it tests after 2 us
 * naps, doubling every 8 tests up to 50 us (a timer slack of 1 us on the
 * waiting thread makes the short sleeps short), so a short transfer
 * between ranks that are both present is not stretched by coarse naps, a
 * long one does not keep waking the thread, and the core is given up
 * between tests.
 *
 * The same MPI operations as runtime/comm's (MPI_Iallgather, MPI_Ialltoall
 * then a sum in rank order, MPI_Iallreduce), so results are bit for bit the
 * same. Errors go to c->err (comm_last_error) as in comm.c; nothing prints. */
#ifndef ZINF_COMM_WAIT_H
#define ZINF_COMM_WAIT_H
#include <stddef.h>
#include "comm.h"

/* Seconds of one collective: waiting for peers, then the transfer. */
typedef struct CommWait {
    double wait_s, xfer_s;
} CommWait;

/* As comm_allgather, comm_reduce_scatter_f32, comm_allreduce_sum_f32/_f64;
 * w (may be NULL) receives the split. A world of one waits for nothing. */
CommStatus commw_allgather(Comm *c, const void *send, void *recv, size_t bytes, CommWait *w);
CommStatus commw_reduce_scatter_f32(Comm *c, const float *send, float *recv, size_t count, CommWait *w);
CommStatus commw_allreduce_sum_f32(Comm *c, float *buf, size_t count, CommWait *w);
CommStatus commw_allreduce_sum_f64(Comm *c, double *buf, size_t count, CommWait *w);

#endif
